/*
 * mono_cond.c - condition variables timed on the monotonic clock
 * (mono_cond.h).
 */
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"

int
fw_mono_cond_init (pthread_cond_t *cond)
{
   pthread_condattr_t attr;
   int rc = pthread_condattr_init (&attr);

   if (rc != 0) {
      return rc;
   }
   rc = pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
   if (rc == 0) {
      rc = pthread_cond_init (cond, &attr);
   }
   pthread_condattr_destroy (&attr);
   return rc;
}

int
fw_mono_lock_init (pthread_mutex_t *mu, pthread_cond_t *cond)
{
   int rc = pthread_mutex_init (mu, NULL);

   if (rc == 0 && (rc = fw_mono_cond_init (cond)) != 0) {
      pthread_mutex_destroy (mu);
   }
   return rc;
}

void
fw_mono_lock_destroy (pthread_mutex_t *mu, pthread_cond_t *cond)
{
   pthread_cond_destroy (cond);
   pthread_mutex_destroy (mu);
}

int
fw_mono_cond_wait_until_ns (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ns)
{
   struct timespec until = {.tv_sec = (time_t) (deadline_ns / 1000000000),
                            .tv_nsec = (long) (deadline_ns % 1000000000)};
   return pthread_cond_timedwait (cond, mu, &until);
}

int
fw_mono_cond_wait_until_ms (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t deadline_ms)
{
   struct timespec until = {.tv_sec = (time_t) (deadline_ms / 1000),
                            .tv_nsec = (long) (deadline_ms % 1000) * 1000000};
   return pthread_cond_timedwait (cond, mu, &until);
}

/* A wait longer than this (about 31 years) is as good as forever, and
 * adding it in nanoseconds cannot overflow. */
#define MAX_WAIT_MS ((int64_t) 1000000000000)

int
fw_mono_cond_wait_ms (pthread_cond_t *cond, pthread_mutex_t *mu, int64_t ms)
{
   if (ms > MAX_WAIT_MS) {
      ms = MAX_WAIT_MS;
   }
   return fw_mono_cond_wait_until_ns (cond, mu, fw_mono_ns () + ms * 1000000);
}
