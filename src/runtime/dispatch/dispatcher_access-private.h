/*
 * dispatcher_access-private.h - a dispatcher's state as the files beside
 * its event path see it: the DLQ's replays, deferred retries and reprocess
 * rounds (replay/), its DLQ opener (dispatcher_dlq.c), and flowwarden.testing,
 * which plugs in its virtual clock, recorder, in-memory DLQ and random seed.
 * Narrow accessors (dispatcher.c) instead of the whole fw_dispatcher_t
 * (dispatcher-private.h, the event path's).
 */
#ifndef FLOWWARDEN_DISPATCHER_ACCESS_PRIVATE_H
#define FLOWWARDEN_DISPATCHER_ACCESS_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "lua_api/event_ctx.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dlq/dlq_store.h"

/* flowwarden test's recorder: after every failed attempt, the decided error
 * and its action ("retry", "dlq", "skip", "drop"). */
typedef struct fw_dispatch_hooks {
   void (*attempt_failed) (void *ud, int attempt, const char *type, const char *message,
                           const char *traceback, const char *action);
   void *ud;
} fw_dispatch_hooks_t;

/* The clock a dispatcher reads and waits on: the wall clock for the times
 * it writes down (DLQ entries, metrics) and every wait it makes (a retry's
 * backoff, a DLQ that cannot be written yet). The real one by default
 * (waits end early at a shutdown); flowwarden test plugs its virtual clock
 * in (testing/test_app.c). */
typedef struct {
   int64_t (*now_ms) (void *ud);
   bool (*wait_ms) (void *ud, int64_t ms); /* true: a stop came first */
   void *ud;
   bool is_virtual; /* now_ms is not the wall clock: never derived from the monotonic one */
} fw_stream_clock_t;

/* flowwarden.testing's plugs, before d's first event: its clock (copied),
 * its recorder (borrowed, NULL: none), its DLQ store (d uses it as the one
 * fw_dispatcher_open_dlq would open; fw_dispatcher_release would free it)
 * and the seed of the retries' jitter (jitter false: the stream's retries
 * have none). */
void fw_dispatcher_set_clock (fw_dispatcher_t *d, const fw_stream_clock_t *clock);
void fw_dispatcher_set_hooks (fw_dispatcher_t *d, const fw_dispatch_hooks_t *hooks);
void fw_dispatcher_set_dlq_store (fw_dispatcher_t *d, fw_dlq_store_t *store);
void fw_dispatcher_set_seed (fw_dispatcher_t *d, uint64_t seed, bool jitter);

/* d's DLQ store (d keeps it), NULL until fw_dispatcher_open_dlq opened it. */
fw_dlq_store_t *fw_dispatcher_dlq_store (const fw_dispatcher_t *d);

/* d's clock: now (ms since the epoch, or the virtual clock's), a wait of ms
 * (true: a stop came first), and a draw of the retries' jitter in [0, 1). */
int64_t fw_dispatcher_now_ms (const fw_dispatcher_t *d);
bool fw_dispatcher_wait_ms (fw_dispatcher_t *d, int64_t ms);
double fw_dispatcher_random (fw_dispatcher_t *d);

/* The running thread's client (fw_dispatcher_bind), and fw.mongo's and a
 * named DLQ connection's clients (d keeps both). */
mongoc_client_t *fw_dispatcher_client (const fw_dispatcher_t *d);
fw_connection_clients_t *fw_dispatcher_clients (const fw_dispatcher_t *d);

/* The stream's metrics block (borrowed), or NULL. */
fw_stream_metrics_t *fw_dispatcher_metrics (const fw_dispatcher_t *d);

/* The registry ref of the stream's spec table in fw_dispatcher_host's state. */
int fw_dispatcher_spec_ref (const fw_dispatcher_t *d);

/* Whether the stream declares a handler for events of operation op. */
bool fw_dispatcher_handles (const fw_dispatcher_t *d, fw_op_t op);

/* The ctx's view of the event in hand (d keeps it): its attempt, the dead
 * letter a replay shows. */
fw_dispatch_t *fw_dispatcher_view (fw_dispatcher_t *d);

/* Puts back counts taken with fw_dispatcher_stats (a reprocess round's
 * replays are not live events). */
void fw_dispatcher_set_stats (fw_dispatcher_t *d, const fw_stream_stats_t *stats);

/* Counts a retry to come that a deferred retry scheduled, as a blocking
 * retry counts it: in the stream's counts and its metrics. */
void fw_dispatcher_count_retry (fw_dispatcher_t *d);

/* Whether d knows the stream's open DLQ sequences (fw_dispatcher_load_sequences). */
bool fw_dispatcher_sequences_loaded (const fw_dispatcher_t *d);

/* When the stream next looks for due deferred retries (d's clock, ms);
 * 0: at its next look. */
int64_t fw_dispatcher_deferred_check_at (const fw_dispatcher_t *d);
void fw_dispatcher_set_deferred_check_at (fw_dispatcher_t *d, int64_t at_ms);

#endif
