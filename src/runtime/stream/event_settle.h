/*
 * event_settle.h - what one event's outcome means for what a user sees:
 * its log line (dead-lettered, parked, scheduled for a deferred retry,
 * skipped, lost) and its counts in the stream's metrics block. The
 * dispatcher decides the outcome and writes neither; it hands each change
 * event it finished with to its sink (fw_dispatcher_set_outcome_sink), and
 * the stream's sink, and flowwarden test's, is this.
 */
#ifndef FLOWWARDEN_EVENT_SETTLE_H
#define FLOWWARDEN_EVENT_SETTLE_H

#include "bson/event.h"
#include "ops/metrics.h"
#include "runtime/dispatch/outcome.h"

/* Logs o's line for ev of stream and, with a metrics block (borrowed, may
 * be NULL), counts it: a DLQ write for an entry stored PENDING (dead
 * letter, park), the event finished with under o->count at
 * o->finished_ms (or now). */
void fw_event_settle (fw_stream_metrics_t *metrics, const char *stream, const fw_event_t *ev,
                      const fw_outcome_t *o);

/* With a metrics block (borrowed, may be NULL): counts ev as received, its
 * operation and its server time for the lag, before it is dispatched. On
 * the thread that read it (a lane's for a lane's batch). Inline: once per
 * event. */
static inline void
fw_event_received (fw_stream_metrics_t *metrics, const fw_event_t *ev)
{
   if (metrics) {
      fw_stream_metrics_event_received (metrics,
                                        ev->op < FW_OP_OTHER
                                           ? (fw_metrics_op_t) ev->op
                                           : fw_metrics_op_from_name (ev->operation_type),
                                        fw_event_time_ms (ev));
   }
}

#endif
