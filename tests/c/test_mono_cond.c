/* Condition variables timed on the monotonic clock (mono_cond.h): a wait
 * lasts until its deadline on fw_mono_ms's clock (a condition variable
 * left on the wall clock would take that deadline, a time since boot, as
 * long past and return at once), a deadline already past returns at once,
 * and a signal ends a wait early. Every wait is bounded. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"

#define WAIT_MS 30
#define DEADLINE_MS 10000

typedef struct {
   pthread_mutex_t mu;
   pthread_cond_t cond;
   bool flag;
} waiter_t;

static void
waiter_init (waiter_t *w)
{
   pthread_mutex_init (&w->mu, NULL);
   assert_int_equal (fw_mono_cond_init (&w->cond), 0);
   w->flag = false;
}

static void
waiter_cleanup (waiter_t *w)
{
   pthread_cond_destroy (&w->cond);
   pthread_mutex_destroy (&w->mu);
}

static void
mono_cond_wait_ms_lasts_until_its_deadline (void **state)
{
   waiter_t w;
   int64_t start;
   int rc = 0;
   (void) state;

   waiter_init (&w);
   pthread_mutex_lock (&w.mu);
   start = fw_mono_ms ();
   while (rc != ETIMEDOUT) { /* a spurious wake-up waits again */
      rc = fw_mono_cond_wait_ms (&w.cond, &w.mu, WAIT_MS - (fw_mono_ms () - start));
   }
   assert_true (fw_mono_ms () - start >= WAIT_MS);
   pthread_mutex_unlock (&w.mu);
   waiter_cleanup (&w);
}

static void
mono_cond_waits_until_a_deadline_on_the_monotonic_clock (void **state)
{
   waiter_t w;
   int64_t until_ms = fw_mono_ms () + WAIT_MS, until_ns = fw_mono_ns () + WAIT_MS * 1000000;
   (void) state;

   waiter_init (&w);
   pthread_mutex_lock (&w.mu);
   while (fw_mono_cond_wait_until_ms (&w.cond, &w.mu, until_ms) != ETIMEDOUT) {
   }
   assert_true (fw_mono_ms () >= until_ms);
   while (fw_mono_cond_wait_until_ns (&w.cond, &w.mu, until_ns) != ETIMEDOUT) {
   }
   assert_true (fw_mono_ns () >= until_ns);
   pthread_mutex_unlock (&w.mu);
   waiter_cleanup (&w);
}

static void
mono_cond_a_deadline_already_past_times_out (void **state)
{
   waiter_t w;
   (void) state;

   waiter_init (&w);
   pthread_mutex_lock (&w.mu);
   assert_int_equal (fw_mono_cond_wait_until_ms (&w.cond, &w.mu, fw_mono_ms () - 1), ETIMEDOUT);
   assert_int_equal (fw_mono_cond_wait_until_ns (&w.cond, &w.mu, fw_mono_ns () - 1), ETIMEDOUT);
   assert_int_equal (fw_mono_cond_wait_ms (&w.cond, &w.mu, 0), ETIMEDOUT);
   pthread_mutex_unlock (&w.mu);
   waiter_cleanup (&w);
}

static void *
signal_main (void *arg)
{
   waiter_t *w = arg;
   pthread_mutex_lock (&w->mu);
   w->flag = true;
   pthread_cond_signal (&w->cond);
   pthread_mutex_unlock (&w->mu);
   return NULL;
}

static void
mono_cond_a_signal_ends_the_wait (void **state)
{
   waiter_t w;
   pthread_t t;
   int64_t until_ms = fw_mono_ms () + DEADLINE_MS;
   (void) state;

   waiter_init (&w);
   pthread_mutex_lock (&w.mu);
   assert_int_equal (pthread_create (&t, NULL, signal_main, &w), 0);
   while (!w.flag && fw_mono_cond_wait_until_ms (&w.cond, &w.mu, until_ms) != ETIMEDOUT) {
   }
   assert_true (w.flag); /* the signal came, not the deadline */
   pthread_mutex_unlock (&w.mu);
   pthread_join (t, NULL);
   waiter_cleanup (&w);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (mono_cond_wait_ms_lasts_until_its_deadline),
      cmocka_unit_test (mono_cond_waits_until_a_deadline_on_the_monotonic_clock),
      cmocka_unit_test (mono_cond_a_deadline_already_past_times_out),
      cmocka_unit_test (mono_cond_a_signal_ends_the_wait),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
