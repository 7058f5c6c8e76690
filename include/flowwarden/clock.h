/*
 * clock.h - the one place flowwarden reads the time.
 *
 * Two clocks: the wall clock (CLOCK_REALTIME) for times that are written
 * down or shown (DLQ entries, checkpoints, log lines, metrics) and the
 * monotonic clock (CLOCK_MONOTONIC) for every wait, timeout and interval,
 * which a wall-clock step must not stretch or cut short. Both functions are
 * thread-safe and cannot fail.
 */
#ifndef FLOWWARDEN_CLOCK_H
#define FLOWWARDEN_CLOCK_H

#include <stdint.h>

/* The wall clock in milliseconds since the Unix epoch. */
int64_t fw_now_ms (void);

/* The monotonic clock in milliseconds / nanoseconds from an unspecified
 * start: only differences mean anything. */
int64_t fw_mono_ms (void);
int64_t fw_mono_ns (void);

/* Timed waits on a condition variable: mono_cond.h (on the monotonic clock). */

#endif /* FLOWWARDEN_CLOCK_H */
