/*
 * batch_run.h - one batch of events through on_batch (issue 30): the
 * whole batch's attempts, then bisection down to single events, so that
 * events failing on their own are found while every other event of the
 * batch is applied. It knows neither Lua nor events: the caller gives it
 * the calls (fw_batch_ops_t), the dispatcher's are in dispatch/batch.c.
 *
 * The order of the calls for a batch of n events, A = retry.max_attempts:
 *  1. the whole batch, up to A attempts (retry_wait between them). An
 *     attempt that returns with events marked failed (batch:fail) settles
 *     the others; the next attempt is a batch of just the marked ones.
 *  2. what still fails after A attempts is split in halves, each half
 *     tried once; a half that fails (or the events a half marks) is split
 *     again, down to single events.
 *  3. a single event goes its own way (single): the per-event path, with
 *     its own attempts, on_error and dead-letter queue.
 * Calls of the handler, at most: A + k * (2 * ceil(log2 n) + A) for k
 * events that fail on their own (each single event's A included).
 */
#ifndef FLOWWARDEN_BATCH_RUN_H
#define FLOWWARDEN_BATCH_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
   FW_BATCH_CALL_OK,           /* the handler returned; marked[] says which events it failed */
   FW_BATCH_CALL_FAILED,       /* the handler raised: every event of the call failed */
   FW_BATCH_CALL_STOPPED,      /* a stop (shutdown, lost lease): the batch ends unfinished */
   FW_BATCH_CALL_FAILED_FINAL, /* raised an error the stream does not retry (retry_on,
                                * no_retry_on): no whole-batch retry, bisected at once */
   FW_BATCH_CALL_AGAIN         /* failed for its state's sake (a full Lua state, rebuilt
                                * before the next call): called again at once with the
                                * same events as the next attempt, whatever max_attempts */
} fw_batch_call_t;

typedef struct {
   /* One call of the handler with the events idx[0..n) (positions in the
    * batch, in stream order) as attempt `attempt`; marked (n entries, all
    * false on entry) is set for each event the handler marked failed. */
   fw_batch_call_t (*call) (void *ud, const size_t *idx, size_t n, int attempt, bool *marked);
   /* After failed attempt `attempt` of n events: waits out the retry
    * backoff. False when a stop came first. */
   bool (*retry_wait) (void *ud, int attempt, size_t n);
   /* Event i is handled: the handler returned without marking it. */
   void (*succeeded) (void *ud, size_t i);
   /* Event i alone, on the per-event path (its attempts, on_error, the
    * DLQ). False when the batch must end there (a stop or a failure). */
   bool (*single) (void *ud, size_t i);
   void *ud;
   int max_attempts; /* retry.max_attempts (>= 1) */
   /* exactly_once (issue 39), NULL otherwise: whether events a < b of the
    * batch are of one source transaction, which bisection never splits: it
    * splits a set at the group boundary nearest its middle, and a set that
    * is one group of several events goes to group(ud, idx, n) whole (the
    * per-event path for each in one transaction; false as single). */
   bool (*joined) (void *ud, size_t a, size_t b);
   bool (*group) (void *ud, const size_t *idx, size_t n);
} fw_batch_ops_t;

typedef struct {
   int64_t calls;   /* calls of the handler with two events or more */
   int64_t splits;  /* sets split in halves */
   int64_t singles; /* events sent to the per-event path */
} fw_batch_stats_t;

/* Takes the n events (n >= 1) of one batch through ops as described above;
 * *stats (may be NULL) is added to. True when every event is finished with
 * (succeeded or given to single, which returned true); false when a call
 * stopped or single returned false (the batch must come back). False too
 * when out of memory (nothing called then). */
bool fw_batch_run (const fw_batch_ops_t *ops, size_t n, fw_batch_stats_t *stats);

#endif
