/*
 * dispatcher_access-private.h - what the files beside a dispatcher's event
 * path change in it: flowwarden.testing plugs in its virtual clock,
 * recorder, in-memory DLQ and random seed; deferred retries (replay/)
 * keep its next look for due retries; its DLQ opener (dispatcher_dlq.c) sets its store. Narrow
 * setters (dispatcher.c) instead of the whole fw_dispatcher_t
 * (dispatcher-private.h, the event path's); what they read is in
 * dispatcher.h.
 */
#ifndef FLOWWARDEN_DISPATCHER_ACCESS_PRIVATE_H
#define FLOWWARDEN_DISPATCHER_ACCESS_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/dispatch/dispatcher.h"

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
 * fw_dispatcher_open_dlq would open, which sets it too;
 * fw_dispatcher_release would free it) and the seed of the retries' jitter
 * (jitter false: the stream's retries have none). */
void fw_dispatcher_set_clock (fw_dispatcher_t *d, const fw_stream_clock_t *clock);
void fw_dispatcher_set_hooks (fw_dispatcher_t *d, const fw_dispatch_hooks_t *hooks);
void fw_dispatcher_set_dlq_store (fw_dispatcher_t *d, fw_dlq_store_t *store);
void fw_dispatcher_set_seed (fw_dispatcher_t *d, uint64_t seed, bool jitter);

/* When the stream next looks for due deferred retries (d's clock, ms);
 * 0: at its next look. */
int64_t fw_dispatcher_deferred_check_at (const fw_dispatcher_t *d);
void fw_dispatcher_set_deferred_check_at (fw_dispatcher_t *d, int64_t at_ms);

#endif
