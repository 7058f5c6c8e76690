/*
 * circuit.h - a stream's circuit breaker (issue 29): when an event's
 * attempts are used up by an error of a type the stream declared as a
 * dependency outage (`circuit.on`), the stream holds the event instead of
 * dead-lettering it, waits, and probes with it.
 *
 *   closed --(attempts exhausted, type in on)--> open
 *   open --(open_for elapsed, or a probe asked)--> half-open (one probe)
 *   half-open --(probe succeeds)--> closed
 *   half-open --(probe fails, type in on)--> open, open_for doubled (<= max)
 *   half-open --(probe fails otherwise)--> closed (the normal policy)
 *   open --(give_up_after elapsed)--> closed (the held event is dead-lettered)
 *
 * The state machine reads no clock: every call takes the time (ms, on the
 * caller's clock), so tests drive it with a fake one. A breaker is the
 * stream's: its lanes share one, so every call is thread-safe.
 */
#ifndef FLOWWARDEN_CIRCUIT_H
#define FLOWWARDEN_CIRCUIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
   bool enabled;
   char **on; /* error types (and the types below them); n_on of them */
   int n_on;
   int64_t open_for_ms;      /* the first pause */
   int64_t max_open_for_ms;  /* the doubling stops here */
   int64_t give_up_after_ms; /* 0: never (give_up_after = "off") */
} fw_circuit_config_t;

/* Whether type is an entry of cfg->on or below one ("Http" matches "Http"
 * and "Http.Connect", never "HttpX"), as retry_on matches. */
bool fw_circuit_config_matches (const fw_circuit_config_t *cfg, const char *type);

/* Frees cfg->on; safe on a zeroed struct. */
void fw_circuit_config_cleanup (fw_circuit_config_t *cfg);

typedef enum {
   FW_CIRCUIT_CLOSED = 0,
   FW_CIRCUIT_OPEN = 1,
   FW_CIRCUIT_HALF_OPEN = 2
} fw_circuit_state_t;

typedef struct fw_circuit fw_circuit_t;

/* A closed breaker, owned by the caller (fw_circuit_destroy); NULL when out
 * of memory. */
fw_circuit_t *fw_circuit_new (void);

/* NULL is a no-op. */
void fw_circuit_destroy (fw_circuit_t *c);

/* Closed -> open at now_ms, for cfg->open_for_ms, on an error of type
 * (copied). True when this call opened it (the caller holds the event);
 * false when it was not closed (another lane holds one). */
bool fw_circuit_open (fw_circuit_t *c, const fw_circuit_config_t *cfg, const char *type,
                      int64_t now_ms);

typedef enum {
   FW_CIRCUIT_WAIT,   /* *wait_ms until something is due */
   FW_CIRCUIT_PROBE,  /* now half-open: run the held event once */
   FW_CIRCUIT_GIVE_UP /* give_up_after passed: dead-letter the held event, then close */
} fw_circuit_step_t;

/* What the holder of an open breaker does at now_ms: wait (*wait_ms, > 0),
 * probe (a probe asked with fw_circuit_probe_now, or open_for elapsed) or
 * give up. A breaker that is not open answers FW_CIRCUIT_PROBE. */
fw_circuit_step_t fw_circuit_next (fw_circuit_t *c, const fw_circuit_config_t *cfg, int64_t now_ms,
                                   int64_t *wait_ms);

/* The probe failed with an error of type in cfg->on: half-open -> open for
 * twice the last pause (at most cfg->max_open_for_ms). */
void fw_circuit_probe_failed (fw_circuit_t *c, const fw_circuit_config_t *cfg, const char *type,
                              int64_t now_ms);

/* -> closed (a probe succeeded, failed otherwise, or the event was given
 * up). Returns the state it was in. */
fw_circuit_state_t fw_circuit_close (fw_circuit_t *c);

/* Asks the holder to probe at once (`flowwarden resume`). Any thread;
 * nothing happens when the breaker is closed. True when it was open. */
bool fw_circuit_probe_now (fw_circuit_t *c);

/* The breaker's current state. */
fw_circuit_state_t fw_circuit_state (fw_circuit_t *c);

/* What status shows of a breaker. Times on the caller's clock (ms). */
typedef struct {
   fw_circuit_state_t state;
   char error_type[128];  /* the error that opened it (last probe's); "" closed */
   int64_t since_ms;      /* when it opened (first, this outage); 0 closed */
   int64_t next_probe_ms; /* when it probes next; 0 unless open */
   int64_t open_for_ms;   /* the current pause */
   int probes;            /* probes run this outage */
   bool probe_asked;      /* fw_circuit_probe_now was called since the last probe */
} fw_circuit_view_t;

void fw_circuit_view (fw_circuit_t *c, fw_circuit_view_t *out);

/* A restart during an outage (issue 37): a closed breaker becomes open as
 * saved (saved->error_type, since_ms, next_probe_ms, open_for_ms, probes;
 * saved->state must be open), with no holder yet: the first event to come
 * (fw_circuit_adopt) holds it and probes at next_probe_ms. give_up_after
 * still counts from since_ms. False when it was not closed or saved is not
 * an open breaker's. */
bool fw_circuit_restore (fw_circuit_t *c, const fw_circuit_view_t *saved);

/* True once for a restored breaker that nobody holds yet: the caller's
 * event now holds it (waits for the probe time, then is the probe). */
bool fw_circuit_adopt (fw_circuit_t *c);

#endif /* FLOWWARDEN_CIRCUIT_H */
