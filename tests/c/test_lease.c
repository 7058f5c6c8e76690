/*
 * lease.c against the MongoDB stand-in (issue 17): taking, renewing, losing and releasing a
 * stream's lease, a leader that cannot renew stopping before anyone else can start, malformed
 * lease documents, clock skew, and the checkpoint fence. Leases of 1 s keep it short; several
 * instances live in one process, told apart by their owner ids.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/ha/lease.h"
#include "standin_process.h"

#define LEASE_MS 1000
#define SKEW_MS 3000

static standin_t g_standin;

static int
group_setup (void **state)
{
   (void) state;
   mongoc_init ();
   return standin_start (&g_standin) ? 0 : -1;
}

static int
group_teardown (void **state)
{
   (void) state;
   int status = standin_stop (&g_standin);
   mongoc_cleanup ();
   return (WIFEXITED (status) && WEXITSTATUS (status) == 0) ? 0 : -1;
}

/* ---- helpers ---- */

static mongoc_uri_t *g_uri;
static mongoc_client_t *g_client;

static int
setup (void **state)
{
   (void) state;
   /* Set before the lease module first reads its wall clock: this process's clock is 3 s
    * ahead of the server's, which must change nothing but the reported offset. */
   setenv ("FW_TEST_CLOCK_SKEW_MS", "3000", 1);
   if (group_setup (state) != 0) {
      return -1;
   }
   g_uri = mongoc_uri_new (g_standin.uri);
   g_client = mongoc_client_new_from_uri (g_uri);
   mongoc_client_set_error_api (g_client, MONGOC_ERROR_API_VERSION_2);
   return g_uri && g_client ? 0 : -1;
}

static int
teardown (void **state)
{
   mongoc_client_destroy (g_client);
   mongoc_uri_destroy (g_uri);
   return group_teardown (state);
}

static void
command (const char *json)
{
   bson_error_t error;
   bson_t *cmd = bson_new_from_json ((const uint8_t *) json, -1, &error);
   bson_t reply;
   assert_non_null (cmd);
   if (!mongoc_client_command_simple (g_client, "admin", cmd, NULL, &reply, &error)) {
      fail_msg ("command %s failed: %s", json, error.message);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
}

static void
insert_lease (const char *json)
{
   bson_error_t error;
   bson_t *doc = bson_new_from_json ((const uint8_t *) json, -1, &error);
   mongoc_collection_t *c = mongoc_client_get_collection (g_client, "ha", FW_LEASE_COLLECTION);
   assert_non_null (doc);
   assert_true (mongoc_collection_insert_one (c, doc, NULL, NULL, &error));
   mongoc_collection_destroy (c);
   bson_destroy (doc);
}

static fw_lease_t *
lease (const char *stream, const char *owner)
{
   fw_error_t err;
   fw_lease_t *l = fw_lease_new (g_uri, "ha", stream, LEASE_MS, owner, &err);
   assert_non_null (l);
   return l;
}

/* Seconds until l leads (fails the test after limit_s). */
static double
time_to_lead (fw_lease_t *l, double limit_s)
{
   double t0 = now_s ();
   while (!fw_lease_is_leader (l, NULL)) {
      if (now_s () - t0 > limit_s) {
         fail_msg ("no leadership within %.1f s", limit_s);
      }
      usleep (5000);
   }
   return now_s () - t0;
}

static int64_t
epoch_of (fw_lease_t *l)
{
   int64_t e = -1;
   assert_true (fw_lease_is_leader (l, &e));
   return e;
}

/* ---- cases ---- */

static void
lease_is_taken_at_once_and_kept_by_renewals (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("kept", "a"), *b;
   fw_lease_status_t st;
   double t0;

   time_to_lead (a, 10.0);
   b = lease ("kept", "b");
   assert_int_equal (epoch_of (a), 1);
   /* Five lease periods: a renews, b never leads. */
   for (t0 = now_s (); now_s () - t0 < 5.0 * LEASE_MS / 1000;) {
      assert_true (fw_lease_is_leader (a, NULL));
      assert_false (fw_lease_is_leader (b, NULL));
      usleep (10000);
   }
   assert_int_equal (epoch_of (a), 1);
   fw_lease_status (b, &st);
   assert_int_equal (st.role, FW_LEASE_STANDBY);
   assert_string_equal (st.holder, "a");
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

static void
a_crashed_leader_is_replaced_within_lease_and_250_ms (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("crash", "a"), *b;
   double took;

   time_to_lead (a, 10.0);
   b = lease ("crash", "b");
   usleep (100000);
   fw_lease_destroy (a); /* no release: as kill -9 */
   took = time_to_lead (b, 3.0);
   /* The bound of docs/operations.md ("Take-over time"): the lease expires
    * within LEASE_MS and a standby reads it at least every 250 ms; room for
    * the round trips. */
   fprintf (stderr, "LEASE takeover after a crash: %.0f ms (bound %d)\n", took * 1000,
            LEASE_MS + 250);
   assert_true (took * 1000 <= LEASE_MS + 250 + 150);
   assert_int_equal (epoch_of (b), 2);
   fw_lease_destroy (b);
}

static void
a_released_lease_is_taken_over_at_once (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("release", "a"), *b;
   double took;

   time_to_lead (a, 10.0);
   b = lease ("release", "b");
   usleep (50000);
   assert_true (fw_lease_release (a, 2000));
   assert_false (fw_lease_is_leader (a, NULL));
   took = time_to_lead (b, 2.0);
   fprintf (stderr, "LEASE takeover after a release: %.0f ms (bound 250)\n", took * 1000);
   assert_true (took * 1000 <= 250 + 150); /* the standby's next read */
   assert_int_equal (epoch_of (b), 2);
   /* Released means given up for good. */
   usleep (LEASE_MS * 1000 * 2 / 3);
   assert_false (fw_lease_is_leader (a, NULL));
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

/* ha.mode = "shared" (issue 31): a gated lease is taken only when its gate says so; a
 * yielded one is given up at once and taken again later, unlike a released one. */
static bool g_allow;

static bool
allow (void *ud)
{
   (void) ud;
   return __atomic_load_n (&g_allow, __ATOMIC_RELAXED);
}

static void
a_gated_lease_waits_for_its_gate_and_a_yielded_one_can_be_taken_again (void **state)
{
   (void) state;
   fw_error_t err;
   fw_lease_t *a, *b;
   fw_lease_status_t st;
   double took;

   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED);
   a = fw_lease_new_gated (g_uri, "ha", "gated", LEASE_MS, "a", allow, NULL, &err);
   assert_non_null (a);
   usleep (LEASE_MS * 1000); /* free all along, but the gate says no */
   assert_false (fw_lease_is_leader (a, NULL));
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (a, 1.0);
   b = lease ("gated", "b");
   usleep (50000);
   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED); /* over its share now */
   assert_true (fw_lease_yield (a, 2000));
   assert_false (fw_lease_is_leader (a, NULL));
   took = time_to_lead (b, 2.0);
   assert_true (took * 1000 <= LEASE_MS / 3 + 100);
   fw_lease_status (a, &st);
   assert_int_equal (st.role, FW_LEASE_STANDBY); /* not released: it may lead again */
   fw_lease_destroy (b);                         /* as kill -9 */
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (a, 3.0);
   assert_int_equal (epoch_of (a), 3);
   fw_lease_destroy (a);
}

/* Issue 38: what a standby sees of the lease: a live holder while it renews; once it
 * crashed, no live holder since the lease's expiry (the server's clock), growing while the
 * gate keeps this one from taking it. */
static void
a_standby_sees_the_holder_then_how_long_the_lease_has_been_free (void **state)
{
   (void) state;
   fw_error_t err;
   fw_lease_t *a = lease ("orphan", "a"), *b;
   fw_lease_status_t st;
   double t0;

   time_to_lead (a, 10.0);
   __atomic_store_n (&g_allow, false, __ATOMIC_RELAXED);
   b = fw_lease_new_gated (g_uri, "ha", "orphan", LEASE_MS, "b", allow, NULL, &err);
   assert_non_null (b);
   for (t0 = now_s ();; usleep (10000)) {
      fw_lease_status (b, &st);
      if (st.live_holder || now_s () - t0 > 5.0) {
         break;
      }
   }
   assert_true (st.live_holder);
   assert_string_equal (st.holder, "a");
   assert_int_equal (st.free_ms, -1);
   assert_true (st.expires_in_ms > 0 && st.expires_in_ms <= LEASE_MS + 100);
   fw_lease_destroy (a); /* as kill -9 */
   for (t0 = now_s ();; usleep (10000)) {
      fw_lease_status (b, &st);
      if (!st.live_holder || now_s () - t0 > 5.0) {
         break;
      }
   }
   assert_false (st.live_holder);
   /* Seen free within 250 ms of its expiry, itself within a lease of the crash. */
   assert_true (now_s () - t0 <= (LEASE_MS + 250 + 150) / 1000.0);
   assert_true (st.free_ms >= 0 && st.free_ms < 500);
   usleep (600000);
   fw_lease_status (b, &st);
   assert_false (st.live_holder);
   assert_true (st.free_ms >= 600 && st.free_ms < 1500);
   assert_false (fw_lease_is_leader (b, NULL));
   __atomic_store_n (&g_allow, true, __ATOMIC_RELAXED);
   time_to_lead (b, 2.0);
   fw_lease_status (b, &st);
   assert_int_equal (st.free_ms, -1); /* the holder sees no orphan */
   fw_lease_destroy (b);
}

/* The renewals of the leader fail (or hang): it must stop leading before the standby can
 * start, every time. */
static void
partitioned (const char *stream, const char *fail_point)
{
   fw_lease_t *a = lease (stream, "a"), *b = NULL;
   double stopped = 0, started = 0, t0;

   time_to_lead (a, 10.0);
   b = lease (stream, "b");
   usleep (50000);
   command (fail_point);
   for (t0 = now_s (); now_s () - t0 < 5.0 && !started;) {
      bool la = fw_lease_is_leader (a, NULL);
      bool lb = fw_lease_is_leader (b, NULL);
      assert_false (la && lb);
      if (!la && !stopped) {
         stopped = now_s ();
      }
      if (lb) {
         started = now_s ();
      }
      usleep (1000);
   }
   command ("{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}");
   assert_true (stopped > 0 && started > 0);
   fprintf (stderr, "LEASE %s: leader stopped %.0f ms before the standby started\n", stream,
            (started - stopped) * 1000);
   assert_true (started - stopped >= fw_lease_margin_ms (LEASE_MS) / 1000.0 * 0.8);
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

static void
a_leader_whose_renewals_fail_stops_before_the_standby_starts (void **state)
{
   (void) state;
   partitioned ("renew-fails",
                "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"update\", \"findAndModify\", \"aggregate\"], \"errorCode\": "
                "96, \"appName\": \"flowwarden-lease-a\"}}");
}

static void
a_leader_whose_renewals_hang_stops_before_the_standby_starts (void **state)
{
   (void) state;
   partitioned ("renew-hangs",
                "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"update\", \"findAndModify\", \"aggregate\"], "
                "\"blockConnection\": true, \"blockTimeMS\": 3000, \"appName\": "
                "\"flowwarden-lease-a\"}}");
}

/* Four instances start together on a lease nobody holds: their takes race, exactly one leads,
 * and the others learn from their own take who holds it (no error, no second leader). */
static void
racing_takes_make_one_leader_and_standbys_that_name_it (void **state)
{
   (void) state;
   const char *owners[] = {"r1", "r2", "r3", "r4"};
   fw_lease_t *ls[4];
   fw_lease_status_t st;
   int leader = -1, named = 0, i;
   double t0;

   for (i = 0; i < 4; i++) {
      ls[i] = lease ("race", owners[i]);
   }
   for (t0 = now_s (); now_s () - t0 < 5.0 && (leader < 0 || named < 3);) {
      int leading = 0;
      named = 0;
      for (i = 0; i < 4; i++) {
         if (fw_lease_is_leader (ls[i], NULL)) {
            leading++;
            leader = i;
         }
      }
      assert_true (leading <= 1);
      for (i = 0; leader >= 0 && i < 4; i++) {
         fw_lease_status (ls[i], &st);
         named += i != leader && st.role == FW_LEASE_STANDBY &&
                  strcmp (st.holder, owners[leader]) == 0;
      }
      usleep (2000);
   }
   assert_true (leader >= 0);
   assert_int_equal (named, 3);
   assert_int_equal (epoch_of (ls[leader]), 1);
   for (i = 0; i < 4; i++) {
      fw_lease_destroy (ls[i]);
   }
}

static void
a_malformed_lease_is_taken_and_never_crashes (void **state)
{
   (void) state;
   fw_lease_t *a;
   insert_lease ("{\"_id\": \"bad\", \"owner\": 5, \"epoch\": \"x\", \"expiresAt\": \"never\"}");
   a = lease ("bad", "a");
   time_to_lead (a, 10.0);
   assert_int_equal (epoch_of (a), 1);
   fw_lease_destroy (a);
}

static void
a_lease_held_far_into_the_future_is_never_taken (void **state)
{
   (void) state;
   fw_lease_t *a;
   fw_lease_status_t st;
   insert_lease (
      "{\"_id\": \"held\", \"owner\": \"other\", \"epoch\": {\"$numberLong\": \"3\"}, "
      "\"expiresAt\": {\"$date\": \"2999-01-01T00:00:00Z\"}}");
   a = lease ("held", "a");
   usleep (LEASE_MS * 1000 * 3 / 2);
   assert_false (fw_lease_is_leader (a, NULL));
   fw_lease_status (a, &st);
   assert_string_equal (st.holder, "other");
   assert_int_equal (st.epoch, 3);
   fw_lease_destroy (a);
}

static void
the_servers_clock_decides_not_a_skewed_host (void **state)
{
   (void) state;
   fw_lease_t *a = lease ("skew", "a"), *b;
   fw_lease_status_t st;
   double t0;

   time_to_lead (a, 10.0);
   b = lease ("skew", "b");
   fw_lease_status (a, &st);
   /* The hook is in effect: this host's clock reads 3 s ahead of the server's. */
   assert_true (st.clock_offset_ms < -SKEW_MS + 500 && st.clock_offset_ms > -SKEW_MS - 500);
   for (t0 = now_s (); now_s () - t0 < 3.0 * LEASE_MS / 1000;) {
      assert_false (fw_lease_is_leader (b, NULL));
      usleep (10000);
   }
   fw_lease_destroy (a);
   fw_lease_destroy (b);
}

static void
a_deposed_leaders_checkpoint_is_fenced_off (void **state)
{
   (void) state;
   fw_error_t err;
   fw_checkpoint_t cp;
   bson_t *t1 = BCON_NEW ("_data", BCON_UTF8 ("01"));
   bson_t *t2 = BCON_NEW ("_data", BCON_UTF8 ("02"));
   bson_t *t3 = BCON_NEW ("_data", BCON_UTF8 ("03"));
   int64_t stored;
   bool fenced;

   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 1, &stored, &err));
   assert_int_equal (stored, 1);
   assert_true (fw_checkpoint_save_fenced (g_client, "ha", "fence", t1, t1, "v", 1, &fenced, &err));
   /* A new leader (epoch 2) fences; the old one's late write moves nothing. */
   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 2, &stored, &err));
   assert_int_equal (stored, 2);
   assert_false (
      fw_checkpoint_save_fenced (g_client, "ha", "fence", t3, t3, "v", 1, &fenced, &err));
   assert_true (fenced);
   assert_non_null (strstr (err.message, "NOT saved"));
   assert_true (fw_checkpoint_load (g_client, "ha", "fence", &cp, &err));
   assert_true (bson_equal (&cp.processed, t1));
   fw_checkpoint_cleanup (&cp);
   assert_true (fw_checkpoint_save_fenced (g_client, "ha", "fence", t2, t2, "v", 2, &fenced, &err));
   /* A fence lower than the stored one leaves it: the caller sees it is behind. */
   assert_true (fw_checkpoint_fence (g_client, "ha", "fence", 1, &stored, &err));
   assert_int_equal (stored, 2);
   bson_destroy (t1);
   bson_destroy (t2);
   bson_destroy (t3);
}

static void
epochs_continue_above_the_fence_when_the_lease_document_is_gone (void **state)
{
   (void) state;
   fw_error_t err;
   int64_t stored;
   fw_lease_t *a;
   assert_true (fw_checkpoint_fence (g_client, "ha", "gone", 7, &stored, &err));
   a = lease ("gone", "a");
   time_to_lead (a, 10.0);
   assert_int_equal (epoch_of (a), 8);
   fw_lease_destroy (a);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (lease_is_taken_at_once_and_kept_by_renewals),
      cmocka_unit_test (a_crashed_leader_is_replaced_within_lease_and_250_ms),
      cmocka_unit_test (a_released_lease_is_taken_over_at_once),
      cmocka_unit_test (a_gated_lease_waits_for_its_gate_and_a_yielded_one_can_be_taken_again),
      cmocka_unit_test (a_standby_sees_the_holder_then_how_long_the_lease_has_been_free),
      cmocka_unit_test (a_leader_whose_renewals_fail_stops_before_the_standby_starts),
      cmocka_unit_test (a_leader_whose_renewals_hang_stops_before_the_standby_starts),
      cmocka_unit_test (racing_takes_make_one_leader_and_standbys_that_name_it),
      cmocka_unit_test (a_malformed_lease_is_taken_and_never_crashes),
      cmocka_unit_test (a_lease_held_far_into_the_future_is_never_taken),
      cmocka_unit_test (the_servers_clock_decides_not_a_skewed_host),
      cmocka_unit_test (a_deposed_leaders_checkpoint_is_fenced_off),
      cmocka_unit_test (epochs_continue_above_the_fence_when_the_lease_document_is_gone),
   };
   return cmocka_run_group_tests_name ("lease", tests, setup, teardown);
}
