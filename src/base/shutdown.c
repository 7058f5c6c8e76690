#include <errno.h>

#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"
#include "flowwarden/shutdown.h"

int
fw_shutdown_init (fw_shutdown_t *s)
{
   s->stopping = false;
   return fw_mono_lock_init (&s->mu, &s->cond);
}

void
fw_shutdown_cleanup (fw_shutdown_t *s)
{
   fw_mono_lock_destroy (&s->mu, &s->cond);
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
   int64_t deadline_ms = fw_mono_ms () + ms;
   bool v;

   pthread_mutex_lock (&s->mu);
   while (!s->stopping) {
      if (fw_mono_cond_wait_until_ms (&s->cond, &s->mu, deadline_ms) == ETIMEDOUT) {
         break;
      }
   }
   v = s->stopping;
   pthread_mutex_unlock (&s->mu);
   return v;
}
