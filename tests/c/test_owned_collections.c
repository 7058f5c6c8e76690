/*
 * owned_collections.c: the one list of the collections flowwarden writes, which database-wide
 * streams exclude (issue 23 §5).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "runtime/collections/owned_collections.h"

typedef struct {
   char seen[16][128];
   int n;
   int stop_after; /* 0: never */
} list_t;

static bool
collect (void *ud, const char *database, const char *collection)
{
   list_t *l = ud;
   assert_true (l->n < 16);
   snprintf (l->seen[l->n++], sizeof l->seen[0], "%s.%s", database, collection);
   return l->stop_after == 0 || l->n < l->stop_after;
}

static void
assert_list (const list_t *l, const char *const *want, int n)
{
   assert_int_equal (l->n, n);
   for (int i = 0; i < n; i++) {
      assert_string_equal (l->seen[i], want[i]);
   }
}

static fw_stream_config_t
stream_in (char *database)
{
   fw_stream_config_t cfg;
   memset (&cfg, 0, sizeof cfg);
   cfg.name = "s";
   cfg.database = database;
   return cfg;
}

static void
a_stream_without_dlq_owns_its_checkpoints_and_leases (void **state)
{
   (void) state;
   fw_stream_config_t cfg = stream_in ("shop");
   list_t l = {0};
   const char *const want[] = {"shop._fw_checkpoints", "shop._fw_leases", "shop._fw_members",
                               "shop._fw_snapshot_marks"};
   assert_true (fw_owned_collections_each (&cfg, collect, &l));
   assert_list (&l, want, 4);
}

static void
a_dlq_brings_its_sequences_sequenced_or_not (void **state)
{
   (void) state;
   fw_stream_config_t cfg = stream_in ("shop");
   list_t l = {0};
   const char *const want[] = {"shop._fw_checkpoints", "shop._fw_leases",
                               "shop._fw_members",     "shop._fw_snapshot_marks",
                               "shop.orders_dlq",      "shop.orders_dlq_sequences"};
   cfg.dlq.enabled = true;
   cfg.dlq.collection = "orders_dlq";
   assert_true (fw_owned_collections_each (&cfg, collect, &l));
   assert_list (&l, want, 6);
}

static void
a_dlq_in_another_database_is_listed_there (void **state)
{
   (void) state;
   fw_stream_config_t cfg = stream_in ("shop");
   list_t l = {0};
   const char *const want[] = {"shop._fw_checkpoints", "shop._fw_leases",
                               "shop._fw_members",     "shop._fw_snapshot_marks",
                               "ops._fw_dlq",          "ops._fw_dlq_sequences"};
   cfg.dlq.enabled = true;
   cfg.dlq.collection = "_fw_dlq";
   cfg.dlq.database = "ops";
   assert_true (fw_owned_collections_each (&cfg, collect, &l));
   assert_list (&l, want, 6);
}

static void
the_default_dlq_of_send_to_dlq_is_listed_and_a_memory_dlq_is_not (void **state)
{
   (void) state;
   fw_stream_config_t cfg = stream_in ("shop");
   list_t l = {0};
   const char *const want[] = {"shop._fw_checkpoints", "shop._fw_leases",
                               "shop._fw_members",     "shop._fw_snapshot_marks",
                               "shop._fw_dlq",         "shop._fw_dlq_sequences"};
   cfg.dlq.enabled = true;
   cfg.dlq.memory = true;
   cfg.dlq.collection = "mem_dlq";
   cfg.dlq_fallback.enabled = true;
   cfg.dlq_fallback.collection = "_fw_dlq";
   assert_true (fw_owned_collections_each (&cfg, collect, &l));
   assert_list (&l, want, 6);
}

static void
the_walk_stops_when_asked (void **state)
{
   (void) state;
   fw_stream_config_t cfg = stream_in ("shop");
   list_t l = {0};
   l.stop_after = 3;
   cfg.dlq.enabled = true;
   cfg.dlq.collection = "_fw_dlq";
   assert_false (fw_owned_collections_each (&cfg, collect, &l));
   assert_int_equal (l.n, 3);
}

static void
the_sequences_name_is_the_dlq_name_and_a_suffix_of_any_length (void **state)
{
   (void) state;
   char long_name[1000];
   char *name;
   memset (long_name, 'd', sizeof long_name - 1);
   long_name[sizeof long_name - 1] = '\0';
   name = fw_dlq_sequences_name (long_name);
   assert_non_null (name);
   assert_int_equal (strlen (name), strlen (long_name) + strlen ("_sequences"));
   assert_string_equal (name + strlen (long_name), "_sequences");
   bson_free (name);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (a_stream_without_dlq_owns_its_checkpoints_and_leases),
      cmocka_unit_test (a_dlq_brings_its_sequences_sequenced_or_not),
      cmocka_unit_test (a_dlq_in_another_database_is_listed_there),
      cmocka_unit_test (the_default_dlq_of_send_to_dlq_is_listed_and_a_memory_dlq_is_not),
      cmocka_unit_test (the_walk_stops_when_asked),
      cmocka_unit_test (the_sequences_name_is_the_dlq_name_and_a_suffix_of_any_length),
   };
   return cmocka_run_group_tests_name ("owned_collections", tests, NULL, NULL);
}
