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

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (a_token_starts_with_its_cluster_time),
      cmocka_unit_test (anything_else_has_no_time),
      cmocka_unit_test (a_new_snapshot_wants_its_first_chunk_and_keeps_its_progress),
   };
   return cmocka_run_group_tests_name ("snapshot", tests, NULL, NULL);
}
