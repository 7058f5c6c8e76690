/*
 * doctor_eo_mongo.c - `doctor`'s check of a MongoDB connection that a
 * stream runs exactly once into (exactly_once = { connection = name }, a
 * deployment other than the stream's, issue 39): reachable and
 * authenticated, able to run transactions (a replica set or mongos recent
 * enough, as its hello says: txn_support.h), and its
 * transactionLifetimeLimitSeconds, which bounds each handler call (read with
 * getParameter, which needs the clusterMonitor role's getParameter action,
 * SERVER-11854; unreadable, MongoDB's default 60 s is what flowwarden
 * assumes).
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "runtime/doctor/doctor_eo-private.h"
#include "runtime/host/server_probe.h"
#include "runtime/host/txn_support.h"

#define ASSUMED_LIFETIME_S 60

/* The names of the streams of L's script that run exactly once into name,
 * ", "-separated into out ("" when none). */
static void
streams_into (lua_State *L, const char *name, char *out, size_t len)
{
   int top = lua_gettop (L);
   size_t used = 0;

   out[0] = '\0';
   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.config") == LUA_TTABLE &&
       lua_getfield (L, -1, "effective") == LUA_TTABLE &&
       lua_getfield (L, -1, "streams") == LUA_TTABLE) {
      for (lua_Integer i = 1; lua_rawgeti (L, -1, i) == LUA_TTABLE; i++) {
         lua_getfield (L, -1, "exactly_once_connection");
         lua_getfield (L, -2, "name");
         if (lua_isstring (L, -2) && strcmp (lua_tostring (L, -2), name) == 0 &&
             lua_isstring (L, -1) && used < len) {
            used += (size_t) snprintf (out + used, len - used, "%s\"%s\"", used ? ", " : "",
                                       lua_tostring (L, -1));
         }
         lua_pop (L, 3);
      }
   }
   lua_settop (L, top);
}

/* transactionLifetimeLimitSeconds through a client of uri's; false when
 * it cannot be read (why says why). */
static bool
read_lifetime (const mongoc_uri_t *uri, double *seconds, char *why, size_t len)
{
   mongoc_uri_t *copy = mongoc_uri_copy (uri);
   mongoc_client_t *client = NULL;
   bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
   bson_iter_t it;
   bson_error_t berr;
   bool ok = false;

   if (copy) {
      mongoc_uri_set_option_as_bool (copy, MONGOC_URI_SERVERSELECTIONTRYONCE, true);
      client = mongoc_client_new_from_uri_with_error (copy, &berr);
   }
   if (!client) {
      snprintf (why, len, "%s", copy ? berr.message : "out of memory");
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      BSON_APPEND_INT32 (&cmd, "getParameter", 1);
      BSON_APPEND_INT32 (&cmd, "transactionLifetimeLimitSeconds", 1);
      bson_destroy (&reply);
      if (!mongoc_client_command_simple (client, "admin", &cmd, NULL, &reply, &berr)) {
         snprintf (why, len, "%s", berr.message);
      } else if (!bson_iter_init_find (&it, &reply, "transactionLifetimeLimitSeconds") ||
                 !BSON_ITER_HOLDS_NUMBER (&it)) {
         snprintf (why, len, "getParameter did not return it");
      } else {
         *seconds = bson_iter_as_double (&it);
         ok = true;
      }
   }
   bson_destroy (&cmd);
   bson_destroy (&reply);
   mongoc_client_destroy (client);
   mongoc_uri_destroy (copy);
   return ok;
}

static void
check_lifetime (fw_doctor_report_t *r, const char *name, const mongoc_uri_t *uri)
{
   char why[512];
   double s = 0;

   if (!read_lifetime (uri, &s, why, sizeof why)) {
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_WARN,
                     "grant the getParameter action (the clusterMonitor role has it) to see it "
                     "here, and keep each handler's timeout below the server's limit",
                     "connection \"%s\" (MongoDB): cannot read transactionLifetimeLimitSeconds "
                     "(%s); %d s (MongoDB's default) is assumed",
                     name, why, ASSUMED_LIFETIME_S);
      return;
   }
   fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_OK, NULL,
                  "connection \"%s\" (MongoDB): transactionLifetimeLimitSeconds is %g s: a "
                  "handler call longer than that fails as Mongo.TransactionTooLong (keep each "
                  "handler's timeout below it)",
                  name, s);
}

void
fw_doctor_eo_mongo (lua_State *L, fw_doctor_report_t *r, const char *name, const char *uri_text)
{
   char streams[512], why[1024], where[512];
   bson_error_t berr;
   mongoc_uri_t *uri;

   streams_into (L, name, streams, sizeof streams);
   if (!streams[0]) {
      return; /* no stream runs exactly once into it */
   }
   if (!(uri = mongoc_uri_new_with_error (uri_text, &berr))) {
      fw_doctor_add (r, NULL, "connection", FW_DOCTOR_FAIL, "correct the connection's uri",
                     "connection \"%s\" (MongoDB): invalid URI (%s)", name, berr.message);
      return;
   }
   fw_server_describe (uri, where, sizeof where);
   switch (fw_txn_support_probe (uri, why, sizeof why)) {
   case FW_TXN_UNKNOWN:
      fw_doctor_add (r, NULL, "connection", FW_DOCTOR_FAIL,
                     "check the URI's hosts and credentials, and that the deployment accepts "
                     "connections from this host",
                     "connection \"%s\" (MongoDB, %s), where stream(s) %s run exactly once: "
                     "cannot reach or authenticate: %s",
                     name, where, streams, why);
      break;
   case FW_TXN_UNSUPPORTED:
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_FAIL,
                     "run it as a replica set (one member will do: mongod --replSet NAME, then "
                     "rs.initiate(), and ?replicaSet=NAME in its URI) or a sharded cluster "
                     "(MongoDB 4.2+), or turn exactly_once off",
                     "connection \"%s\" (MongoDB, %s) has no transactions: %s; stream(s) %s "
                     "would stop at their start",
                     name, where, why, streams);
      break;
   default:
      fw_doctor_add (r, NULL, "exactly_once", FW_DOCTOR_OK, NULL,
                     "connection \"%s\" (MongoDB, %s): reachable, runs transactions for "
                     "stream(s) %s",
                     name, where, streams);
      check_lifetime (r, name, uri);
      break;
   }
   mongoc_uri_destroy (uri);
}
