/* Unit tests for the circuit breaker's state machine (circuit.h), on a fake
 * clock: every call is given the time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/dispatch/circuit.h"

static char *default_on[] = {"Http.Connect", "Mongo.Network", "Timeout"};

static fw_circuit_config_t
config (int64_t open_for, int64_t max_open_for, int64_t give_up_after)
{
   fw_circuit_config_t cfg = {true, default_on, 3, open_for, max_open_for, give_up_after};
   return cfg;
}

static void
circuit_matches_a_type_and_the_types_below_it (void **state)
{
   char *on[] = {"Http"};
   fw_circuit_config_t cfg = config (1000, 1000, 0);
   (void) state;
   cfg.on = on;
   cfg.n_on = 1;
   assert_true (fw_circuit_config_matches (&cfg, "Http"));
   assert_true (fw_circuit_config_matches (&cfg, "Http.Connect"));
   assert_true (fw_circuit_config_matches (&cfg, "Http.Status.Transient"));
   assert_false (fw_circuit_config_matches (&cfg, "HttpX"));
   assert_false (fw_circuit_config_matches (&cfg, "Validation"));
   assert_false (fw_circuit_config_matches (&cfg, NULL));
   cfg.enabled = false;
   assert_false (fw_circuit_config_matches (&cfg, "Http.Connect"));
}

static void
circuit_waits_open_for_then_probes_once (void **state)
{
   fw_circuit_config_t cfg = config (5000, 300000, 0);
   fw_circuit_t *c = fw_circuit_new ();
   int64_t wait = -1;
   fw_circuit_view_t v;
   (void) state;

   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_CLOSED);
   assert_true (fw_circuit_open (c, &cfg, "Http.Connect", 1000));
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_OPEN);
   /* a second lane cannot open it again: one holder */
   assert_false (fw_circuit_open (c, &cfg, "Http.Connect", 1001));
   assert_int_equal (fw_circuit_next (c, &cfg, 1000, &wait), FW_CIRCUIT_WAIT);
   assert_int_equal (wait, 5000);
   assert_int_equal (fw_circuit_next (c, &cfg, 5999, &wait), FW_CIRCUIT_WAIT);
   assert_int_equal (wait, 1);
   fw_circuit_view (c, &v);
   assert_string_equal (v.error_type, "Http.Connect");
   assert_int_equal (v.since_ms, 1000);
   assert_int_equal (v.next_probe_ms, 6000);
   assert_int_equal (fw_circuit_next (c, &cfg, 6000, &wait), FW_CIRCUIT_PROBE);
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_HALF_OPEN);
   assert_int_equal (fw_circuit_close (c), FW_CIRCUIT_HALF_OPEN);
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_CLOSED);
   fw_circuit_view (c, &v);
   assert_int_equal (v.since_ms, 0);
   assert_string_equal (v.error_type, "");
   fw_circuit_destroy (c);
}

static void
circuit_failed_probe_doubles_the_pause_up_to_max (void **state)
{
   fw_circuit_config_t cfg = config (5000, 15000, 0);
   fw_circuit_t *c = fw_circuit_new ();
   const int64_t expected[] = {10000, 15000, 15000};
   int64_t now = 0, wait;
   (void) state;

   assert_true (fw_circuit_open (c, &cfg, "Http.Connect", now));
   now += 5000;
   for (int i = 0; i < 3; i++) {
      fw_circuit_view_t v;
      assert_int_equal (fw_circuit_next (c, &cfg, now, &wait), FW_CIRCUIT_PROBE);
      fw_circuit_probe_failed (c, &cfg, "Mongo.Network", now);
      fw_circuit_view (c, &v);
      assert_int_equal (v.state, FW_CIRCUIT_OPEN);
      assert_int_equal (v.open_for_ms, expected[i]);
      assert_string_equal (v.error_type, "Mongo.Network");
      assert_int_equal (v.since_ms, 0); /* since the first opening */
      assert_int_equal (fw_circuit_next (c, &cfg, now, &wait), FW_CIRCUIT_WAIT);
      assert_int_equal (wait, expected[i]);
      now += expected[i];
   }
   fw_circuit_destroy (c);
}

static void
circuit_probe_now_cuts_the_wait_short (void **state)
{
   fw_circuit_config_t cfg = config (60000, 60000, 0);
   fw_circuit_t *c = fw_circuit_new ();
   int64_t wait;
   (void) state;

   assert_false (fw_circuit_probe_now (c)); /* closed: nothing to probe */
   assert_true (fw_circuit_open (c, &cfg, "Timeout", 0));
   assert_int_equal (fw_circuit_next (c, &cfg, 10, &wait), FW_CIRCUIT_WAIT);
   assert_true (fw_circuit_probe_now (c));
   assert_int_equal (fw_circuit_next (c, &cfg, 11, &wait), FW_CIRCUIT_PROBE);
   /* the request is used up by that probe */
   fw_circuit_probe_failed (c, &cfg, "Timeout", 12);
   assert_int_equal (fw_circuit_next (c, &cfg, 13, &wait), FW_CIRCUIT_WAIT);
   assert_int_equal (wait, 60000 - 1); /* doubled, capped at max_open_for */
   fw_circuit_destroy (c);
}

static void
circuit_gives_up_after_give_up_after (void **state)
{
   fw_circuit_config_t cfg = config (4000, 60000, 10000);
   fw_circuit_t *c = fw_circuit_new ();
   int64_t wait;
   (void) state;

   assert_true (fw_circuit_open (c, &cfg, "Http.Connect", 0));
   assert_int_equal (fw_circuit_next (c, &cfg, 4000, &wait), FW_CIRCUIT_PROBE);
   fw_circuit_probe_failed (c, &cfg, "Http.Connect", 4000); /* next at 12000 */
   /* the wait ends at the give-up deadline, not at the later probe */
   assert_int_equal (fw_circuit_next (c, &cfg, 5000, &wait), FW_CIRCUIT_WAIT);
   assert_int_equal (wait, 5000);
   assert_int_equal (fw_circuit_next (c, &cfg, 10000, &wait), FW_CIRCUIT_GIVE_UP);
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_OPEN); /* the caller closes */
   fw_circuit_close (c);
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_CLOSED);
   fw_circuit_destroy (c);
}

static void
circuit_reopens_afresh_after_closing (void **state)
{
   fw_circuit_config_t cfg = config (1000, 8000, 0);
   fw_circuit_t *c = fw_circuit_new ();
   int64_t wait;
   fw_circuit_view_t v;
   (void) state;

   assert_true (fw_circuit_open (c, &cfg, "Http.Connect", 0));
   assert_int_equal (fw_circuit_next (c, &cfg, 1000, &wait), FW_CIRCUIT_PROBE);
   fw_circuit_probe_failed (c, &cfg, "Http.Connect", 1000);
   fw_circuit_close (c);
   assert_true (fw_circuit_open (c, &cfg, "Http.Timeout", 50000));
   fw_circuit_view (c, &v);
   assert_int_equal (v.open_for_ms, 1000); /* back to open_for */
   assert_int_equal (v.since_ms, 50000);
   assert_int_equal (v.probes, 0);
   assert_string_equal (v.error_type, "Http.Timeout");
   /* a breaker that is not open answers "probe" (nothing to wait for) */
   fw_circuit_close (c);
   assert_int_equal (fw_circuit_next (c, &cfg, 50001, &wait), FW_CIRCUIT_PROBE);
   fw_circuit_destroy (c);
   fw_circuit_destroy (NULL);
}

/* Issue 37: a restart during an outage puts the breaker back open as it was
 * saved; the first event holds it, waits out the rest of the pause, probes
 * once, and a failed probe doubles the pause as before. */
static void
circuit_restore_reopens_with_the_remaining_wait (void **state)
{
   fw_circuit_config_t cfg = config (5000, 300000, 60000);
   fw_circuit_t *c = fw_circuit_new ();
   fw_circuit_view_t saved = {0}, v;
   int64_t wait;

   (void) state;
   saved.state = FW_CIRCUIT_OPEN;
   snprintf (saved.error_type, sizeof saved.error_type, "Http.Connect");
   saved.since_ms = 1000;
   saved.open_for_ms = 10000;
   saved.next_probe_ms = 21000;
   saved.probes = 1;
   assert_false (fw_circuit_adopt (c)); /* closed: nothing to hold */
   assert_true (fw_circuit_restore (c, &saved));
   assert_false (fw_circuit_restore (c, &saved)); /* only a closed one */
   fw_circuit_view (c, &v);
   assert_int_equal (v.state, FW_CIRCUIT_OPEN);
   assert_string_equal (v.error_type, "Http.Connect");
   assert_int_equal (v.since_ms, 1000);
   assert_int_equal (v.next_probe_ms, 21000);
   assert_true (fw_circuit_adopt (c));
   assert_false (fw_circuit_adopt (c)); /* one holder */
   assert_int_equal (fw_circuit_next (c, &cfg, 15000, &wait), FW_CIRCUIT_WAIT);
   assert_int_equal (wait, 6000);
   assert_int_equal (fw_circuit_next (c, &cfg, 21000, &wait), FW_CIRCUIT_PROBE);
   assert_int_equal (fw_circuit_state (c), FW_CIRCUIT_HALF_OPEN);
   fw_circuit_probe_failed (c, &cfg, "Http.Connect", 21500);
   fw_circuit_view (c, &v);
   assert_int_equal (v.open_for_ms, 20000);
   assert_int_equal (v.next_probe_ms, 41500);
   assert_int_equal (v.probes, 2);
   /* give_up_after counts from the first opening, before the restart */
   assert_int_equal (fw_circuit_next (c, &cfg, 61000, &wait), FW_CIRCUIT_GIVE_UP);
   fw_circuit_close (c);
   assert_false (fw_circuit_adopt (c));
   saved.open_for_ms = 0;
   assert_false (fw_circuit_restore (c, &saved)); /* not an open breaker's */
   saved.open_for_ms = 10000;
   saved.state = FW_CIRCUIT_CLOSED;
   assert_false (fw_circuit_restore (c, &saved));
   fw_circuit_destroy (c);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (circuit_matches_a_type_and_the_types_below_it),
      cmocka_unit_test (circuit_waits_open_for_then_probes_once),
      cmocka_unit_test (circuit_failed_probe_doubles_the_pause_up_to_max),
      cmocka_unit_test (circuit_probe_now_cuts_the_wait_short),
      cmocka_unit_test (circuit_gives_up_after_give_up_after),
      cmocka_unit_test (circuit_reopens_afresh_after_closing),
      cmocka_unit_test (circuit_restore_reopens_with_the_remaining_wait),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
