/*
 * dlq_replay_store.c - the DLQ store of a stream's replay (see
 * dlq_replay_store.h).
 */
#include "runtime/replay/dlq_replay_store.h"

fw_dlq_store_t *
fw_dlq_replay_store (fw_dispatcher_t *d, fw_error_t *error)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);
   /* A stream without a DLQ of its own may have sent entries to the
    * script's default DLQ with ctx:send_to_dlq. */
   const fw_dlq_config_t *dlq = cfg->dlq.enabled ? &cfg->dlq : &cfg->dlq_fallback;
   mongoc_client_t *client;

   if (!dlq->enabled) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\" has no dead-letter queue", cfg->name);
      return NULL;
   }
   if (!(client = fw_dispatcher_client_for (d, dlq->connection, error))) {
      return NULL;
   }
   return fw_dlq_store_mongo_open (client, dlq->database ? dlq->database : cfg->database,
                                   dlq->collection, NULL, error);
}
