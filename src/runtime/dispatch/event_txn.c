/*
 * event_txn.c - exactly_once (issue 39): one handler attempt in a MongoDB
 * transaction on the client of the "default" connection (exactly_once =
 * true) or of the sink named by exactly_once = { connection = "name" }, with
 * the stream's position written in it before the commit.
 *
 * What MongoDB gives and this relies on (its manual, "Transactions" and
 * https://www.mongodb.com/docs/manual/core/transactions-in-applications/,
 * "Drivers API"): a transaction needs a replica set or a sharded cluster
 * (a standalone refuses transaction numbers, 20 IllegalOperation); every
 * operation carrying the session's lsid and txnNumber joins it, and none of
 * its writes is visible outside before commitTransaction; an error labelled
 * TransientTransactionError means the whole transaction may be run again
 * from its start, and a commit failed with UnknownTransactionCommitResult
 * may be sent again (commitTransaction is retryable: a second commit of a
 * committed transaction succeeds).
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/mongo_lua.h"
#include "runtime/dispatch/dispatcher-private.h"
#include "runtime/dispatch/event_txn.h"

/* A commit that ended with UnknownTransactionCommitResult is sent again up
 * to this many times (libmongoc already sends it once more by itself). */
#define COMMIT_TRIES 5

void
fw_dispatcher_set_exactly_once (fw_dispatcher_t *d, fw_txn_position_fn fn, fw_txn_session_fn record,
                                void *ud)
{
   d->eo.fn = fn;
   d->eo.record = record;
   d->eo.ud = ud;
}

void
fw_dispatcher_set_txn_sink (fw_dispatcher_t *d, const fw_txn_sink_t *sink)
{
   fw_txn_release (d);
   memset (&d->eo.sink, 0, sizeof d->eo.sink);
   if (sink) {
      d->eo.sink = *sink;
   }
}

void
fw_dispatcher_set_txn_committed (fw_dispatcher_t *d, void (*committed) (void *ud))
{
   d->eo.committed = committed;
}

void
fw_dispatcher_set_exactly_once_replay (fw_dispatcher_t *d, fw_txn_position_fn fn, void *ud)
{
   d->eo.replay_fn = fn;
   d->eo.replay_ud = ud;
}

/* The name of the connection the transactions run on. */
static const char *
txn_connection (const fw_dispatcher_t *d)
{
   return d->prog.cfg.exactly_once_connection ? d->prog.cfg.exactly_once_connection : "default";
}

mongoc_client_t *
fw_dispatcher_txn_client (fw_dispatcher_t *d, fw_error_t *error)
{
   return fw_connection_clients_get (d->clients, txn_connection (d), error);
}

void
fw_dispatcher_txn_reset (fw_dispatcher_t *d)
{
   fw_txn_release (d);
}

/* Pushes the failure table of a step that failed before any server reply. */
static void
push_local_failure (lua_State *L, const char *what, const char *message)
{
   bson_error_t e;

   memset (&e, 0, sizeof e);
   e.domain = MONGOC_ERROR_CLIENT;
   e.code = MONGOC_ERROR_CLIENT_SESSION_FAILURE;
   bson_strncpy (e.message, message, sizeof e.message);
   fw_mongo_lua_push_failure (L, what, &e, NULL);
}

/* d's session on client: the kept one, else a new one recorded before it is
 * used (one session per dispatcher keeps the record off the per-event path
 * and small). False with a failure table pushed. */
static bool
kept_session (fw_dispatcher_t *d, lua_State *L, mongoc_client_t *client)
{
   bson_error_t berr;
   fw_error_t err;

   if (d->eo.session && d->eo.client == client) {
      return true;
   }
   fw_txn_release (d);
   d->eo.session = mongoc_client_start_session (client, NULL, &berr);
   if (!d->eo.session) {
      fw_mongo_lua_push_failure (L, "startSession", &berr, NULL);
      return false;
   }
   d->eo.client = client;
   err.message[0] = '\0';
   if (d->eo.record &&
       !d->eo.record (d->eo.ud, client, mongoc_client_session_get_lsid (d->eo.session), &err)) {
      fw_txn_release (d);
      push_local_failure (L, "startSession", err.message);
      return false;
   }
   d->eo.lifetime_ms = fw_txn_lifetime_ms (client);
   return true;
}

bool
fw_txn_begin (fw_dispatcher_t *d, lua_State *L, fw_mongo_txn_t *join)
{
   fw_error_t err;
   bson_error_t berr;
   mongoc_client_t *client;

   if (d->eo.sink.begin) {
      return d->eo.sink.begin (d->eo.sink.ud, L); /* another store's (issue 40) */
   }
   err.message[0] = '\0';
   client = fw_dispatcher_txn_client (d, &err);
   if (!client) {
      push_local_failure (L, "startTransaction", err.message);
      return false;
   }
   if (!kept_session (d, L, client)) {
      return false;
   }
   if (!mongoc_client_session_start_transaction (d->eo.session, NULL, &berr)) {
      /* A session mongoc refuses to start on is not kept. */
      fw_txn_release (d);
      fw_mongo_lua_push_failure (L, "startTransaction", &berr, NULL);
      return false;
   }
   fw_mongo_lua_txn_open (L, fw_mono_ns () + d->eo.lifetime_ms * 1000000);
   join->client = d->eo.client;
   join->session = d->eo.session;
   join->stream = d->prog.cfg.name;
   join->connection = d->prog.cfg.exactly_once_connection; /* NULL: "default" */
   join->sink = NULL;
   fw_mongo_lua_join (L, join);
   return true;
}

void
fw_txn_end (fw_dispatcher_t *d)
{
   bson_error_t berr;

   if (d->eo.sink.end) {
      d->eo.sink.end (d->eo.sink.ud, fw_lua_host_state (d->prog.host));
   }
   fw_mongo_lua_txn_open (fw_lua_host_state (d->prog.host), 0);
   if (d->eo.session && mongoc_client_session_in_transaction (d->eo.session) &&
       !mongoc_client_session_abort_transaction (d->eo.session, &berr)) {
      /* The server aborts it anyway (its lifetime, or a kill at the next
       * start); a fresh session is started for the next attempt. */
      fw_log (FW_LOG_WARN, d->prog.cfg.name, "exactly_once: abortTransaction failed (%s)",
              berr.message);
      fw_txn_release (d);
   }
}

void
fw_txn_release (fw_dispatcher_t *d)
{
   if (d->eo.sink.release) {
      d->eo.sink.release (d->eo.sink.ud);
   }
   /* Destroying a session with its transaction in progress aborts it. */
   if (d->eo.session) {
      mongoc_client_session_destroy (d->eo.session);
   }
   d->eo.session = NULL;
   d->eo.client = NULL;
}

/* Sends commitTransaction, again while the outcome is unknown. */
static bool
commit (fw_dispatcher_t *d, bson_t *reply, bson_error_t *berr)
{
   for (int i = 0;; i++) {
      bson_destroy (reply);
      if (mongoc_client_session_commit_transaction (d->eo.session, reply, berr)) {
         return true;
      }
      if (i + 1 >= COMMIT_TRIES ||
          !mongoc_error_has_label (reply, "UnknownTransactionCommitResult")) {
         return false;
      }
      fw_log (FW_LOG_WARN, d->prog.cfg.name,
              "exactly_once: the commit's outcome is unknown (%s); sending it again",
              berr->message);
   }
}

fw_txn_end_t
fw_txn_commit (fw_dispatcher_t *d, lua_State *L, const fw_event_t *ev)
{
   bson_t reply = BSON_INITIALIZER;
   bson_error_t berr;
   fw_error_t err;
   bool fenced = false, ok;

   if (d->eo.sink.commit) {
      switch (d->eo.sink.commit (d->eo.sink.ud, L, ev)) {
      case FW_SINK_COMMITTED:
         return FW_TXN_COMMITTED;
      case FW_SINK_FENCED:
         return FW_TXN_FENCED;
      default:
         return FW_TXN_FAILED;
      }
   }
   bson_destroy (&reply);
   err.message[0] = '\0';
   err.code = 0;
   ok = d->eo.replay_fn
           ? d->eo.replay_fn (d->eo.replay_ud, ev, d->eo.client, d->eo.session, &reply, &fenced,
                              &err)
           : d->eo.fn (d->eo.ud, ev, d->eo.client, d->eo.session, &reply, &fenced, &err);
   if (!ok) {
      if (fenced) {
         bson_destroy (&reply);
         fw_log (FW_LOG_WARN, d->prog.cfg.name, "exactly_once: %s; its transaction is aborted",
                 err.message);
         fw_txn_end (d);
         return FW_TXN_FENCED;
      }
      memset (&berr, 0, sizeof berr);
      berr.domain = MONGOC_ERROR_SERVER;
      berr.code = (uint32_t) err.code;
      bson_strncpy (berr.message, err.message, sizeof berr.message);
      fw_mongo_lua_push_failure (L, "checkpoint", &berr, &reply);
      bson_destroy (&reply);
      fw_txn_end (d);
      return FW_TXN_FAILED;
   }
   bson_destroy (&reply);
   bson_init (&reply);
   ok = commit (d, &reply, &berr);
   if (!ok) {
      fw_mongo_lua_push_failure (L, "commitTransaction", &berr, &reply);
   } else if (d->eo.committed) {
      d->eo.committed (d->eo.ud);
   }
   bson_destroy (&reply);
   fw_txn_end (d);
   return ok ? FW_TXN_COMMITTED : FW_TXN_FAILED;
}

/* A deployment without transactions (Mongo.TransactionsUnsupported: 20
 * IllegalOperation inside the transaction, libmongoc's refusal to start one)
 * fails every attempt of every event alike: the stream stops before the
 * event rather than send them all to the DLQ. */
bool
fw_txn_unsupported_stops (fw_dispatcher_t *d, bool replay, const char *type, const char *message)
{
   const char *conn = d->prog.cfg.exactly_once_connection ? d->prog.cfg.exactly_once_connection
                                                          : "default";

   if (!fw_txn_wanted (d, replay) || d->eo.sink.begin ||
       strcmp (type, "Mongo.TransactionsUnsupported") != 0) {
      return false;
   }
   snprintf (d->out.failure, sizeof d->out.failure,
             "exactly_once: connection \"%s\" has no transactions (Mongo.TransactionsUnsupported: "
             "%.400s): every event would fail alike, so the stream stops before this one instead "
             "of dead-lettering them (nothing is lost: it is read again at the next start). Run "
             "that deployment as a replica set (one member will do) or a sharded cluster "
             "(MongoDB 4.2+), or turn exactly_once off, then start the stream again",
             conn, message);
   return true;
}

mongoc_client_session_t *
fw_txn_session (const fw_dispatcher_t *d)
{
   return d->eo.session;
}

bool
fw_txn_in_mongo (const fw_dispatcher_t *d)
{
   return d->eo.fn && !d->eo.sink.begin;
}
