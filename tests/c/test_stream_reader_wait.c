/* The reader's timed waits (stream_reader.c), which run on the monotonic
 * clock (mono_cond.h): a reader held back (the stream's thread is about to
 * stop it) hands over one idle mark and then nothing, so a caller asking
 * whether an event is ready waits until its deadline on fw_mono_ms's clock,
 * no less, and a deadline already past answers at once; a stop ends the
 * held reader's wait. No server: the change stream is opened on a port of
 * 127.0.0.1 nothing listens on and is never read while held. Every wait is
 * bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "flowwarden/clock.h"
#include "runtime/stream/stream_read-private.h"

#define WAIT_MS 40

typedef struct {
   mongoc_client_t *client;
   mongoc_collection_t *coll;
   mongoc_change_stream_t *cs;
} fixture_t;

static bool
hold_always (void *ud)
{
   (void) ud;
   return true;
}

static int
setup (void **state)
{
   static fixture_t f;
   bson_t pipeline = BSON_INITIALIZER;

   /* Port 9 (discard): nothing listens; one quick refused connection. */
   f.client = mongoc_client_new (
      "mongodb://127.0.0.1:9/?serverSelectionTimeoutMS=200"
      "&connectTimeoutMS=200");
   assert_non_null (f.client);
   f.coll = mongoc_client_get_collection (f.client, "db", "coll");
   assert_non_null (f.coll);
   f.cs = mongoc_collection_watch (f.coll, &pipeline, NULL);
   assert_non_null (f.cs);
   bson_destroy (&pipeline);
   *state = &f;
   return 0;
}

static int
teardown (void **state)
{
   fixture_t *f = *state;
   mongoc_change_stream_destroy (f->cs);
   mongoc_collection_destroy (f->coll);
   mongoc_client_destroy (f->client);
   return 0;
}

static void
held_reader_ready_waits_until_its_monotonic_deadline (void **state)
{
   fixture_t *f = *state;
   fw_stream_reader_t *r = fw_stream_reader_start (f->cs, 16, 1 << 20, hold_always, NULL);
   const bson_t *doc = NULL;
   bson_error_t error;
   int64_t deadline_ms;

   assert_non_null (r);
   /* The idle mark the held reader hands over: no event, no error. */
   assert_false (fw_stream_reader_next (r, &doc));
   assert_null (doc);
   assert_false (fw_stream_reader_error (r, &error));

   deadline_ms = fw_mono_ms () + WAIT_MS;
   assert_false (fw_stream_reader_ready (r, deadline_ms));
   assert_true (fw_mono_ms () >= deadline_ms); /* not cut short */

   /* A deadline already past: the answer at once, still nothing. */
   assert_false (fw_stream_reader_ready (r, fw_mono_ms () - 1));

   fw_stream_reader_stop (r); /* ends the held reader's wait: returns */
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown (held_reader_ready_waits_until_its_monotonic_deadline, setup,
                                       teardown),
   };
   int rc;

   mongoc_init ();
   rc = cmocka_run_group_tests (tests, NULL, NULL);
   mongoc_cleanup ();
   return rc;
}
