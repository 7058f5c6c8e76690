/*
 * dispatcher_dlq.c - a dispatcher's DLQ store: which DLQ its stream writes
 * to, and opening it (the in-memory store, or MongoDB's on the thread's
 * client or a named connection), retried until it works or a stop.
 */
#include "flowwarden/log.h"
#include "runtime/dispatch/dispatcher_access-private.h"

/* The DLQ this stream writes to: its own, or, on a stream without one, the
 * script's default DLQ (seed 000: the store exists when any stream declares a
 * DLQ), which only ctx:send_to_dlq uses. */
const fw_dlq_config_t *
fw_dispatcher_dlq_config (const fw_dispatcher_t *d)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);

   return cfg->dlq.enabled ? &cfg->dlq : &cfg->dlq_fallback;
}

bool
fw_dispatcher_open_dlq (fw_dispatcher_t *d)
{
   fw_error_t err;
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);
   const fw_dlq_config_t *dlq = fw_dispatcher_dlq_config (d);
   fw_dlq_store_t *store;

   if (dlq->memory) {
      /* Seed 004's in-memory variant: nothing to connect to; a sequenced
       * DLQ's sequences are kept beside its entries. */
      store = fw_dlq_store_memory_new (&err);
      fw_dispatcher_set_dlq_store (d, store);
      if (!store) {
         fw_log (FW_LOG_ERROR, cfg->name, "%s", err.message);
      }
      return store != NULL;
   }
   for (int tries = 1;; tries++) {
      /* A DLQ on a named connection (seed 002's roadmap: mongoTemplateRef). */
      mongoc_client_t *client = dlq->connection
                                   ? fw_connection_clients_get (fw_dispatcher_clients (d),
                                                                dlq->connection, &err)
                                   : fw_dispatcher_client (d);
      store = client
                 ? fw_dlq_store_mongo_new (client, dlq->database ? dlq->database : cfg->database,
                                           dlq->collection, dlq->write_concern_tag,
                                           dlq->write_concern_w, &err)
                 : NULL;
      fw_dispatcher_set_dlq_store (d, store);
      if (store) {
         return true;
      }
      int64_t delay = fw_backoff_delay_ms (&cfg->restart, tries, fw_dispatcher_random (d));
      fw_log (FW_LOG_ERROR, cfg->name, "%s; retrying in %lld ms", err.message, (long long) delay);
      if (fw_dispatcher_wait_ms (d, delay)) {
         return false;
      }
   }
}
