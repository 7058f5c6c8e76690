/*
 * stream_shared-private.h - ha.mode = "shared" (issue 31, stream_shared.c): the unit's lease,
 * its share and its gauges.
 */
#ifndef FLOWWARDEN_STREAM_SHARED_PRIVATE_H
#define FLOWWARDEN_STREAM_SHARED_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "flowwarden/error.h"
#include "ops/metrics.h"
#include "runtime/ha/lease.h"
#include "runtime/stream/stream_worker.h"

/* The stream's lease: a unit lease of its group with ha.mode = "shared",
 * else fw_lease_new's. NULL (err set) on failure. */
fw_lease_t *fw_stream_lease_new (fw_stream_worker_t *w, fw_error_t *err);

/* ha.mode = "shared": this unit is over the instance's share (sticky until
 * fw_stream_yield_unit gave it up). False otherwise. */
bool fw_stream_over_share (fw_stream_worker_t *w);

/* Gives the unit's lease up when it is over the share (its checkpoint
 * saved by the caller); true when it did. */
bool fw_stream_yield_unit (fw_stream_worker_t *w);

/* Destroys the lease (and leaves the group). */
void fw_stream_lease_destroy (fw_stream_worker_t *w);

/* Defines the unit's gauges in registry (ha.mode = "shared" only). */
void fw_stream_shared_set_metrics (fw_stream_worker_t *w, fw_metrics_t *registry);

/* ha.mode = "shared": sets the gauges, at most every 500 ms. Any of the
 * stream's threads. */
void fw_stream_shared_observe (fw_stream_worker_t *w);

/* ha, while the stream's thread waits to lead (fw_stream_wait_lead): the
 * gauges, and the unit's state as this member sees it: standby (naming the
 * holder) or orphaned with how long (issue 38), at most every 250 ms. The
 * stream's thread only. */
void fw_stream_standby_observe (fw_stream_worker_t *w);

#endif
