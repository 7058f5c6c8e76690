/*
 * stream_start_at.c - where an open without a position of its own starts:
 * checkpoint.start_at (issue 28), a switched generation's start, or with
 * ha.mode = "shared" the stream's start in its group (startAtOperationTime,
 * change_stream.c); and what the stream does when the server says that
 * history is already gone.
 */
#include <stdio.h>
#include <time.h>

#include "flowwarden/log.h"
#include "runtime/snapshot/snapshot.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_restart-private.h"
#include "runtime/stream/stream_shared-private.h"

/* "2026-11-26T10:00:00Z (Timestamp(1795600800, 0))" */
static void
describe_start_at (uint64_t start_at, char *out, size_t len)
{
   time_t t = (time_t) (start_at >> 32);
   struct tm tm;
   char when[32] = "?";

   if (gmtime_r (&t, &tm)) {
      strftime (when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
   }
   snprintf (out, len, "%s (Timestamp(%u, %u))", when, (unsigned) (start_at >> 32),
             (unsigned) (start_at & 0xffffffffu));
}

bool
fw_stream_start_at_lost (const fw_stream_config_t *cfg, fw_stream_metrics_t *metrics,
                         fw_stream_run_t *run, uint64_t start_at, char *why, size_t len)
{
   const char *what = run->at_group ? "the stream's start in its group" : "checkpoint.start_at";
   char at[96];

   describe_start_at (start_at, at, sizeof at);
   if (!cfg->resume_from_now) {
      snprintf (why, len,
                "the change stream history is lost: %s %s is older than the oplog's first "
                "entry, and on_history_lost = \"fail\". %s, or set checkpoint.on_history_lost "
                "= \"resume_from_now\" to start from now",
                what, at,
                run->at_group ? "Stop every member of the group for a lease (the next start "
                                "records a new start)"
                              : "Choose a later start_at");
      return false;
   }
   fw_log (FW_LOG_ERROR, cfg->name,
           "change stream history lost: %s %s is older than the oplog's first entry; "
           "starting from now: events between it and now were NOT delivered "
           "(on_history_lost = resume_from_now)",
           what, at);
   run->start_at_lost = true;
   run->candidate = 2;
   if (metrics) {
      fw_stream_metrics_restart (metrics, FW_METRICS_RESTART_HISTORY_LOST);
   }
   return true;
}

bool
fw_stream_start_point (const fw_stream_config_t *cfg, struct fw_stream_shared *shared,
                       mongoc_client_t *client, fw_stream_run_t *run, uint64_t gen_start,
                       uint64_t *at)
{
   fw_position_t *p = run->p;
   uint64_t group = 0;

   run->at_group = false;
   *at = run->start_at_lost ? 0 : gen_start ? gen_start : cfg->start_at;
   if (*at || run->start_at_lost || !cfg->ha_shared || (p->has_resume && !cfg->start_latest)) {
      return true;
   }
   if (!fw_stream_group_start (shared, client, &group, p->error, sizeof p->error)) {
      return false;
   }
   if (p->has_resume) {
      uint64_t t = fw_snapshot_token_time (&p->resume);
      if (!t || t >= group) {
         return true; /* saved by this run of the group: a take-over resumes there */
      }
      fw_log (FW_LOG_INFO, cfg->name,
              "start_position = \"latest\": its checkpoint is older than the group's start "
              "(an earlier run of the group): starting at the group's start");
      p->has_resume = false;
   }
   run->group_at = *at = group;
   run->at_group = true;
   return true;
}
