/*
 * event_dispatch.h - running one change event (or a source transaction's
 * events) through a dispatcher (event_dispatch.c): the call every client of
 * the dispatcher makes, the stream's thread, its lanes, batches, replays and
 * deferred retries. The dispatcher itself is dispatcher.h's.
 */
#ifndef FLOWWARDEN_EVENT_DISPATCH_H
#define FLOWWARDEN_EVENT_DISPATCH_H

#include <stddef.h>

#include "bson/event.h"
#include "runtime/dispatch/outcome.h"

typedef struct fw_dispatcher fw_dispatcher_t; /* dispatcher.h */

/* How a client other than the stream runs an event through d: the
 * dispatcher keeps no mode, each call says what it runs. All zero (or
 * NULL): a change event (fw_event_dispatch). */
typedef struct fw_dispatch_run {
   /* Attempts made before this call (a deferred retry's, an event that
    * yielded to a reload): this call's first attempt is number
    * attempt_base + 1 for ctx:attempt_number(), the error policy's decision,
    * the backoff and a DLQ entry; the outcome's attempts count them all. */
   int attempt_base;
   /* A dead letter's replay (dispatcher-private.h), NULL for a change event:
    * see fw_replay_hook_t for what it changes. */
   struct fw_replay_hook *replay;
} fw_dispatch_run_t;

/* fw_event_dispatch for the client run says (borrowed; NULL: a change
 * event). */
fw_outcome_t fw_event_dispatch_run (fw_dispatcher_t *d, const fw_event_t *ev,
                                    const fw_dispatch_run_t *run);

/* Runs the handlers for one parsed change event with the stream's retry and
 * DLQ policy, and says what became of it (runtime/dispatch/outcome.h): it moves no
 * position, its caller settles the outcome (the sink has logged and
 * counted it). The event must stay valid until it returns; the outcome's
 * strings until d's next event. */
static inline fw_outcome_t
fw_event_dispatch (fw_dispatcher_t *d, const fw_event_t *ev)
{
   return fw_event_dispatch_run (d, ev, NULL);
}

/* exactly_once (issue 39): the n events evs[0..n) of one source transaction
 * (same lsid and txnNumber, in stream order, valid until it returns) applied
 * together: each attempt calls the handler of each event in turn in one
 * transaction, committed with the position past evs[n-1]; a failed call
 * fails the attempt, and the retry policy and on_error apply to the event
 * that failed, for the whole group. When that event ends without being
 * applied (dead-lettered, skipped, lost), the group's other events are run
 * again without it, together. Returns FW_OUTCOME_HANDLED once every event
 * is finished with, else the outcome that must come back or stop the stream
 * (as fw_event_dispatch); outcomes (n entries, or NULL) gets each event's
 * kind. Without exactly_once (or with n == 1): fw_event_dispatch for each. */
fw_outcome_t fw_group_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                                fw_outcome_kind_t *outcomes);

#endif
