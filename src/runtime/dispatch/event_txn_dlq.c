/*
 * event_txn_dlq.c - exactly_once (issue 39): a dead letter written in one
 * transaction with the position past its event, when the DLQ lives on the
 * client the transactions run on (the sink). A crash then leaves either the
 * entry and the moved position, or neither (the event comes again, runs
 * again from nothing applied, and is dead-lettered once): never an entry
 * whose event is run again, so its attempts and history are counted once.
 *
 * A DLQ elsewhere (another connection, the in-memory store) is written as
 * without exactly_once, before the checkpoint: at least once, its unique
 * (streamName, eventId) index keeping one entry.
 */
#include <string.h>

#include <lua.h>

#include "flowwarden/log.h"
#include "runtime/dispatch/backoff.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/event_txn.h"

/* Transactions tried before the entry is written the plain way. */
#define TXN_TRIES 5

fw_dlq_store_t *
fw_txn_sink_dlq (fw_dispatcher_t *d, mongoc_client_t *client)
{
   const fw_dlq_config_t *dlq = fw_dispatcher_dlq_config (d);
   fw_dlq_store_t *store;
   fw_error_t err;

   if (dlq->memory ||
       fw_connection_clients_get (fw_dispatcher_clients (d),
                                  dlq->connection ? dlq->connection : "default", &err) != client) {
      return NULL;
   }
   store = fw_dlq_store_mongo_open (
      client, dlq->database ? dlq->database : fw_dispatcher_config (d)->database, dlq->collection,
      NULL, &err);
   if (store && !fw_dlq_store_can (store, FW_DLQ_CAN_JOIN)) {
      fw_dlq_store_destroy (store);
      store = NULL;
   }
   return store;
}

/* The message of the failure table on top of L's stack ({ value = a typed
 * error, or a string }), read raw; the caller restores the stack. */
static void
failure_message (lua_State *L, char *buf, size_t len)
{
   const char *msg = NULL;

   if (lua_istable (L, -1)) {
      lua_pushliteral (L, "value");
      lua_rawget (L, -2);
      if (lua_istable (L, -1)) {
         lua_pushliteral (L, "message");
         lua_rawget (L, -2);
      }
      msg = lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : NULL;
   }
   snprintf (buf, len, "%s", msg ? msg : "(no message)");
}

typedef enum { TRY_COMMITTED, TRY_FAILED, TRY_FENCED } try_t;

/* One transaction: the entry, the position past ev, the commit. */
static try_t
try_once (fw_dispatcher_t *d, fw_dlq_store_t *store, const fw_event_t *ev, const bson_t *entry,
          char *why, size_t len)
{
   lua_State *L = fw_lua_host_state (fw_dispatcher_host (d));
   int top = lua_gettop (L);
   fw_mongo_txn_t join;
   fw_error_t err;

   if (!fw_txn_begin (d, L, &join)) {
      failure_message (L, why, len);
      lua_settop (L, top);
      return TRY_FAILED;
   }
   fw_mongo_lua_join (L, NULL); /* no handler runs in this one */
   err.message[0] = '\0';
   if (!store->save_in (store, fw_txn_session (d), entry, &err)) {
      snprintf (why, len, "%s", err.message);
      fw_txn_end (d);
      return TRY_FAILED;
   }
   switch (fw_txn_commit (d, L, ev)) {
   case FW_TXN_COMMITTED:
      return TRY_COMMITTED;
   case FW_TXN_FENCED:
      snprintf (why, len, "a newer leader holds the checkpoint");
      return TRY_FENCED;
   default:
      failure_message (L, why, len);
      lua_settop (L, top);
      return TRY_FAILED;
   }
}

fw_txn_dlq_t
fw_txn_dead_letter (fw_dispatcher_t *d, const fw_event_t *ev, const bson_t *entry, const char *id)
{
   fw_error_t err;
   mongoc_client_t *client;
   fw_dlq_store_t *store;
   char why[1024];
   fw_txn_dlq_t r = FW_TXN_DLQ_NOT_JOINED;

   /* MongoDB transactions only (another store's sink: at least once) */
   if (!fw_txn_in_mongo (d) || !(client = fw_dispatcher_txn_client (d, &err)) ||
       !(store = fw_txn_sink_dlq (d, client))) {
      return FW_TXN_DLQ_NOT_JOINED;
   }
   for (int tries = 1; tries <= TXN_TRIES; tries++) {
      try_t t = try_once (d, store, ev, entry, why, sizeof why);
      if (t == TRY_COMMITTED || t == TRY_FENCED) {
         r = t == TRY_COMMITTED ? FW_TXN_DLQ_COMMITTED : FW_TXN_DLQ_STOPPED;
         if (t == TRY_FENCED) {
            fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
                    "exactly_once: event %s not dead-lettered: "
                    "%s; its transaction is aborted",
                    id, why);
         }
         break;
      }
      if (tries == TXN_TRIES) {
         fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
                 "exactly_once: the dead letter of event %s could not be committed with its "
                 "checkpoint (%s); it is written on its own (at least once: its DLQ entry is "
                 "kept once, its event may run again after a crash)",
                 id, why);
         break;
      }
      int64_t delay = fw_backoff_delay_ms (&fw_dispatcher_config (d)->restart, tries,
                                           fw_dispatcher_random (d));
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "exactly_once: the dead letter of event %s and its checkpoint failed to commit "
              "(try %d): %s; the stream holds this event and tries again in %lld ms",
              id, tries, why, (long long) delay);
      if (fw_dispatcher_wait_ms (d, delay)) {
         r = FW_TXN_DLQ_STOPPED;
         break;
      }
   }
   fw_dlq_store_destroy (store);
   return r;
}
