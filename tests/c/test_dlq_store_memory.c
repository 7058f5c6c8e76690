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

#include "runtime/dlq/dlq_store.h"

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
   assert_string_equal (json,
                        "{ \"0\" : { \"streamName\" : \"s\", \"sequenceId\" : \"\\\"k1\\\"\", "
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

/* A scheduled retry of stream s due at next_ms (attempts 1, error e1). */
static void
put_scheduled (fw_dlq_store_t *store, const char *id, const char *stream, int64_t next_ms)
{
   bson_t *e = BCON_NEW ("_id", BCON_UTF8 (id), "streamName", BCON_UTF8 (stream), "status",
                         BCON_UTF8 ("SCHEDULED"), "nextAttemptAt", BCON_DATE_TIME (next_ms),
                         "createdAt", BCON_DATE_TIME (next_ms - 30000), "attempts", BCON_INT32 (1),
                         "error", "{", "type", BCON_UTF8 ("E"), "message", BCON_UTF8 ("e1"),
                         "where", BCON_UTF8 ("x.lua:3"), "}");
   fw_error_t err;
   bool inserted;
   assert_true (store->put (store, e, &inserted, &err));
   bson_destroy (e);
}

static const char *
utf8_at (const bson_t *doc, const char *path)
{
   bson_iter_t it, f;
   return bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, path, &f) &&
                BSON_ITER_HOLDS_UTF8 (&f)
             ? bson_iter_utf8 (&f, NULL)
             : NULL;
}

static int64_t
number_at (const bson_t *doc, const char *path)
{
   bson_iter_t it, f;
   return bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, path, &f)
             ? (BSON_ITER_HOLDS_DATE_TIME (&f) ? bson_iter_date_time (&f) : bson_iter_as_int64 (&f))
             : -1;
}

/* The in-memory store keeps deferred retries as the MongoDB store does, so
 * flowwarden test schedules them as run does (tests/testing/deferred_spec.lua):
 * the due one with the earliest nextAttemptAt is claimed, a failed attempt
 * reschedules it (attempts, error, history), the last one leaves it PENDING. */
static void
memory_store_keeps_scheduled_retries (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_outcome_t o = {FW_DLQ_RESCHEDULE, 2000, false, "E", "e2", NULL, 9000, 1};
   int64_t count, oldest, next;
   bson_t got, stored;
   bson_iter_t id;
   fw_error_t err;
   bool claimed, held, found;

   assert_true (fw_dlq_store_can (store, FW_DLQ_CAN_DEFER));
   put_scheduled (store, "late", "s", 5000);
   put_scheduled (store, "early", "s", 1000);
   put_scheduled (store, "other", "t", 500);
   assert_true (store->scheduled (store, "s", &count, &oldest, &next, &err));
   assert_int_equal (count, 2);
   assert_int_equal (oldest, 1000 - 30000);
   assert_int_equal (next, 1000);

   assert_true (store->claim_due (store, "s", "me", 900, 60900, &got, &claimed, &err));
   assert_false (claimed); /* none due yet */
   bson_destroy (&got);
   assert_true (store->claim_due (store, "s", "me", 2000, 62000, &got, &claimed, &err));
   assert_true (claimed);
   assert_string_equal (utf8_at (&got, "_id"), "early");
   assert_string_equal (utf8_at (&got, "status"), "REPROCESSING");
   assert_string_equal (utf8_at (&got, "claimedBy"), "me");

   /* attempt 2 failed: SCHEDULED again at 9000 */
   assert_true (bson_iter_init_find (&id, &got, "_id"));
   assert_true (store->settle (store, bson_iter_value (&id), "me", &o, &held, &err));
   assert_true (held);
   assert_true (store->find_by_id (store, "early", &stored, &found, &err) && found);
   assert_string_equal (utf8_at (&stored, "status"), "SCHEDULED");
   assert_int_equal (number_at (&stored, "nextAttemptAt"), 9000);
   assert_int_equal (number_at (&stored, "attempts"), 2);
   assert_string_equal (utf8_at (&stored, "error.message"), "e2");
   assert_string_equal (utf8_at (&stored, "error.where"), "x.lua:3");
   assert_string_equal (utf8_at (&stored, "history.0.action"), "rescheduled");
   assert_null (utf8_at (&stored, "claimedBy"));
   bson_destroy (&stored);

   /* the last attempt: PENDING, nextAttemptAt gone */
   bson_destroy (&got);
   assert_true (store->claim_due (store, "s", "me", 9000, 69000, &got, &claimed, &err));
   assert_true (claimed);
   assert_string_equal (utf8_at (&got, "_id"), "late"); /* due at 5000, before 9000 */
   bson_destroy (&got);
   assert_true (store->claim_due (store, "s", "me", 9000, 69000, &got, &claimed, &err));
   assert_true (claimed);
   assert_string_equal (utf8_at (&got, "_id"), "early");
   o.now_ms = 9000;
   o.next_attempt_ms = 0;
   assert_true (bson_iter_init_find (&id, &got, "_id"));
   assert_true (store->settle (store, bson_iter_value (&id), "me", &o, &held, &err));
   assert_true (store->find_by_id (store, "early", &stored, &found, &err) && found);
   assert_string_equal (utf8_at (&stored, "status"), "PENDING");
   assert_int_equal (number_at (&stored, "nextAttemptAt"), -1);
   assert_int_equal (number_at (&stored, "attempts"), 3);
   assert_string_equal (utf8_at (&stored, "history.1.action"), "requeued");
   bson_destroy (&stored);
   bson_destroy (&got);
   assert_true (store->scheduled (store, "s", &count, &oldest, &next, &err));
   assert_int_equal (count, 0); /* "late" is claimed (REPROCESSING) */
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
      cmocka_unit_test_setup_teardown (memory_store_keeps_scheduled_retries, setup, teardown),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
