#include <errno.h>
#include <time.h>

#include "flowwarden/clock.h"
#include "flowwarden/shutdown.h"

void
fw_shutdown_init (fw_shutdown_t *s)
{
   pthread_condattr_t attr;
   pthread_mutex_init (&s->mu, NULL);
   pthread_condattr_init (&attr);
   pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
   pthread_cond_init (&s->cond, &attr);
   pthread_condattr_destroy (&attr);
   s->stopping = false;
}

void
fw_shutdown_cleanup (fw_shutdown_t *s)
{
   pthread_cond_destroy (&s->cond);
   pthread_mutex_destroy (&s->mu);
}

void
fw_shutdown_request (fw_shutdown_t *s)
{
   pthread_mutex_lock (&s->mu);
   __atomic_store_n (&s->stopping, true, __ATOMIC_RELEASE);
   pthread_cond_broadcast (&s->cond);
   pthread_mutex_unlock (&s->mu);
}

/* Without the lock: every stream's thread and reader asks once an event
 * (issue 41); the waits below read it under the lock, as it is written. */
bool
fw_shutdown_requested (fw_shutdown_t *s)
{
   return __atomic_load_n (&s->stopping, __ATOMIC_ACQUIRE);
}

bool
fw_shutdown_wait_ms (fw_shutdown_t *s, int64_t ms)
{
   struct timespec until;
   bool v;

   until = fw_clock_after (CLOCK_MONOTONIC, ms);
   pthread_mutex_lock (&s->mu);
   while (!s->stopping) {
      if (pthread_cond_timedwait (&s->cond, &s->mu, &until) == ETIMEDOUT) {
         break;
      }
   }
   v = s->stopping;
   pthread_mutex_unlock (&s->mu);
   return v;
}
