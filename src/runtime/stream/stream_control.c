/*
 * stream_control.c - what the admin endpoint asks of a stream's thread
 * (pause, resume, restart), the waits that give way to those requests,
 * whether its thread runs, and the DLQ count behind the
 * flowwarden_dlq_pending gauges.
 */
#include <lauxlib.h>

#include "flowwarden/log.h"
#include "lua_api/metrics_lua.h"
#include "runtime/stream/stream_control-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_worker-private.h"

const fw_stream_config_t *
fw_stream_cfg (const fw_stream_worker_t *w)
{
   return w->cfg;
}

fw_shutdown_t *
fw_stream_shutdown (const fw_stream_worker_t *w)
{
   return w->shutdown;
}

mongoc_client_t *
fw_stream_client (const fw_stream_worker_t *w)
{
   return w->client;
}

uint64_t *
fw_stream_rng (fw_stream_worker_t *w)
{
   return &w->rng;
}

int64_t
fw_stream_lead_epoch (const fw_stream_worker_t *w)
{
   return w->lead.epoch;
}

void
fw_stream_set_lead_epoch (fw_stream_worker_t *w, int64_t epoch)
{
   w->lead.epoch = epoch;
}

fw_lease_t *
fw_stream_lease (const fw_stream_worker_t *w)
{
   return w->lead.lease;
}

struct fw_stream_circuit *
fw_stream_circuit (fw_stream_worker_t *w)
{
   return &w->circuit;
}

struct fw_stream_shared *
fw_stream_shared (fw_stream_worker_t *w)
{
   return &w->shared;
}

struct fw_stream_eo *
fw_stream_exactly_once (fw_stream_worker_t *w)
{
   return &w->eo;
}

struct fw_stream_ckpt *
fw_stream_checkpoint (fw_stream_worker_t *w)
{
   return &w->ckpt;
}

struct fw_stream_pending *
fw_stream_pending (fw_stream_worker_t *w)
{
   return &w->pending;
}

/* ha.mode = "leader": whether this thread may still call handlers (declared
 * in stream_lead-private.h; the share it reads: stream_shared.c). */
bool
fw_stream_lease_lost (fw_stream_worker_t *w)
{
   fw_stream_shared_observe (&w->shared); /* ha.mode = "shared" only */
   return w->lead.lease &&
          (!fw_lease_is_leader (w->lead.lease, NULL) || fw_stream_over_share (&w->shared));
}

int
fw_stream_control_pending (fw_stream_worker_t *w)
{
   return fw_stream_control_peek (w);
}

bool
fw_stream_worker_finished (const fw_stream_worker_t *w)
{
   return __atomic_load_n (&w->thread.finished, __ATOMIC_ACQUIRE);
}

bool
fw_stream_worker_running (const fw_stream_worker_t *w)
{
   return w->thread.started && !w->thread.joined && !fw_stream_worker_finished (w);
}

/* Waits are cut in slices this long so a request is seen soon. */
#define CONTROL_SLICE_MS 100
#define DLQ_COUNT_EVERY_MS 30000

void
fw_stream_worker_control (fw_stream_worker_t *w, fw_stream_action_t action)
{
   int c = action == FW_STREAM_PAUSE    ? W_CONTROL_PAUSE
           : action == FW_STREAM_RESUME ? W_CONTROL_RESUME
                                        : W_CONTROL_RESTART;
   __atomic_store_n (&w->control, c, __ATOMIC_RELEASE);
   if (action == FW_STREAM_RESUME) {
      fw_dispatcher_circuit_probe_now (w->d); /* an open breaker probes at once */
   }
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
                w->cfg->name, w->cfg->name);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_PAUSED, why);
   }
   fw_log (FW_LOG_INFO, w->cfg->name, "paused: checkpoint written, change stream closed");
   for (;;) {
      int c = fw_stream_control_take (w);
      if (c == W_CONTROL_RESUME || c == W_CONTROL_RESTART) {
         fw_log (FW_LOG_INFO, w->cfg->name, "%s: re-opening the change stream from its checkpoint",
                 c == W_CONTROL_RESUME ? "resumed" : "restarted");
         return c;
      }
      if (fw_shutdown_wait_ms (w->shutdown, CONTROL_SLICE_MS)) {
         return W_CONTROL_NONE;
      }
   }
}

/* --- counting events ------------------------------------------------------ */

void
fw_stream_count_dispatched (fw_stream_worker_t *w, const fw_outcome_t *o)
{
   if (w->metrics) {
      fw_stream_dlq_count_tick (w, o->finished_ms ? o->finished_ms : fw_now_ms ());
   }
}

/* --- the DLQ's pending entries -------------------------------------------- */

/* Counts the stream's PENDING entries and finds the oldest: through the
 * stream's DLQ store, or, before it is (re)opened, a reader of its
 * collection. */
static bool
count_pending (fw_stream_worker_t *w, int64_t now_ms, int64_t *pending, double *oldest_age)
{
   int64_t oldest_ms = 0;
   fw_error_t err;

   if (!fw_dispatcher_dlq_pending (w->d, pending, &oldest_ms, &err)) {
      fw_log (FW_LOG_DEBUG, w->cfg->name, "cannot count the DLQ's pending entries: %s",
              err.message);
      return false;
   }
   *oldest_age = oldest_ms && now_ms > oldest_ms ? (double) (now_ms - oldest_ms) / 1000.0 : 0.0;
   return true;
}

void
fw_stream_dlq_count_tick (fw_stream_worker_t *w, int64_t now_ms)
{
   int64_t pending = -1;
   double oldest = 0;

   if (!w->metrics || !w->cfg->dlq.enabled || now_ms < w->dlq.count_at_ms) {
      return;
   }
   w->dlq.count_at_ms = now_ms + DLQ_COUNT_EVERY_MS;
   if (count_pending (w, now_ms, &pending, &oldest)) {
      fw_stream_metrics_set_dlq_pending (w->metrics, pending, oldest);
   }
}

/* The stream stops for good: says why (log, status, metrics). */
void
fw_stream_failed (fw_stream_worker_t *w, const char *what)
{
   w->summary.failed = true;
   if (w->metrics) {
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_FAILED, what);
   }
   fw_log (FW_LOG_ERROR, w->cfg->name, "STREAM STOPPED: %s", what);
}
