/*
 * stream_exactly_once.c - exactly_once (issue 39), the stream's side: the
 * position past a handled event written in its handler's transaction, to
 * _fw_checkpoints on the stream's own deployment, fenced with the lease's
 * epoch under ha so that a deposed leader commits nothing; and the record
 * of the server sessions those transactions run on, whose transactions the
 * next holder of the checkpoint kills before it reads (txn_sessions.h).
 */
#include "flowwarden/checkpoint_store.h"
#include "flowwarden/log.h"
#include "flowwarden/txn_sessions.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_worker-private.h"

static bool
position_in_txn (void *ud, const fw_event_t *ev, mongoc_client_t *client,
                 mongoc_client_session_t *session, bson_t *reply, bool *fenced,
                 fw_error_t *error)
{
   fw_stream_worker_t *w = ud;
   bson_t token = BSON_INITIALIZER;
   bool ok;

   *fenced = false;
   bson_init (reply);
   if (w->lead.lease && w->lead.epoch <= 0) {
      *fenced = true;
      fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\" no longer leads", w->cfg->name);
      return false;
   }
   if (!fw_position_set_event_token (&token, ev)) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\": the event has no resume token to "
                    "commit", w->cfg->name);
      bson_destroy (&token);
      return false;
   }
   bson_destroy (reply);
   ok = fw_checkpoint_save_in (client, session, w->cfg->database, w->cfg->name, &token,
                               fw_lua_host_version (fw_dispatcher_host (w->d)),
                               w->lead.lease ? w->lead.epoch : 0, fenced, reply, error);
   bson_destroy (&token);
   return ok;
}

static bool
record_session (void *ud, mongoc_client_t *client, const bson_t *lsid, fw_error_t *error)
{
   fw_stream_worker_t *w = ud;

   return fw_txn_sessions_record (client, w->cfg->database, w->cfg->name, lsid, error);
}

void
fw_stream_exactly_once_wire (fw_stream_worker_t *w)
{
   if (w->cfg->exactly_once) {
      fw_dispatcher_set_exactly_once (w->d, position_in_txn, record_session, w);
   } else {
      fw_dispatcher_set_exactly_once (w->d, NULL, NULL, w);
   }
}

void
fw_stream_exactly_once_recover (fw_stream_worker_t *w)
{
   mongoc_client_t *client;
   fw_error_t err;
   int killed = 0;

   if (!w->cfg->exactly_once) {
      return;
   }
   err.message[0] = '\0';
   if (!(client = fw_dispatcher_txn_client (w->d, &err)) ||
       !fw_txn_sessions_kill (client, w->cfg->database, w->cfg->name, &killed, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name, "exactly_once: cannot end the transactions an earlier "
              "run may have left open (%s): until the server aborts them "
              "(transactionLifetimeLimitSeconds) their documents stay locked and attempts "
              "touching them fail with WriteConflict", err.message);
      return;
   }
   if (killed > 0) {
      fw_log (FW_LOG_INFO, w->cfg->name, "exactly_once: ended %d server session(s) of an "
              "earlier run (killSessions), aborting any transaction left open", killed);
   }
}
