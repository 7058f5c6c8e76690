/*
 * event_settle.h - what one event's outcome means for what a user sees:
 * its log line (dead-lettered, parked, scheduled for a deferred retry,
 * skipped, lost), its counts in the stream's metrics block and in the
 * stream's summary (the exit line's counts). The dispatcher decides the
 * outcome and writes none of them; it hands each change event it finished
 * with to its sink (fw_dispatcher_set_outcome_sink), and the stream's sink,
 * and flowwarden test's, is this.
 */
#ifndef FLOWWARDEN_EVENT_SETTLE_H
#define FLOWWARDEN_EVENT_SETTLE_H

#include "bson/event.h"
#include "ops/metrics.h"
#include "runtime/dispatch/outcome.h"

/* What a stream counted of its events: its summary, logged as it stops
 * (runtime.c). Counted by fw_event_settle alone; read it with
 * fw_stream_summary_read while threads may still add to it. */
typedef struct {
   uint64_t handled;        /* handler finished without error */
   uint64_t handler_errors; /* failed attempts */
   uint64_t retries;
   uint64_t dead_lettered;
   uint64_t skipped; /* on_error returned fw.SKIP */
   uint64_t lost;    /* failed for good with no DLQ: logged at error level */
   uint64_t parked;  /* stored behind an open DLQ sequence (dlq.sequenced) */
   bool failed;      /* the stream stopped on a terminal error (its thread sets it) */
} fw_stream_stats_t;

/* Logs o's line for ev of stream and counts it: with a metrics block
 * (borrowed, may be NULL) a DLQ write for an entry stored PENDING (dead
 * letter, park), the event finished with under o->count at o->finished_ms
 * (or now); with a summary (borrowed, may be NULL; the stream's and its
 * lanes' threads add to one, atomically) its end (o->summary), its failed
 * attempts and its retries. With ev NULL (fw_outcome_sink_fn: no change
 * event) only the summary counts. */
void fw_event_settle (fw_stream_metrics_t *metrics, fw_stream_stats_t *summary, const char *stream,
                      const fw_event_t *ev, const fw_outcome_t *o);

/* A copy of summary: its counts safe while other threads add to them, failed
 * once the thread that sets it ended. */
void fw_stream_summary_read (const fw_stream_stats_t *summary, fw_stream_stats_t *out);

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
