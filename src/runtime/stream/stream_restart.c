/*
 * stream_restart.c - what a stream's thread does when a read of its change
 * stream ended: waits out a pause, takes an admin restart, stands by after a
 * lost lease, falls back when the history is lost, and re-opens after a
 * failure or an invalidate with the restart backoff. Called by worker_main
 * (stream_worker.c) only.
 */
#include "flowwarden/log.h"
#include "runtime/stream/stream_connect-private.h"
#include "runtime/stream/stream_control-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_parts-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_restart-private.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_shared-private.h"

bool
fw_stream_pause (fw_stream_worker_t *w, fw_stream_run_t *run, bool save)
{
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);
   int next;

   fw_stream_control_take (w);
   if (save) {
      fw_position_save (fw_stream_checkpoint (w), run->p, "pause");
   }
   if ((next = fw_stream_paused (w)) == W_CONTROL_NONE) {
      return false;
   }
   if (next == W_CONTROL_RESTART && metrics) {
      fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_ADMIN);
   }
   run->restarts = 0;
   return true;
}

/* The admin endpoint asked a restart (checkpoint written): re-open at once. */
static void
restart_asked (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);

   fw_stream_control_take (w);
   fw_log (FW_LOG_INFO, cfg->name,
           "restarting: checkpoint written, re-opening the change stream (asked by the "
           "admin endpoint)");
   if (metrics) {
      fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_ADMIN);
   }
   run->restarts = 0;
}

/* ha: the lease could not be kept: a standby until this instance leads
 * again, then from the checkpoint as it is then. False on shutdown. */
static bool
stand_by (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_position_t *p = run->p;

   /* Handlers stopped before the lease could expire. The last save is
    * fenced: it lands only if no newer leader fenced the checkpoint. */
   fw_position_save (fw_stream_checkpoint (w), p, "lease lost");
   /* ha.mode = "shared": over the share (stream_shared.c) */
   if (!fw_stream_yield_unit (fw_stream_shared (w))) {
      fw_log (FW_LOG_WARN, cfg->name,
              "role: standby (stopped handling: the lease, epoch %lld, could not be kept; "
              "change stream closed)",
              (long long) fw_stream_lead_epoch (w));
   }
   p->has_processed = p->has_resume = false;
   p->since_save = 0;
   p->dirty = false;
   p->invalidated = false;
   fw_checkpoint_cleanup (&run->cp);
   bson_init (&run->cp.processed);
   bson_init (&run->cp.seen);
   run->candidate = 0;
   if (!fw_stream_wait_lead (w) ||
       !fw_stream_load_checkpoint (w, &run->cp, p, &run->candidate, &run->from_checkpoint)) {
      return false;
   }
   run->restarts = 0;
   return true;
}

/* The resume point left the oplog: the last seen position is tried once
 * after the last processed one, then on_history_lost decides. False when
 * the stream stops. */
static bool
history_lost (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);
   fw_position_t *p = run->p;

   if (run->candidate == 0 && run->cp.has_seen && !bson_equal (&run->cp.seen, &p->resume)) {
      fw_log (FW_LOG_WARN, cfg->name,
              "resume point of the last processed event is no longer in the oplog; "
              "trying the last seen position");
      fw_position_set_token (&p->resume, &run->cp.seen);
      run->candidate = 1;
      if (metrics) {
         fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_HISTORY_LOST);
      }
      return true;
   }
   if (!p->has_resume && (cfg->start_at || run->at_group) && !run->start_at_lost) {
      char why[512];
      if (!fw_stream_start_at_lost (
             cfg, metrics, run, run->at_group ? run->group_at : cfg->start_at, why, sizeof why)) {
         fw_stream_failed (w, why);
         return false;
      }
      return true;
   }
   if (!cfg->resume_from_now) {
      fw_stream_failed (w,
                        "the change stream history is lost (the resume point left the "
                        "oplog) and on_history_lost = \"fail\"; events after the last "
                        "checkpoint may be missing. Set checkpoint.on_history_lost = "
                        "\"resume_from_now\" to accept the gap");
      return false;
   }
   fw_log (FW_LOG_ERROR, cfg->name,
           "change stream history lost: resuming from now; events between the last "
           "checkpoint and now were NOT delivered (on_history_lost = resume_from_now)");
   p->has_resume = false;
   run->start_at_lost = true; /* not back to an older start_at or group start */
   run->candidate = 2;
   if (metrics) {
      fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_HISTORY_LOST);
   }
   return true;
}

/* The change stream failed or was invalidated: re-opened after the restart
 * backoff (an admin request cuts it short). False when restart.max_attempts
 * is reached or on shutdown. */
static bool
restart_backoff (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   const fw_stream_config_t *cfg = fw_stream_cfg (w);
   fw_stream_metrics_t *metrics = fw_stream_worker_metrics (w);
   fw_position_t *p = run->p;
   int64_t delay;

   run->restarts++;
   if (cfg->restart.max_attempts > 0 && run->restarts > cfg->restart.max_attempts) {
      fw_stream_failed (w, "the change stream kept failing: restart.max_attempts reached");
      return false;
   }
   delay = fw_backoff_delay_ms (&cfg->restart, run->restarts,
                                fw_backoff_random (fw_stream_rng (w)));
   fw_log (FW_LOG_INFO, cfg->name, "re-opening the change stream in %lld ms%s", (long long) delay,
           p->invalidated ? " (after invalidate, with startAfter)" : "");
   if (metrics) {
      char why[800];
      snprintf (why, sizeof why, "%s; re-opening it in %lld ms (restart %d)",
                p->invalidated ? "the change stream was invalidated"
                : p->error[0]  ? p->error
                               : "the change stream failed",
                (long long) delay, run->restarts);
      fw_stream_metrics_set_state (metrics, FW_STREAM_RESTARTING, why);
      fw_stream_metrics_restart (metrics, p->invalidated ? FW_METRICS_RESTART_INVALIDATE
                                                         : FW_METRICS_RESTART_ERROR);
   }
   p->invalidated = false;
   p->error[0] = '\0';
   /* An admin request (restart now, pause) cuts the delay short. */
   if (fw_stream_wait (w, delay) ||
       !fw_stream_wait_server (fw_stream_client (w), cfg->name, fw_stream_shutdown (w), metrics,
                               FW_STREAM_RESTARTING)) {
      return false;
   }
   if (fw_stream_control_pending (w) == W_CONTROL_RESTART) {
      fw_stream_control_take (w);
      if (metrics) {
         fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_ADMIN);
      }
   }
   return true;
}

bool
fw_stream_read_ended (fw_stream_worker_t *w, fw_stream_run_t *run, fw_read_end_t end)
{
   fw_shutdown_t *shutdown = fw_stream_shutdown (w);

   if (end == FW_READ_PAUSE) {
      return fw_stream_pause (w, run, false); /* the read saved at its end */
   }
   if (end == FW_READ_REOPEN && !fw_shutdown_requested (shutdown)) {
      return true;
   }
   if (end == FW_READ_RESTART) {
      restart_asked (w, run);
      return true;
   }
   if (end == FW_READ_LOST && !fw_shutdown_requested (shutdown)) {
      return stand_by (w, run);
   }
   if (end == FW_READ_STOP || end == FW_READ_FAILED || fw_shutdown_requested (shutdown)) {
      return false;
   }
   if (end == FW_READ_HISTORY_LOST) {
      return history_lost (w, run);
   }
   return restart_backoff (w, run);
}
