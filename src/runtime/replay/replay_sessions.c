/*
 * replay_sessions.c - the sessions of `flowwarden dlq replay`'s transactions
 * (replay_sessions.h). One session per entry: recorded by the dispatcher
 * before the entry's first attempt, ended and taken off the record after
 * its last. A killed replay leaves its session on the record; the next
 * replay, and the stream's next start (stream_exactly_once.c), kill it with
 * killSessions, which aborts the transaction left open at once (MongoDB
 * manual, "killSessions": "Killing a session kills any in-progress
 * operations in the session"). A replay running meanwhile loses the attempt
 * in flight (its transaction is aborted; the retry policy runs it again).
 */
#include <string.h>

#include "flowwarden/log.h"
#include "runtime/checkpoint/txn_sessions.h"
#include "runtime/config/stream_config.h"
#include "runtime/replay/replay_sessions.h"

/* Takes the recorded session off the record (its transactions are over). */
static void
forget (fw_replay_sessions_t *rs)
{
   fw_error_t err;

   if (!rs->lsid) {
      return;
   }
   if (!fw_txn_sessions_forget (rs->client, fw_dispatcher_config (rs->d)->database, rs->id,
                                rs->lsid, &err)) {
      /* Left on the record: the next start kills an ended session, harmlessly. */
      fw_log (FW_LOG_WARN, fw_dispatcher_config (rs->d)->name, "exactly_once: %s", err.message);
   }
   bson_destroy (rs->lsid);
   rs->lsid = NULL;
   rs->client = NULL;
}

static bool
record (void *ud, mongoc_client_t *client, const bson_t *lsid, fw_error_t *error)
{
   fw_replay_sessions_t *rs = ud;
   const fw_stream_config_t *cfg = fw_dispatcher_config (rs->d);

   forget (rs); /* the dispatcher started a new session: the old one is over */
   if (!fw_txn_sessions_record (client, cfg->database, rs->id, lsid, error)) {
      return false;
   }
   if (!(rs->lsid = bson_copy (lsid))) {
      fw_error_set (error, FW_ERROR_NOMEM, "stream \"%s\": out of memory", cfg->name);
      return false;
   }
   rs->client = client;
   return true;
}

/* The stream's name without a unit's "#k/N". */
static size_t
base_len (const fw_stream_config_t *cfg)
{
   const char *hash = cfg->partitions > 0 ? strrchr (cfg->name, '#') : NULL;
   return hash ? (size_t) (hash - cfg->name) : strlen (cfg->name);
}

void
fw_replay_sessions_start (fw_replay_sessions_t *rs, fw_dispatcher_t *d)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);
   mongoc_client_t *client;
   fw_error_t err;
   int killed = 0;

   memset (rs, 0, sizeof *rs);
   rs->d = d;
   err.message[0] = '\0';
   if (!cfg->exactly_once || !(client = fw_dispatcher_txn_client (d, &err))) {
      return; /* no transactions, or not on MongoDB (PostgreSQL's sink) */
   }
   if (!fw_txn_sessions_replay_id (rs->id, sizeof rs->id, cfg->name, base_len (cfg))) {
      rs->id[0] = '\0';
      fw_log (FW_LOG_WARN, cfg->name,
              "exactly_once: the stream's name is too long for a "
              "record of its replay's sessions");
      return;
   }
   fw_dispatcher_set_exactly_once (d, NULL, record, rs);
   if (!fw_txn_sessions_kill (client, cfg->database, rs->id, &killed, &err)) {
      fw_log (FW_LOG_WARN, cfg->name,
              "exactly_once: cannot end the transactions a killed dlq replay may have left "
              "open (%s): until the server aborts them (transactionLifetimeLimitSeconds) "
              "their documents stay locked and attempts touching them fail with WriteConflict",
              err.message);
   } else if (killed > 0) {
      fw_log (FW_LOG_INFO, cfg->name,
              "exactly_once: ended %d server session(s) of a killed dlq replay "
              "(killSessions), aborting any transaction left open",
              killed);
   }
}

void
fw_replay_sessions_end (fw_replay_sessions_t *rs)
{
   if (!rs->d || !rs->lsid) {
      return;
   }
   fw_dispatcher_txn_reset (rs->d);
   forget (rs);
}
