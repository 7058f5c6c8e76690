/*
 * stream_shared-private.h - ha.mode = "shared" (issue 31, stream_shared.c): the unit's lease,
 * its share and its gauges.
 */
#ifndef FLOWWARDEN_STREAM_SHARED_PRIVATE_H
#define FLOWWARDEN_STREAM_SHARED_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/error.h"
#include "ops/metrics.h"
#include "runtime/config/stream_config.h"
#include "runtime/ha/lease.h"

/* The stream's ha state besides its lease: the shared units' group, its
 * gauges, this member's view of a unit it does not hold; and what it reads
 * of the stream (links to its fields, set by fw_stream_shared_link: the
 * settings follow reloads in place, the client and the lease change with
 * each run). Part of the stream's state (w->shared). */
typedef struct fw_stream_shared {
   struct fw_shared_group *group; /* ha.mode = "shared": the units' group */
   fw_metric_series_t *held;      /* ... its gauges flowwarden_units_held, _members */
   fw_metric_series_t *members;
   int64_t seen_ms;           /* when they were last set (atomic) */
   uint64_t start_at;         /* the stream's start in the group (fw_stream_group_start);
                               * 0: not known yet. The stream's thread only. */
   struct {                   /* ha, this member's view of a unit it does not hold: */
      int64_t orphan_seen_ms; /* wall clock it first saw the unit's holder gone (its member
                                * record); 0: not seen */
      int64_t seen_ms;        /* when fw_stream_standby_observe last looked (both: the
                                * stream's thread only) */
   } standby;
   const fw_stream_config_t *cfg;  /* the stream's settings (borrowed) */
   fw_stream_metrics_t *metrics;   /* the stream's block, or NULL (fw_stream_shared_set_metrics) */
   mongoc_client_t *const *client; /* the stream's client (NULL in it outside a run) */
   fw_lease_t *const *lease;       /* the stream's lease (ha), NULL in it: none */
} fw_stream_shared_t;

/* Links s to the stream's settings, client and lease fields (borrowed,
 * outliving s). */
void fw_stream_shared_link (fw_stream_shared_t *s, const fw_stream_config_t *cfg,
                            mongoc_client_t *const *client, fw_lease_t *const *lease);

/* The stream's lease: a unit lease of its group with ha.mode = "shared",
 * else fw_lease_new's. NULL (err set) on failure. */
fw_lease_t *fw_stream_lease_new (fw_stream_shared_t *s, fw_error_t *err);

/* ha.mode = "shared": the stream's start in its group (ha/group_start.h),
 * read or recorded on client (the stream's, borrowed) the first time, then
 * kept for the run: where a unit without a checkpoint opens. *at = 0 without
 * "shared". False (why[len] set) when the server cannot be asked. The
 * stream's thread only. */
bool fw_stream_group_start (fw_stream_shared_t *s, mongoc_client_t *client, uint64_t *at, char *why,
                            size_t len);

/* ha.mode = "shared": this unit is over the instance's share (sticky until
 * fw_stream_yield_unit gave it up). False otherwise. */
bool fw_stream_over_share (fw_stream_shared_t *s);

/* Gives the unit's lease up when it is over the share (its checkpoint
 * saved by the caller); true when it did. */
bool fw_stream_yield_unit (fw_stream_shared_t *s);

/* Destroys the lease (and leaves the group). */
void fw_stream_lease_destroy (fw_stream_shared_t *s);

/* Defines the unit's gauges in registry (ha.mode = "shared" only) for the
 * stream's metrics block (NULL: none). */
void fw_stream_shared_set_metrics (fw_stream_shared_t *s, fw_metrics_t *registry,
                                   fw_stream_metrics_t *metrics);

/* ha.mode = "shared": sets the gauges, at most every 500 ms. Any of the
 * stream's threads. */
void fw_stream_shared_observe (fw_stream_shared_t *s);

/* ha, while the stream's thread waits to lead (fw_stream_wait_lead): the
 * gauges, and the unit's state as this member sees it: standby (naming the
 * holder) or orphaned with how long (issue 38), at most every 250 ms. The
 * stream's thread only. */
void fw_stream_standby_observe (fw_stream_shared_t *s);

#endif
