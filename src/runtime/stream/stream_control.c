/*
 * stream_control.c - what the admin endpoint asks of a stream's thread
 * (pause, resume, restart), the waits that give way to those requests, and
 * the DLQ count behind the flowwarden_dlq_pending gauges.
 */
#include <lauxlib.h>

#include "flowwarden/log.h"
#include "flowwarden/metrics_lua.h"
#include "runtime/stream/stream_worker-private.h"

/* Waits are cut in slices this long so a request is seen soon. */
#define CONTROL_SLICE_MS 100
#define DLQ_COUNT_EVERY_MS 30000

void
fw_stream_worker_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry)
{
   w->metrics = registry ? fw_metrics_stream (registry, w->cfg.name) : NULL;
   fw_metrics_lua_bind_stream (fw_lua_host_state (w->host), w->metrics);
   for (int i = 0; i < w->n_lane_w; i++) {
      fw_stream_worker_set_metrics (w->lane_w[i], registry); /* one block: the stream's */
   }
}

fw_stream_metrics_t *
fw_stream_worker_metrics (const fw_stream_worker_t *w)
{
   return w->metrics;
}

void
fw_stream_worker_control (fw_stream_worker_t *w, fw_stream_action_t action)
{
   int c = action == FW_STREAM_PAUSE    ? W_CONTROL_PAUSE
           : action == FW_STREAM_RESUME ? W_CONTROL_RESUME
                                        : W_CONTROL_RESTART;
   __atomic_store_n (&w->control, c, __ATOMIC_RELEASE);
}

int
fw_stream_control_peek (fw_stream_worker_t *w)
{
   return __atomic_load_n (&w->control, __ATOMIC_ACQUIRE);
}

int
fw_stream_control_take (fw_stream_worker_t *w)
{
   return __atomic_exchange_n (&w->control, W_CONTROL_NONE, __ATOMIC_ACQ_REL);
}

bool
fw_stream_wait (fw_stream_worker_t *w, int64_t ms)
{
   while (ms > 0) {
      int64_t slice = ms < CONTROL_SLICE_MS ? ms : CONTROL_SLICE_MS;
      if (fw_shutdown_wait_ms (w->shutdown, slice)) {
         return true;
      }
      if (fw_stream_control_peek (w) != W_CONTROL_NONE) {
         return false;
      }
      ms -= slice;
   }
   return fw_shutdown_requested (w->shutdown);
}

int
fw_stream_paused (fw_stream_worker_t *w)
{
   if (w->metrics) {
      char why[256];
      snprintf (why, sizeof why,
                "paused by the operator (POST /v1/streams/%s/resume or `flowwarden resume %s` "
                "resumes it)",
                w->cfg.name, w->cfg.name);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_PAUSED, why);
   }
   fw_log (FW_LOG_INFO, w->cfg.name, "paused: checkpoint written, change stream closed");
   for (;;) {
      int c = fw_stream_control_take (w);
      if (c == W_CONTROL_RESUME || c == W_CONTROL_RESTART) {
         fw_log (FW_LOG_INFO, w->cfg.name, "%s: re-opening the change stream from its checkpoint",
                 c == W_CONTROL_RESUME ? "resumed" : "restarted");
         return c;
      }
      if (fw_shutdown_wait_ms (w->shutdown, CONTROL_SLICE_MS)) {
         return W_CONTROL_NONE;
      }
   }
}

/* --- counting events ------------------------------------------------------ */

/* The server's time of the event (wallTime, else clusterTime), for the lag. */
static int64_t
event_time_ms (const fw_event_t *ev)
{
   bson_iter_t it;
   uint32_t t, i;

   if (fw_event_field (ev, FW_EV_WALL_TIME, &it) && BSON_ITER_HOLDS_DATE_TIME (&it)) {
      return bson_iter_date_time (&it);
   }
   if (fw_event_field (ev, FW_EV_CLUSTER_TIME, &it) && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &t, &i);
      return (int64_t) t * 1000;
   }
   return 0;
}

void
fw_stream_count_received (fw_stream_worker_t *w, const fw_event_t *ev)
{
   fw_metrics_op_t op = ev->op != FW_OP_OTHER ? (fw_metrics_op_t) ev->op
                                              : fw_metrics_op_from_name (ev->operation_type);
   fw_stream_metrics_event_received (w->metrics, op, event_time_ms (ev));
}

void
fw_stream_count_dispatched (fw_stream_worker_t *w)
{
   fw_stream_metrics_set_lua_memory (w->metrics, fw_lua_host_memory_used (w->host));
   fw_stream_dlq_count_tick (w, w->finished_ms);
}

/* --- the DLQ's pending entries -------------------------------------------- */

/* Counts the stream's PENDING entries and finds the oldest: through the
 * stream's DLQ store, or, before it is (re)opened, a reader of its
 * collection. */
static bool
count_pending (fw_stream_worker_t *w, int64_t now_ms, int64_t *pending, double *oldest_age)
{
   const fw_dlq_config_t *dlq = &w->cfg.dlq;
   mongoc_client_t *client = w->client;
   fw_dlq_store_t *reader = NULL, *store = w->dlq;
   int64_t oldest_ms = 0;
   fw_error_t err;
   bool ok;

   if (!store && dlq->connection &&
       !(client = fw_connection_clients_get (w->clients, dlq->connection, &err))) {
      return false;
   }
   if (!store && client) {
      store = reader = fw_dlq_store_mongo_open (
         client, dlq->database ? dlq->database : w->cfg.database, dlq->collection, NULL, &err);
   }
   if (!store) {
      return false;
   }
   ok = store->pending (store, w->cfg.name, pending, &oldest_ms, &err);
   if (!ok) {
      fw_log (FW_LOG_DEBUG, w->cfg.name, "cannot count the DLQ's pending entries: %s",
              err.message);
   }
   *oldest_age = oldest_ms && now_ms > oldest_ms ? (double) (now_ms - oldest_ms) / 1000.0 : 0.0;
   fw_dlq_store_destroy (reader);
   return ok;
}

void
fw_stream_dlq_count_tick (fw_stream_worker_t *w, int64_t now_ms)
{
   int64_t pending = -1;
   double oldest = 0;

   if (!w->metrics || !w->cfg.dlq.enabled || now_ms < w->dlq_count_at_ms) {
      return;
   }
   w->dlq_count_at_ms = now_ms + DLQ_COUNT_EVERY_MS;
   if (count_pending (w, now_ms, &pending, &oldest)) {
      fw_stream_metrics_set_dlq_pending (w->metrics, pending, oldest);
   }
}

/* The stream stops for good: says why (log, status, metrics). */
void
fw_stream_failed (fw_stream_worker_t *w, const char *what)
{
   w->stats.failed = true;
   if (w->metrics) {
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_FAILED, what);
   }
   fw_log (FW_LOG_ERROR, w->cfg.name, "STREAM STOPPED: %s", what);
}
