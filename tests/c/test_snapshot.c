/*
 * snapshot.c without a server (issue 28): where a resume token puts the
 * stream (the high watermark's test), and a snapshot's state before its
 * first chunk. The chunks themselves are read from a server:
 * tests/integration/test_snapshot.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/snapshot/snapshot.h"

static uint64_t
time_of (const char *data)
{
   bson_t *token = BCON_NEW ("_data", BCON_UTF8 (data));
   uint64_t t = fw_snapshot_token_time (token);
   bson_destroy (token);
   return t;
}

static void
a_token_starts_with_its_cluster_time (void **state)
{
   (void) state;
   /* 0x82, then the Timestamp's 8 bytes big-endian: t = 0x6565A0B1, i = 2. */
   assert_true (time_of ("826565A0B1000000022B022C0100296E5A1004") ==
                ((uint64_t) 0x6565A0B1 << 32 | 2));
   assert_true (time_of ("826565a0b100000002") == ((uint64_t) 0x6565A0B1 << 32 | 2));
}

static void
anything_else_has_no_time (void **state)
{
   bson_t *no_data = BCON_NEW ("x", BCON_INT32 (1));
   bson_t *not_string = BCON_NEW ("_data", BCON_INT32 (1));

   (void) state;
   assert_true (time_of ("") == 0);
   assert_true (time_of ("8265") == 0);               /* too short */
   assert_true (time_of ("016565A0B100000002") == 0); /* not a Timestamp first */
   assert_true (time_of ("8265G5A0B100000002") == 0); /* not hex */
   assert_true (fw_snapshot_token_time (NULL) == 0);
   assert_true (fw_snapshot_token_time (no_data) == 0);
   assert_true (fw_snapshot_token_time (not_string) == 0);
   bson_destroy (no_data);
   bson_destroy (not_string);
}

static void
a_new_snapshot_wants_its_first_chunk_and_keeps_its_progress (void **state)
{
   fw_stream_config_t cfg;
   fw_snapshot_progress_t from;
   fw_snapshot_t *s;
   const fw_snapshot_progress_t *p;
   bson_t *token = BCON_NEW ("_data", BCON_UTF8 ("82FFFFFFFF00000001"));

   (void) state;
   memset (&cfg, 0, sizeof cfg);
   cfg.name = "s";
   cfg.database = "shop";
   cfg.collection = "orders";
   cfg.snapshot.chunk_size = 10;
   fw_snapshot_progress_init (&from);
   from.has_after = true;
   BSON_APPEND_INT32 (&from.after, "_id", 41);
   from.documents = 41;
   assert_non_null (s = fw_snapshot_new (&cfg, &from));
   fw_snapshot_progress_cleanup (&from);

   assert_false (fw_snapshot_chunk_open (s));
   assert_true (fw_snapshot_wants_chunk (s));
   assert_false (fw_snapshot_finished (s));
   assert_false (fw_snapshot_due (s));
   assert_false (fw_snapshot_token_past (s, token)); /* no chunk waits */
   p = fw_snapshot_progress (s);
   assert_true (p->present && p->has_after && !p->done);
   assert_int_equal (p->documents, 41);
   fw_snapshot_discard (s);
   assert_true (fw_snapshot_wants_chunk (s));
   fw_snapshot_destroy (s);
   fw_snapshot_destroy (NULL);
   bson_destroy (token);
}

/* The _id at key "_id" of doc, as an int32. */
static int32_t
id_of (const bson_t *doc)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, "_id") ? bson_iter_int32 (&it) : -1;
}

/* exactly_once (issue 39): the progress a row's transaction commits. */
static void
the_progress_past_a_row_names_it_and_keeps_the_rest (void **state)
{
   fw_stream_config_t cfg;
   fw_snapshot_progress_t from, past;
   fw_snapshot_t *s;
   fw_event_t row, bare;
   fw_error_t err;
   bson_iter_t it;
   bson_t *doc = BCON_NEW ("_id", "{", "_data", BCON_UTF8 ("fwsnapshot-1-0"), "}", "operationType",
                           BCON_UTF8 ("snapshot"), "documentKey", "{", "_id", BCON_INT32 (57), "}",
                           "fullDocument", "{", "_id", BCON_INT32 (57), "}");
   bson_t *nokey = BCON_NEW ("_id", "{", "_data", BCON_UTF8 ("fwsnapshot-1-1"), "}",
                             "operationType", BCON_UTF8 ("snapshot"));

   (void) state;
   memset (&cfg, 0, sizeof cfg);
   cfg.name = "s";
   cfg.database = "shop";
   cfg.collection = "orders";
   cfg.snapshot.chunk_size = 10;
   fw_snapshot_progress_init (&from);
   from.has_after = from.has_until = from.has_filter = true;
   BSON_APPEND_INT32 (&from.after, "_id", 41);
   BSON_APPEND_INT32 (&from.until, "_id", 99);
   BSON_APPEND_INT32 (&from.filter, "x", 1);
   from.documents = 41;
   assert_non_null (s = fw_snapshot_new (&cfg, &from));
   fw_snapshot_progress_cleanup (&from);
   assert_true (fw_event_parse (doc, &row, &err));
   assert_true (fw_event_parse (nokey, &bare, &err));

   fw_snapshot_progress_init (&past);
   BSON_APPEND_INT32 (&past.after, "_id", 7); /* overwritten */
   assert_true (fw_snapshot_progress_past (s, &row, &past));
   assert_true (past.present && !past.done && past.has_after && past.has_until);
   assert_true (past.has_filter);
   assert_int_equal (id_of (&past.after), 57);
   assert_int_equal (id_of (&past.until), 99);
   assert_true (bson_iter_init_find (&it, &past.filter, "x") && bson_iter_int32 (&it) == 1);
   assert_int_equal (past.documents, 41);
   /* The snapshot's own progress (stored after a chunk) is untouched. */
   assert_int_equal (id_of (&fw_snapshot_progress (s)->after), 41);
   assert_false (fw_snapshot_progress_past (s, &bare, &past)); /* no documentKey._id */
   fw_snapshot_progress_cleanup (&past);
   fw_snapshot_destroy (s);
   bson_destroy (doc);
   bson_destroy (nokey);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (a_token_starts_with_its_cluster_time),
      cmocka_unit_test (anything_else_has_no_time),
      cmocka_unit_test (a_new_snapshot_wants_its_first_chunk_and_keeps_its_progress),
      cmocka_unit_test (the_progress_past_a_row_names_it_and_keeps_the_rest),
   };
   return cmocka_run_group_tests_name ("snapshot", tests, NULL, NULL);
}
