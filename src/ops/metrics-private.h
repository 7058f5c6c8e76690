/*
 * metrics-private.h - the registry's structures, shared by metrics.c (the
 * registry and the per-stream blocks), metrics_user.c (metrics scripts
 * define) and metrics_render.c (the exposition).
 *
 * Concurrency: a block is written by its stream's thread only, with relaxed
 * atomic loads and stores (count_add); readers use relaxed atomic loads.
 * Lists (blocks, metrics, series) only grow: an element is filled in, then
 * published by a release store of the list head, and readers walk them
 * after an acquire load, without a lock. Creating an element takes the
 * registry's (or the metric's) mutex.
 */
#ifndef FLOWWARDEN_METRICS_PRIVATE_H
#define FLOWWARDEN_METRICS_PRIVATE_H

#include <pthread.h>

#include "metrics_outage.h"
#include "ops/metrics.h"
#include "strbuf.h"

/* Upper bounds of the duration histograms (handler calls, handler IO), in
 * nanoseconds: 100 us .. 30 s. */
#define FW_DURATION_BUCKETS 17
extern const int64_t fw_duration_bounds_ns[FW_DURATION_BUCKETS];

/* Per-bucket (not cumulative) counts, the last one above every bound. */
typedef struct {
   uint64_t count[FW_DURATION_BUCKETS + 1];
   uint64_t sum_ns;
} fw_duration_hist_t;

/* Events received so far, sampled every 10 s for the rate over a minute. */
#define FW_RATE_SLOTS 8
#define FW_RATE_SLOT_MS 10000
typedef struct {
   uint32_t seq; /* odd while the writer fills the slot */
   int64_t t_ms; /* 0: never filled */
   uint64_t events;
} fw_rate_slot_t;

struct fw_stream_metrics {
   fw_stream_metrics_t *next; /* registry list; fixed once published */
   fw_metrics_t *registry;
   char *name;
   int active;

   /* written by the stream's thread (count_add / relaxed stores) */
   uint64_t events[FW_METRICS_OP_COUNT];
   uint64_t handled[FW_METRICS_OUTCOME_COUNT];
   uint64_t handler_errors[FW_METRICS_MAX_ERROR_TYPES + 1]; /* last: "other" */
   char error_types[FW_METRICS_MAX_ERROR_TYPES][64];
   int n_error_types; /* release-stored after the name is written */
   uint64_t retries;
   uint64_t batches, batch_events, batch_splits; /* on_batch (issue 30) */
   uint64_t restarts[FW_METRICS_RESTART_COUNT];
   uint64_t rebuilds[FW_METRICS_REBUILD_COUNT];
   uint64_t checkpoint_writes;
   uint64_t checkpoint_errors;
   uint64_t dlq_writes;
   int64_t checkpoint_ms;
   int64_t inflight_ms; /* server time of the event in flight; 0: none */
   int64_t last_event_ms;
   int64_t lag_ms;
   int64_t finished_ms; /* local time the last event was finished with */
   int attempt;
   int state;
   uint64_t lua_memory;
   int64_t snapshot_docs; /* snapshot events handed out (issue 28) */
   int64_t snapshot_chunks;
   int snapshot_state;        /* 0: none, 1: running, 2: finished */
   int role;                  /* FW_STREAM_ROLE_* (ha.mode = "leader") */
   int64_t lease_ms;          /* ha: the unit's lease; 0: no ha (issue 38) */
   int64_t orphaned_since_ms; /* ha: wall clock since the unit has had no live holder; 0: it
                               * has one */
   int share_short;           /* ha: this instance holds fewer units than its share */
   int64_t dlq_pending;
   int64_t dlq_oldest_ms;     /* wall clock of the oldest PENDING entry; 0: none */
   int64_t retries_scheduled; /* SCHEDULED entries (retry.mode = "deferred"); -1: not counted */
   int64_t retry_oldest_ms;   /* wall clock of the oldest one's createdAt; 0: none */
   int64_t last_error_ms;     /* wall clock of the last failed attempt; 0: none */
   fw_duration_hist_t handler;
   fw_duration_hist_t io[FW_METRICS_IO_CLIENT_COUNT];
   uint64_t io_requests[FW_METRICS_IO_CLIENT_COUNT][FW_METRICS_IO_RESULT_COUNT];
   fw_rate_slot_t rate[FW_RATE_SLOTS];

   /* the writer's own, never read by others */
   uint64_t w_events;
   int64_t w_next_sample_ms;
   int w_rate_slot;
   char w_last_error[128];

   /* strings, under mu */
   pthread_mutex_t mu;
   char reason[256];
   char last_error_type[128];
   char script_version[32];
   char holder[200];         /* ha: the unit's holder as this instance last saw it */
   fw_outage_block_t outage; /* issue 29 (metrics_outage.c) */
};

typedef enum { METRIC_PENDING = 0, METRIC_COMMITTED, METRIC_RETIRED } metric_state_t;

struct fw_metric_series {
   fw_metric_series_t *next; /* fixed once published */
   const fw_metric_t *metric;
   fw_stream_metrics_t *stream;
   char **values;       /* one per declared label */
   uint64_t value_bits; /* counters, gauges: a double; histograms: the sum */
   uint64_t *buckets;   /* histograms: n_buckets + 1 per-bucket counts */
};

struct fw_metric {
   fw_metric_t *next; /* registry list; fixed once published */
   char *name;
   char *help;
   fw_metric_type_t type;
   char **labels;
   int n_labels;
   double *buckets;
   int n_buckets;
   int state;          /* metric_state_t, atomic */
   pthread_mutex_t mu; /* creating series */
   fw_metric_series_t *series;
   int n_series;
   bool cap_logged;
};

struct fw_metrics {
   pthread_mutex_t mu; /* creating blocks and metrics; the strings below */
   fw_stream_metrics_t *streams;
   fw_metric_t *metrics;
   uint64_t reloads_ok;
   uint64_t reloads_failed;
   fw_reload_result_t last_reload; /* under mu */
   int64_t oplog_window_ms;        /* atomic; valid while oplog_window_known */
   int oplog_window_known;         /* atomic */
   int oplog_window_unknown;       /* atomic; while not known: why (fw_oplog_unknown_t) */
   char *script_version;
   char *build_version;
   char *build_libmongoc;
   char *build_lua;
};

static inline uint64_t
count_get (const uint64_t *c)
{
   return __atomic_load_n (c, __ATOMIC_RELAXED);
}

/* The writer's increment: it owns the word, so a load and a store do. */
static inline void
count_add (uint64_t *c, uint64_t n)
{
   /* An atomic add: a stream with lanes (issue 16) counts from several
    * threads into one block. */
   __atomic_fetch_add (c, n, __ATOMIC_RELAXED);
}

static inline double
bits_to_double (uint64_t bits)
{
   double d;
   __builtin_memcpy (&d, &bits, sizeof d);
   return d;
}

static inline uint64_t
double_to_bits (double d)
{
   uint64_t bits;
   __builtin_memcpy (&bits, &d, sizeof bits);
   return bits;
}

/* The age of the oldest PENDING entry at now_ms (wall clock), growing
 * between the counts; 0 when none waits. */
static inline double
dlq_oldest_age (const fw_stream_metrics_t *b, int64_t now_ms)
{
   int64_t oldest = __atomic_load_n (&b->dlq_oldest_ms, __ATOMIC_RELAXED);
   return oldest > 0 && now_ms > oldest ? (double) (now_ms - oldest) / 1000.0 : 0.0;
}

/* ha (issue 38): how long the unit has had no live holder at now_ms (wall
 * clock), -1 when it has one (or no ha, or this instance holds it). */
static inline double
fw_metrics_orphaned_seconds (const fw_stream_metrics_t *b, int64_t now_ms)
{
   int64_t since = __atomic_load_n (&b->orphaned_since_ms, __ATOMIC_RELAXED);
   if (since <= 0 || __atomic_load_n (&b->role, __ATOMIC_RELAXED) == FW_STREAM_ROLE_LEADER) {
      return -1.0;
   }
   return now_ms > since ? (double) (now_ms - since) / 1000.0 : 0.0;
}

/* A standby's (ha) lag, position and DLQ gauges are another member's to
 * export: this instance's copies are stale (issue 38). */
static inline bool
fw_metrics_holder_only_hidden (const fw_stream_metrics_t *b)
{
   return __atomic_load_n (&b->role, __ATOMIC_RELAXED) == FW_STREAM_ROLE_STANDBY;
}

/* Renders the handler-defined metrics (metrics_user.c). */
void fw_metrics_render_user (fw_metrics_t *m, fw_strbuf_t *out);

/* The circuit breaker and rate limit families of every active block, and
 * a block's part of a snapshot (metrics_outage.c). */
void fw_metrics_render_outage (fw_stream_metrics_t *first, fw_strbuf_t *out);
void fw_metrics_outage_snapshot (fw_stream_metrics_t *b, fw_outage_snapshot_t *out);

/* Frees the handler-defined metrics (metrics_user.c). */
void fw_metrics_free_user (fw_metrics_t *m);

/* Each stream block from first on that is active (its stream exists now),
 * as b: the list only grows, so it is walked without the registry's lock. */
#define FW_FOREACH_ACTIVE_STREAM(first, b)                                                     \
   for (fw_stream_metrics_t *b = (first); b; b = __atomic_load_n (&b->next, __ATOMIC_ACQUIRE)) \
      if (__atomic_load_n (&b->active, __ATOMIC_ACQUIRE))

#endif
