/*
 * outcome.h - what became of one event in its dispatcher, as a value: the
 * dispatcher decides it and writes no position; its caller (the stream's
 * settle, a replay, flowwarden test) acts on it.
 */
#ifndef FLOWWARDEN_OUTCOME_H
#define FLOWWARDEN_OUTCOME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
   /* Finished with: the position may pass the event. */
   FW_OUTCOME_HANDLED = 0,   /* the handler returned */
   FW_OUTCOME_SKIPPED,       /* on_error returned fw.SKIP */
   FW_OUTCOME_DEAD_LETTERED, /* stored in the DLQ (entry_id) */
   FW_OUTCOME_PARKED,        /* stored behind its open DLQ sequence (entry_id) */
   FW_OUTCOME_DEFERRED,      /* stored as a deferred retry due at until_ms (entry_id) */
   FW_OUTCOME_LOST,          /* failed for good and no DLQ took it (logged as LOST) */
   FW_OUTCOME_NO_HANDLER,    /* the program has no handler for its operation */
   FW_OUTCOME_GAVE_UP,       /* a replayed dead letter failed for good: its replay decides */
   /* Not finished with: the position stays before the event. */
   FW_OUTCOME_STOPPED, /* a stop, or the lost lease, came first: it comes back */
   FW_OUTCOME_HELD,    /* held behind the open circuit breaker until a stop came */
   FW_OUTCOME_NO_DLQ,  /* unreadable or oversize, and no DLQ to keep it */
   FW_OUTCOME_FAILED,  /* the stream must stop before it (error says why) */
   FW_OUTCOME_YIELDED, /* between two attempts, a reload's new program was waiting: the
                              * stream switches at the event's boundary and runs it again,
                              * its attempts carrying on (fw_dispatch_run_t's attempt_base) */
   FW_OUTCOME_KINDS
} fw_outcome_kind_t;

/* How the stream counts an event that ended so (the outcome label of
 * flowwarden_events_total, ops/metrics.h's fw_metrics_outcome_t):
 * not always the kind's (a park counts PARKED, but a dead letter whose error
 * has no type is stored as PARKED and counts DLQ; DEFERRED counts DLQ). */
typedef enum {
   FW_COUNT_NOTHING = 0, /* not counted as an event that finished (unreadable, oversize, ...) */
   FW_COUNT_OK,          /* fw_metrics_outcome_t's values, plus 1 */
   FW_COUNT_SKIPPED,
   FW_COUNT_DLQ,
   FW_COUNT_LOST,
   FW_COUNT_PARKED,
   FW_COUNT_NONE /* finished, in no outcome's count (no handler): the lag moves */
} fw_outcome_count_t;

/* How an event that ended so counts in its stream's summary (the counts
 * of its exit line, fw_stream_stats_t): set where the dispatcher decides
 * the end, so that a replayed dead letter handled counts, one skipped or
 * given up does not. */
typedef enum {
   FW_SUMMARY_NOTHING = 0, /* comes back, no handler, deferred, a replay skipped or given up */
   FW_SUMMARY_HANDLED,
   FW_SUMMARY_SKIPPED,
   FW_SUMMARY_DEAD_LETTERED,
   FW_SUMMARY_PARKED,
   FW_SUMMARY_LOST
} fw_outcome_summary_t;

/* What the log line of an outcome needs besides the event (the stream's
 * settle writes it, runtime/stream/event_settle.h). Strings never NULL. */
typedef struct {
   const char *where;      /* the failing line ("file:line", redacted), or "" */
   const char *dlq;        /* DEAD_LETTERED, PARKED, DEFERRED: the DLQ collection */
   bool default_dlq;       /* ... the script's default DLQ (the stream has none) */
   const char *sequence;   /* PARKED: its DLQ sequence; DEAD_LETTERED: the one it opened; or "" */
   int64_t sequence_index; /* the entry's index in it */
   bool asked_dlq;         /* LOST: on_error asked for a DLQ the stream has not */
} fw_outcome_detail_t;

/* The strings are the dispatcher's, valid until its next event; never NULL
 * ("" when there is none). */
typedef struct {
   fw_outcome_kind_t kind;
   int attempts;           /* handler attempts made (0: none ran) */
   int64_t until_ms;       /* DEFERRED: when the retry is due (wall clock) */
   const char *entry_id;   /* DEAD_LETTERED, PARKED, DEFERRED: the DLQ entry's _id */
   const char *error_type; /* after a failed attempt: its error's type */
   const char *error;      /* its message; FAILED, NO_DLQ: why the stream stops */
   /* When it was finished with (wall clock, ms: a handled event's handler
    * end, for the lag); 0 when its dispatcher counts in no metrics block. */
   int64_t finished_ms;
   fw_outcome_count_t count;
   const fw_outcome_detail_t *detail; /* NULL: no log line (handled, no handler, ...) */
   /* The bytes its dispatcher's Lua state held as the dispatcher finished
    * with it (the flowwarden_lua_memory_bytes gauge); 0 when not read. */
   size_t lua_memory;
   /* What it adds to its stream's summary: its end, and its run's attempts
    * that failed and retries waited out or scheduled (a batch's calls: see
    * fw_outcome_sink_fn). Counted by the stream's settle, never by the
    * dispatcher. */
   fw_outcome_summary_t summary;
   int failed_attempts;
   int retries;
} fw_outcome_t;

/* An outcome of kind after attempts, with no DLQ entry, no error, no log
 * line and nothing counted: the start every maker of an outcome sets its
 * other fields on. */
static inline fw_outcome_t
fw_outcome_of (fw_outcome_kind_t kind, int attempts)
{
   fw_outcome_t o = {kind, attempts,           0, "", "", "", 0, FW_COUNT_NOTHING, NULL,
                     0,    FW_SUMMARY_NOTHING, 0, 0};
   return o;
}

/* The position may pass an event that ended so. */
static inline bool
fw_outcome_finished (fw_outcome_kind_t kind)
{
   return kind < FW_OUTCOME_STOPPED;
}

/* The event must come back (a stop or the lease came first, or a reload:
 * at once, on the new program). */
static inline bool
fw_outcome_comes_back (fw_outcome_kind_t kind)
{
   return kind == FW_OUTCOME_STOPPED || kind == FW_OUTCOME_HELD || kind == FW_OUTCOME_YIELDED;
}

/* The kind's name, as flowwarden test reports it ("handled", "dlq", ...). */
const char *fw_outcome_name (fw_outcome_kind_t kind);

#endif
