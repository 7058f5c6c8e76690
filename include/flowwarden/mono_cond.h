/*
 * mono_cond.h - condition variables whose timed waits run on the monotonic
 * clock (CLOCK_MONOTONIC, the clock of fw_mono_ms and fw_mono_ns), so a step
 * of the wall clock neither stretches nor cuts short a wait, a backoff or a
 * lease's deadline. One place sets the clock up and turns a deadline into the
 * absolute time pthread_cond_timedwait takes.
 *
 * The caller owns the condition variable (and its mutex): it is initialised
 * with fw_mono_cond_init, destroyed with pthread_cond_destroy, signalled with
 * pthread_cond_signal or pthread_cond_broadcast, and waited on without a
 * deadline with pthread_cond_wait as any other. A condition variable not
 * made by fw_mono_cond_init must not be given to the waits below (its waits
 * run on the wall clock).
 */
#ifndef FLOWWARDEN_MONO_COND_H
#define FLOWWARDEN_MONO_COND_H

#include <pthread.h>
#include <stdint.h>

/* Initialises cond (caller-owned storage) for waits on the monotonic clock.
 * Returns pthread_cond_init's code: 0 on success. */
int fw_mono_cond_init (pthread_cond_t *cond);

/* A mutex (default attributes) and a condition variable on the monotonic
 * clock that go together (caller-owned storage): 0, or the pthread error code
 * with neither set up. fw_mono_lock_destroy destroys both. */
int fw_mono_lock_init (pthread_mutex_t *mu, pthread_cond_t *cond);
void fw_mono_lock_destroy (pthread_mutex_t *mu, pthread_cond_t *cond);

/* Waits on cond with mu held (as pthread_cond_timedwait: mu is released
 * while waiting and held again on return) until it is signalled, spuriously
 * woken, or the monotonic clock reaches the deadline: deadline_ms as
 * fw_mono_ms reads it, deadline_ns as fw_mono_ns does. Returns
 * pthread_cond_timedwait's code (ETIMEDOUT once the deadline passed). Callers
 * check their condition again, as after any wait. */
int fw_mono_cond_wait_until_ms (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms);
int fw_mono_cond_wait_until_ns (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns);

/* The same for ms (>= 0) from now. */
int fw_mono_cond_wait_ms (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t ms);

#endif /* FLOWWARDEN_MONO_COND_H */
