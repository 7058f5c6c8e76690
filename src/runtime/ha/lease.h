/*
 * lease.h - one leader per stream among the instances running a script
 * (fw.defaults { ha = { mode = "leader" } }, issue 17).
 *
 * The lease is one document per stream in <database>._fw_leases:
 *
 *   { _id: <stream>, owner: "host:pid:uuid" | null, epoch: <int64>,
 *     renewedAt: <date>, expiresAt: <date> }
 *
 * Every decision about time is the server's: an instance takes the lease with
 * one findAndModify upsert on _id whose update pipeline decides (free, its
 * own, or expiresAt <= $$NOW: MongoDB refuses $expr in an upsert's query) and
 * then sets expiresAt = $$NOW + lease and increments epoch, the returned
 * lease saying who holds it; renewals (every lease / 3)
 * are conditional on owner and epoch; a standby reads the lease (with the
 * server's $$NOW) before it tries, so it never hammers the server with
 * updates that must fail. The instances' own clocks never decide who leads,
 * so a skew between them cannot make two leaders.
 *
 * The leader's own deadline is measured on its monotonic clock from the
 * moment it sent the renewal that succeeded: sent + lease - margin. The
 * server's expiresAt is later than that by at least the margin, so a leader
 * that can no longer renew (a partition, a stalled server) stops before any
 * standby can take over.
 *
 * Each fw_lease_t runs a thread with a libmongoc client of its own (appname
 * "flowwarden-lease-<pid>", socket timeouts of lease / 3), so renewals go on
 * while handlers run and a failCommand fail point (appName) can cut one
 * instance's leases off the server and nothing else.
 */
#ifndef FLOWWARDEN_LEASE_H
#define FLOWWARDEN_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include <mongoc/mongoc.h>

#include "flowwarden/collection_names.h"
#include "flowwarden/error.h"

#define FW_LEASE_APPNAME "flowwarden-lease"

typedef struct fw_lease fw_lease_t;

typedef enum {
   FW_LEASE_STANDBY = 0, /* another instance holds it, or not yet taken */
   FW_LEASE_LEADER,      /* held, and the deadline is ahead */
   FW_LEASE_RELEASED     /* given up by fw_lease_release: never taken again */
} fw_lease_role_t;

/* What fw_lease_status reports (for logs, status and metrics). */
typedef struct {
   fw_lease_role_t role;
   int64_t epoch;           /* of the lease this instance holds, else the last one seen */
   char holder[256];        /* the owner seen in the lease document ("" when free) */
   int64_t remaining_ms;    /* leader: time to its own deadline */
   int64_t clock_offset_ms; /* the server's clock minus this host's wall clock, as last seen
                             * (information only: no decision depends on it) */
   int acquisitions;        /* times this instance took the lease */
   /* Issue 38: a standby's view of the lease at its last read. */
   bool live_holder;      /* another instance held it, its expiresAt after the server's
                             * $$NOW (false: free, released, expired, or not read yet) */
   int64_t free_ms;       /* !live_holder and read: how long the lease has been without a
                             * holder (since its expiresAt by the server's clock, else since
                             * this instance first saw it free); -1: not read yet, or held */
   int64_t expires_in_ms; /* live_holder: the holder's expiresAt less the server's $$NOW at
                             * the last read, less the time since (may be < 0) */
} fw_lease_status_t;

/* This process's owner id, "host:pid:uuid" (the same for all its leases).
 * Valid for the life of the process. */
const char *fw_lease_owner_id (void);

/* The lease of stream in database, reached through uri (copied; the lease's
 * client sets its own appname and timeouts). lease_ms >= 1000. owner (copied)
 * names this instance in the lease; NULL: fw_lease_owner_id (tests pass
 * their own to run several instances in one process). Starts its thread,
 * which tries to take the lease at once and then as described above. NULL
 * (error set) when out of memory or the thread cannot start. */
fw_lease_t *fw_lease_new (const mongoc_uri_t *uri, const char *database, const char *stream,
                          int64_t lease_ms, const char *owner, fw_error_t *error);

/* ha.mode = "shared" (issue 31): whether this instance may take one more
 * lease now (its share of the units); called on the lease's thread. */
typedef bool (*fw_lease_gate_fn) (void *ud);

/* As fw_lease_new (owner as there), but the thread takes a free lease only
 * when gate (ud) says so; gate and ud outlive the lease. */
fw_lease_t *fw_lease_new_gated (const mongoc_uri_t *uri, const char *database, const char *stream,
                                int64_t lease_ms, const char *owner, fw_lease_gate_fn gate,
                                void *ud, fw_error_t *error);

/* ha.mode = "shared": gives the lease up now (owner null, expiresAt now, as
 * fw_lease_release) but stays a standby that may take it again when the
 * gate lets it. Waits up to wait_ms; true when given up (or not held). The
 * caller saved its final checkpoint first. */
bool fw_lease_yield (fw_lease_t *lease, int64_t wait_ms);

/* True while this instance holds the lease and its deadline is ahead; *epoch
 * (may be NULL) is then the epoch of the holding. Cheap: a lock and a clock
 * read; any thread. */
bool fw_lease_is_leader (fw_lease_t *lease, int64_t *epoch);

/* Waits up to ms for fw_lease_is_leader to become true (returns it). */
bool fw_lease_wait_leader (fw_lease_t *lease, int64_t ms, int64_t *epoch);

/* Milliseconds left before the leader must stop (0 when not leading). */
int64_t fw_lease_remaining_ms (fw_lease_t *lease);

/* Gives the lease up (owner null, expiresAt now, epoch kept) if this
 * instance holds it, so a standby takes over at once, and never takes it
 * again. Waits up to wait_ms for the server's answer; true when released (or
 * not held). */
bool fw_lease_release (fw_lease_t *lease, int64_t wait_ms);

/* A copy of the lease's state. */
void fw_lease_status (fw_lease_t *lease, fw_lease_status_t *out);

/* "leader", "standby" or "released". */
const char *fw_lease_role_name (fw_lease_role_t role);

/* Stops and joins the thread (without releasing: see fw_lease_release),
 * destroys the client. NULL is a no-op. */
void fw_lease_destroy (fw_lease_t *lease);

/* The leader's safety margin for a lease of lease_ms: max(lease / 10, 200 ms). */
int64_t fw_lease_margin_ms (int64_t lease_ms);

#endif
