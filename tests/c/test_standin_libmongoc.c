/*
 * The MongoDB stand-in, driven by libmongoc 1.23: the driver flowwarden uses must not be able
 * to tell it from a one-node MongoDB 6.0 replica set. Each case talks to one stand-in started
 * by the group setup (fork/exec of tests/standin/mongo_standin.py --port 0).
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

#include "standin_process.h"

static standin_t g_standin;

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
   return standin_group_stop (&g_standin);
}

/* ---- helpers ---- */

typedef struct {
   int aggregates;
   int getmores;
} counters_t;

static void
on_started (const mongoc_apm_command_started_t *event)
{
   counters_t *c = mongoc_apm_command_started_get_context (event);
   const char *name = mongoc_apm_command_started_get_command_name (event);
   if (strcmp (name, "aggregate") == 0) {
      c->aggregates++;
   } else if (strcmp (name, "getMore") == 0) {
      c->getmores++;
   }
}

static mongoc_client_t *
new_client (counters_t *counters)
{
   mongoc_client_t *client = mongoc_client_new (g_standin.uri);
   assert_non_null (client);
   mongoc_client_set_error_api (client, MONGOC_ERROR_API_VERSION_2);
   if (counters) {
      mongoc_apm_callbacks_t *cbs = mongoc_apm_callbacks_new ();
      mongoc_apm_set_command_started_cb (cbs, on_started);
      mongoc_client_set_apm_callbacks (client, cbs, counters);
      mongoc_apm_callbacks_destroy (cbs);
   }
   return client;
}

static void
run_admin (mongoc_client_t *client, const char *json)
{
   bson_error_t error;
   bson_t *cmd = bson_new_from_json ((const uint8_t *) json, -1, &error);
   assert_non_null (cmd);
   bson_t reply;
   bool ok = mongoc_client_command_simple (client, "admin", cmd, NULL, &reply, &error);
   if (!ok) {
      fail_msg ("command %s failed: %s", json, error.message);
   }
   bson_destroy (&reply);
   bson_destroy (cmd);
}

static void
insert_json (mongoc_collection_t *coll, const char *json)
{
   bson_error_t error;
   bson_t *doc = bson_new_from_json ((const uint8_t *) json, -1, &error);
   assert_non_null (doc);
   if (!mongoc_collection_insert_one (coll, doc, NULL, NULL, &error)) {
      fail_msg ("insert %s failed: %s", json, error.message);
   }
   bson_destroy (doc);
}

/* Next event within `timeout_s`, or NULL; fails the test on a stream error. */
static const bson_t *
next_event (mongoc_change_stream_t *stream, double timeout_s)
{
   const bson_t *event = NULL;
   double deadline = now_s () + timeout_s;
   while (now_s () < deadline) {
      if (mongoc_change_stream_next (stream, &event)) {
         return event;
      }
      bson_error_t error;
      const bson_t *reply;
      if (mongoc_change_stream_error_document (stream, &error, &reply)) {
         fail_msg ("change stream error: %s", error.message);
      }
   }
   return NULL;
}

static const char *
event_str (const bson_t *event, const char *dotted)
{
   bson_iter_t it;
   if (bson_iter_init (&it, event) && bson_iter_find_descendant (&it, dotted, &it) &&
       BSON_ITER_HOLDS_UTF8 (&it)) {
      return bson_iter_utf8 (&it, NULL);
   }
   return NULL;
}

static int32_t
event_int (const bson_t *event, const char *dotted)
{
   bson_iter_t it;
   if (bson_iter_init (&it, event) && bson_iter_find_descendant (&it, dotted, &it) &&
       BSON_ITER_HOLDS_INT32 (&it)) {
      return bson_iter_int32 (&it);
   }
   return -1;
}

static mongoc_change_stream_t *
watch (mongoc_collection_t *coll, const char *opts_json)
{
   bson_error_t error;
   bson_t *opts = bson_new_from_json ((const uint8_t *) (opts_json ? opts_json : "{}"), -1, &error);
   bson_t pipeline = BSON_INITIALIZER;
   mongoc_change_stream_t *stream = mongoc_collection_watch (coll, &pipeline, opts);
   const bson_t *reply;
   if (mongoc_change_stream_error_document (stream, &error, &reply)) {
      fail_msg ("watch failed: %s", error.message);
   }
   bson_destroy (&pipeline);
   bson_destroy (opts);
   return stream;
}

/* ---- cases ---- */

static void
insert_then_find_round_trips_the_document (void **state)
{
   (void) state;
   mongoc_client_t *client = new_client (NULL);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "roundtrip");
   insert_json (coll, "{\"_id\": 1, \"name\": \"widget\", \"qty\": 5, \"tags\": [\"a\", \"b\"]}");
   insert_json (coll, "{\"_id\": 2, \"name\": \"gadget\", \"qty\": 7}");

   bson_t *filter = BCON_NEW ("qty", "{", "$gt", BCON_INT32 (6), "}");
   mongoc_cursor_t *cursor = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   const bson_t *doc;
   int n = 0;
   while (mongoc_cursor_next (cursor, &doc)) {
      assert_string_equal (event_str (doc, "name"), "gadget");
      assert_int_equal (event_int (doc, "_id"), 2);
      n++;
   }
   bson_error_t error;
   assert_false (mongoc_cursor_error (cursor, &error));
   assert_int_equal (n, 1);

   bson_t *dup = BCON_NEW ("_id", BCON_INT32 (1));
   assert_false (mongoc_collection_insert_one (coll, dup, NULL, NULL, &error));
   assert_int_equal (error.code, 11000);
   assert_non_null (strstr (error.message,
                            "E11000 duplicate key error collection: "
                            "libmongoc.roundtrip index: _id_ dup key: { _id: 1 }"));

   bson_destroy (dup);
   mongoc_cursor_destroy (cursor);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

static void
watch_delivers_insert_update_replace_delete (void **state)
{
   (void) state;
   mongoc_client_t *client = new_client (NULL);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "events");
   mongoc_change_stream_t *stream = watch (coll, NULL);

   insert_json (coll, "{\"_id\": 1, \"v\": 1}");
   bson_error_t error;
   bson_t *sel = BCON_NEW ("_id", BCON_INT32 (1));
   bson_t *upd = BCON_NEW ("$set", "{", "v", BCON_INT32 (2), "}");
   assert_true (mongoc_collection_update_one (coll, sel, upd, NULL, NULL, &error));
   bson_t *repl = BCON_NEW ("w", BCON_INT32 (3));
   assert_true (mongoc_collection_replace_one (coll, sel, repl, NULL, NULL, &error));
   assert_true (mongoc_collection_delete_one (coll, sel, NULL, NULL, &error));

   const char *expected[] = {"insert", "update", "replace", "delete"};
   for (int i = 0; i < 4; i++) {
      const bson_t *ev = next_event (stream, 10.0);
      assert_non_null (ev);
      assert_string_equal (event_str (ev, "operationType"), expected[i]);
      assert_string_equal (event_str (ev, "ns.db"), "libmongoc");
      assert_string_equal (event_str (ev, "ns.coll"), "events");
      assert_int_equal (event_int (ev, "documentKey._id"), 1);
      assert_non_null (event_str (ev, "_id._data"));
      if (i == 1) {
         assert_int_equal (event_int (ev, "updateDescription.updatedFields.v"), 2);
      }
      if (i == 2) {
         assert_int_equal (event_int (ev, "fullDocument.w"), 3);
      }
   }
   const bson_t *token = mongoc_change_stream_get_resume_token (stream);
   assert_non_null (token);

   bson_destroy (sel);
   bson_destroy (upd);
   bson_destroy (repl);
   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

/* The server labels the getMore error ResumableChangeStreamError; libmongoc re-aggregates
 * with the cached token and the next event arrives exactly once. */
static void
watch_resumes_after_labelled_getmore_error (void **state)
{
   (void) state;
   counters_t counters = {0, 0};
   mongoc_client_t *client = new_client (&counters);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "resume1");
   mongoc_change_stream_t *stream = watch (coll, NULL);
   insert_json (coll, "{\"_id\": 1}");
   const bson_t *ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_int_equal (event_int (ev, "documentKey._id"), 1);

   /* failGetMoreAfterCursorCheckout, not failCommand: mongod labels only an error it can tell
    * is a change stream's, and failCommand fails the getMore before its cursor is checked out
    * (error_labels.cpp, isResumableChangeStreamError; SERVER-46091). */
   run_admin (client,
              "{\"configureFailPoint\": \"failGetMoreAfterCursorCheckout\","
              " \"mode\": {\"times\": 1}, \"data\": {\"errorCode\": 10107}}");
   insert_json (coll, "{\"_id\": 2}");
   ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_int_equal (event_int (ev, "documentKey._id"), 2);
   assert_int_equal (counters.aggregates, 2);

   insert_json (coll, "{\"_id\": 3}");
   ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_int_equal (event_int (ev, "documentKey._id"), 3);

   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

static void
watch_resumes_after_close_connection (void **state)
{
   (void) state;
   counters_t counters = {0, 0};
   mongoc_client_t *client = new_client (&counters);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "resume2");
   mongoc_change_stream_t *stream = watch (coll, NULL);
   insert_json (coll, "{\"_id\": 1}");
   assert_non_null (next_event (stream, 10.0));

   run_admin (client,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1},"
              " \"data\": {\"failCommands\": [\"getMore\"], \"closeConnection\": true}}");
   insert_json (coll, "{\"_id\": 2}");
   const bson_t *ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_int_equal (event_int (ev, "documentKey._id"), 2);
   assert_int_equal (counters.aggregates, 2);

   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

/* No event seen yet, so libmongoc resumes with startAtOperationTime = the aggregate's
 * operationTime: the document inserted before the watch must not show up, the one after it
 * exactly once. */
static void
watch_resume_without_token_never_repeats_an_event (void **state)
{
   (void) state;
   counters_t counters = {0, 0};
   mongoc_client_t *client = new_client (&counters);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "resume3");
   insert_json (coll, "{\"_id\": \"before\"}");
   mongoc_change_stream_t *stream = watch (coll, NULL);
   /* A server-labelled resumable error (failCommand would carry no label, see above). */
   run_admin (client,
              "{\"configureFailPoint\": \"failGetMoreAfterCursorCheckout\","
              " \"mode\": {\"times\": 1}, \"data\": {\"errorCode\": 91}}");
   insert_json (coll, "{\"_id\": \"after\"}");
   const bson_t *ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_string_equal (event_str (ev, "documentKey._id"), "after");
   assert_int_equal (counters.aggregates, 2);
   insert_json (coll, "{\"_id\": \"later\"}");
   ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_string_equal (event_str (ev, "documentKey._id"), "later");

   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

static void
unlabelled_getmore_error_is_not_resumed (void **state)
{
   (void) state;
   counters_t counters = {0, 0};
   mongoc_client_t *client = new_client (&counters);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "noresume");
   mongoc_change_stream_t *stream = watch (coll, NULL);
   run_admin (client,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1},"
              " \"data\": {\"failCommands\": [\"getMore\"], \"errorCode\": 2}}");
   const bson_t *event;
   assert_false (mongoc_change_stream_next (stream, &event));
   bson_error_t error;
   const bson_t *reply;
   assert_true (mongoc_change_stream_error_document (stream, &error, &reply));
   assert_int_equal (error.code, 2);
   assert_non_null (strstr (error.message, "Failing command via 'failCommand' failpoint"));
   assert_int_equal (counters.aggregates, 1);

   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

/* Dropping the watched collection yields drop + invalidate; libmongoc's retry with
 * resumeAfter(invalidate token) gets 260, while startAfter that token works. */
static void
drop_invalidates_and_start_after_continues (void **state)
{
   (void) state;
   mongoc_client_t *client = new_client (NULL);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "inval");
   mongoc_change_stream_t *stream = watch (coll, NULL);
   insert_json (coll, "{\"_id\": 1}");
   bson_error_t error;
   assert_true (mongoc_collection_drop (coll, &error));
   const bson_t *ev = next_event (stream, 10.0);
   assert_string_equal (event_str (ev, "operationType"), "insert");
   ev = next_event (stream, 10.0);
   assert_string_equal (event_str (ev, "operationType"), "drop");
   ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_string_equal (event_str (ev, "operationType"), "invalidate");
   char *inval_token = bson_strdup (event_str (ev, "_id._data"));
   /* The stream is over: libmongoc's attempt to continue ends in no event (and, if it
    * re-aggregates with resumeAfter the invalidate token, in the server's 260). */
   const bson_t *next;
   assert_false (mongoc_change_stream_next (stream, &next));
   const bson_t *err_reply;
   if (mongoc_change_stream_error_document (stream, &error, &err_reply)) {
      printf ("# after invalidate: %s (code %u)\n", error.message, error.code);
      assert_int_equal (error.code, 260);
   }
   mongoc_change_stream_destroy (stream);

   char opts[256];
   snprintf (opts, sizeof opts, "{\"resumeAfter\": {\"_data\": \"%s\"}}", inval_token);
   bson_t *o = bson_new_from_json ((const uint8_t *) opts, -1, &error);
   bson_t pipeline = BSON_INITIALIZER;
   stream = mongoc_collection_watch (coll, &pipeline, o);
   const bson_t *reply;
   assert_true (mongoc_change_stream_error_document (stream, &error, &reply));
   assert_int_equal (error.code, 260);
   mongoc_change_stream_destroy (stream);
   bson_destroy (o);

   snprintf (opts, sizeof opts, "{\"startAfter\": {\"_data\": \"%s\"}}", inval_token);
   stream = watch (coll, opts);
   insert_json (coll, "{\"_id\": 7}");
   ev = next_event (stream, 10.0);
   assert_non_null (ev);
   assert_int_equal (event_int (ev, "documentKey._id"), 7);

   bson_destroy (&pipeline);
   bson_free (inval_token);
   mongoc_change_stream_destroy (stream);
   mongoc_collection_destroy (coll);
   mongoc_client_destroy (client);
}

/* A pooled client streams awaitable hellos; the server must block on them, not hot-loop. */
static void
pooled_client_works_with_awaitable_hello (void **state)
{
   (void) state;
   mongoc_uri_t *uri = mongoc_uri_new (g_standin.uri);
   mongoc_client_pool_t *pool = mongoc_client_pool_new (uri);
   mongoc_client_pool_set_error_api (pool, MONGOC_ERROR_API_VERSION_2);
   mongoc_client_t *client = mongoc_client_pool_pop (pool);
   mongoc_collection_t *coll = mongoc_client_get_collection (client, "libmongoc", "pooled");
   insert_json (coll, "{\"_id\": 1}");
   bson_error_t error;
   bson_t *filter = bson_new ();
   int64_t n = mongoc_collection_count_documents (coll, filter, NULL, NULL, NULL, &error);
   assert_int_equal (n, 1);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
   mongoc_client_pool_push (pool, client);
   mongoc_client_pool_destroy (pool);
   mongoc_uri_destroy (uri);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (insert_then_find_round_trips_the_document),
      cmocka_unit_test (watch_delivers_insert_update_replace_delete),
      cmocka_unit_test (watch_resumes_after_labelled_getmore_error),
      cmocka_unit_test (watch_resumes_after_close_connection),
      cmocka_unit_test (watch_resume_without_token_never_repeats_an_event),
      cmocka_unit_test (unlabelled_getmore_error_is_not_resumed),
      cmocka_unit_test (drop_invalidates_and_start_after_continues),
      cmocka_unit_test (pooled_client_works_with_awaitable_hello),
   };
   return cmocka_run_group_tests_name ("standin_libmongoc", tests, group_setup, group_teardown);
}
