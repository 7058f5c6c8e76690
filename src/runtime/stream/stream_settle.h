/*
 * stream_settle.h - one place settles what became of an event (or a batch)
 * for the stream: the dispatcher returns an outcome (runtime/dispatch/outcome.h)
 * and moves nothing; fw_stream_settle says what it means for the read,
 * counts it and moves the position through the caller's place. The
 * stream's thread (one event, a batch, a snapshot's row, an unreadable or
 * oversize event) and every lane's thread use it.
 */
#ifndef FLOWWARDEN_STREAM_SETTLE_H
#define FLOWWARDEN_STREAM_SETTLE_H

#include <stdbool.h>

#include "ops/metrics.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/outcome.h"

/* How a read of the change stream ended (stream_worker.c). */
typedef enum {
   FW_READ_STOP,
   FW_READ_REOPEN, /* re-open at once where the position is (no backoff) */
   FW_READ_FAILED, /* the stream stopped for good (fw_stream_failed said why) */
   FW_READ_ERROR,
   FW_READ_INVALIDATED,
   FW_READ_HISTORY_LOST,
   FW_READ_PAUSE,   /* the admin endpoint asked to pause: checkpoint written */
   FW_READ_RESTART, /* the admin endpoint asked to restart: checkpoint written */
   FW_READ_LOST,    /* ha: the lease's deadline passed: handling stopped */
   FW_READ_NEXT     /* within a read only: no end, read on */
} fw_read_end_t;

/* Where an outcome is settled: whose it is, and the caller's ways of
 * moving the position past the event(s) and of stopping the stream. The
 * settle calls one of them at most, once: the caller's part of an outcome
 * is done there, with the outcome handed to it. */
typedef struct {
   fw_dispatcher_t *d;           /* the dispatcher that ran it */
   fw_stream_metrics_t *metrics; /* the stream's block (the settle sets its Lua
                                  * memory gauge), or NULL */
   /* The event(s) are finished with (o: their outcome, a batch's for a
    * batch; each event was counted and logged as it finished,
    * runtime/stream/event_settle.h): the caller counts what it keeps (the
    * DLQ's pending entries) and moves the position past them, or what stands
    * for it (a lane's tickets, a snapshot row's progress); returns how the
    * read goes on. NULL: nothing to do, FW_READ_NEXT. */
   fw_read_end_t (*finished) (void *ud, const fw_outcome_t *o);
   /* The stream must stop before them, why says why. */
   void (*fail) (void *ud, const char *why);
   /* A stop came first: true when it was the lost lease, not a shutdown
    * (NULL: never). */
   bool (*lease_lost) (void *ud);
   void *ud;
   const char *no_dlq_why; /* FW_OUTCOME_NO_DLQ: why the stream stops */
} fw_settle_place_t;

/* Settles o at place: FW_READ_NEXT (or what finished returns) once the
 * event(s) are finished with; FW_READ_STOP or FW_READ_LOST when they must
 * come back; FW_READ_FAILED after place->fail when the stream stops
 * before them. */
fw_read_end_t fw_stream_settle (const fw_settle_place_t *place, const fw_outcome_t *o);

#endif
