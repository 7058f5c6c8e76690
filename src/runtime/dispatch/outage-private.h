/*
 * outage-private.h - a stream's circuit breaker and rate limit (outage.c, issue
 * 29), for the files that take an event or a batch through the dispatcher.
 */
#ifndef FLOWWARDEN_OUTAGE_PRIVATE_H
#define FLOWWARDEN_OUTAGE_PRIVATE_H

#include <stdbool.h>

#include "runtime/dispatch/circuit.h"
#include "runtime/dispatch/dispatcher.h"
#include "runtime/dispatch/rate_limit.h"

/* A stream's guards against a dependency outage (outage.c, issue 29): its
 * circuit breaker and rate limit, one of each per stream, its lanes'
 * dispatchers sharing the stream's own dispatcher's. */
typedef struct {
   fw_circuit_t *circuit;
   fw_rate_limit_t *rate;
   bool shared;                     /* another dispatcher's (fw_dispatcher_share_outage) */
   bool holder;                     /* this dispatcher's event holds the breaker open */
   const fw_circuit_store_t *store; /* where it is kept across restarts, or NULL */
} fw_outage_t;

/* d's guards (d keeps them; dispatcher.c). */
fw_outage_t *fw_dispatcher_outage (fw_dispatcher_t *d);

/* d's own breaker and bucket (fw_dispatcher_new); false when out of memory. */
bool fw_outage_init (fw_dispatcher_t *d);

/* Tells d's metrics block (if any) whether the stream has a breaker and its
 * rate limit (at set_metrics and after a reload). */
void fw_outage_show_config (fw_dispatcher_t *d);

/* Frees them unless shared (fw_dispatcher_destroy). */
void fw_outage_cleanup (fw_dispatcher_t *d);

/* Before every handler attempt: waits while another lane's event holds the
 * stream's breaker open, then for a rate-limit token. A breaker restored
 * after a restart with no holder yet (issue 37) is held by this event,
 * which waits for its probe time (ev: the event, attempt: this attempt's
 * number; a batch's call, ev NULL, cannot hold it and closes it). False: a
 * stop came first. */
bool fw_outage_admit (fw_dispatcher_t *d, const fw_event_t *ev, int attempt);

typedef enum {
   FW_HOLD_NONE,   /* the event ends under the normal policy */
   FW_HOLD_PROBE,  /* the event is attempted once more (a probe) */
   FW_HOLD_STOPPED /* a stop came first: the event must come back */
} fw_hold_t;

/* An attempt failed and the decision ends the event (giving_up: it would be
 * dead-lettered or dropped by the standard policy; false for fw.SKIP, an
 * explicit DLQ request or a replay). With circuit.on matching type, opens
 * the breaker (or, after a probe, opens it again) and waits for the next
 * probe or give_up_after. id: the event's log id. */
fw_hold_t fw_outage_hold (fw_dispatcher_t *d, const char *id, int attempt, const char *type,
                          const char *message, bool giving_up);

/* The event was handled: a probe's success closes the breaker. */
void fw_outage_handled (fw_dispatcher_t *d);

/* The event is finished with (or must come back): a breaker it still holds
 * (its new script has no handler for it, the lease was lost, the stream
 * fails) is closed, so the breaker never outlives its held event. */
void fw_outage_event_end (fw_dispatcher_t *d);

#endif
