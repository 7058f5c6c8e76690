/*
 * metrics.h - the process's metrics and their Prometheus text exposition.
 *
 * One registry per process holds:
 *   - a block per stream (fw_stream_metrics_t) of counters, gauges and
 *     histograms. Only the stream's own thread writes a block, so every
 *     update is a relaxed atomic load and store of a word it owns: no lock,
 *     no allocation, no read-modify-write on the event path. Readers (the
 *     admin endpoint) load the same words with relaxed atomics;
 *   - process-wide metrics: reloads, the script and build versions, and the
 *     standard process_* metrics read from /proc/self at each scrape;
 *   - metrics that scripts define with fw.metrics (fw_metric_t), each with a
 *     series per (stream, label values).
 *
 * Blocks and handler-defined metrics live as long as the registry: a stream
 * removed by a reload keeps its block (hidden from the exposition), so a
 * stream that comes back carries on counting where it was.
 *
 * The ops layer sits above base/ only: it knows nothing of Lua, libmongoc or
 * the runtime, which feed it through this interface.
 */
#ifndef FLOWWARDEN_METRICS_H
#define FLOWWARDEN_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "flowwarden/error.h"

typedef struct fw_metrics fw_metrics_t;
typedef struct fw_stream_metrics fw_stream_metrics_t;
typedef struct fw_metric fw_metric_t;
typedef struct fw_metric_series fw_metric_series_t;

/* --- label values of the built-in metrics (each a closed set) ------------ */

/* operationType of a change event; insert..delete in fw_op_t's order. */
typedef enum {
   FW_METRICS_OP_INSERT = 0,
   FW_METRICS_OP_UPDATE,
   FW_METRICS_OP_REPLACE,
   FW_METRICS_OP_DELETE,
   FW_METRICS_OP_INVALIDATE,
   FW_METRICS_OP_DROP,
   FW_METRICS_OP_RENAME,
   FW_METRICS_OP_DROP_DATABASE,
   FW_METRICS_OP_SNAPSHOT, /* a row of an incremental snapshot (issue 38: was "other") */
   FW_METRICS_OP_OTHER,
   FW_METRICS_OP_COUNT
} fw_metrics_op_t;

/* How an event ended: flowwarden_events_handled_total{outcome}. */
typedef enum {
   FW_METRICS_OUTCOME_OK = 0,  /* a handler returned normally */
   FW_METRICS_OUTCOME_SKIPPED, /* on_error returned fw.SKIP */
   FW_METRICS_OUTCOME_DLQ,     /* stored in the dead-letter queue */
   FW_METRICS_OUTCOME_LOST,    /* given up without a DLQ, or unreadable */
   FW_METRICS_OUTCOME_PARKED,  /* parked behind an open DLQ sequence (dlq.sequenced) */
   FW_METRICS_OUTCOME_COUNT,
   FW_METRICS_OUTCOME_NONE = FW_METRICS_OUTCOME_COUNT /* no handler for it */
} fw_metrics_outcome_t;

typedef enum {
   FW_STREAM_STARTING = 0, /* thread started, change stream not open yet */
   FW_STREAM_RUNNING,      /* change stream open, reading or handling */
   FW_STREAM_PAUSED,       /* paused by the operator: change stream closed */
   FW_STREAM_RETRYING,     /* an event waits for its next attempt */
   FW_STREAM_RESTARTING,   /* the change stream failed; waiting to re-open it */
   FW_STREAM_STOPPED,      /* stopped (shutdown or removed) */
   FW_STREAM_FAILED,       /* stopped on an error it cannot get over */
   FW_STREAM_STANDBY,      /* ha: another live member holds the unit and reads it */
   FW_STREAM_ORPHANED,     /* ha: no live member holds the unit (its lease expired, or its
                            * holder's member record is gone) and this one has not taken it */
   FW_STREAM_STATE_COUNT
} fw_stream_state_t;

/* Why a change stream was re-opened: flowwarden_stream_restarts_total{reason}. */
typedef enum {
   FW_METRICS_RESTART_ERROR = 0,    /* it failed or could not be opened */
   FW_METRICS_RESTART_INVALIDATE,   /* an invalidate event ended it */
   FW_METRICS_RESTART_HISTORY_LOST, /* resumed elsewhere after history was lost */
   FW_METRICS_RESTART_ADMIN,        /* POST /v1/streams/NAME/restart */
   FW_METRICS_RESTART_RELOAD,       /* a reload changed its source */
   FW_METRICS_RESTART_COUNT
} fw_metrics_restart_t;

/* Why a stream's Lua state was rebuilt from its script:
 * flowwarden_states_rebuilt_total{reason}. */
typedef enum {
   FW_METRICS_REBUILD_MEMORY = 0, /* still over 90% of memory_limit after a full collection */
   FW_METRICS_REBUILD_COUNT
} fw_metrics_rebuild_t;

typedef enum {
   FW_METRICS_IO_MONGO = 0,
   FW_METRICS_IO_HTTP,
   FW_METRICS_IO_CLIENT_COUNT
} fw_metrics_io_client_t;

typedef enum {
   FW_METRICS_IO_OK = 0,
   FW_METRICS_IO_ERROR,   /* the server answered with an error, or the call failed */
   FW_METRICS_IO_TIMEOUT, /* the handler's budget ran out */
   FW_METRICS_IO_RESULT_COUNT
} fw_metrics_io_result_t;

/* At most this many distinct error_type label values per stream; further
 * types are counted as "other". */
#define FW_METRICS_MAX_ERROR_TYPES 50
#define FW_METRICS_NAME_MAX 128

/* The Prometheus label value of each enum (static strings). */
const char *fw_metrics_op_name (fw_metrics_op_t op);
const char *fw_metrics_outcome_name (fw_metrics_outcome_t outcome);
const char *fw_stream_state_name (fw_stream_state_t state);
const char *fw_metrics_restart_name (fw_metrics_restart_t reason);
const char *fw_metrics_rebuild_name (fw_metrics_rebuild_t reason);

/* Maps a change event's operationType ("insert", "dropDatabase", ...). */
fw_metrics_op_t fw_metrics_op_from_name (const char *operation_type);

/* --- the registry -------------------------------------------------------- */

/* Returns NULL when out of memory (or its lock cannot be set up). Owned by the
 * caller: fw_metrics_destroy. */
fw_metrics_t *fw_metrics_new (void);

/* Frees the registry, every block and every handler-defined metric. Nothing
 * may use them afterwards. NULL is a no-op. */
void fw_metrics_destroy (fw_metrics_t *m);

/* flowwarden_build_info{version,libmongoc,lua}; the strings are copied. */
void fw_metrics_set_build_info (fw_metrics_t *m, const char *version, const char *libmongoc,
                                const char *lua);

/* flowwarden_script_info{version}: the running script's version (copied). */
void fw_metrics_set_script_version (fw_metrics_t *m, const char *version);

/* Counts a reload in flowwarden_reloads_total{result="success|failure"}. */
void fw_metrics_count_reload (fw_metrics_t *m, bool ok);

/* The last reload, for status (/v1/streams). */
typedef struct {
   bool happened; /* false: no reload since the start */
   bool ok;
   int64_t at_ms;      /* wall clock */
   char message[2048]; /* its "reloaded ..." line, or why it failed (truncated) */
} fw_reload_result_t;

/* Records the last reload's result (message copied; secrets already hidden
 * by the caller). Any thread. */
void fw_metrics_set_last_reload (fw_metrics_t *m, bool ok, int64_t now_ms, const char *message);

/* Copies the last reload's result into *out; false when none happened. */
bool fw_metrics_last_reload (fw_metrics_t *m, fw_reload_result_t *out);

/* flowwarden_oplog_window_seconds: the deployment's oplog window as last
 * sampled (oplog_window.h); seconds < 0: unknown, and the metric is absent.
 * Any thread. */
void fw_metrics_set_oplog_window (fw_metrics_t *m, double seconds);

/* The last sampled window in seconds, or -1 when unknown. Any thread. */
double fw_metrics_oplog_window (fw_metrics_t *m);

/* Why the oplog window is unknown (issue 38: `status` said "the log says
 * why" where the log rightly said nothing, an empty oplog). */
typedef enum {
   FW_OPLOG_UNKNOWN_NOT_SAMPLED = 0, /* no sample yet */
   FW_OPLOG_UNKNOWN_EMPTY,           /* local.oplog.rs has no entry (yet) */
   FW_OPLOG_UNKNOWN_UNREADABLE,      /* it cannot be read; a warning says why */
   FW_OPLOG_UNKNOWN_UNREACHABLE,     /* the server cannot be reached (the streams say) */
} fw_oplog_unknown_t;

/* Marks the window unknown, for why (the metric is absent). Any thread. */
void fw_metrics_set_oplog_window_unknown (fw_metrics_t *m, fw_oplog_unknown_t why);

/* The short text /v1/streams and `status` give for why: "not sampled yet",
 * "empty oplog", ... (static). */
const char *fw_oplog_unknown_text (int why);

/*
 * The block of stream `name`, created on first use (NULL only when out of
 * memory). The same name always gives the same block. It belongs to the
 * registry and lives until fw_metrics_destroy; the returned block is shown
 * in the exposition until fw_stream_metrics_set_active (b, false).
 */
fw_stream_metrics_t *fw_metrics_stream (fw_metrics_t *m, const char *name);

/*
 * The Prometheus text exposition (format 0.0.4) of every metric: built-in,
 * handler-defined and process_*. Returns a NUL-terminated string the caller
 * frees with free(), its length in *len, or NULL when out of memory. Safe
 * from any thread at any time; it never blocks a stream.
 */
char *fw_metrics_render (fw_metrics_t *m, size_t *len);

/* --- a stream's block: written by the stream's thread only --------------- */

/* The stream's name; valid for the registry's life. */
const char *fw_stream_metrics_name (const fw_stream_metrics_t *b);

/* Shows (true) or hides (false) the block in the exposition and in
 * fw_metrics_snapshot_all. Any thread. */
void fw_stream_metrics_set_active (fw_stream_metrics_t *b, bool active);

/* An event arrived (operation op, written by the server at event_ms: its
 * wallTime, else its clusterTime's seconds * 1000; 0 if it has neither):
 * counts it and marks it in flight, so the lag grows while it is handled. */
void fw_stream_metrics_event_received (fw_stream_metrics_t *b, fw_metrics_op_t op,
                                       int64_t event_ms);

/* One handler call (an attempt) took duration_ns. */
void fw_stream_metrics_handler_call (fw_stream_metrics_t *b, int64_t duration_ns);

/* The event in flight is finished with (outcome, or FW_METRICS_OUTCOME_NONE
 * when no handler ran) at now_ms (wall clock): its time becomes the last
 * event timestamp and the lag is frozen at now_ms minus it. */
void fw_stream_metrics_event_finished (fw_stream_metrics_t *b, fw_metrics_outcome_t outcome,
                                       int64_t now_ms);

/* The change stream returned no event: the stream has caught up (lag 0). */
void fw_stream_metrics_caught_up (fw_stream_metrics_t *b);

/* A handler attempt failed with error type `type` (the first
 * FW_METRICS_MAX_ERROR_TYPES distinct types keep their name, later ones
 * count as "other"). Also kept as the stream's last error type. */
void fw_stream_metrics_handler_error (fw_stream_metrics_t *b, const char *type);

/* A retry was scheduled. */
void fw_stream_metrics_retry (fw_stream_metrics_t *b);

/* on_batch was given a batch of events, whose failing sets were split
 * splits times. */
void fw_stream_metrics_batch (fw_stream_metrics_t *b, uint64_t events, uint64_t splits);

/* The attempt now running (1, 2, ...), 0 when no event is in flight. */
void fw_stream_metrics_set_attempt (fw_stream_metrics_t *b, int attempt);

/* A checkpoint write succeeded at now_ms, or failed. */
void fw_stream_metrics_checkpoint (fw_stream_metrics_t *b, bool ok, int64_t now_ms);

/* A DLQ entry was written (PENDING): counted, and the pending gauge, once
 * known, moves up with it until the next count corrects it. Any of the
 * stream's threads (lanes). */
void fw_stream_metrics_dlq_write (fw_stream_metrics_t *b);

/* The DLQ's pending entries and the age of the oldest, from a count the
 * stream runs now and then (never per scrape), which corrects what
 * fw_stream_metrics_dlq_write added since; pending < 0: unknown. */
void fw_stream_metrics_set_dlq_pending (fw_stream_metrics_t *b, int64_t pending,
                                        double oldest_age_seconds);

/* retry.mode = "deferred" (issue 29): the stream's SCHEDULED retries and
 * the age of the oldest (since its event first failed), from the count its
 * thread runs when it looks for due retries; count < 0: unknown. */
void fw_stream_metrics_set_retries_scheduled (fw_stream_metrics_t *b, int64_t count,
                                              double oldest_age_seconds);

/* Moves the stream to state; reason (may be NULL) says why when the state is
 * not running, e.g. the error that failed it (copied, truncated to 255
 * bytes). Takes a short lock: not for the event path, except for the
 * running <-> retrying moves, which take none. */
void fw_stream_metrics_set_state (fw_stream_metrics_t *b, fw_stream_state_t state,
                                  const char *reason);

/* The change stream was re-opened for reason. */
void fw_stream_metrics_restart (fw_stream_metrics_t *b, fw_metrics_restart_t reason);

/* One of the stream's Lua states (its own or a lane's) was rebuilt. */
void fw_stream_metrics_state_rebuilt (fw_stream_metrics_t *b, fw_metrics_rebuild_t reason);

/* Bytes the stream's Lua state holds. */
/* The stream's incremental snapshot (issue 28): running or finished, the
 * snapshot events handed out and the chunks read. */
void fw_stream_metrics_set_snapshot (fw_stream_metrics_t *b, bool running, bool done,
                                     int64_t documents, int64_t chunks);

void fw_stream_metrics_set_lua_memory (fw_stream_metrics_t *b, uint64_t bytes);

/* The script version the stream runs (copied). Takes a short lock. */
void fw_stream_metrics_set_script_version (fw_stream_metrics_t *b, const char *version);

/* ha.mode = "leader" (issue 17): whether this instance leads the stream
 * (flowwarden_stream_leader, status, /v1/streams). Streams that never set it
 * have no role (NONE): no such series, no role in /v1/streams. */
enum { FW_STREAM_ROLE_NONE = 0, FW_STREAM_ROLE_STANDBY = 1, FW_STREAM_ROLE_LEADER = 2 };
void fw_stream_metrics_set_role (fw_stream_metrics_t *b, int role);

/* ha (issue 38): the unit's lease (flowwarden_unit_lease_seconds); 0: no
 * ha. Any thread. */
void fw_stream_metrics_set_lease (fw_stream_metrics_t *b, int64_t lease_ms);

/* ha (issue 38): what this instance sees of a unit it does not hold: the
 * holder's id (copied; NULL or "": none), since when (wall clock) the unit
 * has had no live holder (0: it has one), and whether this instance holds
 * fewer units than its share (it should take an orphaned unit, so it is
 * not ready while one is). Takes the block's short lock. */
void fw_stream_metrics_set_unit_view (fw_stream_metrics_t *b, const char *holder,
                                      int64_t orphaned_since_ms, bool share_short);

/* A handler's IO call (fw.mongo, fw.http) ended with result after duration_ns. */
void fw_stream_metrics_io (fw_stream_metrics_t *b, fw_metrics_io_client_t client,
                           fw_metrics_io_result_t result, int64_t duration_ns);

/* --- a stream's circuit breaker and rate limit (issue 29, metrics_outage.c) */

/* The stream declares circuit (status shows its breaker, closed or not) and
 * rate_limit as written ("200/s"; NULL or "": none). Copied. Any thread. */
void fw_stream_metrics_set_outage_config (fw_stream_metrics_t *b, bool circuit,
                                          const char *rate_limit);

/* The breaker is now in state (0 closed, 1 open, 2 half-open: the gauge
 * flowwarden_stream_circuit_state) on error type (copied; NULL when
 * closed), open since since_ms, next probe at next_probe_ms (wall clock;
 * 0: none). Takes the block's short lock. */
void fw_stream_metrics_set_circuit (fw_stream_metrics_t *b, int state, const char *type,
                                    int64_t since_ms, int64_t next_probe_ms);

/* The breaker opened on an error of type:
 * flowwarden_circuit_opened_total{stream,type} (the first 16 types by name,
 * later ones as "other"). */
void fw_stream_metrics_circuit_opened (fw_stream_metrics_t *b, const char *type);

/* An attempt waited ns for a rate-limit token. Any of the stream's threads. */
void fw_stream_metrics_rate_wait (fw_stream_metrics_t *b, int64_t ns);

typedef struct {
   bool circuit;                  /* the stream declares a breaker */
   int circuit_state;             /* 0 closed, 1 open, 2 half-open */
   char circuit_error_type[128];  /* "" when closed */
   int64_t circuit_since_ms;      /* wall clock; 0 when closed */
   int64_t circuit_next_probe_ms; /* wall clock; 0 unless open */
   char rate_limit[32];           /* as written; "" when none */
   double rate_wait_seconds;      /* time attempts spent waiting for tokens */
} fw_outage_snapshot_t;

/* --- reading a block: any thread ----------------------------------------- */

typedef struct {
   char name[FW_METRICS_NAME_MAX];
   fw_stream_state_t state;
   char reason[256]; /* why it is not running; "" when it is */
   char script_version[32];
   char last_error_type[128]; /* "" when no attempt failed yet */
   uint64_t events;           /* every operation */
   uint64_t events_by_op[FW_METRICS_OP_COUNT];
   uint64_t handled[FW_METRICS_OUTCOME_COUNT];
   uint64_t handler_errors;
   uint64_t retries;
   uint64_t restarts; /* every reason */
   uint64_t checkpoint_writes;
   uint64_t checkpoint_errors;
   uint64_t dlq_writes;
   int attempt;                   /* of the event in flight; 0 when idle */
   int64_t last_event_ms;         /* time of the last finished event; 0: none */
   int64_t checkpoint_ms;         /* when the last checkpoint was written; 0: none */
   int64_t last_error_ms;         /* when an attempt last failed (wall clock); 0: never */
   double last_error_age_seconds; /* now_ms - last_error_ms, in seconds; -1: never */
   double lag_seconds;
   double events_per_second; /* over about the last minute */
   int64_t dlq_pending;      /* -1: not counted (yet) */
   double dlq_oldest_age_seconds;
   uint64_t lua_memory_bytes;
   int role;                    /* FW_STREAM_ROLE_* */
   char holder[200];            /* ha, standby or orphaned: the lease's holder ("": none) */
   double orphaned_seconds;     /* ha: how long the unit has had no live holder; -1: it
                                    * has one (or no ha) */
   bool share_short;            /* ha: this instance holds fewer units than its share */
   double lease_seconds;        /* ha: the lease; 0: no ha */
   bool has_oplog_window;       /* the deployment's oplog window is known: */
   double oplog_window_seconds; /* fw_metrics_oplog_window */
   int oplog_window_unknown;    /* without it: why (fw_oplog_unknown_t) */
   fw_outage_snapshot_t outage; /* circuit breaker, rate limit (issue 29) */
   int snapshot_state;          /* incremental snapshot: 0 none, 1 running, 2 finished */
   int64_t snapshot_documents;
   int64_t snapshot_chunks;
} fw_stream_snapshot_t;

/* Copies b's current values (now_ms: the wall clock, for the lag and the
 * rate). Counters are read one by one, so the snapshot is not atomic as a
 * whole; each value is. */
void fw_stream_metrics_snapshot (const fw_stream_metrics_t *b, int64_t now_ms,
                                 fw_stream_snapshot_t *out);

/* Snapshots of every active block, in the order the blocks were created.
 * Returns the count and a malloc'd array in *out (caller frees; NULL when
 * the count is 0), or -1 when out of memory. */
int fw_metrics_snapshot_all (fw_metrics_t *m, int64_t now_ms, fw_stream_snapshot_t **out);

/* True when a stream in state s counts as ready (/readyz): running, or
 * running and retrying an event, or (ha) a standby while another member
 * reads it. */
bool fw_stream_state_ready (fw_stream_state_t s);

/* Whether the stream holds the instance's readiness back: not ready (above),
 * unless it is orphaned while this instance already holds its share (the
 * members that should take it are elsewhere, issue 38). */
bool fw_stream_snapshot_ready (const fw_stream_snapshot_t *s);

/* The stream a unit belongs to: name less a trailing "#k/N" (names of that
 * form are reserved for units), into out (size len). */
void fw_metrics_unit_stream (const char *name, char *out, size_t len);

/* --- metrics defined by scripts (fw.metrics) ----------------------------- */

typedef enum { FW_METRIC_COUNTER = 0, FW_METRIC_GAUGE, FW_METRIC_HISTOGRAM } fw_metric_type_t;

#define FW_METRIC_MAX_LABELS 8
#define FW_METRIC_MAX_BUCKETS 40
/* Series (stream x label values) of one metric; updates beyond are dropped
 * and logged once. */
#define FW_METRIC_MAX_SERIES 1000

typedef struct {
   const char *name;
   const char *help;
   fw_metric_type_t type;
   const char *const *labels; /* declared label names, n_labels of them */
   int n_labels;
   const double *buckets; /* histograms: upper bounds, increasing; NULL: the defaults */
   int n_buckets;
} fw_metric_spec_t;

/* Checks a metric name as scripts may use it: Prometheus's syntax, snake
 * case, no ':' (reserved for recording rules), the suffix and unit rules of
 * `promtool check metrics` for its type, and not one of flowwarden's own
 * names (flowwarden_*, process_*). Fills error with what is wrong and what
 * to use instead. */
bool fw_metrics_check_name (const char *name, fw_metric_type_t type, fw_error_t *error);

/*
 * Defines a metric, or returns the one of that name already defined when its
 * type, labels and buckets are the same (the help text of the first
 * definition stays). A different type, labels or buckets is an error naming
 * both definitions. The metric belongs to the registry.
 *
 * pending: the definition comes from a script being loaded (start-up or a
 * reload). It shows in the exposition only after fw_metrics_commit, and
 * fw_metrics_rollback forgets it, so a reload that fails leaves nothing
 * behind. A definition that is not pending (from a running handler) is
 * committed at once, and so is a pending metric defined again that way.
 */
fw_metric_t *fw_metrics_define (fw_metrics_t *m, const fw_metric_spec_t *spec, bool pending,
                                fw_error_t *error);

/* As fw_metrics_define (committed at once), for a metric of flowwarden's own
 * named flowwarden_* (issue 31's ha.mode = "shared" gauges). */
fw_metric_t *fw_metrics_define_own (fw_metrics_t *m, const fw_metric_spec_t *spec,
                                    fw_error_t *error);

/* Commits every pending definition. */
void fw_metrics_commit (fw_metrics_t *m);

/* Forgets every pending definition: they disappear from lookups and from
 * the exposition (their memory stays until fw_metrics_destroy, so a handle a
 * Lua state still holds stays valid). */
void fw_metrics_rollback (fw_metrics_t *m);

const char *fw_metric_name (const fw_metric_t *metric);
fw_metric_type_t fw_metric_type (const fw_metric_t *metric);
int fw_metric_label_count (const fw_metric_t *metric);
const char *fw_metric_label_name (const fw_metric_t *metric, int i);
const char *fw_metric_type_name (fw_metric_type_t type);

/*
 * The series of metric for stream and the label values (values[i] for the
 * i-th declared label; NULL when the metric has none), created on first use
 * under a lock; the lookup itself takes none. Returns NULL when the metric
 * has FW_METRIC_MAX_SERIES series already (logged once) or memory ran out.
 * The series lives as long as the registry. Values must be valid UTF-8
 * without NUL (the caller checks).
 */
fw_metric_series_t *fw_metric_series_get (fw_metric_t *metric, fw_stream_metrics_t *stream,
                                          const char *const *values);

/* True when the len bytes at value can be a label value: valid UTF-8,
 * without NUL. */
bool fw_metrics_label_value_ok (const char *value, size_t len);

/* Updates. A series is written by its stream's thread only. */
void fw_metric_series_add (fw_metric_series_t *s, double v);     /* counters, gauges */
void fw_metric_series_set (fw_metric_series_t *s, double v);     /* gauges */
void fw_metric_series_observe (fw_metric_series_t *s, double v); /* histograms */

/* The current value (counters, gauges) or, for a histogram, its sum; *count
 * (may be NULL) gets a histogram's observation count. */
double fw_metric_series_value (const fw_metric_series_t *s, uint64_t *count);

#endif
