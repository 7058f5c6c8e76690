/* Unit tests for the backoff formula of seed 001. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "runtime/dispatch/backoff.h"

static const fw_backoff_t seed_defaults = {3, 500, 30000, 2.0, false};

/* Seed 001's table: 500ms, 1s, 2s, 4s, 8s, 16s, then 30s capped. */
static void
retry_policy_default_table_without_jitter (void **state)
{
   const int64_t expected[] = {500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000};
   (void) state;
   for (int attempt = 1; attempt <= 9; attempt++) {
      assert_int_equal (fw_backoff_delay_ms (&seed_defaults, attempt, 0.5), expected[attempt - 1]);
   }
}

static void
retry_policy_huge_attempt_stays_capped (void **state)
{
   (void) state;
   assert_int_equal (fw_backoff_delay_ms (&seed_defaults, 5000, 0.0), 30000);
}

static void
retry_policy_multiplier_one_is_constant (void **state)
{
   fw_backoff_t b = {5, 250, 1000, 1.0, false};
   (void) state;
   for (int attempt = 1; attempt < 6; attempt++) {
      assert_int_equal (fw_backoff_delay_ms (&b, attempt, 0.9), 250);
   }
}

/* Jitter multiplies by uniform(0.8, 1.2): every draw stays inside, and
 * 10,000 draws cover the range rather than clumping. */
static void
retry_policy_jitter_bounds_and_spread (void **state)
{
   fw_backoff_t b = seed_defaults;
   uint64_t rng = 12345;
   int64_t lo = INT64_MAX, hi = 0;
   int buckets[4] = {0};
   double sum = 0;
   (void) state;

   b.jitter = true;
   for (int i = 0; i < 10000; i++) {
      int64_t d = fw_backoff_delay_ms (&b, 3, fw_backoff_random (&rng)); /* base 2000 */
      assert_true (d >= 1600 && d <= 2400);
      lo = d < lo ? d : lo;
      hi = d > hi ? d : hi;
      buckets[(d - 1600) * 4 / 801]++;
      sum += (double) d;
   }
   assert_true (lo < 1620 && hi > 2380);
   for (int i = 0; i < 4; i++) {
      assert_true (buckets[i] > 2000 && buckets[i] < 3000);
   }
   assert_true (sum / 10000 > 1980 && sum / 10000 < 2020);
}

static void
retry_policy_random_is_in_unit_interval (void **state)
{
   uint64_t rng = 1;
   (void) state;
   for (int i = 0; i < 100000; i++) {
      double r = fw_backoff_random (&rng);
      assert_true (r >= 0.0 && r < 1.0);
   }
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (retry_policy_default_table_without_jitter),
      cmocka_unit_test (retry_policy_huge_attempt_stays_capped),
      cmocka_unit_test (retry_policy_multiplier_one_is_constant),
      cmocka_unit_test (retry_policy_jitter_bounds_and_spread),
      cmocka_unit_test (retry_policy_random_is_in_unit_interval),
   };
   return cmocka_run_group_tests_name ("backoff", tests, NULL, NULL);
}
