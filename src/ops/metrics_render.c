/*
 * metrics_render.c - the Prometheus text exposition (format 0.0.4) of the
 * registry: each family once, with HELP and TYPE, then its samples for
 * every active stream; the process_* metrics from /proc/self.
 */
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "flowwarden/clock.h"

#include "metrics-private.h"

typedef struct {
   fw_strbuf_t *out;
   fw_stream_metrics_t *first; /* the registry's blocks */
} render_t;

#define FOREACH_ACTIVE(r, b) FW_FOREACH_ACTIVE_STREAM ((r)->first, b)

static void
family (fw_strbuf_t *out, const char *name, const char *type, const char *help)
{
   fw_strbuf_printf (out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{stream="S"[,key="value"]} */
static void
series_start (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b, const char *key,
              const char *value)
{
   fw_strbuf_puts (out, name);
   fw_strbuf_puts (out, "{stream=\"");
   fw_strbuf_prom_label (out, b->name);
   fw_strbuf_puts (out, "\"");
   if (key) {
      fw_strbuf_printf (out, ",%s=\"", key);
      fw_strbuf_prom_label (out, value);
      fw_strbuf_puts (out, "\"");
   }
}

static void
sample_u64 (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b, const char *key,
            const char *value, uint64_t v)
{
   series_start (out, name, b, key, value);
   fw_strbuf_printf (out, "} %llu\n", (unsigned long long) v);
}

static void
sample_double (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b, const char *key,
               const char *value, double v)
{
   series_start (out, name, b, key, value);
   fw_strbuf_puts (out, "} ");
   fw_strbuf_prom_double (out, v);
   fw_strbuf_puts (out, "\n");
}

/* A per-stream counter with no label but stream. */
static void
plain_counter (render_t *r, const char *name, const char *help, size_t offset)
{
   family (r->out, name, "counter", help);
   FOREACH_ACTIVE (r, b)
   {
      sample_u64 (r->out, name, b, NULL, NULL,
                  count_get ((const uint64_t *) ((char *) b + offset)));
   }
}

/* The le labels of fw_duration_bounds_ns, in seconds. */
static const char *const duration_le[FW_DURATION_BUCKETS + 1] = {
   "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
   "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",   "30",    "+Inf"};

static void
duration_histogram (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b,
                    const char *key, const char *value, const fw_duration_hist_t *h)
{
   char sub[128];
   uint64_t cumulative = 0;

   snprintf (sub, sizeof sub, "%s_bucket", name);
   for (int i = 0; i <= FW_DURATION_BUCKETS; i++) {
      cumulative += count_get (&h->count[i]);
      series_start (out, sub, b, key, value);
      fw_strbuf_printf (out, ",le=\"%s\"} %llu\n", duration_le[i], (unsigned long long) cumulative);
   }
   snprintf (sub, sizeof sub, "%s_sum", name);
   sample_double (out, sub, b, key, value, (double) count_get (&h->sum_ns) / 1e9);
   /* The count is the +Inf bucket as read above, so the two always agree. */
   snprintf (sub, sizeof sub, "%s_count", name);
   sample_u64 (out, sub, b, key, value, cumulative);
}

/* The incremental snapshot (issue 28), only for streams that took one. */
static void
render_snapshot (render_t *r)
{
   bool any = false;
   FOREACH_ACTIVE (r, b)
   {
      any = any || __atomic_load_n (&b->snapshot_state, __ATOMIC_RELAXED) != 0;
   }
   if (!any) {
      return;
   }
   family (r->out, "flowwarden_snapshot_documents_total", "counter",
           "Snapshot events the stream's incremental snapshot handed to its handlers.");
   FOREACH_ACTIVE (r, b)
   {
      if (__atomic_load_n (&b->snapshot_state, __ATOMIC_RELAXED) != 0) {
         sample_u64 (r->out, "flowwarden_snapshot_documents_total", b, NULL, NULL,
                     (uint64_t) __atomic_load_n (&b->snapshot_docs, __ATOMIC_RELAXED));
      }
   }
   family (r->out, "flowwarden_snapshot_running", "gauge",
           "1 while the stream's snapshot has chunks left to read, 0 once it finished.");
   FOREACH_ACTIVE (r, b)
   {
      int st = __atomic_load_n (&b->snapshot_state, __ATOMIC_RELAXED);
      if (st != 0) {
         sample_u64 (r->out, "flowwarden_snapshot_running", b, NULL, NULL, st == 1);
      }
   }
}

static void
render_events (render_t *r)
{
   family (r->out, "flowwarden_events_total", "counter",
           "Change events received, by operation type (snapshot: a document an "
           "incremental snapshot handed out).");
   FOREACH_ACTIVE (r, b)
   {
      for (int op = 0; op < FW_METRICS_OP_COUNT; op++) {
         sample_u64 (r->out, "flowwarden_events_total", b, "operation",
                     fw_metrics_op_name ((fw_metrics_op_t) op), count_get (&b->events[op]));
      }
   }
   family (r->out, "flowwarden_events_handled_total", "counter",
           "Events finished with, by outcome: ok (a handler returned), skipped (on_error "
           "returned fw.SKIP), dlq (stored in the dead-letter queue), lost (given up without "
           "one).");
   FOREACH_ACTIVE (r, b)
   {
      for (int o = 0; o < FW_METRICS_OUTCOME_COUNT; o++) {
         sample_u64 (r->out, "flowwarden_events_handled_total", b, "outcome",
                     fw_metrics_outcome_name ((fw_metrics_outcome_t) o),
                     count_get (&b->handled[o]));
      }
   }
   family (r->out, "flowwarden_handler_errors_total", "counter",
           "Failed handler attempts, by error type (the first 50 types of a stream, then "
           "\"other\").");
   FOREACH_ACTIVE (r, b)
   {
      int n = __atomic_load_n (&b->n_error_types, __ATOMIC_ACQUIRE);
      for (int i = 0; i < n; i++) {
         sample_u64 (r->out, "flowwarden_handler_errors_total", b, "error_type", b->error_types[i],
                     count_get (&b->handler_errors[i]));
      }
      if (count_get (&b->handler_errors[FW_METRICS_MAX_ERROR_TYPES])) {
         sample_u64 (r->out, "flowwarden_handler_errors_total", b, "error_type", "other",
                     count_get (&b->handler_errors[FW_METRICS_MAX_ERROR_TYPES]));
      }
   }
   plain_counter (r, "flowwarden_retries_total", "Retries scheduled after a failed attempt.",
                  offsetof (fw_stream_metrics_t, retries));
   plain_counter (r, "flowwarden_batches_total", "Batches on_batch was given (issue 30).",
                  offsetof (fw_stream_metrics_t, batches));
   plain_counter (r, "flowwarden_batch_events_total", "Events taken in those batches.",
                  offsetof (fw_stream_metrics_t, batch_events));
   plain_counter (r, "flowwarden_batch_splits_total",
                  "Failed sets of a batch split in halves to isolate failing events.",
                  offsetof (fw_stream_metrics_t, batch_splits));
   family (r->out, "flowwarden_handler_duration_seconds", "histogram",
           "Time a handler call (one attempt) took.");
   FOREACH_ACTIVE (r, b)
   {
      duration_histogram (r->out, "flowwarden_handler_duration_seconds", b, NULL, NULL,
                          &b->handler);
   }
}

static void
render_position (render_t *r, int64_t now_ms)
{
   family (r->out, "flowwarden_lag_seconds", "gauge",
           "How far behind the source the stream is: now minus the server time of the event "
           "being handled, else the same for the last event when it was finished; 0 once the "
           "change stream has nothing more. Exported by the unit's holder only (ha).");
   FOREACH_ACTIVE (r, b)
   {
      fw_stream_snapshot_t snap;
      if (fw_metrics_holder_only_hidden (b)) {
         continue;
      }
      fw_stream_metrics_snapshot (b, now_ms, &snap);
      sample_double (r->out, "flowwarden_lag_seconds", b, NULL, NULL, snap.lag_seconds);
   }
   family (r->out, "flowwarden_last_event_timestamp_seconds", "gauge",
           "Server time (wallTime, else clusterTime) of the last event finished with.");
   FOREACH_ACTIVE (r, b)
   {
      int64_t ms = __atomic_load_n (&b->last_event_ms, __ATOMIC_RELAXED);
      if (ms && !fw_metrics_holder_only_hidden (b)) {
         sample_double (r->out, "flowwarden_last_event_timestamp_seconds", b, NULL, NULL,
                        (double) ms / 1000.0);
      }
   }
   family (r->out, "flowwarden_checkpoint_timestamp_seconds", "gauge",
           "When the stream last wrote its checkpoint.");
   FOREACH_ACTIVE (r, b)
   {
      int64_t ms = __atomic_load_n (&b->checkpoint_ms, __ATOMIC_RELAXED);
      if (ms && !fw_metrics_holder_only_hidden (b)) {
         sample_double (r->out, "flowwarden_checkpoint_timestamp_seconds", b, NULL, NULL,
                        (double) ms / 1000.0);
      }
   }
   plain_counter (r, "flowwarden_checkpoint_writes_total", "Checkpoints written.",
                  offsetof (fw_stream_metrics_t, checkpoint_writes));
   plain_counter (r, "flowwarden_checkpoint_errors_total", "Checkpoint writes that failed.",
                  offsetof (fw_stream_metrics_t, checkpoint_errors));
}

static void
render_dlq (render_t *r)
{
   int64_t now_ms = fw_now_ms ();

   plain_counter (r, "flowwarden_dlq_writes_total", "Entries written to the dead-letter queue.",
                  offsetof (fw_stream_metrics_t, dlq_writes));
   family (r->out, "flowwarden_dlq_pending", "gauge",
           "Entries waiting in the stream's dead-letter queue (counted as they are written, "
           "corrected by a count every 30 s).");
   FOREACH_ACTIVE (r, b)
   {
      int64_t n = __atomic_load_n (&b->dlq_pending, __ATOMIC_RELAXED);
      if (n >= 0 && !fw_metrics_holder_only_hidden (b)) {
         sample_u64 (r->out, "flowwarden_dlq_pending", b, NULL, NULL, (uint64_t) n);
      }
   }
   family (r->out, "flowwarden_dlq_oldest_pending_age_seconds", "gauge",
           "Age of the oldest entry waiting in the dead-letter queue (found by the count "
           "every 30 s; 0 when none waits).");
   FOREACH_ACTIVE (r, b)
   {
      if (__atomic_load_n (&b->dlq_pending, __ATOMIC_RELAXED) >= 0 &&
          !fw_metrics_holder_only_hidden (b)) {
         sample_double (r->out, "flowwarden_dlq_oldest_pending_age_seconds", b, NULL, NULL,
                        dlq_oldest_age (b, now_ms));
      }
   }
}

/* retry.mode = "deferred" (issue 29): only streams that counted some. */
static void
render_scheduled (render_t *r)
{
   int64_t now_ms = fw_now_ms ();

   family (r->out, "flowwarden_retries_scheduled", "gauge",
           "Deferred retries waiting in the stream's DLQ as SCHEDULED (retry.mode = "
           "\"deferred\"; counted when the stream looks for due ones).");
   FOREACH_ACTIVE (r, b)
   {
      int64_t n = __atomic_load_n (&b->retries_scheduled, __ATOMIC_RELAXED);
      if (n >= 0) {
         sample_u64 (r->out, "flowwarden_retries_scheduled", b, NULL, NULL, (uint64_t) n);
      }
   }
   family (r->out, "flowwarden_oldest_retry_age_seconds", "gauge",
           "Age of the oldest scheduled deferred retry, since its event first failed (0 when "
           "none waits).");
   FOREACH_ACTIVE (r, b)
   {
      if (__atomic_load_n (&b->retries_scheduled, __ATOMIC_RELAXED) >= 0) {
         int64_t oldest = __atomic_load_n (&b->retry_oldest_ms, __ATOMIC_RELAXED);
         sample_double (r->out, "flowwarden_oldest_retry_age_seconds", b, NULL, NULL,
                        oldest > 0 && now_ms > oldest ? (double) (now_ms - oldest) / 1000.0 : 0.0);
      }
   }
}

static void
render_state (render_t *r)
{
   family (r->out, "flowwarden_stream_up", "gauge",
           "1 while the stream does its part here: runs with its change stream open, or (ha) "
           "stands by while another member reads it; else 0.");
   FOREACH_ACTIVE (r, b)
   {
      int s = __atomic_load_n (&b->state, __ATOMIC_ACQUIRE);
      sample_u64 (r->out, "flowwarden_stream_up", b, NULL, NULL,
                  fw_stream_state_ready ((fw_stream_state_t) s) ? 1 : 0);
   }
   family (r->out, "flowwarden_stream_state", "gauge",
           "1 for the state the stream is in, 0 for the others.");
   FOREACH_ACTIVE (r, b)
   {
      int s = __atomic_load_n (&b->state, __ATOMIC_ACQUIRE);
      for (int i = 0; i < FW_STREAM_STATE_COUNT; i++) {
         sample_u64 (r->out, "flowwarden_stream_state", b, "state",
                     fw_stream_state_name ((fw_stream_state_t) i), s == i ? 1 : 0);
      }
   }
   family (r->out, "flowwarden_stream_restarts_total", "counter",
           "Times the change stream was re-opened, by reason.");
   FOREACH_ACTIVE (r, b)
   {
      for (int i = 0; i < FW_METRICS_RESTART_COUNT; i++) {
         sample_u64 (r->out, "flowwarden_stream_restarts_total", b, "reason",
                     fw_metrics_restart_name ((fw_metrics_restart_t) i),
                     count_get (&b->restarts[i]));
      }
   }
   family (r->out, "flowwarden_states_rebuilt_total", "counter",
           "Times a Lua state of the stream (its own or a lane's) was rebuilt from the script, "
           "by reason.");
   FOREACH_ACTIVE (r, b)
   {
      for (int i = 0; i < FW_METRICS_REBUILD_COUNT; i++) {
         sample_u64 (r->out, "flowwarden_states_rebuilt_total", b, "reason",
                     fw_metrics_rebuild_name ((fw_metrics_rebuild_t) i),
                     count_get (&b->rebuilds[i]));
      }
   }
   render_snapshot (r);
   family (r->out, "flowwarden_lua_memory_bytes", "gauge",
           "Memory held by the stream's Lua state.");
   FOREACH_ACTIVE (r, b)
   {
      sample_u64 (r->out, "flowwarden_lua_memory_bytes", b, NULL, NULL,
                  __atomic_load_n (&b->lua_memory, __ATOMIC_RELAXED));
   }
   {
      bool any = false;
      FOREACH_ACTIVE (r, b)
      {
         any = any || __atomic_load_n (&b->role, __ATOMIC_RELAXED) != FW_STREAM_ROLE_NONE;
      }
      if (any) {
         family (r->out, "flowwarden_stream_leader", "gauge",
                 "1 while this instance holds the stream's lease (ha.mode = \"leader\"), else 0.");
         FOREACH_ACTIVE (r, b)
         {
            int role = __atomic_load_n (&b->role, __ATOMIC_RELAXED);
            if (role != FW_STREAM_ROLE_NONE) {
               sample_u64 (r->out, "flowwarden_stream_leader", b, NULL, NULL,
                           role == FW_STREAM_ROLE_LEADER);
            }
         }
      }
   }
}

/* name{stream="<the unit's stream>",unit="<unit>"} value */
static void
unit_sample (fw_strbuf_t *out, const char *name, const fw_stream_metrics_t *b, double v)
{
   char stream[FW_METRICS_NAME_MAX];

   fw_metrics_unit_stream (b->name, stream, sizeof stream);
   fw_strbuf_printf (out, "%s{stream=\"", name);
   fw_strbuf_prom_label (out, stream);
   fw_strbuf_puts (out, "\",unit=\"");
   fw_strbuf_prom_label (out, b->name);
   fw_strbuf_puts (out, "\"} ");
   fw_strbuf_prom_double (out, v);
   fw_strbuf_puts (out, "\n");
}

/* Issue 38: who holds each unit, on every member. Without ha the instance
 * holds its units itself (1). */
static void
render_units (render_t *r, int64_t now_ms)
{
   bool ha = false;

   family (r->out, "flowwarden_unit_held", "gauge",
           "1 while this instance holds the unit (its lease with ha; always without ha), else "
           "0: sum by (stream, unit) over a healthy group is 1.");
   FOREACH_ACTIVE (r, b)
   {
      int role = __atomic_load_n (&b->role, __ATOMIC_RELAXED);
      ha = ha || __atomic_load_n (&b->lease_ms, __ATOMIC_RELAXED) > 0;
      unit_sample (r->out, "flowwarden_unit_held", b, role != FW_STREAM_ROLE_STANDBY ? 1 : 0);
   }
   if (!ha) {
      return;
   }
   family (r->out, "flowwarden_unit_orphaned_seconds", "gauge",
           "ha: how long the unit has had no live holder (its lease expired, or its holder's "
           "member record is gone), as this member sees it; 0 while it has one.");
   FOREACH_ACTIVE (r, b)
   {
      if (__atomic_load_n (&b->lease_ms, __ATOMIC_RELAXED) > 0) {
         double o = fw_metrics_orphaned_seconds (b, now_ms);
         unit_sample (r->out, "flowwarden_unit_orphaned_seconds", b, o > 0 ? o : 0);
      }
   }
   family (r->out, "flowwarden_unit_lease_seconds", "gauge",
           "ha: the unit's lease (ha.lease), for alerts on orphaned units.");
   FOREACH_ACTIVE (r, b)
   {
      int64_t lease = __atomic_load_n (&b->lease_ms, __ATOMIC_RELAXED);
      if (lease > 0) {
         unit_sample (r->out, "flowwarden_unit_lease_seconds", b, (double) lease / 1000.0);
      }
   }
}

static const char *const io_clients[FW_METRICS_IO_CLIENT_COUNT] = {"mongo", "http"};
static const char *const io_results[FW_METRICS_IO_RESULT_COUNT] = {"ok", "error", "timeout"};

static void
render_io (render_t *r)
{
   family (r->out, "flowwarden_io_requests_total", "counter",
           "Handler IO calls (fw.mongo, fw.http), by client and result.");
   FOREACH_ACTIVE (r, b)
   {
      for (int c = 0; c < FW_METRICS_IO_CLIENT_COUNT; c++) {
         for (int res = 0; res < FW_METRICS_IO_RESULT_COUNT; res++) {
            series_start (r->out, "flowwarden_io_requests_total", b, "client", io_clients[c]);
            fw_strbuf_printf (r->out, ",result=\"%s\"} %llu\n", io_results[res],
                              (unsigned long long) count_get (&b->io_requests[c][res]));
         }
      }
   }
   family (r->out, "flowwarden_io_duration_seconds", "histogram",
           "Time a handler IO call (fw.mongo, fw.http) took.");
   FOREACH_ACTIVE (r, b)
   {
      for (int c = 0; c < FW_METRICS_IO_CLIENT_COUNT; c++) {
         duration_histogram (r->out, "flowwarden_io_duration_seconds", b, "client", io_clients[c],
                             &b->io[c]);
      }
   }
}

static void
info_label (fw_strbuf_t *out, const char *key, const char *value, bool first)
{
   fw_strbuf_printf (out, "%s%s=\"", first ? "" : ",", key);
   fw_strbuf_prom_label (out, value ? value : "");
   fw_strbuf_puts (out, "\"");
}

static void
render_process_wide (fw_metrics_t *m, fw_strbuf_t *out)
{
   family (out, "flowwarden_reloads_total", "counter",
           "Script reloads (SIGHUP, POST /v1/reload), by result.");
   fw_strbuf_printf (out, "flowwarden_reloads_total{result=\"success\"} %llu\n",
                     (unsigned long long) count_get (&m->reloads_ok));
   fw_strbuf_printf (out, "flowwarden_reloads_total{result=\"failure\"} %llu\n",
                     (unsigned long long) count_get (&m->reloads_failed));
   if (fw_metrics_oplog_window (m) >= 0) {
      /* Absent where the oplog cannot be read (oplog_window.h). */
      family (out, "flowwarden_oplog_window_seconds", "gauge",
              "Time between the oplog's first and last entries, sampled every minute.");
      fw_strbuf_printf (out, "flowwarden_oplog_window_seconds %.3f\n", fw_metrics_oplog_window (m));
   }
   pthread_mutex_lock (&m->mu);
   family (out, "flowwarden_script_info", "gauge", "The running script's version (always 1).");
   if (m->script_version) {
      fw_strbuf_puts (out, "flowwarden_script_info{");
      info_label (out, "version", m->script_version, true);
      fw_strbuf_puts (out, "} 1\n");
   }
   family (out, "flowwarden_build_info", "gauge",
           "flowwarden's version and the libmongoc and Lua it runs with (always 1).");
   if (m->build_version) {
      fw_strbuf_puts (out, "flowwarden_build_info{");
      info_label (out, "version", m->build_version, true);
      info_label (out, "libmongoc", m->build_libmongoc, false);
      info_label (out, "lua", m->build_lua, false);
      fw_strbuf_puts (out, "} 1\n");
   }
   pthread_mutex_unlock (&m->mu);
}

/* --- process_* from /proc/self ------------------------------------------ */

static bool
read_file (const char *path, char *buf, size_t len)
{
   FILE *f = fopen (path, "r");
   size_t n;

   if (!f) {
      return false;
   }
   n = fread (buf, 1, len - 1, f);
   fclose (f);
   buf[n] = '\0';
   return n > 0;
}

static void
render_process (fw_strbuf_t *out)
{
   char stat[2048], sys[8192];
   const char *p;
   unsigned long long utime = 0, stime = 0, start_ticks = 0, vsize = 0;
   long long rss_pages = 0, btime = -1;
   long ticks = sysconf (_SC_CLK_TCK), page = sysconf (_SC_PAGESIZE);
   bool have_stat = false;
   struct rlimit rl;
   DIR *d;

   /* Fields after the command, which may hold spaces and ')': state is
    * field 3, utime 14, stime 15, starttime 22, vsize 23, rss 24. */
   if (read_file ("/proc/self/stat", stat, sizeof stat) && (p = strrchr (stat, ')'))) {
      have_stat = sscanf (p + 2,
                          "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d "
                          "%*d %*d %llu %llu %lld",
                          &utime, &stime, &start_ticks, &vsize, &rss_pages) == 5;
   }
   if (read_file ("/proc/stat", sys, sizeof sys) && (p = strstr (sys, "\nbtime "))) {
      btime = strtoll (p + 7, NULL, 10);
   }
   if (have_stat && ticks > 0) {
      family (out, "process_cpu_seconds_total", "counter",
              "Total user and system CPU time spent in seconds.");
      fw_strbuf_puts (out, "process_cpu_seconds_total ");
      fw_strbuf_prom_double (out, (double) (utime + stime) / (double) ticks);
      fw_strbuf_puts (out, "\n");
      family (out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
      fw_strbuf_printf (out, "process_resident_memory_bytes %lld\n", rss_pages * (long long) page);
      family (out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
      fw_strbuf_printf (out, "process_virtual_memory_bytes %llu\n", vsize);
      if (btime >= 0) {
         family (out, "process_start_time_seconds", "gauge",
                 "Start time of the process since unix epoch in seconds.");
         fw_strbuf_puts (out, "process_start_time_seconds ");
         fw_strbuf_prom_double (out, (double) btime + (double) start_ticks / (double) ticks);
         fw_strbuf_puts (out, "\n");
      }
   }
   if ((d = opendir ("/proc/self/fd"))) {
      long long n = 0;
      struct dirent *e;
      while ((e = readdir (d))) {
         n += e->d_name[0] != '.';
      }
      closedir (d);
      family (out, "process_open_fds", "gauge", "Number of open file descriptors.");
      fw_strbuf_printf (out, "process_open_fds %lld\n", n - 1); /* not the one reading */
   }
   if (getrlimit (RLIMIT_NOFILE, &rl) == 0) {
      family (out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
      fw_strbuf_printf (out, "process_max_fds %llu\n",
                        rl.rlim_cur == RLIM_INFINITY ? 0ULL : (unsigned long long) rl.rlim_cur);
   }
}

/* --- handler-defined metrics --------------------------------------------- */

static void
user_labels (fw_strbuf_t *out, const fw_metric_t *x, const fw_metric_series_t *s)
{
   fw_strbuf_puts (out, "{stream=\"");
   fw_strbuf_prom_label (out, s->stream->name);
   fw_strbuf_puts (out, "\"");
   for (int i = 0; i < x->n_labels; i++) {
      fw_strbuf_printf (out, ",%s=\"", x->labels[i]);
      fw_strbuf_prom_label (out, s->values[i]);
      fw_strbuf_puts (out, "\"");
   }
}

static void
user_series (fw_strbuf_t *out, const fw_metric_t *x, const fw_metric_series_t *s)
{
   uint64_t cumulative = 0;

   if (x->type != FW_METRIC_HISTOGRAM) {
      fw_strbuf_puts (out, x->name);
      user_labels (out, x, s);
      fw_strbuf_puts (out, "} ");
      fw_strbuf_prom_double (out, fw_metric_series_value (s, NULL));
      fw_strbuf_puts (out, "\n");
      return;
   }
   for (int i = 0; i <= x->n_buckets; i++) {
      cumulative += count_get (&s->buckets[i]);
      fw_strbuf_printf (out, "%s_bucket", x->name);
      user_labels (out, x, s);
      fw_strbuf_puts (out, ",le=\"");
      if (i < x->n_buckets) {
         fw_strbuf_prom_double (out, x->buckets[i]);
      } else {
         fw_strbuf_puts (out, "+Inf");
      }
      fw_strbuf_printf (out, "\"} %llu\n", (unsigned long long) cumulative);
   }
   fw_strbuf_printf (out, "%s_sum", x->name);
   user_labels (out, x, s);
   fw_strbuf_puts (out, "} ");
   fw_strbuf_prom_double (out, fw_metric_series_value (s, NULL));
   fw_strbuf_printf (out, "\n%s_count", x->name);
   user_labels (out, x, s);
   fw_strbuf_printf (out, "} %llu\n", (unsigned long long) cumulative);
}

void
fw_metrics_render_user (fw_metrics_t *m, fw_strbuf_t *out)
{
   for (fw_metric_t *x = __atomic_load_n (&m->metrics, __ATOMIC_ACQUIRE); x;
        x = __atomic_load_n (&x->next, __ATOMIC_ACQUIRE)) {
      if (__atomic_load_n (&x->state, __ATOMIC_ACQUIRE) != METRIC_COMMITTED) {
         continue;
      }
      fw_strbuf_printf (out, "# HELP %s ", x->name);
      fw_strbuf_prom_help (out, x->help);
      fw_strbuf_printf (out, "\n# TYPE %s %s\n", x->name, fw_metric_type_name (x->type));
      for (fw_metric_series_t *s = __atomic_load_n (&x->series, __ATOMIC_ACQUIRE); s;
           s = __atomic_load_n (&s->next, __ATOMIC_ACQUIRE)) {
         if (__atomic_load_n (&s->stream->active, __ATOMIC_ACQUIRE)) {
            user_series (out, x, s);
         }
      }
   }
}

char *
fw_metrics_render (fw_metrics_t *m, size_t *len)
{
   fw_strbuf_t out;
   render_t r;

   fw_strbuf_init (&out);
   r.out = &out;
   r.first = __atomic_load_n (&m->streams, __ATOMIC_ACQUIRE);
   render_events (&r);
   render_position (&r, fw_now_ms ());
   render_dlq (&r);
   render_scheduled (&r);
   render_state (&r);
   render_units (&r, fw_now_ms ());
   render_io (&r);
   fw_metrics_render_outage (r.first, &out);
   render_process_wide (m, &out);
   render_process (&out);
   fw_metrics_render_user (m, &out);
   return fw_strbuf_steal (&out, len);
}
