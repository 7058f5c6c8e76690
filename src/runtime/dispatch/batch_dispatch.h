/*
 * batch_dispatch.h - a stream with on_batch (issue 30): a batch of events
 * through its dispatcher, by batch_run.h's attempts and bisection. The
 * stream assembles the batch (stream/stream_batch.c); events the batch
 * cannot settle go the per-event path (fw_event_dispatch), where on_batch
 * is called with a batch of one.
 */
#ifndef FLOWWARDEN_BATCH_DISPATCH_H
#define FLOWWARDEN_BATCH_DISPATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/dispatch/batch_run.h"
#include "runtime/dispatch/dispatcher.h"

/* True when d's program declares on_batch: *max_events and *max_wait_ms
 * (may be NULL) are its batch settings. */
bool fw_dispatcher_batching (const fw_dispatcher_t *d, int *max_events, int64_t *max_wait_ms);

/* Runs the n events evs[0..n) (parsed, valid until it returns, in stream
 * order) through on_batch. Its outcome is FW_OUTCOME_HANDLED when every
 * event is finished with (handled, or given to on_error / the DLQ);
 * otherwise the one that ended the batch early, which must come back
 * (fw_outcome_comes_back) or stop the stream before it, as with
 * fw_event_dispatch. outcomes (n entries, or NULL) gets each event's kind
 * (FW_OUTCOME_STOPPED for one not finished with). */
fw_outcome_t fw_batch_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                                fw_outcome_kind_t *outcomes);

#endif
