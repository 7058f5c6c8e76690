/*
 * metrics.c - the registry and the per-stream blocks: what a stream's
 * thread writes on its event path, and what readers copy out of it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "metrics-private.h"

const int64_t fw_duration_bounds_ns[FW_DURATION_BUCKETS] = {
   100000LL,     250000LL,     500000LL,     1000000LL,     2500000LL,    5000000LL,
   10000000LL,   25000000LL,   50000000LL,   100000000LL,   250000000LL,  500000000LL,
   1000000000LL, 2500000000LL, 5000000000LL, 10000000000LL, 30000000000LL};

static const char *const op_names[FW_METRICS_OP_COUNT] = {
   "insert", "update", "replace",      "delete",   "invalidate",
   "drop",   "rename", "dropDatabase", "snapshot", "other"};
static const char *const outcome_names[FW_METRICS_OUTCOME_COUNT] = {"ok", "skipped", "dlq", "lost",
                                                                    "parked"};
static const char *const state_names[FW_STREAM_STATE_COUNT] = {
   "starting", "running", "paused",  "retrying", "restarting",
   "stopped",  "failed",  "standby", "orphaned"};
static const char *const restart_names[FW_METRICS_RESTART_COUNT] = {
   "error", "invalidate", "history_lost", "admin", "reload"};
static const char *const rebuild_names[FW_METRICS_REBUILD_COUNT] = {"memory"};

const char *
fw_metrics_op_name (fw_metrics_op_t op)
{
   return (unsigned) op < FW_METRICS_OP_COUNT ? op_names[op] : "other";
}

const char *
fw_metrics_outcome_name (fw_metrics_outcome_t outcome)
{
   return (unsigned) outcome < FW_METRICS_OUTCOME_COUNT ? outcome_names[outcome] : "none";
}

const char *
fw_stream_state_name (fw_stream_state_t state)
{
   return (unsigned) state < FW_STREAM_STATE_COUNT ? state_names[state] : "unknown";
}

const char *
fw_metrics_restart_name (fw_metrics_restart_t reason)
{
   return (unsigned) reason < FW_METRICS_RESTART_COUNT ? restart_names[reason] : "error";
}

const char *
fw_metrics_rebuild_name (fw_metrics_rebuild_t reason)
{
   return (unsigned) reason < FW_METRICS_REBUILD_COUNT ? rebuild_names[reason] : "memory";
}

fw_metrics_op_t
fw_metrics_op_from_name (const char *operation_type)
{
   for (int i = 0; operation_type && i < FW_METRICS_OP_OTHER; i++) {
      if (strcmp (operation_type, op_names[i]) == 0) {
         return (fw_metrics_op_t) i;
      }
   }
   return FW_METRICS_OP_OTHER;
}

bool
fw_stream_state_ready (fw_stream_state_t s)
{
   return s == FW_STREAM_RUNNING || s == FW_STREAM_RETRYING || s == FW_STREAM_STANDBY;
}

bool
fw_stream_snapshot_ready (const fw_stream_snapshot_t *s)
{
   return fw_stream_state_ready (s->state) || (s->state == FW_STREAM_ORPHANED && !s->share_short);
}

void
fw_metrics_unit_stream (const char *name, char *out, size_t len)
{
   const char *hash = strrchr (name, '#');
   size_t n = strlen (name);
   int k, total, used = 0;

   if (hash && sscanf (hash, "#%d/%d%n", &k, &total, &used) == 2 && hash[used] == '\0' &&
       hash[1] >= '0' && hash[1] <= '9') {
      n = (size_t) (hash - name);
   }
   snprintf (out, len, "%.*s", (int) n, name);
}

/* --- the registry -------------------------------------------------------- */

fw_metrics_t *
fw_metrics_new (void)
{
   fw_metrics_t *m = calloc (1, sizeof *m);

   if (m && pthread_mutex_init (&m->mu, NULL) != 0) {
      free (m);
      m = NULL;
   }
   return m;
}

void
fw_metrics_destroy (fw_metrics_t *m)
{
   fw_stream_metrics_t *b, *next;

   if (!m) {
      return;
   }
   fw_metrics_free_user (m);
   for (b = m->streams; b; b = next) {
      next = b->next;
      pthread_mutex_destroy (&b->mu);
      free (b->name);
      free (b);
   }
   free (m->script_version);
   free (m->build_version);
   free (m->build_libmongoc);
   free (m->build_lua);
   pthread_mutex_destroy (&m->mu);
   free (m);
}

static void
replace_string (char **dst, const char *src)
{
   char *copy = strdup (src ? src : "");
   if (copy) {
      free (*dst);
      *dst = copy;
   }
}

void
fw_metrics_set_build_info (fw_metrics_t *m, const char *version, const char *libmongoc,
                           const char *lua)
{
   pthread_mutex_lock (&m->mu);
   replace_string (&m->build_version, version);
   replace_string (&m->build_libmongoc, libmongoc);
   replace_string (&m->build_lua, lua);
   pthread_mutex_unlock (&m->mu);
}

void
fw_metrics_set_script_version (fw_metrics_t *m, const char *version)
{
   pthread_mutex_lock (&m->mu);
   replace_string (&m->script_version, version);
   pthread_mutex_unlock (&m->mu);
}

void
fw_metrics_count_reload (fw_metrics_t *m, bool ok)
{
   /* Reloads run on one thread, but count with a real increment anyway:
    * nothing here is on an event path. */
   __atomic_add_fetch (ok ? &m->reloads_ok : &m->reloads_failed, 1, __ATOMIC_RELAXED);
}

void
fw_metrics_set_last_reload (fw_metrics_t *m, bool ok, int64_t now_ms, const char *message)
{
   pthread_mutex_lock (&m->mu);
   m->last_reload.happened = true;
   m->last_reload.ok = ok;
   m->last_reload.at_ms = now_ms;
   snprintf (m->last_reload.message, sizeof m->last_reload.message, "%s", message ? message : "");
   pthread_mutex_unlock (&m->mu);
}

bool
fw_metrics_last_reload (fw_metrics_t *m, fw_reload_result_t *out)
{
   pthread_mutex_lock (&m->mu);
   *out = m->last_reload;
   pthread_mutex_unlock (&m->mu);
   return out->happened;
}

void
fw_metrics_set_oplog_window (fw_metrics_t *m, double seconds)
{
   if (seconds >= 0) {
      __atomic_store_n (&m->oplog_window_ms, (int64_t) (seconds * 1000.0), __ATOMIC_RELAXED);
   }
   __atomic_store_n (&m->oplog_window_known, seconds >= 0, __ATOMIC_RELEASE);
}

void
fw_metrics_set_oplog_window_unknown (fw_metrics_t *m, fw_oplog_unknown_t why)
{
   __atomic_store_n (&m->oplog_window_unknown, (int) why, __ATOMIC_RELAXED);
   __atomic_store_n (&m->oplog_window_known, 0, __ATOMIC_RELEASE);
}

const char *
fw_oplog_unknown_text (int why)
{
   switch (why) {
   case FW_OPLOG_UNKNOWN_EMPTY:
      return "empty oplog";
   case FW_OPLOG_UNKNOWN_UNREADABLE:
      return "local.oplog.rs cannot be read: the log says why";
   case FW_OPLOG_UNKNOWN_UNREACHABLE:
      return "MongoDB cannot be reached";
   default:
      return "not sampled yet";
   }
}

double
fw_metrics_oplog_window (fw_metrics_t *m)
{
   if (!__atomic_load_n (&m->oplog_window_known, __ATOMIC_ACQUIRE)) {
      return -1;
   }
   return (double) __atomic_load_n (&m->oplog_window_ms, __ATOMIC_RELAXED) / 1000.0;
}

fw_stream_metrics_t *
fw_metrics_stream (fw_metrics_t *m, const char *name)
{
   fw_stream_metrics_t *b, **tail;

   pthread_mutex_lock (&m->mu);
   for (tail = &m->streams; (b = *tail); tail = &b->next) {
      if (strcmp (b->name, name) == 0) {
         break;
      }
   }
   if (!b && (b = calloc (1, sizeof *b))) {
      if (!(b->name = strdup (name)) || pthread_mutex_init (&b->mu, NULL) != 0) {
         free (b->name);
         free (b);
         b = NULL;
      } else {
         b->registry = m;
         b->dlq_pending = -1;
         b->retries_scheduled = -1;
         /* Appended, so the exposition lists streams in creation order. */
         __atomic_store_n (tail, b, __ATOMIC_RELEASE);
      }
   }
   if (b) {
      __atomic_store_n (&b->active, 1, __ATOMIC_RELEASE);
   }
   pthread_mutex_unlock (&m->mu);
   return b;
}

const char *
fw_stream_metrics_name (const fw_stream_metrics_t *b)
{
   return b->name;
}

void
fw_stream_metrics_set_active (fw_stream_metrics_t *b, bool active)
{
   __atomic_store_n (&b->active, active ? 1 : 0, __ATOMIC_RELEASE);
}

/* --- the writer's side --------------------------------------------------- */

static void
store_i64 (int64_t *p, int64_t v)
{
   __atomic_store_n (p, v, __ATOMIC_RELAXED);
}

static int64_t
load_i64 (const int64_t *p)
{
   return __atomic_load_n (p, __ATOMIC_RELAXED);
}

void
fw_stream_metrics_event_received (fw_stream_metrics_t *b, fw_metrics_op_t op, int64_t event_ms)
{
   if ((unsigned) op >= FW_METRICS_OP_COUNT) {
      op = FW_METRICS_OP_OTHER;
   }
   count_add (&b->events[op], 1);
   __atomic_fetch_add (&b->w_events, 1, __ATOMIC_RELAXED);
   store_i64 (&b->inflight_ms, event_ms > 0 ? event_ms : 0);
}

static void
hist_observe (fw_duration_hist_t *h, int64_t ns)
{
   int i = 0;

   if (ns < 0) {
      ns = 0;
   }
   while (i < FW_DURATION_BUCKETS && ns > fw_duration_bounds_ns[i]) {
      i++;
   }
   count_add (&h->count[i], 1);
   count_add (&h->sum_ns, (uint64_t) ns);
}

void
fw_stream_metrics_handler_call (fw_stream_metrics_t *b, int64_t duration_ns)
{
   hist_observe (&b->handler, duration_ns);
}

/* Every FW_RATE_SLOT_MS, the events received so far go into the next slot
 * (a sequence lock per slot, so a reader never sees half of one). */
static void
rate_sample (fw_stream_metrics_t *b, int64_t now_ms)
{
   fw_rate_slot_t *s;
   uint32_t seq;

   b->w_rate_slot = (b->w_rate_slot + 1) % FW_RATE_SLOTS;
   s = &b->rate[b->w_rate_slot];
   seq = __atomic_load_n (&s->seq, __ATOMIC_RELAXED);
   __atomic_store_n (&s->seq, seq + 1, __ATOMIC_RELAXED);
   __atomic_thread_fence (__ATOMIC_RELEASE);
   __atomic_store_n (&s->t_ms, now_ms, __ATOMIC_RELAXED);
   __atomic_store_n (&s->events, __atomic_load_n (&b->w_events, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
   __atomic_store_n (&s->seq, seq + 2, __ATOMIC_RELEASE);
}

void
fw_stream_metrics_event_finished (fw_stream_metrics_t *b, fw_metrics_outcome_t outcome,
                                  int64_t now_ms)
{
   int64_t event_ms = load_i64 (&b->inflight_ms);

   if ((unsigned) outcome < FW_METRICS_OUTCOME_COUNT) {
      count_add (&b->handled[outcome], 1);
   }
   if (event_ms) {
      store_i64 (&b->last_event_ms, event_ms);
      store_i64 (&b->lag_ms, now_ms > event_ms ? now_ms - event_ms : 0);
      store_i64 (&b->inflight_ms, 0);
   }
   if (__atomic_load_n (&b->attempt, __ATOMIC_RELAXED)) {
      __atomic_store_n (&b->attempt, 0, __ATOMIC_RELAXED);
   }
   store_i64 (&b->finished_ms, now_ms);
   {
      /* The one thread that moves the next sample time takes the sample (a
       * stream's lanes, issue 16, finish events on several threads). */
      int64_t next = __atomic_load_n (&b->w_next_sample_ms, __ATOMIC_RELAXED);
      if (now_ms >= next &&
          __atomic_compare_exchange_n (&b->w_next_sample_ms, &next, now_ms + FW_RATE_SLOT_MS, false,
                                       __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
         rate_sample (b, now_ms);
      }
   }
}

void
fw_stream_metrics_caught_up (fw_stream_metrics_t *b)
{
   if (load_i64 (&b->lag_ms)) {
      store_i64 (&b->lag_ms, 0);
   }
}

/* The index of type among the stream's error types, adding it when there
 * is room; FW_METRICS_MAX_ERROR_TYPES means "other". */
static int
error_type_index (fw_stream_metrics_t *b, const char *type)
{
   int n = __atomic_load_n (&b->n_error_types, __ATOMIC_RELAXED);
   size_t len = strlen (type);

   if (strcmp (type, "other") == 0 || len == 0 || len >= sizeof b->error_types[0] ||
       !fw_utf8_valid (type, len)) {
      return FW_METRICS_MAX_ERROR_TYPES;
   }
   for (int i = 0; i < n; i++) {
      if (strcmp (b->error_types[i], type) == 0) {
         return i;
      }
   }
   if (n == FW_METRICS_MAX_ERROR_TYPES) {
      return n;
   }
   memcpy (b->error_types[n], type, len + 1);
   __atomic_store_n (&b->n_error_types, n + 1, __ATOMIC_RELEASE);
   return n;
}

void
fw_stream_metrics_handler_error (fw_stream_metrics_t *b, const char *type)
{
   if (!type) {
      type = "";
   }
   /* Under the lock: a stream's lanes (issue 16) fail on several threads. */
   pthread_mutex_lock (&b->mu);
   count_add (&b->handler_errors[error_type_index (b, type)], 1);
   store_i64 (&b->last_error_ms, fw_now_ms ());
   if (strcmp (b->w_last_error, type) != 0) {
      snprintf (b->w_last_error, sizeof b->w_last_error, "%s", type);
      memcpy (b->last_error_type, b->w_last_error, sizeof b->last_error_type);
   }
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_retry (fw_stream_metrics_t *b)
{
   count_add (&b->retries, 1);
}

void
fw_stream_metrics_batch (fw_stream_metrics_t *b, uint64_t events, uint64_t splits)
{
   count_add (&b->batches, 1);
   count_add (&b->batch_events, events);
   count_add (&b->batch_splits, splits);
}

void
fw_stream_metrics_set_attempt (fw_stream_metrics_t *b, int attempt)
{
   __atomic_store_n (&b->attempt, attempt, __ATOMIC_RELAXED);
}

void
fw_stream_metrics_checkpoint (fw_stream_metrics_t *b, bool ok, int64_t now_ms)
{
   if (ok) {
      count_add (&b->checkpoint_writes, 1);
      store_i64 (&b->checkpoint_ms, now_ms);
   } else {
      count_add (&b->checkpoint_errors, 1);
   }
}

void
fw_stream_metrics_dlq_write (fw_stream_metrics_t *b)
{
   int64_t pending = __atomic_load_n (&b->dlq_pending, __ATOMIC_RELAXED);

   count_add (&b->dlq_writes, 1);
   /* Every entry is written PENDING: the gauge moves with the writes (of
    * several lanes at once) and the periodic count corrects it (replays,
    * discards, other instances). Unknown (-1) stays unknown until counted. */
   while (pending >= 0 && !__atomic_compare_exchange_n (&b->dlq_pending, &pending, pending + 1,
                                                        true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
   }
   if (pending == 0) {
      /* The oldest pending entry is the one just written. */
      store_i64 (&b->dlq_oldest_ms, fw_now_ms ());
   }
}

void
fw_stream_metrics_set_dlq_pending (fw_stream_metrics_t *b, int64_t pending,
                                   double oldest_age_seconds)
{
   int64_t oldest_ms = pending > 0 ? fw_now_ms () - (int64_t) (oldest_age_seconds * 1000.0) : 0;
   store_i64 (&b->dlq_oldest_ms, oldest_ms);
   store_i64 (&b->dlq_pending, pending < 0 ? -1 : pending);
}

void
fw_stream_metrics_set_retries_scheduled (fw_stream_metrics_t *b, int64_t count,
                                         double oldest_age_seconds)
{
   int64_t oldest_ms = count > 0 ? fw_now_ms () - (int64_t) (oldest_age_seconds * 1000.0) : 0;
   store_i64 (&b->retry_oldest_ms, oldest_ms);
   store_i64 (&b->retries_scheduled, count < 0 ? -1 : count);
}

void
fw_stream_metrics_set_state (fw_stream_metrics_t *b, fw_stream_state_t state, const char *reason)
{
   if (state == FW_STREAM_RUNNING || state == FW_STREAM_RETRYING) {
      /* The reason is only read for states other than these. */
      __atomic_store_n (&b->state, (int) state, __ATOMIC_RELEASE);
      return;
   }
   pthread_mutex_lock (&b->mu);
   snprintf (b->reason, sizeof b->reason, "%s", reason ? reason : "");
   __atomic_store_n (&b->state, (int) state, __ATOMIC_RELEASE);
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_restart (fw_stream_metrics_t *b, fw_metrics_restart_t reason)
{
   if ((unsigned) reason >= FW_METRICS_RESTART_COUNT) {
      reason = FW_METRICS_RESTART_ERROR;
   }
   count_add (&b->restarts[reason], 1);
}

void
fw_stream_metrics_state_rebuilt (fw_stream_metrics_t *b, fw_metrics_rebuild_t reason)
{
   if ((unsigned) reason >= FW_METRICS_REBUILD_COUNT) {
      reason = FW_METRICS_REBUILD_MEMORY;
   }
   count_add (&b->rebuilds[reason], 1);
}

void
fw_stream_metrics_set_snapshot (fw_stream_metrics_t *b, bool running, bool done, int64_t documents,
                                int64_t chunks)
{
   __atomic_store_n (&b->snapshot_docs, documents, __ATOMIC_RELAXED);
   __atomic_store_n (&b->snapshot_chunks, chunks, __ATOMIC_RELAXED);
   __atomic_store_n (&b->snapshot_state, running ? 1 : done ? 2 : 0, __ATOMIC_RELAXED);
}

void
fw_stream_metrics_set_lua_memory (fw_stream_metrics_t *b, uint64_t bytes)
{
   __atomic_store_n (&b->lua_memory, bytes, __ATOMIC_RELAXED);
}

void
fw_stream_metrics_set_role (fw_stream_metrics_t *b, int role)
{
   if (role == FW_STREAM_ROLE_STANDBY) {
      /* Another member reads the unit now: this block's lag (an event read
       * ahead and dropped would grow it for ever) and position are stale,
       * and are no longer shown (issue 38). */
      store_i64 (&b->inflight_ms, 0);
      store_i64 (&b->lag_ms, 0);
   } else if (role == FW_STREAM_ROLE_LEADER) {
      fw_stream_metrics_set_unit_view (b, NULL, 0, false);
   }
   __atomic_store_n (&b->role, role, __ATOMIC_RELAXED);
}

void
fw_stream_metrics_set_lease (fw_stream_metrics_t *b, int64_t lease_ms)
{
   store_i64 (&b->lease_ms, lease_ms > 0 ? lease_ms : 0);
}

void
fw_stream_metrics_set_unit_view (fw_stream_metrics_t *b, const char *holder,
                                 int64_t orphaned_since_ms, bool share_short)
{
   pthread_mutex_lock (&b->mu);
   snprintf (b->holder, sizeof b->holder, "%s", holder ? holder : "");
   store_i64 (&b->orphaned_since_ms, orphaned_since_ms > 0 ? orphaned_since_ms : 0);
   __atomic_store_n (&b->share_short, share_short ? 1 : 0, __ATOMIC_RELAXED);
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_set_script_version (fw_stream_metrics_t *b, const char *version)
{
   pthread_mutex_lock (&b->mu);
   snprintf (b->script_version, sizeof b->script_version, "%s", version ? version : "");
   pthread_mutex_unlock (&b->mu);
}

void
fw_stream_metrics_io (fw_stream_metrics_t *b, fw_metrics_io_client_t client,
                      fw_metrics_io_result_t result, int64_t duration_ns)
{
   if ((unsigned) client >= FW_METRICS_IO_CLIENT_COUNT) {
      return;
   }
   if ((unsigned) result >= FW_METRICS_IO_RESULT_COUNT) {
      result = FW_METRICS_IO_ERROR;
   }
   count_add (&b->io_requests[client][result], 1);
   hist_observe (&b->io[client], duration_ns);
}

/* --- the readers' side --------------------------------------------------- */

static bool
rate_read (const fw_rate_slot_t *s, int64_t *t_ms, uint64_t *events)
{
   for (int tries = 0; tries < 100; tries++) {
      uint32_t s1 = __atomic_load_n (&s->seq, __ATOMIC_ACQUIRE), s2;
      if (s1 & 1) {
         continue;
      }
      *t_ms = __atomic_load_n (&s->t_ms, __ATOMIC_RELAXED);
      *events = __atomic_load_n (&s->events, __ATOMIC_RELAXED);
      __atomic_thread_fence (__ATOMIC_ACQUIRE);
      s2 = __atomic_load_n (&s->seq, __ATOMIC_RELAXED);
      if (s1 == s2) {
         return *t_ms != 0;
      }
   }
   return false;
}

/* Events per second since the newest sample at least a minute old (or the
 * oldest one there is). */
static double
events_per_second (const fw_stream_metrics_t *b, uint64_t total, int64_t now_ms)
{
   int64_t best_t = 0;
   uint64_t best_events = 0;
   bool have_old = false;

   for (int i = 0; i < FW_RATE_SLOTS; i++) {
      int64_t t;
      uint64_t ev;
      if (!rate_read (&b->rate[i], &t, &ev) || t > now_ms) {
         continue;
      }
      if (t <= now_ms - 60000) {
         if (!have_old || t > best_t) {
            best_t = t;
            best_events = ev;
            have_old = true;
         }
      } else if (!have_old && (!best_t || t < best_t)) {
         best_t = t;
         best_events = ev;
      }
   }
   if (!best_t || now_ms <= best_t || total < best_events ||
       load_i64 (&b->finished_ms) <= now_ms - 60000) {
      return 0.0; /* nothing in the last minute */
   }
   return (double) (total - best_events) * 1000.0 / (double) (now_ms - best_t);
}

void
fw_stream_metrics_snapshot (const fw_stream_metrics_t *b, int64_t now_ms, fw_stream_snapshot_t *out)
{
   fw_stream_metrics_t *mb = (fw_stream_metrics_t *) b; /* for the mutex */
   int64_t inflight;

   memset (out, 0, sizeof *out);
   snprintf (out->name, sizeof out->name, "%s", b->name);
   out->state = (fw_stream_state_t) __atomic_load_n (&b->state, __ATOMIC_ACQUIRE);
   pthread_mutex_lock (&mb->mu);
   if (out->state != FW_STREAM_RUNNING && out->state != FW_STREAM_RETRYING) {
      memcpy (out->reason, b->reason, sizeof out->reason);
   }
   memcpy (out->last_error_type, b->last_error_type, sizeof out->last_error_type);
   memcpy (out->script_version, b->script_version, sizeof out->script_version);
   memcpy (out->holder, b->holder, sizeof out->holder);
   pthread_mutex_unlock (&mb->mu);
   fw_metrics_outage_snapshot (mb, &out->outage);

   for (int i = 0; i < FW_METRICS_OP_COUNT; i++) {
      out->events_by_op[i] = count_get (&b->events[i]);
      out->events += out->events_by_op[i];
   }
   for (int i = 0; i < FW_METRICS_OUTCOME_COUNT; i++) {
      out->handled[i] = count_get (&b->handled[i]);
   }
   for (int i = 0; i <= FW_METRICS_MAX_ERROR_TYPES; i++) {
      out->handler_errors += count_get (&b->handler_errors[i]);
   }
   for (int i = 0; i < FW_METRICS_RESTART_COUNT; i++) {
      out->restarts += count_get (&b->restarts[i]);
   }
   out->retries = count_get (&b->retries);
   out->checkpoint_writes = count_get (&b->checkpoint_writes);
   out->checkpoint_errors = count_get (&b->checkpoint_errors);
   out->dlq_writes = count_get (&b->dlq_writes);
   out->attempt = __atomic_load_n (&b->attempt, __ATOMIC_RELAXED);
   out->last_event_ms = load_i64 (&b->last_event_ms);
   out->checkpoint_ms = load_i64 (&b->checkpoint_ms);
   out->oplog_window_seconds = b->registry ? fw_metrics_oplog_window (b->registry) : -1;
   out->has_oplog_window = out->oplog_window_seconds >= 0;
   out->oplog_window_unknown = b->registry ? __atomic_load_n (&b->registry->oplog_window_unknown,
                                                              __ATOMIC_RELAXED)
                                           : 0;
   inflight = load_i64 (&b->inflight_ms);
   if (inflight) {
      out->lag_seconds = now_ms > inflight ? (double) (now_ms - inflight) / 1000.0 : 0.0;
   } else {
      out->lag_seconds = (double) load_i64 (&b->lag_ms) / 1000.0;
   }
   out->events_per_second = events_per_second (b, out->events, now_ms);
   out->last_error_ms = load_i64 (&b->last_error_ms);
   out->last_error_age_seconds = out->last_error_ms <= 0 ? -1.0
                                 : now_ms > out->last_error_ms
                                    ? (double) (now_ms - out->last_error_ms) / 1000.0
                                    : 0.0;
   out->dlq_pending = load_i64 (&b->dlq_pending);
   out->dlq_oldest_age_seconds = dlq_oldest_age (b, now_ms);
   out->lua_memory_bytes = __atomic_load_n (&b->lua_memory, __ATOMIC_RELAXED);
   out->role = __atomic_load_n (&b->role, __ATOMIC_RELAXED);
   out->lease_seconds = (double) load_i64 (&b->lease_ms) / 1000.0;
   out->orphaned_seconds = fw_metrics_orphaned_seconds (b, now_ms);
   out->share_short = __atomic_load_n (&b->share_short, __ATOMIC_RELAXED) != 0;
   out->snapshot_state = __atomic_load_n (&b->snapshot_state, __ATOMIC_RELAXED);
   out->snapshot_documents = __atomic_load_n (&b->snapshot_docs, __ATOMIC_RELAXED);
   out->snapshot_chunks = __atomic_load_n (&b->snapshot_chunks, __ATOMIC_RELAXED);
}

int
fw_metrics_snapshot_all (fw_metrics_t *m, int64_t now_ms, fw_stream_snapshot_t **out)
{
   fw_stream_metrics_t *b;
   fw_stream_snapshot_t *arr = NULL;
   int n = 0, cap = 0;

   *out = NULL;
   for (b = __atomic_load_n (&m->streams, __ATOMIC_ACQUIRE); b;
        b = __atomic_load_n (&b->next, __ATOMIC_ACQUIRE)) {
      if (!__atomic_load_n (&b->active, __ATOMIC_ACQUIRE)) {
         continue;
      }
      if (n == cap) {
         fw_stream_snapshot_t *grown;
         cap = cap ? cap * 2 : 8;
         if (!(grown = realloc (arr, (size_t) cap * sizeof *arr))) {
            free (arr);
            return -1;
         }
         arr = grown;
      }
      fw_stream_metrics_snapshot (b, now_ms, &arr[n++]);
   }
   *out = arr;
   return n;
}
