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
#include <time.h>

/* The wall clock in milliseconds since the Unix epoch. */
int64_t fw_now_ms (void);

/* The monotonic clock in milliseconds / nanoseconds from an unspecified
 * start: only differences mean anything. */
int64_t fw_mono_ms (void);
int64_t fw_mono_ns (void);

/* The time after_ms (>= 0) from now on clock, as the absolute time
 * pthread_cond_timedwait takes (its condition variable must use the same
 * clock: CLOCK_REALTIME by default). For waits on the monotonic clock use
 * mono_cond.h, which sets the clock up too. */
struct timespec fw_clock_after (clockid_t clock, int64_t after_ms);

#endif /* FLOWWARDEN_CLOCK_H */
