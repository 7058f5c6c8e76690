/*
 * dispatcher_dlq.c - a dispatcher's DLQ store: which DLQ its stream writes
 * to, and opening it (the in-memory store, or MongoDB's on the thread's
 * client or a named connection), retried until it works or a stop.
 */
#include "flowwarden/log.h"
#include "runtime/dispatch/dispatcher-private.h"

/* The DLQ this stream writes to: its own, or, on a stream without one, the
 * script's default DLQ (seed 000: the store exists when any stream declares a
 * DLQ), which only ctx:send_to_dlq uses. */
const fw_dlq_config_t *
fw_dispatcher_dlq_config (const fw_dispatcher_t *d)
{
   return d->prog.cfg.dlq.enabled ? &d->prog.cfg.dlq : &d->prog.cfg.dlq_fallback;
}

bool
fw_dispatcher_open_dlq (fw_dispatcher_t *d)
{
   fw_error_t err;
   const fw_dlq_config_t *dlq = fw_dispatcher_dlq_config (d);

   if (dlq->memory) {
      /* Seed 004's in-memory variant: nothing to connect to; a sequenced
       * DLQ's sequences are kept beside its entries. */
      d->dlq = fw_dlq_store_memory_new (&err);
      if (!d->dlq) {
         fw_log (FW_LOG_ERROR, d->prog.cfg.name, "%s", err.message);
      }
      return d->dlq != NULL;
   }
   for (int tries = 1;; tries++) {
      /* A DLQ on a named connection (seed 002's roadmap: mongoTemplateRef). */
      mongoc_client_t *client = dlq->connection
                                   ? fw_connection_clients_get (d->clients, dlq->connection, &err)
                                   : d->client;
      d->dlq = client ? fw_dlq_store_mongo_new (
                           client, dlq->database ? dlq->database : d->prog.cfg.database,
                           dlq->collection, dlq->write_concern_tag, dlq->write_concern_w, &err)
                      : NULL;
      if (d->dlq) {
         return true;
      }
      int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.restart, tries,
                                           fw_backoff_random (&d->rng));
      fw_log (FW_LOG_ERROR, d->prog.cfg.name, "%s; retrying in %lld ms", err.message,
              (long long) delay);
      if (d->clock.wait_ms (d->clock.ud, delay)) {
         return false;
      }
   }
}
