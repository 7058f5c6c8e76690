/*
 * server_probe.c - a bounded reachability check of a MongoDB URI (see
 * server_probe.h).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime/host/server_probe.h"

void
fw_server_describe (const mongoc_uri_t *uri, char *out, size_t len)
{
   const char *srv = mongoc_uri_get_srv_hostname (uri);
   const char *rs = mongoc_uri_get_replica_set (uri);
   size_t used = 0;

   out[0] = '\0';
   if (srv) {
      used = (size_t) snprintf (out, len, "SRV %s", srv);
   } else {
      for (const mongoc_host_list_t *h = mongoc_uri_get_hosts (uri); h && used < len; h = h->next) {
         used += (size_t) snprintf (out + used, len - used, "%s%s", used ? "," : "",
                                    h->host_and_port);
      }
   }
   if (rs && used < len) {
      snprintf (out + used, len - used, " (replica set %s)", rs);
   }
}

/* uri's options (TLS, timeouts, ...) for a connection straight to host,
 * without the replica set (copied, so the caller destroys it); NULL when
 * out of memory. Credentials are left out: hello needs none. */
static mongoc_uri_t *
direct_uri (const mongoc_uri_t *uri, const mongoc_host_list_t *host)
{
   mongoc_uri_t *d = mongoc_uri_new_for_host_port (host->host, host->port);
   const bson_t *opts = mongoc_uri_get_options (uri);
   bson_iter_t it;

   if (!d || !opts || !bson_iter_init (&it, opts)) {
      return d;
   }
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      if (!strcasecmp (key, MONGOC_URI_REPLICASET) ||
          !strcasecmp (key, MONGOC_URI_DIRECTCONNECTION)) {
         continue;
      }
      if (BSON_ITER_HOLDS_UTF8 (&it)) {
         mongoc_uri_set_option_as_utf8 (d, key, bson_iter_utf8 (&it, NULL));
      } else if (BSON_ITER_HOLDS_BOOL (&it)) {
         mongoc_uri_set_option_as_bool (d, key, bson_iter_bool (&it));
      } else if (BSON_ITER_HOLDS_INT32 (&it)) {
         mongoc_uri_set_option_as_int32 (d, key, bson_iter_int32 (&it));
      } else if (BSON_ITER_HOLDS_INT64 (&it)) {
         mongoc_uri_set_option_as_int64 (d, key, bson_iter_int64 (&it));
      }
   }
   mongoc_uri_set_option_as_bool (d, MONGOC_URI_DIRECTCONNECTION, true);
   return d;
}

/* What host's hello says against the replica set the URI names (rs), as a
 * sentence with the remedy into out (at most len), or "" when it says
 * nothing wrong or does not answer. MongoDB's hello has setName only on a
 * replica set member (jstests/core/ismaster.js), "isreplicaset: true" on a
 * mongod started with --replSet whose set is not initiated, and msg
 * "isdbgrid" on a mongos. */
static void
explain_host (const mongoc_uri_t *uri, const mongoc_host_list_t *host, const char *rs, char *out,
              size_t len)
{
   mongoc_uri_t *d = direct_uri (uri, host);
   mongoc_client_t *client = d ? mongoc_client_new_from_uri (d) : NULL;
   mongoc_server_description_t *sd;
   const bson_t *hello;
   const char *set = NULL, *msg = NULL;
   bool uninitiated = false;
   bson_iter_t it;

   out[0] = '\0';
   if (client) {
      mongoc_client_set_appname (client, "flowwarden");
   }
   if (client && (sd = mongoc_client_select_server (client, false, NULL, NULL))) {
      hello = mongoc_server_description_hello_response (sd);
      if (bson_iter_init_find (&it, hello, "setName") && BSON_ITER_HOLDS_UTF8 (&it)) {
         set = bson_iter_utf8 (&it, NULL);
      }
      if (bson_iter_init_find (&it, hello, "msg") && BSON_ITER_HOLDS_UTF8 (&it)) {
         msg = bson_iter_utf8 (&it, NULL);
      }
      uninitiated = bson_iter_init_find (&it, hello, "isreplicaset") && bson_iter_as_bool (&it);
      if (set && strcmp (set, rs) != 0) {
         snprintf (out, len,
                   "%s is a member of replica set \"%s\", not \"%s\": set replicaSet=%s in the "
                   "URI",
                   host->host_and_port, set, rs, set);
      } else if (!set && msg && strcmp (msg, "isdbgrid") == 0) {
         snprintf (out, len,
                   "%s is a mongos (a sharded cluster), not a member of replica set \"%s\": "
                   "remove replicaSet=%s from the URI",
                   host->host_and_port, rs, rs);
      } else if (!set && uninitiated) {
         snprintf (out, len,
                   "%s runs with --replSet but its replica set is not initiated (its hello has "
                   "no setName): run rs.initiate() on it once",
                   host->host_and_port);
      } else if (!set) {
         snprintf (out, len,
                   "%s is a standalone mongod (its hello has no setName), not a member of "
                   "replica set \"%s\" as the URI's replicaSet=%s says, and a standalone "
                   "cannot serve change streams: restart it with --replSet %s and run "
                   "rs.initiate() once (one member will do)",
                   host->host_and_port, rs, rs, rs);
      }
      mongoc_server_description_destroy (sd);
   }
   mongoc_client_destroy (client);
   mongoc_uri_destroy (d);
}

/* Whether host is one that client's last selection could not reach (its
 * description Unknown: it never answered, so it has nothing to say). */
static bool
unanswered (mongoc_server_description_t **sds, size_t n, const mongoc_host_list_t *host)
{
   for (size_t i = 0; sds && i < n; i++) {
      if (strcasecmp (mongoc_server_description_host (sds[i])->host_and_port,
                      host->host_and_port) == 0) {
         return strcmp (mongoc_server_description_type (sds[i]), "Unknown") == 0;
      }
   }
   return false; /* answered, and was left out of the topology */
}

void
fw_server_explain_selection (mongoc_client_t *client, char *why, size_t len)
{
   const mongoc_uri_t *uri = mongoc_client_get_uri (client);
   const char *rs = mongoc_uri_get_replica_set (uri);
   mongoc_server_description_t **sds;
   size_t n = 0;
   char one[600];

   if (!rs) {
      return;
   }
   /* NULL (n 0) once every seed was left out of the topology. */
   sds = mongoc_client_get_server_descriptions (client, &n);
   for (const mongoc_host_list_t *h = mongoc_uri_get_hosts (uri); h; h = h->next) {
      size_t used = strlen (why);
      if (unanswered (sds, n, h)) {
         continue; /* libmongoc's message says why (refused, timed out) */
      }
      explain_host (uri, h, rs, one, sizeof one);
      if (one[0] && used + 3 < len) {
         snprintf (why + used, len - used, "; %s", one);
      }
   }
   if (sds) {
      mongoc_server_descriptions_destroy_all (sds, n);
   }
}

mongoc_server_description_t *
fw_server_probe_select (const mongoc_uri_t *uri, char *why, size_t len)
{
   mongoc_uri_t *copy = mongoc_uri_copy (uri);
   mongoc_client_t *client = NULL;
   mongoc_server_description_t *sd = NULL;
   bson_error_t berr;

   if (!copy) {
      snprintf (why, len, "out of memory");
      return NULL;
   }
   /* One scan, then an answer: the single-threaded client's selection. */
   if (!mongoc_uri_has_option (copy, MONGOC_URI_CONNECTTIMEOUTMS)) {
      mongoc_uri_set_option_as_int32 (copy, MONGOC_URI_CONNECTTIMEOUTMS,
                                      FW_PROBE_CONNECT_TIMEOUT_MS);
   }
   mongoc_uri_set_option_as_bool (copy, MONGOC_URI_SERVERSELECTIONTRYONCE, true);
   if (!(client = mongoc_client_new_from_uri_with_error (copy, &berr))) {
      snprintf (why, len, "%s", berr.message);
   } else {
      mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
      mongoc_client_set_appname (client, "flowwarden");
      if (!(sd = mongoc_client_select_server (client, true, NULL, &berr))) {
         snprintf (why, len, "%s", berr.message);
         fw_server_explain_selection (client, why, len);
      }
   }
   /* The description is a copy: it outlives the client. */
   mongoc_client_destroy (client);
   mongoc_uri_destroy (copy);
   return sd;
}

bool
fw_server_probe (const mongoc_uri_t *uri, char *why, size_t len)
{
   mongoc_server_description_t *sd = fw_server_probe_select (uri, why, len);
   bool ok = sd != NULL;

   mongoc_server_description_destroy (sd);
   return ok;
}
