/*
 * rate_limit.h - a stream's rate limit on handler attempts (issue 29's
 * `rate_limit = "200/s"`, issue 38's `{ rate = "50/s", burst = N }`): a
 * token bucket of burst + 1 tokens (by default one second's worth),
 * refilled at the configured rate, shared by the stream's lanes. Every
 * attempt takes a token: first attempts, retries and circuit probes alike.
 * Any one period of the rate (a second for "/s", a minute for "/m") sees at
 * most count + burst attempts: burst = 0 never lets more than the rate
 * through, the default allows up to twice the rate (less one) in a second.
 *
 * The bucket reads no clock: every call takes the time (ns, on the
 * caller's monotonic clock), so tests drive it with a fake one. Thread-safe.
 */
#ifndef FLOWWARDEN_RATE_LIMIT_H
#define FLOWWARDEN_RATE_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "flowwarden/error.h"

typedef struct {
   int64_t count;  /* attempts per `per_ms`; 0: no limit */
   int64_t per_ms; /* 1000 ("/s") or 60000 ("/m") */
   bool has_burst; /* false: the default burst (one second's worth, less one) */
   int64_t burst;  /* with has_burst: attempts above the rate in one period, >= 0 */
} fw_rate_limit_config_t;

/* Parses "N/s" or "N/m" (N a whole number >= 1) into *out; false with error
 * filled (the message names the value and what is expected). */
bool fw_rate_limit_parse (const char *text, fw_rate_limit_config_t *out, fw_error_t *error);

/* The bucket's size: burst + 1 when set, else one second's worth of
 * attempts, at least 1. */
int64_t fw_rate_limit_burst (const fw_rate_limit_config_t *cfg);

typedef struct fw_rate_limit fw_rate_limit_t;

/* A full bucket for cfg at now_ns; owned by the caller
 * (fw_rate_limit_destroy); NULL when out of memory. */
fw_rate_limit_t *fw_rate_limit_new (const fw_rate_limit_config_t *cfg, int64_t now_ns);

/* NULL is a no-op. */
void fw_rate_limit_destroy (fw_rate_limit_t *rl);

/* A reload's new setting (the tokens kept, capped at the new burst). */
void fw_rate_limit_set (fw_rate_limit_t *rl, const fw_rate_limit_config_t *cfg, int64_t now_ns);

/* Takes a token at now_ns: 0 when taken (or no limit), else how many ns to
 * wait before a token is there (nothing taken: call again then). */
int64_t fw_rate_limit_take (fw_rate_limit_t *rl, int64_t now_ns);

/* The configured limit (a copy). */
fw_rate_limit_config_t fw_rate_limit_config (fw_rate_limit_t *rl);

#endif /* FLOWWARDEN_RATE_LIMIT_H */
