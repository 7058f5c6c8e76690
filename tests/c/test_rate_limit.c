/* Unit tests for the rate limit's token bucket (rate_limit.h), on a fake
 * clock: every call is given the time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/dispatch/rate_limit.h"

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
   const char *bad[] = {"",      "200",    "/s",     "0/s",   "-1/s",         "1.5/s",
                        "200/h", "200/ss", " 200/s", "200/S", "99999999999/s"};
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
   fw_rate_limit_config_t cfg = {100, 1000, false, 0};
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
   fw_rate_limit_config_t cfg = {50, 1000, false, 0};
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

/* The most attempts in any half-open window [t, t + window) of times[0..n). */
static int
most_in_window (const int64_t *times, int n, int64_t window)
{
   int most = 0;
   for (int i = 0, j = 0; i < n; i++) {
      while (j < n && times[j] < times[i] + window) {
         j++;
      }
      if (j - i > most) {
         most = j - i;
      }
   }
   return most;
}

/* Takes n tokens from a full bucket for cfg, as soon as each is there
 * (greedy) or after random gaps of 0..gap_ns; their times in times. */
static void
take_n (const fw_rate_limit_config_t *cfg, int64_t *times, int n, int64_t gap_ns)
{
   fw_rate_limit_t *rl = fw_rate_limit_new (cfg, 0);
   int64_t now = 0;
   uint32_t x = 777;

   assert_non_null (rl);
   for (int got = 0; got < n;) {
      int64_t wait = fw_rate_limit_take (rl, now);
      if (wait == 0) {
         times[got++] = now;
         if (gap_ns > 0) {
            x = x * 1103515245u + 12345u;
            now += (int64_t) (x >> 8) % gap_ns;
         }
      } else {
         now += wait;
      }
   }
   fw_rate_limit_destroy (rl);
}

/* Issue 38: "50/s" let 99 attempts through in one second right after a
 * breaker closed (a full bucket, then the rate). That stays the default;
 * burst = 0 never lets more than 50 through in any second, burst = 10 no
 * more than 60, and both still keep the rate over time. */
static void
rate_limit_burst_bounds_every_one_second_window (void **state)
{
   fw_rate_limit_config_t def = {50, 1000, false, 0}, none = {50, 1000, true, 0},
                          ten = {50, 1000, true, 10};
   static int64_t times[500];
   (void) state;

   take_n (&def, times, 500, 0);
   assert_int_equal (most_in_window (times, 500, SEC), 99);
   assert_int_equal (fw_rate_limit_burst (&none), 1);
   take_n (&none, times, 500, 0);
   assert_int_equal (most_in_window (times, 500, SEC), 50);
   /* 500 attempts at 50/s from one token: 499 refills of 20 ms */
   assert_true (times[499] >= 499 * (SEC / 50) && times[499] <= 499 * (SEC / 50) + 500 * 2);
   take_n (&none, times, 500, SEC / 25);
   assert_true (most_in_window (times, 500, SEC) <= 50);
   take_n (&ten, times, 500, 0);
   assert_int_equal (most_in_window (times, 500, SEC), 60);
   take_n (&ten, times, 500, SEC / 25);
   assert_true (most_in_window (times, 500, SEC) <= 60);
}

/* "/m" rates: the bound holds per minute. */
static void
rate_limit_burst_bounds_a_per_minute_rate (void **state)
{
   fw_rate_limit_config_t none = {120, 60000, true, 0}, def = {120, 60000, false, 0};
   static int64_t times[400];
   (void) state;

   take_n (&none, times, 400, 0);
   assert_int_equal (most_in_window (times, 400, 60 * SEC), 120);
   take_n (&def, times, 400, 0);
   assert_int_equal (most_in_window (times, 400, 60 * SEC), 120 + 2 - 1);
}

/* A reload that changes only the burst applies it at once. */
static void
rate_limit_reload_of_the_burst_alone_applies (void **state)
{
   fw_rate_limit_config_t def = {50, 1000, false, 0}, none = {50, 1000, true, 0};
   fw_rate_limit_t *rl = fw_rate_limit_new (&def, 0);
   int taken = 0;
   (void) state;

   fw_rate_limit_set (rl, &none, 0);
   while (fw_rate_limit_take (rl, 0) == 0) {
      taken++;
   }
   assert_int_equal (taken, 1);
   assert_true (fw_rate_limit_config (rl).has_burst);
   fw_rate_limit_destroy (rl);
}

static void
rate_limit_without_a_limit_never_waits (void **state)
{
   fw_rate_limit_config_t off = {0, 0, false, 0}, on = {1, 1000, false, 0};
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
   fw_rate_limit_config_t cfg = {1, 1000, false, 0};
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
      cmocka_unit_test (rate_limit_burst_bounds_every_one_second_window),
      cmocka_unit_test (rate_limit_burst_bounds_a_per_minute_rate),
      cmocka_unit_test (rate_limit_reload_of_the_burst_alone_applies),
      cmocka_unit_test (rate_limit_without_a_limit_never_waits),
      cmocka_unit_test (rate_limit_follows_a_clock_behind_its_start),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
