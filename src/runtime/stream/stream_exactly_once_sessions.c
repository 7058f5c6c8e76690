/*
 * stream_exactly_once_sessions.c - exactly_once (issue 39): the server
 * sessions an earlier run left elsewhere than on the deployment this run's
 * transactions use, killed at the start (fw_stream_exactly_once_recover)
 * for the same reason as its own: a process killed inside a transaction
 * leaves the documents it wrote locked until the server's
 * transactionLifetimeLimitSeconds, and the next run's writes to them wait
 * or fail with WriteConflict until then. killSessions aborts that
 * transaction at once (MongoDB manual, "killSessions": "Killing a session
 * kills any in-progress operations in the session"; txn_sessions.c).
 *
 * Where they may be: the record of a killed `flowwarden dlq replay`
 * (replay_sessions.h); after a switch from exactly_once = true to a sink
 * deployment, the stream's own deployment; after a switch from a sink to
 * true or to another sink, that sink, which the stream's own record names
 * (each run on a sink notes it there before recording a session). On those
 * other deployments both records, the stream's and its replays', are ended.
 */
#include <string.h>

#include "flowwarden/log.h"
#include "runtime/checkpoint/txn_sessions.h"
#include "runtime/stream/stream_exactly_once_sessions-private.h"
#include "runtime/stream/stream_partition-private.h"

/* What the kills below read: the stream's settings and its dispatcher (the
 * sinks' clients). */
typedef struct {
   const fw_stream_config_t *cfg;
   fw_dispatcher_t *d;
} kill_ctx_t;

/* Kills the sessions of record id on client (connection: its name, for the
 * log); true when done (none, or killed). */
static bool
kill_record (const kill_ctx_t *w, mongoc_client_t *client, const char *id, const char *whose,
             const char *connection)
{
   fw_error_t err;
   int killed = 0;

   if (!fw_txn_sessions_kill (client, w->cfg->database, id, &killed, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "exactly_once: cannot end the transactions %s may have left open on connection "
              "\"%s\" (%s): until the server aborts them (transactionLifetimeLimitSeconds) their "
              "documents stay locked",
              whose, connection, err.message);
      return false;
   }
   if (killed > 0) {
      fw_log (FW_LOG_INFO, w->cfg->name,
              "exactly_once: ended %d server session(s) of %s on connection \"%s\" "
              "(killSessions), aborting any transaction left open",
              killed, whose, connection);
   }
   return true;
}

/* Kills both records on a deployment the transactions ran on: an earlier
 * run's and a killed dlq replay's; true when both are done. */
static bool
kill_records (const kill_ctx_t *w, mongoc_client_t *client, const char *connection)
{
   char id[512];
   bool ok = kill_record (w, client, w->cfg->name, "an earlier run", connection);

   if (fw_txn_sessions_replay_id (id, sizeof id, w->cfg->name,
                                  fw_stream_partition_base_len (w->cfg))) {
      ok = kill_record (w, client, id, "a killed dlq replay", connection) && ok;
   }
   return ok;
}

/* fw_txn_sessions_each_sink's: an earlier run's sink. */
static bool
kill_on_sink (void *ud, const char *sink)
{
   const kill_ctx_t *w = ud;
   mongoc_client_t *client;
   fw_error_t err;

   if (w->cfg->exactly_once_connection && strcmp (sink, w->cfg->exactly_once_connection) == 0) {
      return false; /* this run's: killed already, and still in use */
   }
   if (!(client = fw_dispatcher_client_for (w->d, sink, &err))) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "exactly_once: an earlier run's transactions ran on connection \"%s\", which the "
              "script no longer declares (%s): a transaction it left open there ends only with "
              "the server's transactionLifetimeLimitSeconds",
              sink, err.message);
      return true; /* said once: forgotten */
   }
   return kill_records (w, client, sink);
}

void
fw_stream_exactly_once_kill_elsewhere (const fw_stream_config_t *cfg, fw_dispatcher_t *d,
                                       mongoc_client_t *own, mongoc_client_t *client)
{
   kill_ctx_t ctx = {cfg, d};
   const kill_ctx_t *w = &ctx;
   const char *conn = w->cfg->exactly_once_connection ? w->cfg->exactly_once_connection : "default";
   char id[512];
   fw_error_t err;

   if (fw_txn_sessions_replay_id (id, sizeof id, w->cfg->name,
                                  fw_stream_partition_base_len (w->cfg))) {
      kill_record (w, client, id, "a killed dlq replay", conn);
   }
   if (!own) {
      return;
   }
   if (w->cfg->exactly_once_connection) { /* an earlier exactly_once = true's */
      kill_records (w, own, "default");
   }
   if (!fw_txn_sessions_each_sink (own, w->cfg->database, w->cfg->name, kill_on_sink, &ctx, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "exactly_once: cannot read which sinks an earlier run used (%s)", err.message);
   }
}
