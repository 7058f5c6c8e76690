/*
 * test_dlq_store_memory.c - the in-memory DLQ store's sequences (a sequenced
 * DLQ with dlq = { store = "memory" }, and flowwarden.testing's): the same
 * answers as the sequences collection of dlq_sequence.h's protocol.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/dlq_store.h"

/* The store the setup made. */
#define STORE ((fw_dlq_store_t *) *state)

static int
setup (void **state)
{
   fw_error_t err;
   *state = fw_dlq_store_memory_new (&err);
   return *state ? 0 : -1;
}

static int
teardown (void **state)
{
   fw_dlq_store_destroy (*state);
   return 0;
}

static void
put_entry (fw_dlq_store_t *store, const char *id, const char *stream, const char *seq,
           const char *status)
{
   bson_t e = BSON_INITIALIZER;
   fw_error_t err;
   BSON_APPEND_UTF8 (&e, "_id", id);
   BSON_APPEND_UTF8 (&e, "streamName", stream);
   BSON_APPEND_UTF8 (&e, "sequenceId", seq);
   BSON_APPEND_UTF8 (&e, "status", status);
   bool inserted;
   assert_true (store->put (store, &e, &inserted, &err));
   bson_destroy (&e);
}

static void
take (fw_dlq_store_t *store, const char *stream, const char *id, bool open, int64_t want_index,
      fw_seq_take_t want)
{
   int64_t index = -1;
   fw_seq_take_t result;
   fw_error_t err;
   assert_true (store->seq_take (store, stream, id, open, &index, &result, &err));
   assert_int_equal (result, want);
   if (want == FW_SEQ_TAKEN) {
      assert_int_equal (index, want_index);
   }
}

static void
memory_seq_park_on_an_unknown_sequence_is_closed_and_creates_nothing (void **state)
{
   fw_seq_state_t st;
   fw_error_t err;

   take (*state, "s", "\"k1\"", false, 0, FW_SEQ_CLOSED);
   assert_true (STORE->seq_read (STORE, "s", "\"k1\"", &st, &err));
   assert_false (st.exists);
}

static void
memory_seq_open_then_park_take_indexes_in_order_per_stream (void **state)
{
   fw_seq_state_t st;
   fw_error_t err;

   take (*state, "s", "\"k1\"", true, 0, FW_SEQ_TAKEN);
   take (*state, "s", "\"k1\"", false, 1, FW_SEQ_TAKEN);
   take (*state, "t", "\"k1\"", false, 0, FW_SEQ_CLOSED); /* another stream's key */
   take (*state, "s", "\"k1\"", false, 2, FW_SEQ_TAKEN);
   assert_true (STORE->seq_read (STORE, "s", "\"k1\"", &st, &err));
   assert_true (st.exists && st.open);
   assert_int_equal (st.next, 3);
   assert_int_equal (st.inflight, 3);
   assert_true (STORE->seq_settle (STORE, "s", "\"k1\"", &err));
   assert_true (STORE->seq_read (STORE, "s", "\"k1\"", &st, &err));
   assert_int_equal (st.inflight, 2);
}

static void
memory_seq_close_holds_only_with_the_next_read_and_nothing_in_flight (void **state)
{
   fw_seq_state_t st;
   fw_error_t err;
   bool closed;

   take (*state, "s", "\"k1\"", true, 0, FW_SEQ_TAKEN);
   assert_true (STORE->seq_close (STORE, "s", "\"k1\"", 1, &closed, &err));
   assert_false (closed); /* inflight 1 */
   assert_true (STORE->seq_settle (STORE, "s", "\"k1\"", &err));
   /* A live event took index 1 after the replay read next = 1. */
   take (*state, "s", "\"k1\"", false, 1, FW_SEQ_TAKEN);
   assert_true (STORE->seq_settle (STORE, "s", "\"k1\"", &err));
   assert_true (STORE->seq_close (STORE, "s", "\"k1\"", 1, &closed, &err));
   assert_false (closed);
   assert_true (STORE->seq_close (STORE, "s", "\"k1\"", 2, &closed, &err));
   assert_true (closed);
   assert_true (STORE->seq_read (STORE, "s", "\"k1\"", &st, &err));
   assert_true (st.exists);
   assert_false (st.open);
   /* Closed: parking is refused, a new head reopens it after the last index. */
   take (*state, "s", "\"k1\"", false, 0, FW_SEQ_CLOSED);
   take (*state, "s", "\"k1\"", true, 2, FW_SEQ_TAKEN);
}

static void
memory_seq_load_lists_the_streams_open_sequences_and_resets_inflight (void **state)
{
   fw_dlq_sequences_t *set = fw_dlq_sequences_new ();
   fw_seq_state_t st;
   fw_error_t err;
   bool closed;

   assert_non_null (set);
   take (*state, "s", "\"k1\"", true, 0, FW_SEQ_TAKEN);
   take (*state, "s", "\"k2\"", true, 0, FW_SEQ_TAKEN);
   take (*state, "t", "\"k3\"", true, 0, FW_SEQ_TAKEN);
   assert_true (STORE->seq_settle (STORE, "s", "\"k2\"", &err));
   assert_true (STORE->seq_close (STORE, "s", "\"k2\"", 1, &closed, &err));
   assert_true (closed);
   assert_true (fw_dlq_sequences_add (set, "stale"));
   assert_true (STORE->seq_load (STORE, "s", set, &err));
   assert_int_equal (fw_dlq_sequences_count (set), 1);
   assert_true (fw_dlq_sequences_has (set, "\"k1\""));
   assert_true (STORE->seq_read (STORE, "s", "\"k1\"", &st, &err));
   assert_int_equal (st.inflight, 0);
   assert_true (STORE->seq_read (STORE, "t", "\"k3\"", &st, &err));
   assert_int_equal (st.inflight, 1); /* another stream's requests are left alone */
   fw_dlq_sequences_destroy (set);
}

static void
memory_seq_size_counts_the_waiting_entries_of_the_sequence (void **state)
{
   int64_t n = -1;
   fw_error_t err;

   put_entry (*state, "a", "s", "\"k1\"", "PENDING");
   put_entry (*state, "b", "s", "\"k1\"", "REPROCESSING");
   put_entry (*state, "c", "s", "\"k1\"", "RESOLVED");
   put_entry (*state, "d", "s", "\"k1\"", "DISCARDED");
   put_entry (*state, "e", "s", "\"k2\"", "PENDING");
   put_entry (*state, "f", "t", "\"k1\"", "PENDING");
   assert_true (STORE->seq_size (STORE, "s", "\"k1\"", &n, &err));
   assert_int_equal (n, 2);
}

static void
memory_seq_lists_the_sequence_documents (void **state)
{
   bson_t docs;
   char *json;

   take (*state, "s", "\"k1\"", true, 0, FW_SEQ_TAKEN);
   take (*state, "t", "\"k2\"", true, 0, FW_SEQ_TAKEN);
   assert_true (fw_dlq_store_memory_sequences (*state, "s", &docs));
   json = bson_as_relaxed_extended_json (&docs, NULL);
   assert_string_equal (json, "{ \"0\" : { \"streamName\" : \"s\", \"sequenceId\" : \"\\\"k1\\\"\", "
                              "\"open\" : true, \"next\" : 1, \"inflight\" : 1 } }");
   bson_free (json);
   bson_destroy (&docs);
}

static void
memory_sequences_refuses_a_store_that_is_not_in_memory (void **state)
{
   fw_dlq_store_t other = {0};
   bson_t docs;
   (void) state;

   assert_false (fw_dlq_store_memory_sequences (&other, NULL, &docs));
   bson_destroy (&docs);
}

/* The in-memory store keeps no deferred retries and says so: flowwarden test
 * retries in place (tests/testing/deferred_spec.lua). */
static void
memory_store_says_it_cannot_defer_retries (void **state)
{
   fw_dlq_store_t *store = *state;

   assert_false (fw_dlq_store_can (store, FW_DLQ_CAN_DEFER));
   assert_null (store->claim_due);
   assert_null (store->scheduled);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown (
         memory_seq_park_on_an_unknown_sequence_is_closed_and_creates_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown (memory_seq_open_then_park_take_indexes_in_order_per_stream,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (
         memory_seq_close_holds_only_with_the_next_read_and_nothing_in_flight, setup, teardown),
      cmocka_unit_test_setup_teardown (
         memory_seq_load_lists_the_streams_open_sequences_and_resets_inflight, setup, teardown),
      cmocka_unit_test_setup_teardown (memory_seq_size_counts_the_waiting_entries_of_the_sequence,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (memory_seq_lists_the_sequence_documents, setup, teardown),
      cmocka_unit_test (memory_sequences_refuses_a_store_that_is_not_in_memory),
      cmocka_unit_test_setup_teardown (memory_store_says_it_cannot_defer_retries, setup, teardown),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
