/*
 * The reader's copies (stream_reader.c, issue 41) against the MongoDB
 * stand-in: events are copied out of libmongoc's batch into blocks shared by
 * many small events, and an event over a quarter of a block gets a buffer
 * of its own. Whatever block an event sits in, the stream's thread gets
 * every event once, in order, each with the resume token the change stream
 * had after it (its _id, or at a batch's end the post-batch token), while
 * the read-ahead bound makes the reader wait; and a reader stopped with
 * events still waiting frees them (the ASan build checks the frees).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/stream/stream_read-private.h"
#include "standin_process.h"

#define DB "reader_blocks"
#define EVENTS 600
#define BIG_EVERY 97      /* every 97th document is a big one ... */
#define BIG_BYTES 20000   /* ... over a quarter of a block (32 KiB) */
#define READ_AHEAD 100000 /* bytes: the reader waits for room many times */
#define DEADLINE_MS 60000

static standin_t g_standin;
static mongoc_client_t *g_client;   /* the writer's */
static mongoc_client_t *g_reader_c; /* the change stream's (the reader's alone) */

static int
setup (void **state)
{
   (void) state;
   mongoc_init ();
   if (!standin_start (&g_standin)) {
      return -1;
   }
   g_client = mongoc_client_new (g_standin.uri);
   g_reader_c = mongoc_client_new (g_standin.uri);
   return g_client && g_reader_c ? 0 : -1;
}

static int
teardown (void **state)
{
   int status;
   (void) state;
   mongoc_client_destroy (g_reader_c);
   mongoc_client_destroy (g_client);
   status = standin_stop (&g_standin);
   mongoc_cleanup ();
   return (WIFEXITED (status) && WEXITSTATUS (status) == 0) ? 0 : -1;
}

/* Opens a change stream on coll (nothing read yet), then inserts EVENTS
 * documents {n, pad}: small ones, and a big one every BIG_EVERY. */
static mongoc_change_stream_t *
watch_and_insert (const char *coll_name)
{
   mongoc_collection_t *rc = mongoc_client_get_collection (g_reader_c, DB, coll_name);
   mongoc_collection_t *wc = mongoc_client_get_collection (g_client, DB, coll_name);
   bson_t pipeline = BSON_INITIALIZER;
   bson_t *opts = BCON_NEW ("maxAwaitTimeMS", BCON_INT64 (200), "batchSize", BCON_INT32 (128));
   mongoc_change_stream_t *cs = mongoc_collection_watch (rc, &pipeline, opts);
   char *big = malloc (BIG_BYTES + 1);
   bson_error_t err;

   assert_non_null (big);
   memset (big, 'b', BIG_BYTES);
   big[BIG_BYTES] = '\0';
   assert_false (mongoc_change_stream_error_document (cs, &err, NULL));
   for (int i = 0; i < EVENTS; i++) {
      bson_t *doc = BCON_NEW ("n", BCON_INT32 (i), "pad",
                              BCON_UTF8 (i % BIG_EVERY == 5 ? big : "a small document"));
      assert_true (mongoc_collection_insert_one (wc, doc, NULL, NULL, &err));
      bson_destroy (doc);
   }
   free (big);
   bson_destroy (opts);
   bson_destroy (&pipeline);
   mongoc_collection_destroy (wc);
   mongoc_collection_destroy (rc);
   return cs;
}

/* The event's fullDocument.n, or -1. */
static int
doc_n (const bson_t *ev)
{
   bson_iter_t it;
   if (bson_iter_init (&it, ev) && bson_iter_find_descendant (&it, "fullDocument.n", &it) &&
       BSON_ITER_HOLDS_INT32 (&it)) {
      return bson_iter_int32 (&it);
   }
   return -1;
}

/* Whether tok is the event's _id. */
static bool
token_is_id (const bson_t *ev, const bson_t *tok)
{
   bson_iter_t it;
   const uint8_t *data;
   uint32_t len;
   if (!bson_iter_init_find (&it, ev, "_id") || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   return len == tok->len && memcmp (data, bson_get_data (tok), len) == 0;
}

static void
every_event_once_in_order_with_its_token (void **state)
{
   mongoc_change_stream_t *cs = watch_and_insert ("order");
   fw_stream_reader_t *r = fw_stream_reader_start (cs, 64, READ_AHEAD, NULL, NULL);
   int64_t deadline = fw_mono_ms () + DEADLINE_MS;
   int next = 0, not_id = 0, bigs = 0;
   bson_error_t err;

   (void) state;
   assert_non_null (r);
   while (next < EVENTS && fw_mono_ms () < deadline) {
      const bson_t *ev;
      const bson_t *tok;
      if (!fw_stream_reader_next (r, &ev)) {
         assert_false (fw_stream_reader_error (r, &err));
         continue; /* idle: the stand-in had no more yet */
      }
      assert_int_equal (doc_n (ev), next);
      bigs += ev->len > BIG_BYTES;
      tok = fw_stream_reader_resume_token (r);
      assert_false (bson_empty (tok));
      /* The post-batch token only at a batch's end: most are the _id. */
      not_id += !token_is_id (ev, tok);
      next++;
   }
   assert_int_equal (next, EVENTS);
   assert_int_equal (bigs, (EVENTS - 5 + BIG_EVERY - 1) / BIG_EVERY);
   assert_true (not_id <= EVENTS / 64 + 1);
   fw_stream_reader_stop (r);
   mongoc_change_stream_destroy (cs);
}

/* Stopped after a few events, with what it read ahead (small and big events
 * in several blocks) still waiting: all freed, nothing handed out again. */
static void
stop_with_events_waiting (void **state)
{
   mongoc_change_stream_t *cs = watch_and_insert ("stop");
   fw_stream_reader_t *r = fw_stream_reader_start (cs, 1000, (size_t) 4 * 1024 * 1024, NULL, NULL);
   int64_t deadline = fw_mono_ms () + DEADLINE_MS;
   int got = 0;

   (void) state;
   assert_non_null (r);
   while (got < 10 && fw_mono_ms () < deadline) {
      const bson_t *ev;
      if (fw_stream_reader_next (r, &ev)) {
         assert_int_equal (doc_n (ev), got);
         got++;
      }
   }
   assert_int_equal (got, 10);
   /* Let the reader fill its read-ahead (bounded wait for it to be ready). */
   assert_true (fw_stream_reader_ready (r, fw_mono_ms () + DEADLINE_MS));
   fw_stream_reader_stop (r);
   mongoc_change_stream_destroy (cs);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (every_event_once_in_order_with_its_token),
      cmocka_unit_test (stop_with_events_waiting),
   };
   return cmocka_run_group_tests (tests, setup, teardown);
}
