/*
 * test_dlq_claim_keeper.c - a replay's claim outlives its TTL while a
 * keeper runs (issue 25, section 5): another replay cannot take the entry,
 * and without a keeper it can. On the in-memory store (thread-safe), with
 * a 300 ms TTL so the test stays short; the MongoDB store's extend is the
 * same method (integration/test_dlq_replay covers a replay end to end).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "flowwarden/clock.h"
#include "runtime/dlq/dlq_store.h"
#include "runtime/replay/dlq_claim_keeper.h"

#define TTL_MS 1000

static int
setup (void **state)
{
   fw_error_t err;
   fw_dlq_store_t *store = fw_dlq_store_memory_new (&err);
   bson_t *e;
   bool inserted;

   if (!store) {
      return -1;
   }
   e = BCON_NEW ("_id", BCON_UTF8 ("e1"), "streamName", BCON_UTF8 ("s"), "status",
                 BCON_UTF8 ("PENDING"));
   if (!store->put (store, e, &inserted, &err)) {
      bson_destroy (e);
      fw_dlq_store_destroy (store);
      return -1;
   }
   bson_destroy (e);
   *state = store;
   return 0;
}

static int
teardown (void **state)
{
   fw_dlq_store_destroy (*state);
   return 0;
}

/* actor's claim on e1, now, for TTL_MS. */
static bool
claim (fw_dlq_store_t *store, const char *actor)
{
   bson_value_t id = {.value_type = BSON_TYPE_UTF8};
   int64_t now = fw_now_ms ();
   fw_error_t err;
   bson_t out;
   bool got;

   id.value.v_utf8.str = (char *) "e1";
   id.value.v_utf8.len = 2;
   assert_true (store->claim (store, "s", &id, actor, now, now + TTL_MS, &out, &got, &err));
   bson_destroy (&out);
   return got;
}

/* Waits (polling) until the wall clock is past until_ms. */
static void
wait_past (int64_t until_ms)
{
   struct timespec step = {0, 20 * 1000000L};
   while (fw_now_ms () <= until_ms) {
      nanosleep (&step, NULL);
   }
}

static void
a_kept_claim_outlives_its_ttl (void **state)
{
   fw_dlq_store_t *store = *state;
   bson_value_t id = {.value_type = BSON_TYPE_UTF8};
   fw_claim_keeper_opts_t o = {
      .store = store, .stream = "s", .id = &id, .actor = "replay-a", .claim_ttl_ms = TTL_MS};
   fw_claim_keeper_t *k;
   fw_error_t err;
   int64_t claimed_until;

   id.value.v_utf8.str = (char *) "e1";
   id.value.v_utf8.len = 2;
   assert_true (claim (store, "replay-a"));
   claimed_until = fw_now_ms () + TTL_MS;
   assert_non_null (k = fw_claim_keeper_start (&o, &err));
   /* Three TTLs: a claim nobody extended would have expired twice over. */
   wait_past (claimed_until + 2 * TTL_MS);
   assert_false (claim (store, "replay-b"));
   assert_true (fw_claim_keeper_extensions (k) >= 3);
   fw_claim_keeper_stop (k);
}

static void
an_unkept_claim_is_taken_after_its_ttl (void **state)
{
   fw_dlq_store_t *store = *state;
   int64_t claimed_until;

   assert_true (claim (store, "replay-a"));
   claimed_until = fw_now_ms () + TTL_MS;
   assert_false (claim (store, "replay-b")); /* live */
   wait_past (claimed_until + 50);
   assert_true (claim (store, "replay-b"));
}

static void
a_keeper_stops_at_once_and_needs_a_store (void **state)
{
   fw_dlq_store_t *store = *state;
   bson_value_t id = {.value_type = BSON_TYPE_UTF8};
   fw_claim_keeper_opts_t o = {
      .stream = "s", .id = &id, .actor = "replay-a", .claim_ttl_ms = 60000};
   fw_claim_keeper_t *k;
   fw_error_t err;
   int64_t t0;

   id.value.v_utf8.str = (char *) "e1";
   id.value.v_utf8.len = 2;
   assert_null (fw_claim_keeper_start (&o, &err)); /* neither a store nor a registry */
   o.store = store;
   assert_non_null (k = fw_claim_keeper_start (&o, &err));
   t0 = fw_mono_ms ();
   fw_claim_keeper_stop (k); /* does not wait out its 20 s tick */
   assert_true (fw_mono_ms () - t0 < 5000);
   fw_claim_keeper_stop (NULL);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown (a_kept_claim_outlives_its_ttl, setup, teardown),
      cmocka_unit_test_setup_teardown (an_unkept_claim_is_taken_after_its_ttl, setup, teardown),
      cmocka_unit_test_setup_teardown (a_keeper_stops_at_once_and_needs_a_store, setup, teardown),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
