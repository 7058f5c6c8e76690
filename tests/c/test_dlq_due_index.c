/*
 * The deferred retries' claim and its index (issue 37), against the stand-in.
 * A stream's DLQ with many entries (5,000; FW_CHAOS_LONG=1: 100,000) and a few
 * due SCHEDULED ones: the store a stream opens creates
 * {streamName, status, nextAttemptAt}, and the claim's findAndModify (read
 * from libmongoc's command monitoring) has the shape that index serves:
 * equality on its leading fields (streamName, and status in each $or branch),
 * then the sort and the range on nextAttemptAt (MongoDB manual, "The ESR
 * (Equality, Sort, Range) Guideline"; a $or is planned branch by branch,
 * "$or Clauses and Indexes"). Pass/fail is on that; the claim's time is
 * printed (the stand-in scans whatever the indexes, so it is a figure to
 * compare against a real server, not a goal).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/dlq/dlq_store.h"
#include "standin_process.h"

#define DB "dueidx"
#define DUE 16

static standin_t g_standin;
static bson_t *g_claim; /* the last findAndModify sent */

static void
started (const mongoc_apm_command_started_t *e)
{
   if (strcmp (mongoc_apm_command_started_get_command_name (e), "findAndModify") == 0) {
      bson_destroy (g_claim);
      g_claim = bson_copy (mongoc_apm_command_started_get_command (e));
   }
}

static int
group_setup (void **state)
{
   (void) state;
   return standin_group_start (&g_standin);
}

static int
group_teardown (void **state)
{
   (void) state;
   bson_destroy (g_claim);
   return standin_group_stop (&g_standin);
}

/* n PENDING entries of stream s (and of another stream), then DUE SCHEDULED
 * ones of s due a minute ago. */
static void
fill (mongoc_collection_t *coll, int n, int64_t now_ms)
{
   mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts (coll, NULL);
   bson_error_t err;

   for (int i = 0; i < n + DUE; i++) {
      bson_t *doc;
      if (i < n) {
         doc = BCON_NEW ("streamName", BCON_UTF8 (i % 2 ? "s" : "other"), "status",
                         BCON_UTF8 ("PENDING"), "createdAt", BCON_DATE_TIME (now_ms - i));
      } else {
         doc = BCON_NEW ("streamName", BCON_UTF8 ("s"), "status", BCON_UTF8 ("SCHEDULED"),
                         "nextAttemptAt", BCON_DATE_TIME (now_ms - 60000 + i - n), "createdAt",
                         BCON_DATE_TIME (now_ms));
      }
      assert_true (mongoc_bulk_operation_insert_with_opts (bulk, doc, NULL, &err));
      bson_destroy (doc);
   }
   assert_true (mongoc_bulk_operation_execute (bulk, NULL, &err));
   mongoc_bulk_operation_destroy (bulk);
}

/* The key of the index named name, or NULL. */
static bson_t *
index_key (mongoc_collection_t *coll, const char *name)
{
   mongoc_cursor_t *cur = mongoc_collection_find_indexes_with_opts (coll, NULL);
   const bson_t *doc;
   bson_t *key = NULL;
   bson_iter_t it;

   while (!key && mongoc_cursor_next (cur, &doc)) {
      if (bson_iter_init_find (&it, doc, "name") && BSON_ITER_HOLDS_UTF8 (&it) &&
          strcmp (bson_iter_utf8 (&it, NULL), name) == 0 && bson_iter_init_find (&it, doc, "key") &&
          BSON_ITER_HOLDS_DOCUMENT (&it)) {
         const uint8_t *data;
         uint32_t len;
         bson_iter_document (&it, &len, &data);
         key = bson_new_from_data (data, len);
      }
   }
   mongoc_cursor_destroy (cur);
   return key;
}

/* The equality fields of clause (a document of a query) into eq (a
 * "|"-joined list, in any order), the fields with operators into range. */
static void
fields_of (bson_iter_t *clause, char *eq, char *range, size_t size)
{
   while (bson_iter_next (clause)) {
      const char *k = bson_iter_key (clause);
      if (k[0] == '$') {
         continue;
      }
      if (BSON_ITER_HOLDS_DOCUMENT (clause)) {
         bson_iter_t ops;
         assert_true (bson_iter_recurse (clause, &ops) && bson_iter_next (&ops));
         assert_true (bson_iter_key (&ops)[0] == '$'); /* an operator, not a subdocument */
         snprintf (range + strlen (range), size - strlen (range), "%s|", k);
      } else {
         snprintf (eq + strlen (eq), size - strlen (eq), "%s|", k);
      }
   }
}

/* Whether the index key (in order) serves the query of one $or branch:
 * its first fields are the equality fields (any order), then nextAttemptAt
 * (the sort) and the branch's range fields may use only what follows. */
static bool
key_serves (const bson_t *key, const char *eq, const char *sort_field)
{
   bson_iter_t it;
   int n_eq = 0, seen = 0;
   char want[64];

   for (const char *p = eq; *p; p++) {
      n_eq += *p == '|';
   }
   assert_true (bson_iter_init (&it, key));
   while (seen < n_eq && bson_iter_next (&it)) {
      snprintf (want, sizeof want, "%s|", bson_iter_key (&it));
      if (!strstr (eq, want)) {
         return false; /* a non-equality field before the equalities end */
      }
      seen++;
   }
   return seen == n_eq && bson_iter_next (&it) && strcmp (bson_iter_key (&it), sort_field) == 0;
}

static void
the_claim_of_a_due_retry_has_the_shape_its_index_serves (void **state)
{
   const char *long_run = getenv ("FW_CHAOS_LONG");
   int n = long_run && strcmp (long_run, "1") == 0 ? 100000 : 5000;
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
   mongoc_collection_t *coll = mongoc_client_get_collection (client, DB, "_fw_dlq");
   fw_dlq_store_t *store;
   fw_error_t err;
   bson_t *key;
   bson_iter_t it, sort, query, or, branch;
   int64_t now = fw_now_ms ();
   double t0, t1;
   int got_n = 0;

   (void) state;
   memset (&err, 0, sizeof err);
   fill (coll, n, now);
   mongoc_apm_set_command_started_cb (cbs, started);
   assert_true (mongoc_client_set_apm_callbacks (client, cbs, NULL));
   store = fw_dlq_store_mongo_new (client, DB, "_fw_dlq", NULL, 1, &err);
   assert_non_null (store);
   assert_true (fw_dlq_store_can (store, FW_DLQ_CAN_DEFER));
   assert_non_null (store->claim_due);

   /* The index exists, with this key in this order. */
   key = index_key (coll, "streamName_status_nextAttemptAt");
   assert_non_null (key);
   {
      char *json = bson_as_relaxed_extended_json (key, NULL);
      assert_string_equal (json, "{ \"streamName\" : 1, \"status\" : 1, \"nextAttemptAt\" : 1 }");
      bson_free (json);
   }

   /* Every due retry claimed, earliest first; the time per claim printed. */
   t0 = now_s ();
   for (int i = 0; i < DUE + 1; i++) {
      bson_t out;
      bool got = false;
      assert_true (store->claim_due (store, "s", "test", fw_now_ms (), fw_now_ms () + 60000, &out,
                                     &got, &err));
      got_n += got;
      bson_destroy (&out);
   }
   t1 = now_s ();
   assert_int_equal (got_n, DUE);
   fprintf (stderr, "BENCH dlq deferred claim: %d entries, %d claims, %.2f ms per claim\n", n + DUE,
            DUE + 1, (t1 - t0) * 1000.0 / (DUE + 1));

   /* The shape of the claim: { streamName: s, $or: [ {status, nextAttemptAt
    * range, ...}, ... ] }, sorted by nextAttemptAt; the index serves each
    * branch. */
   assert_non_null (g_claim);
   assert_true (bson_iter_init_find (&it, g_claim, "sort") && bson_iter_recurse (&it, &sort) &&
                bson_iter_next (&sort));
   assert_string_equal (bson_iter_key (&sort), "nextAttemptAt");
   assert_false (bson_iter_next (&sort));
   assert_true (bson_iter_init_find (&it, g_claim, "query") && bson_iter_recurse (&it, &query));
   {
      char top_eq[256] = "", top_range[256] = "";
      int branches = 0;
      fields_of (&query, top_eq, top_range, sizeof top_eq);
      assert_string_equal (top_eq, "streamName|");
      assert_string_equal (top_range, "");
      assert_true (bson_iter_init_find (&it, g_claim, "query") && bson_iter_recurse (&it, &query) &&
                   bson_iter_find (&query, "$or") && bson_iter_recurse (&query, & or));
      while (bson_iter_next (& or)) {
         char eq[256], range[256] = "";
         snprintf (eq, sizeof eq, "%s", top_eq);
         assert_true (bson_iter_recurse (& or, &branch));
         fields_of (&branch, eq, range, sizeof eq);
         assert_non_null (strstr (range, "nextAttemptAt|"));
         assert_true (key_serves (key, eq, "nextAttemptAt"));
         branches++;
      }
      assert_true (branches >= 1);
   }

   bson_destroy (key);
   fw_dlq_store_destroy (store);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
   mongoc_apm_callbacks_destroy (cbs);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (the_claim_of_a_due_retry_has_the_shape_its_index_serves),
   };
   return cmocka_run_group_tests_name ("dlq_due_index", tests, group_setup, group_teardown);
}
