/*
 * stream_exactly_once.c - exactly_once (issue 39), the stream's side: the
 * position past a handled event written in its handler's transaction, to
 * _fw_checkpoints on the stream's own deployment, fenced with the lease's
 * epoch under ha so that a deposed leader commits nothing.
 */
#include "flowwarden/checkpoint_store.h"
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

void
fw_stream_exactly_once_wire (fw_stream_worker_t *w)
{
   fw_dispatcher_set_exactly_once (w->d, w->cfg->exactly_once ? position_in_txn : NULL, w);
}
