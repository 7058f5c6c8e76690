/*
 * dlq_replay_store.c - the DLQ store of a stream's replay (see
 * dlq_replay_store.h).
 */
#include "flowwarden/connections.h"
#include "flowwarden/dlq_replay_store.h"
#include "runtime/stream/stream_worker-private.h"

fw_dlq_store_t *
fw_dlq_replay_store (fw_stream_worker_t *w, fw_error_t *error)
{
   /* As fw_dlq_replay_collection chooses. */
   const fw_dlq_config_t *dlq = w->cfg.dlq.enabled ? &w->cfg.dlq : &w->cfg.dlq_fallback;
   mongoc_client_t *client;

   if (!dlq->enabled) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\" has no dead-letter queue",
                    w->cfg.name);
      return NULL;
   }
   client = dlq->connection ? fw_connection_clients_get (w->clients, dlq->connection, error)
                            : w->client;
   if (!client) {
      if (!dlq->connection) {
         fw_error_set (error, FW_ERROR_MONGO, "stream \"%s\" has no client", w->cfg.name);
      }
      return NULL;
   }
   return fw_dlq_store_mongo_open (client, dlq->database ? dlq->database : w->cfg.database,
                                   dlq->collection, NULL, error);
}
