/*
 * stream_exactly_once.c - exactly_once (issue 39), the stream's side: the
 * position past a handled event written in its handler's transaction, to
 * _fw_checkpoints on the deployment the transactions run on (the stream's
 * own, or the sink of exactly_once = { connection = "name" }: there in the
 * database of the stream's checkpoint), fenced with the lease's epoch under
 * ha so that a deposed leader commits nothing; and the record of the server
 * sessions those transactions run on, whose transactions the next holder of
 * the checkpoint kills before it reads (txn_sessions.h).
 */
#include "flowwarden/log.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/txn_sessions.h"
#include "runtime/dispatch/backoff.h"
#include "runtime/host/server_probe.h"
#include "runtime/host/txn_support.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_exactly_once_sessions-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_token-private.h"

/* *dst = a copy of src (*dst allocated on first use). */
static void
keep (bson_t **dst, const bson_t *src)
{
   if (!*dst) {
      *dst = bson_new ();
   }
   fw_position_set_token (*dst, src);
}

bool
fw_stream_exactly_once_gen (fw_stream_eo_t *e, mongoc_client_t *client, int64_t *gen, bool *refused,
                            fw_error_t *error)
{
   const char *db = e->cfg->database, *name = e->cfg->name;
   int64_t stored;

   *gen = 0;
   *refused = false;
   if (*e->lease) {
      return true; /* under ha the fence orders the runs */
   }
   if (e->gen > 0) {
      *gen = e->gen;
      return true;
   }
   if (!*e->client) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "stream \"%s\": no client to claim its writer generation", name);
      return false;
   }
   if (!fw_position_claim (fw_stream_checkpoint (e->w), *e->client, gen, error)) {
      return false;
   }
   /* A sink's checkpoint, which the transactions write, carries it too:
    * raised before the first of them. A later generation there is a newer
    * run's (the stream's own claims are past every earlier run's, also
    * after a delete by hand). */
   if (e->cfg->exactly_once_connection) {
      if (!fw_checkpoint_raise_generation (client, db, name, *gen, &stored, error)) {
         return false;
      }
      if (stored > *gen) {
         fw_error_set (error, FW_ERROR_MONGO,
                       "checkpoint of stream \"%s\" on connection \"%s\" NOT saved: a newer run "
                       "of the stream (writer generation %lld, this run's %lld) has written it "
                       "since this run started",
                       name, e->cfg->exactly_once_connection, (long long) stored, (long long) *gen);
         *refused = true;
         return false;
      }
   }
   e->gen = *gen;
   return true;
}

void
fw_stream_exactly_once_opened (fw_stream_eo_t *e)
{
   mongoc_client_t *client;
   fw_error_t err;
   int64_t gen;
   bool refused;

   if (!e->cfg->exactly_once || e->cfg->exactly_once_pg || *e->lease || e->gen > 0) {
      return;
   }
   err.message[0] = '\0';
   if (!(client = fw_dispatcher_txn_client (e->d, &err)) ||
       !fw_stream_exactly_once_gen (e, client, &gen, &refused, &err)) {
      fw_log (FW_LOG_WARN, e->cfg->name,
              "exactly_once: %s; claimed again before the first transaction", err.message);
   }
}

/* Without ha a later run holds the checkpoint (refused): this run stops,
 * its events are the later run's (nothing of the transaction committed). */
static void
stop_stale_run (fw_stream_eo_t *e, const fw_error_t *error)
{
   if (!*e->lease) {
      fw_stream_failed (e->w, error->message);
   }
}

static bool
position_in_txn (void *ud, const fw_event_t *ev, mongoc_client_t *client,
                 mongoc_client_session_t *session, bson_t *reply, bool *fenced, fw_error_t *error)
{
   fw_stream_eo_t *e = ud;
   bson_t token = BSON_INITIALIZER;
   int64_t gen;
   bool ok;

   *fenced = false;
   bson_init (reply);
   if (*e->lease && *e->epoch <= 0) {
      *fenced = true;
      fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\" no longer leads", e->cfg->name);
      return false;
   }
   if (!fw_stream_exactly_once_gen (e, client, &gen, fenced, error)) {
      if (*fenced) {
         stop_stale_run (e, error);
      }
      bson_destroy (&token);
      return false;
   }
   if (ev->op == FW_OP_SNAPSHOT) {
      /* A snapshot's row has no resume token: the snapshot's progress
       * past it commits instead (the stream's position does not move). */
      bson_destroy (&token);
      if (!e->row) {
         fw_error_set (error, FW_ERROR_INVALID,
                       "stream \"%s\": a snapshot's row without its "
                       "snapshot",
                       e->cfg->name);
         return false;
      }
      bson_destroy (reply);
      ok = e->row (e->w, ev, client, session, gen, reply, fenced, error);
      if (!ok && *fenced && gen > 0) {
         stop_stale_run (e, error);
      }
      return ok;
   }
   if (!fw_position_set_event_token (&token, ev)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "stream \"%s\": the event has no resume token to "
                    "commit",
                    e->cfg->name);
      bson_destroy (&token);
      return false;
   }
   bson_destroy (reply);
   ok = fw_checkpoint_save_in (client, session, e->cfg->database, e->cfg->name, &token,
                               fw_lua_host_version (fw_dispatcher_host (e->d)),
                               *e->lease ? *e->epoch : 0, gen, fenced, reply, error);
   if (ok) {
      keep (&e->written, &token);
   } else if (*fenced && gen > 0) {
      stop_stale_run (e, error);
   }
   bson_destroy (&token);
   return ok;
}

/* The transaction the last position was written in committed. */
static void
position_committed (void *ud)
{
   fw_stream_eo_t *e = ud;

   if (e->written) {
      keep (&e->committed, e->written);
   }
}

static bool
record_session (void *ud, mongoc_client_t *client, const bson_t *lsid, fw_error_t *error)
{
   fw_stream_eo_t *e = ud;

   /* On a sink: the stream's own record says where, for a start that no
    * longer runs there (stream_exactly_once_sessions.c). */
   if (e->cfg->exactly_once_connection && *e->client &&
       !fw_txn_sessions_note_sink (*e->client, e->cfg->database, e->cfg->name,
                                   e->cfg->exactly_once_connection, error)) {
      return false;
   }
   return fw_txn_sessions_record (client, e->cfg->database, e->cfg->name, lsid, error);
}

void
fw_stream_exactly_once_wire (fw_stream_eo_t *e)
{
   if (e->cfg->exactly_once) {
      fw_dispatcher_set_exactly_once (e->d, position_in_txn, record_session, e);
      fw_dispatcher_set_txn_committed (e->d, position_committed);
   } else {
      fw_dispatcher_set_exactly_once (e->d, NULL, NULL, e);
      fw_dispatcher_set_txn_committed (e->d, NULL);
   }
   fw_dispatcher_set_txn_sink (e->d, NULL);
   e->advance = e->cfg->exactly_once_connection ? fw_stream_exactly_once_advance : NULL;
   fw_stream_exactly_once_pg_wire (e); /* into PostgreSQL: its sink */
}

void
fw_stream_exactly_once_recover (fw_stream_eo_t *e)
{
   mongoc_client_t *client;
   fw_error_t err;
   int killed = 0;
   bool ok;

   /* A new run reads its position from the stored checkpoint (which
    * another holder may have moved since). */
   bson_destroy (e->written);
   bson_destroy (e->committed);
   e->written = e->committed = NULL;
   e->gen = 0; /* claimed again before the run's first transaction */
   if (!e->cfg->exactly_once) {
      return;
   }
   err.message[0] = '\0';
   ok = (client = fw_dispatcher_txn_client (e->d, &err)) &&
        fw_txn_sessions_kill (client, e->cfg->database, e->cfg->name, &killed, &err);
   if (client) {
      fw_stream_exactly_once_kill_elsewhere (e->cfg, e->d, *e->client, client);
   }
   /* This thread's session of an earlier term ends too: another holder may
    * have killed it and taken it off the record meanwhile, and a session
    * used unrecorded would leave a transaction nobody can end after a kill
    * -9. The next attempt starts a new session and records it first. Only
    * after the kill: the driver hands an ended session to the next one
    * started in this process, which must not find it in this record (a
    * killed session may be used again: MongoDB manual, "killSessions",
    * "Killed Session Availability"). */
   fw_dispatcher_txn_reset (e->d);
   if (!ok) {
      fw_log (FW_LOG_WARN, e->cfg->name,
              "exactly_once: cannot end the transactions an earlier "
              "run may have left open (%s): until the server aborts them "
              "(transactionLifetimeLimitSeconds) their documents stay locked and attempts "
              "touching them fail with WriteConflict",
              err.message);
      return;
   }
   if (killed > 0) {
      fw_log (FW_LOG_INFO, e->cfg->name,
              "exactly_once: ended %d server session(s) of an "
              "earlier run (killSessions), aborting any transaction left open",
              killed);
   }
}

/* The sink's client (exactly_once = { connection = <MongoDB> }), else NULL
 * (error set only when the sink's client cannot be had). */
static mongoc_client_t *
sink_client (fw_stream_eo_t *e, fw_error_t *error)
{
   error->message[0] = '\0';
   if (!e->cfg->exactly_once || !e->cfg->exactly_once_connection) {
      return NULL;
   }
   return fw_dispatcher_txn_client (e->d, error);
}

bool
fw_stream_exactly_once_fence (fw_stream_eo_t *e, int64_t epoch, int64_t *stored, fw_error_t *error)
{
   mongoc_client_t *client = sink_client (e, error);

   *stored = epoch;
   if (!client) {
      return error->message[0] == '\0';
   }
   return fw_checkpoint_fence (client, e->cfg->database, e->cfg->name, epoch, stored, error);
}

bool
fw_stream_exactly_once_load (fw_stream_eo_t *e, fw_checkpoint_t *cp, bool *found)
{
   fw_error_t err;
   mongoc_client_t *client;

   *found = false;
   for (int tries = 1;; tries++) {
      client = sink_client (e, &err);
      if (!client && err.message[0] == '\0') {
         return true; /* no sink */
      }
      if (client && fw_checkpoint_load (client, e->cfg->database, e->cfg->name, cp, &err)) {
         *found = cp->has_processed || cp->has_seen;
         return true;
      }
      fw_checkpoint_cleanup (cp);
      int64_t delay = fw_backoff_delay_ms (&e->cfg->restart, tries, fw_backoff_random (e->rng));
      fw_log (FW_LOG_ERROR, e->cfg->name,
              "exactly_once: the checkpoint on connection \"%s\": %s; retrying in %lld ms",
              e->cfg->exactly_once_connection, err.message, (long long) delay);
      if (fw_shutdown_wait_ms (e->shutdown, delay)) {
         return false;
      }
   }
}

void
fw_stream_exactly_once_advance (fw_stream_eo_t *e, const bson_t *processed, const bson_t *seen)
{
   fw_error_t err;
   mongoc_client_t *client = sink_client (e, &err);
   const char *version = fw_lua_host_version (fw_dispatcher_host (e->d));
   bool ok;

   if ((!processed && !seen) || (*e->lease && *e->epoch <= 0)) {
      return; /* nothing to save, or a standby's: the leader's stands */
   }
   if (!client || fw_position_tokens_are (processed, seen, e->committed)) {
      return;
   }
   if (*e->lease) {
      ok = fw_checkpoint_save_fenced (client, e->cfg->database, e->cfg->name, processed, seen,
                                      version, *e->epoch, NULL, &err);
   } else {
      /* with the run's writer generation, as the transactions' writes */
      int64_t gen;
      bool refused;
      ok = fw_stream_exactly_once_gen (e, client, &gen, &refused, &err) &&
           fw_checkpoint_save_ordered_with (client, e->cfg->database, e->cfg->name, processed, seen,
                                            version, NULL, 0, gen, NULL, 0,
                                            &err) == FW_CHECKPOINT_SAVED;
   }
   if (!ok) {
      fw_log (FW_LOG_WARN, e->cfg->name,
              "exactly_once: the checkpoint on connection \"%s\" not moved (%s): a restart "
              "reads again from the last event handled",
              e->cfg->exactly_once_connection, err.message);
   }
}

bool
fw_stream_exactly_once_supported (fw_stream_eo_t *e, char *what, size_t len)
{
   const char *conn = e->cfg->exactly_once_connection ? e->cfg->exactly_once_connection : "default";
   mongoc_client_t *client;
   fw_error_t err;
   char why[400], where[300];

   if (!e->cfg->exactly_once || !(client = fw_dispatcher_txn_client (e->d, &err))) {
      return true; /* none, PostgreSQL's, or a client its first attempt will say about */
   }
   switch (fw_txn_support_probe (mongoc_client_get_uri (client), why, sizeof why)) {
   case FW_TXN_SUPPORTED:
      return true;
   case FW_TXN_UNKNOWN:
      fw_log (FW_LOG_WARN, e->cfg->name,
              "exactly_once: cannot tell whether connection \"%s\" has transactions (%s); "
              "the stream goes on and its first transaction will say",
              conn, why);
      return true;
   default:
      break;
   }
   fw_server_describe (mongoc_client_get_uri (client), where, sizeof where);
   snprintf (what, len,
             "exactly_once: stream \"%s\" runs its handler calls in transactions on connection "
             "\"%s\" (%s), but %s. Run that deployment as a replica set (one member will do: "
             "mongod --replSet NAME, then rs.initiate(), and ?replicaSet=NAME in its URI) or a "
             "sharded cluster (MongoDB 4.2+), or turn exactly_once off; the stream reads "
             "nothing until then, so no event is lost or dead-lettered",
             e->cfg->name, conn, where, why);
   return false;
}
