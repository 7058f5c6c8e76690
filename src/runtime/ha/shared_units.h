/*
 * shared_units.h - ha.mode = "shared" (issue 31): the instances running a
 * script share its units (streams, and each partitioned stream's units
 * <stream>#k/N) between them.
 *
 * Each instance announces itself in <database>._fw_members:
 *
 *   { _id: "host:pid:uuid", renewedAt: <date>, expiresAt: <date> }
 *
 * renewed every lease / 3 on the server's clock ($$NOW + lease), and counts
 * the members whose expiresAt is after $$NOW. Each unit keeps its own lease
 * (lease.h, with its fencing epoch) and checkpoint; a unit's lease is taken
 * only while this instance holds fewer than ceil(units / live members)
 * units (the gate), and a unit over that share is given up at an event
 * boundary, its final checkpoint saved first (fw_shared_should_yield, then
 * fw_lease_yield). One group per database, shared by the units in it.
 */
#ifndef FLOWWARDEN_SHARED_UNITS_H
#define FLOWWARDEN_SHARED_UNITS_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/collection_names.h"
#include "flowwarden/error.h"
#include "runtime/ha/lease.h"

typedef struct fw_shared_group fw_shared_group_t;

/* The process's group for database (created on first use, its members
 * thread started; reached through uri, copied). Each call takes a reference,
 * given back by fw_shared_group_leave. NULL (error set) on no memory. */
fw_shared_group_t *fw_shared_group_join (const mongoc_uri_t *uri, const char *database,
                                         int64_t lease_ms, fw_error_t *error);

/* A unit's lease, created gated by the group (fw_lease_new_gated) and
 * counted among its units until fw_shared_group_remove. start_id (copied;
 * NULL: none): the unit's stream's start record (group_start.h), kept alive
 * by the members thread while the unit is counted, once
 * fw_shared_group_started said which start it took. */
fw_lease_t *fw_shared_group_lease (fw_shared_group_t *g, const mongoc_uri_t *uri, const char *unit,
                                   const char *start_id, fw_error_t *error);

/* The unit of lease took the start at (fw_group_start_take) from its start
 * record: the members thread keeps that record alive while it holds at. */
void fw_shared_group_started (fw_shared_group_t *g, fw_lease_t *lease, uint64_t at);

/* Before fw_lease_destroy of a lease the group made. */
void fw_shared_group_remove (fw_shared_group_t *g, fw_lease_t *lease);

/* True when lease (held) is over this instance's share and should be given
 * up: sticky until fw_shared_yielded. Any thread. */
bool fw_shared_should_yield (fw_shared_group_t *g, fw_lease_t *lease);

/* After the unit saved its final checkpoint: gives the lease up (staying a
 * standby) and logs it. */
void fw_shared_yield (fw_shared_group_t *g, fw_lease_t *lease, const char *unit);

/* What status and metrics show. */
typedef struct {
   int members; /* live members seen at the last count (0: not counted yet) */
   int units;   /* units of this database in this instance's script */
   int held;    /* units this instance leads */
   int share;   /* ceil(units / members) */
} fw_shared_figures_t;

void fw_shared_group_figures (fw_shared_group_t *g, fw_shared_figures_t *out);

/* Whether member id (a holder named by a lease) was among the live members
 * at this instance's last count: 1 yes, 0 no, -1 not counted yet;
 * *counted_ms: when that count was sent (CLOCK_MONOTONIC). A holder absent
 * from a count sent after one of its lease renewals has lost its member
 * record (expired or removed): its units are orphaned (issue 38). */
int fw_shared_group_member_live (fw_shared_group_t *g, const char *id, int64_t *counted_ms);

/* Drops the reference; the last one stops the thread and removes this
 * instance's member document. NULL is a no-op. */
void fw_shared_group_leave (fw_shared_group_t *g);

#endif
