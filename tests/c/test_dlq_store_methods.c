/*
 * test_dlq_store_methods.c - the DLQ store's reading and changing methods
 * (dlq_store.h) on the in-memory store: the filters of `flowwarden dlq`,
 * oldest first; the tally's groups; discard, purge and put; the sequences'
 * documents and waiting groups. The MongoDB store's answers are what the
 * integration tests of `flowwarden dlq` check.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/dlq/dlq_store.h"

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

/* An entry; error_type NULL: no error (parked when seq is set). */
static void
put (fw_dlq_store_t *store, const char *id, const char *stream, const char *status,
     const char *error_type, int64_t created_ms, const char *seq, int64_t seq_index)
{
   bson_t e = BSON_INITIALIZER;
   fw_error_t err;
   bool inserted;
   BSON_APPEND_UTF8 (&e, "_id", id);
   BSON_APPEND_UTF8 (&e, "streamName", stream);
   BSON_APPEND_UTF8 (&e, "status", status);
   if (error_type) {
      BCON_APPEND (&e, "error", "{", "type", BCON_UTF8 (error_type), "}");
   }
   BSON_APPEND_DATE_TIME (&e, "createdAt", created_ms);
   BCON_APPEND (&e, "fullDocument", "{", "secret", BCON_UTF8 ("x"), "}");
   if (seq) {
      BSON_APPEND_UTF8 (&e, "sequenceId", seq);
      BSON_APPEND_INT64 (&e, "sequenceIndex", seq_index);
   }
   assert_true (store->put (store, &e, &inserted, &err));
   assert_true (inserted);
   bson_destroy (&e);
}

typedef struct {
   char ids[256];
   bool saw_document;
} seen_t;

static bool
note_id (const bson_t *entry, void *ud, fw_error_t *error)
{
   seen_t *s = ud;
   bson_iter_t it;
   (void) error;
   if (bson_iter_init_find (&it, entry, "_id")) {
      strcat (s->ids, bson_iter_utf8 (&it, NULL));
      strcat (s->ids, " ");
   }
   s->saw_document |= bson_iter_init_find (&it, entry, "fullDocument");
   return true;
}

static void
query_ids (fw_dlq_store_t *store, const fw_dlq_query_t *q, const char *want)
{
   seen_t s = {{0}, false};
   fw_error_t err;
   assert_true (store->query (store, q, note_id, &s, &err));
   assert_string_equal (s.ids, want);
   assert_int_equal (s.saw_document, q->with_documents);
}

static void
three (fw_dlq_store_t *store)
{
   put (store, "c", "s", "PENDING", "Net.Timeout", 3000, NULL, 0);
   put (store, "a", "s", "RESOLVED", "Net", 1000, NULL, 0);
   put (store, "b", "t", "PENDING", "Network", 2000, NULL, 0);
}

static void
query_filters_oldest_first_without_documents (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {&f, NULL, NULL, 0, false};

   three (store);
   query_ids (store, &q, "a b c ");
   f.stream = "s";
   query_ids (store, &q, "a c ");
   f.stream = NULL;
   f.status = "pending";
   query_ids (store, &q, "b c ");
   f.status = NULL;
   q.default_status = "RESOLVED";
   query_ids (store, &q, "a ");
   q.default_status = NULL;
   f.error_type = "Net"; /* Net and Net.*, not Network */
   query_ids (store, &q, "a c ");
   f.error_type = NULL;
   f.since_ms = 2000;
   f.until_ms = 3000;
   q.with_documents = true;
   query_ids (store, &q, "b ");
   f.since_ms = f.until_ms = 0;
   q.limit = 2;
   query_ids (store, &q, "a b ");
}

/* --id takes an entry's _id or its eventId (the id a log line names). */
static void
query_ids_match_the_entry_id_or_the_event_id (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {&f, NULL, NULL, 0, false};
   const char *events[] = {"826B01", "826B02"};
   const char *ids[] = {"x", "y"};
   fw_error_t err;
   bool inserted;

   for (int i = 0; i < 2; i++) {
      bson_t e = BSON_INITIALIZER;
      BSON_APPEND_UTF8 (&e, "_id", ids[i]);
      BSON_APPEND_UTF8 (&e, "streamName", "s");
      BSON_APPEND_UTF8 (&e, "status", "PENDING");
      BSON_APPEND_UTF8 (&e, "eventId", events[i]);
      BSON_APPEND_DATE_TIME (&e, "createdAt", 1000 + i);
      assert_true (store->put (store, &e, &inserted, &err));
      bson_destroy (&e);
   }
   f.ids[f.n_ids++] = "826B02";
   query_ids (store, &q, "y ");
   f.ids[f.n_ids++] = "x";
   query_ids (store, &q, "x y ");
   f.n_ids = 0;
   f.ids[f.n_ids++] = "826B0"; /* a prefix is no id */
   query_ids (store, &q, "");
}

static void
query_refuses_a_bad_status_and_a_mongodb_filter (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {&f, NULL, NULL, 0, false};
   seen_t s = {{0}, false};
   fw_error_t err;

   three (store);
   f.status = "PENDING,LOST";
   assert_false (store->query (store, &q, note_id, &s, &err));
   assert_non_null (strstr (err.message, "unknown status \"LOST\""));
   f.status = NULL;
   f.filter_json = "{\"attempts\": 3}";
   assert_false (store->query (store, &q, note_id, &s, &err));
   assert_non_null (strstr (err.message, "--filter"));
}

static bool
note_group (const fw_dlq_group_t *g, void *ud, fw_error_t *error)
{
   char *out = ud;
   char line[128];
   (void) error;
   snprintf (line, sizeof line, "%s/%s/%s%s=%lld ", g->stream, g->status, g->error_type,
             g->parked ? "(parked)" : "", (long long) g->n);
   strcat (out, line);
   return true;
}

static void
tally_groups_and_finds_the_oldest_pending (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_query_t q = {0};
   char out[512] = "";
   int64_t oldest = INT64_MAX, count, oldest_ms;
   fw_error_t err;

   three (store);
   put (store, "d", "s", "PENDING", "Net.Timeout", 4000, NULL, 0);
   put (store, "e", "s", "PENDING", NULL, 5000, "\"k\"", 1);
   assert_true (store->tally (store, &q, note_group, out, &oldest, &err));
   /* In the order of each group's oldest entry. */
   assert_string_equal (out,
                        "s/RESOLVED/Net=1 t/PENDING/Network=1 s/PENDING/Net.Timeout=2 "
                        "s/PENDING/?(parked)=1 ");
   assert_int_equal (oldest, 2000);
   assert_true (store->pending (store, "s", &count, &oldest_ms, &err));
   assert_int_equal (count, 3);
   assert_int_equal (oldest_ms, 3000);
   assert_true (store->pending (store, "none", &count, &oldest_ms, &err));
   assert_int_equal (count, 0);
   assert_int_equal (oldest_ms, 0);
}

static void
discard_and_purge_touch_only_the_selected_ids_still_matching (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_filter_t f = {0};
   bson_t *ids = BCON_NEW ("0", BCON_UTF8 ("a"), "1", BCON_UTF8 ("c"));
   fw_dlq_query_t q = {&f, "PENDING", ids, 0, false};
   bson_t entry;
   bool found;
   int64_t n;
   fw_error_t err;
   char *json;

   three (store);
   assert_true (store->discard (store, &q, "bad data", "ops@host", 9000, &n, &err));
   assert_int_equal (n, 1); /* a is RESOLVED: not selected */
   assert_true (store->find_by_id (store, "c", &entry, &found, &err));
   assert_true (found);
   json = bson_as_relaxed_extended_json (&entry, NULL);
   assert_non_null (strstr (json, "\"status\" : \"DISCARDED\""));
   assert_non_null (strstr (json, "\"discardReason\" : \"bad data\""));
   assert_non_null (strstr (json, "\"action\" : \"discarded\", \"actor\" : \"ops@host\""));
   bson_free (json);
   bson_destroy (&entry);

   q.default_status = NULL;
   assert_true (store->purge (store, &q, &n, &err));
   assert_int_equal (n, 2);
   assert_true (store->count (store, NULL, &n, &err));
   assert_int_equal (n, 1);
   bson_destroy (ids);
}

static void
put_replaces_an_entry_with_the_same_id (void **state)
{
   fw_dlq_store_t *store = *state;
   bson_t *e = BCON_NEW ("_id", BCON_UTF8 ("a"), "streamName", BCON_UTF8 ("s"), "status",
                         BCON_UTF8 ("DISCARDED"));
   bson_t *no_id = BCON_NEW ("streamName", BCON_UTF8 ("s"));
   bool inserted = true;
   int64_t n;
   fw_error_t err;

   three (store);
   assert_true (store->put (store, e, &inserted, &err));
   assert_false (inserted);
   assert_true (store->count (store, NULL, &n, &err));
   assert_int_equal (n, 3);
   assert_false (store->put (store, no_id, &inserted, &err));
   bson_destroy (e);
   bson_destroy (no_id);
}

static bool
note_json (const bson_t *doc, void *ud, fw_error_t *error)
{
   char *json = bson_as_relaxed_extended_json (doc, NULL);
   (void) error;
   strcat (ud, json);
   strcat (ud, "\n");
   bson_free (json);
   return true;
}

static bool
note_seq (const fw_dlq_seq_t *seq, void *ud, fw_error_t *error)
{
   char line[128];
   (void) error;
   snprintf (line, sizeof line, "%s/%s open=%d next=%lld inflight=%lld\n", seq->stream, seq->id,
             seq->open, (long long) seq->next, (long long) seq->inflight);
   strcat (ud, line);
   return true;
}

static void
sequences_list_documents_and_waiting_groups (void **state)
{
   fw_dlq_store_t *store = *state;
   bson_t *ids = BCON_NEW ("0", BCON_UTF8 ("\"k2\""));
   char out[2048] = "";
   int64_t index;
   fw_seq_take_t taken;
   bool closed;
   fw_error_t err;

   assert_true (store->seq_take (store, "s", "\"k1\"", true, &index, &taken, &err));
   assert_true (store->seq_take (store, "s", "\"k2\"", true, &index, &taken, &err));
   assert_true (store->seq_settle (store, "s", "\"k2\"", &err));
   assert_true (store->seq_close (store, "s", "\"k2\"", 1, &closed, &err));
   assert_true (closed);
   assert_true (store->seq_list (store, "s", NULL, note_seq, out, &err));
   assert_string_equal (out, "s/\"k1\" open=1 next=1 inflight=1\n");
   out[0] = '\0';
   assert_true (store->seq_list (store, "s", ids, note_seq, out, &err));
   assert_string_equal (out,
                        "s/\"k1\" open=1 next=1 inflight=1\n"
                        "s/\"k2\" open=0 next=1 inflight=0\n");
   out[0] = '\0';
   assert_true (store->seq_list (store, "t", ids, note_seq, out, &err));
   assert_string_equal (out, "");

   put (store, "h2", "s", "PENDING", NULL, 2000, "\"k1\"", 1);
   put (store, "h1", "s", "PENDING", "E", 1000, "\"k1\"", 0);
   put (store, "x", "s", "RESOLVED", "E", 500, "\"k1\"", 2);
   out[0] = '\0';
   assert_true (store->seq_waiting (store, NULL, note_json, out, &err));
   assert_string_equal (out,
                        "{ \"_id\" : { \"s\" : \"s\", \"q\" : \"\\\"k1\\\"\" }, \"n\" : 2, "
                        "\"head\" : \"h1\", \"sequenceIndex\" : 0, \"status\" : "
                        "\"PENDING\", \"error\" : { \"type\" : \"E\" }, \"createdAt\" : "
                        "{ \"$date\" : \"1970-01-01T00:00:01Z\" } }\n");
   {
      seen_t seen = {{0}, false};
      int64_t before;
      assert_true (store->seq_entries (store, "s", "\"k1\"", note_id, &seen, &err));
      assert_string_equal (seen.ids, "h1 h2 "); /* x is RESOLVED */
      assert_true (store->seq_before (store, "s", "\"k1\"", 1, &before, &err));
      assert_int_equal (before, 1);
      assert_true (store->seq_before (store, "s", "\"k1\"", 0, &before, &err));
      assert_int_equal (before, 0);
   }
   bson_destroy (ids);
}

/* An entry of stream s with a clusterTime and, when claimed_until is set,
 * held by a replay until then. */
static void
put_claim (fw_dlq_store_t *store, const char *id, uint32_t ct, const char *seq,
           int64_t claimed_until)
{
   bson_t *e = BCON_NEW ("_id", BCON_UTF8 (id), "streamName", BCON_UTF8 ("s"), "status",
                         BCON_UTF8 (claimed_until ? "REPROCESSING" : "PENDING"), "clusterTime",
                         BCON_TIMESTAMP (ct, 1), "createdAt", BCON_DATE_TIME (1000 - ct));
   bool inserted;
   fw_error_t err;
   if (seq) {
      BSON_APPEND_UTF8 (e, "sequenceId", seq);
   }
   if (claimed_until) {
      BSON_APPEND_DATE_TIME (e, "claimedUntil", claimed_until);
   }
   assert_true (store->put (store, e, &inserted, &err));
   bson_destroy (e);
}

static void
claim_ids (fw_dlq_store_t *store, const fw_dlq_query_t *q, const char *seq, bool in_seq,
           const char *want)
{
   fw_dlq_claimable_t c = {seq, in_seq, 0, 5000};
   seen_t s = {{0}, false};
   fw_error_t err;
   assert_true (store->claimable (store, q, &c, note_id, &s, &err));
   assert_string_equal (s.ids, want);
}

static void
claimable_leaves_live_claims_out_oldest_cluster_time_first (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {&f, "PENDING,REPROCESSING", NULL, 0, false};

   put_claim (store, "late", 30, NULL, 0);
   put_claim (store, "early", 10, "\"k\"", 0);
   put_claim (store, "held", 5, NULL, 9000); /* a live claim */
   put_claim (store, "expired", 20, "\"j\"", 4000);
   claim_ids (store, &q, NULL, false, "early expired late ");
   claim_ids (store, &q, NULL, true, "early expired ");
   claim_ids (store, &q, "\"j\"", false, "expired ");
   q.limit = 1;
   claim_ids (store, &q, NULL, false, "early ");
}

static void
claimable_leaves_entries_out_of_reprocess_attempts (void **state)
{
   fw_dlq_store_t *store = *state;
   fw_dlq_query_t q = {NULL, "PENDING", NULL, 0, false};
   fw_dlq_claimable_t c = {NULL, false, 2, 5000};
   bson_t *tried = BCON_NEW ("_id", BCON_UTF8 ("tried"), "status", BCON_UTF8 ("PENDING"),
                             "reprocessAttempts", BCON_INT32 (2));
   bson_t *once = BCON_NEW ("_id", BCON_UTF8 ("once"), "status", BCON_UTF8 ("PENDING"),
                            "reprocessAttempts", BCON_INT64 (1));
   seen_t s = {{0}, false};
   bool inserted;
   fw_error_t err;

   put_claim (store, "never", 1, NULL, 0);
   assert_true (store->put (store, tried, &inserted, &err));
   assert_true (store->put (store, once, &inserted, &err));
   assert_true (store->claimable (store, &q, &c, note_id, &s, &err));
   assert_string_equal (s.ids, "once never ");
   bson_destroy (tried);
   bson_destroy (once);
}

static char *
json_of (fw_dlq_store_t *store, const char *id)
{
   bson_t entry;
   bool found;
   fw_error_t err;
   char *json;
   assert_true (store->find_by_id (store, id, &entry, &found, &err));
   assert_true (found);
   json = bson_as_relaxed_extended_json (&entry, NULL);
   bson_destroy (&entry);
   return json;
}

static void
claim_extend_settle_and_release_a_stale_claim (void **state)
{
   fw_dlq_store_t *store = *state;
   bson_value_t id = {.value_type = BSON_TYPE_UTF8};
   bson_t *diag = BCON_NEW ("note", BCON_UTF8 ("n1"));
   fw_dlq_outcome_t requeue = {FW_DLQ_REQUEUE, 6000, false, "E", "boom", diag, 0, 0};
   fw_dlq_outcome_t resolve = {FW_DLQ_RESOLVE, 8000, true, NULL, NULL, NULL, 0, 0};
   bson_t out;
   bool got, held;
   fw_error_t err;
   char *json;

   id.value.v_utf8.str = (char *) "c";
   id.value.v_utf8.len = 1;
   three (store);
   assert_true (store->claim (store, "t", &id, "me", 5000, 9000, &out, &got, &err));
   assert_false (got); /* c is of stream s */
   bson_destroy (&out);
   assert_true (store->claim (store, "s", &id, "me", 5000, 9000, &out, &got, &err));
   assert_true (got);
   json = bson_as_relaxed_extended_json (&out, NULL);
   assert_non_null (strstr (json, "\"status\" : \"REPROCESSING\""));
   assert_non_null (strstr (json, "\"claimedBy\" : \"me\""));
   bson_free (json);
   bson_destroy (&out);
   assert_true (store->claim (store, "s", &id, "you", 5000, 9000, &out, &got, &err));
   assert_false (got); /* a live claim */
   bson_destroy (&out);
   assert_true (store->extend (store, &id, "you", 9500, &held, &err));
   assert_false (held);
   assert_true (store->extend (store, &id, "me", 9500, &held, &err));
   assert_true (held);

   assert_true (store->settle (store, &id, "me", &requeue, &held, &err));
   assert_true (held);
   json = json_of (store, "c");
   assert_non_null (strstr (json, "\"status\" : \"PENDING\""));
   assert_null (strstr (json, "claimedBy"));
   assert_non_null (strstr (json, "\"reprocessAttempts\" : 1"));
   assert_non_null (strstr (json,
                            "\"lastReprocessError\" : { \"type\" : \"E\", "
                            "\"message\" : \"boom\" }"));
   assert_non_null (strstr (json, "\"diagnostics\" : { \"note\" : \"n1\" }"));
   assert_non_null (strstr (json,
                            "\"action\" : \"requeued\", \"actor\" : \"me\", "
                            "\"result\" : \"E: boom\""));
   bson_free (json);

   assert_true (store->claim (store, "s", &id, "me", 7000, 7500, &out, &got, &err));
   assert_true (got);
   bson_destroy (&out);
   assert_true (store->release_stale (store, &id, 7400, &err)); /* not stale yet */
   assert_true (store->settle (store, &id, "me", &resolve, &held, &err));
   assert_true (held);
   json = json_of (store, "c");
   assert_non_null (strstr (json, "\"status\" : \"RESOLVED\""));
   assert_non_null (strstr (json, "\"resolution\" : \"SKIPPED\""));
   bson_free (json);
   assert_true (store->settle (store, &id, "me", &resolve, &held, &err));
   assert_false (held); /* no claim any more */

   id.value.v_utf8.str = (char *) "b";
   assert_true (store->claim (store, "t", &id, "gone", 7000, 7500, &out, &got, &err));
   bson_destroy (&out);
   assert_true (store->release_stale (store, &id, 8000, &err));
   json = json_of (store, "b");
   assert_non_null (strstr (json, "\"status\" : \"PENDING\""));
   assert_null (strstr (json, "claimedUntil"));
   bson_free (json);
   bson_destroy (diag);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown (query_filters_oldest_first_without_documents, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (query_ids_match_the_entry_id_or_the_event_id, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (query_refuses_a_bad_status_and_a_mongodb_filter, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (tally_groups_and_finds_the_oldest_pending, setup, teardown),
      cmocka_unit_test_setup_teardown (discard_and_purge_touch_only_the_selected_ids_still_matching,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (put_replaces_an_entry_with_the_same_id, setup, teardown),
      cmocka_unit_test_setup_teardown (sequences_list_documents_and_waiting_groups, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (claimable_leaves_live_claims_out_oldest_cluster_time_first,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (claimable_leaves_entries_out_of_reprocess_attempts, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (claim_extend_settle_and_release_a_stale_claim, setup,
                                       teardown),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
