/*
 * backoff.h - exponential backoff, as seed 001 defines it for @RetryPolicy;
 * also used for re-opening change streams.
 *
 *    base   = initial_delay * multiplier ^ (attempt - 1)
 *    capped = min(base, max_delay)
 *    final  = jitter ? capped * uniform(0.8, 1.2) : capped
 */
#ifndef FLOWWARDEN_BACKOFF_H
#define FLOWWARDEN_BACKOFF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
   int max_attempts; /* counts the first attempt; 0 = unlimited */
   int64_t initial_delay_ms;
   int64_t max_delay_ms;
   double multiplier;
   bool jitter;
} fw_backoff_t;

/* Delay to wait after failed attempt `attempt` (1-based) before the next.
 * unit_random is a draw from [0, 1), used only when jitter is on. */
int64_t fw_backoff_delay_ms (const fw_backoff_t *b, int attempt, double unit_random);

/* A thread-safe uniform draw from [0, 1) for jitter. state is per caller
 * (seed it once, e.g. from the clock and thread id). */
double fw_backoff_random (uint64_t *state);

#endif
