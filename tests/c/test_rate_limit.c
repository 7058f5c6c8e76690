/* Unit tests for the rate limit's token bucket (rate_limit.h), on a fake
 * clock: every call is given the time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/rate_limit.h"

#define SEC 1000000000LL

static void
rate_limit_parses_per_second_and_per_minute (void **state)
{
   fw_rate_limit_config_t cfg;
   fw_error_t err;
   (void) state;

   assert_true (fw_rate_limit_parse ("200/s", &cfg, &err));
   assert_int_equal (cfg.count, 200);
   assert_int_equal (cfg.per_ms, 1000);
   assert_int_equal (fw_rate_limit_burst (&cfg), 200);
   assert_true (fw_rate_limit_parse ("12000/m", &cfg, &err));
   assert_int_equal (cfg.count, 12000);
   assert_int_equal (cfg.per_ms, 60000);
   assert_int_equal (fw_rate_limit_burst (&cfg), 200);
   assert_true (fw_rate_limit_parse ("30/m", &cfg, &err));
   assert_int_equal (fw_rate_limit_burst (&cfg), 1); /* at least one */
}

static void
rate_limit_refuses_malformed_rates (void **state)
{
   const char *bad[] = {"", "200", "/s", "0/s", "-1/s", "1.5/s", "200/h", "200/ss", " 200/s",
                        "200/S", "99999999999/s"};
   (void) state;
   for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
      fw_rate_limit_config_t cfg;
      fw_error_t err;
      assert_false (fw_rate_limit_parse (bad[i], &cfg, &err));
      assert_non_null (strstr (err.message, "expected \"N/s\" or \"N/m\""));
   }
}

/* A full second of burst, then the rate: 300 attempts at 100/s take 2 s. */
static void
rate_limit_bursts_one_second_then_keeps_the_rate (void **state)
{
   fw_rate_limit_config_t cfg = {100, 1000};
   fw_rate_limit_t *rl = fw_rate_limit_new (&cfg, 0);
   int64_t now = 0;
   (void) state;

   for (int i = 0; i < 100; i++) {
      assert_int_equal (fw_rate_limit_take (rl, now), 0);
   }
   for (int taken = 100; taken < 300;) {
      int64_t wait = fw_rate_limit_take (rl, now);
      if (wait == 0) {
         taken++;
      } else {
         assert_true (wait <= SEC / 100 + 1);
         now += wait;
      }
   }
   assert_true (now >= 2 * SEC - 2 * SEC / 100 && now <= 2 * SEC + 300);
   fw_rate_limit_destroy (rl);
}

/* Whatever the pattern of calls, no window of t seconds holds more than
 * burst + rate * t attempts. */
static void
rate_limit_never_exceeds_burst_plus_rate (void **state)
{
   fw_rate_limit_config_t cfg = {50, 1000};
   fw_rate_limit_t *rl = fw_rate_limit_new (&cfg, 0);
   int64_t times[2000];
   int n = 0;
   int64_t now = 0;
   uint32_t x = 12345;
   (void) state;

   while (n < 2000) {
      x = x * 1103515245u + 12345u;
      now += (int64_t) (x >> 8) % (SEC / 20); /* 0..50 ms apart */
      if (fw_rate_limit_take (rl, now) == 0) {
         times[n++] = now;
      }
   }
   for (int i = 0; i < n; i++) {
      for (int j = i; j < n; j++) {
         double t = (double) (times[j] - times[i]) / SEC;
         assert_true ((double) (j - i + 1) <= 50.0 + 50.0 * t + 1e-6);
      }
   }
   fw_rate_limit_destroy (rl);
}

static void
rate_limit_without_a_limit_never_waits (void **state)
{
   fw_rate_limit_config_t off = {0, 0}, on = {1, 1000};
   fw_rate_limit_t *rl = fw_rate_limit_new (&off, 0);
   (void) state;

   for (int i = 0; i < 10000; i++) {
      assert_int_equal (fw_rate_limit_take (rl, 0), 0);
   }
   /* a reload sets a limit: a full bucket of the new one */
   fw_rate_limit_set (rl, &on, 0);
   assert_int_equal (fw_rate_limit_take (rl, 0), 0);
   assert_true (fw_rate_limit_take (rl, 0) > 0);
   assert_int_equal (fw_rate_limit_config (rl).count, 1);
   fw_rate_limit_destroy (rl);
   fw_rate_limit_destroy (NULL);
}

/* A clock that is behind the one the bucket was made with (flowwarden
 * test's virtual clock) still refills: the bucket starts over from it. */
static void
rate_limit_follows_a_clock_behind_its_start (void **state)
{
   fw_rate_limit_config_t cfg = {1, 1000};
   fw_rate_limit_t *rl = fw_rate_limit_new (&cfg, 100 * SEC);
   int64_t now = 5 * SEC, wait;
   (void) state;

   assert_int_equal (fw_rate_limit_take (rl, now), 0);
   wait = fw_rate_limit_take (rl, now);
   assert_true (wait > 0 && wait <= SEC + 1);
   assert_int_equal (fw_rate_limit_take (rl, now + wait), 0);
   fw_rate_limit_destroy (rl);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (rate_limit_parses_per_second_and_per_minute),
      cmocka_unit_test (rate_limit_refuses_malformed_rates),
      cmocka_unit_test (rate_limit_bursts_one_second_then_keeps_the_rate),
      cmocka_unit_test (rate_limit_never_exceeds_burst_plus_rate),
      cmocka_unit_test (rate_limit_without_a_limit_never_waits),
      cmocka_unit_test (rate_limit_follows_a_clock_behind_its_start),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
