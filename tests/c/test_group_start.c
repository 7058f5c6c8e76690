/*
 * group_start.c against the MongoDB stand-in: a shared stream's start in its group. The first
 * take records it (before any later write), the next ones read the same; a record nobody kept
 * alive, or a malformed one, is replaced by a new start; renewals keep it alive and never
 * create one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mongoc/mongoc.h>

#include "runtime/ha/group_start.h"
#include "runtime/ha/lease.h"
#include "standin_process.h"

#define LEASE_MS 1000
#define DB "gs"

static standin_t g_standin;
static mongoc_client_t *g_client;

static int
setup (void **state)
{
   (void) state;
   if (standin_group_start (&g_standin) != 0) {
      return -1;
   }
   g_client = mongoc_client_new (g_standin.uri);
   if (g_client) {
      mongoc_client_set_error_api (g_client, MONGOC_ERROR_API_VERSION_2);
   }
   return g_client ? 0 : -1;
}

static int
teardown (void **state)
{
   (void) state;
   mongoc_client_destroy (g_client);
   return standin_group_stop (&g_standin);
}

static mongoc_collection_t *
records (void)
{
   return mongoc_client_get_collection (g_client, DB, "_fw_checkpoints");
}

/* The record id, or fails. */
static void
record (const char *id, bson_t *out)
{
   mongoc_collection_t *coll = records ();
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (id));
   mongoc_cursor_t *cur = mongoc_collection_find_with_opts (coll, filter, NULL, NULL);
   const bson_t *doc;

   assert_true (mongoc_cursor_next (cur, &doc));
   bson_copy_to (doc, out);
   mongoc_cursor_destroy (cur);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
}

static void
update (const char *id, const char *json_set)
{
   mongoc_collection_t *coll = records ();
   bson_t *filter = BCON_NEW ("_id", BCON_UTF8 (id));
   bson_error_t err;
   bson_t *set = bson_new_from_json ((const uint8_t *) json_set, -1, &err);

   assert_non_null (set);
   assert_true (mongoc_collection_update_one (coll, filter, set, NULL, NULL, &err));
   bson_destroy (set);
   bson_destroy (filter);
   mongoc_collection_destroy (coll);
}

static uint64_t
timestamp_field (const bson_t *doc, const char *name)
{
   bson_iter_t it;
   uint32_t t = 0, i = 0;
   if (bson_iter_init_find (&it, doc, name) && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &t, &i);
   }
   return (uint64_t) t << 32 | i;
}

static int64_t
date_field (const bson_t *doc, const char *name)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, name) && BSON_ITER_HOLDS_DATE_TIME (&it)
             ? bson_iter_date_time (&it)
             : 0;
}

/* The operationTime of an insert into another collection (a write after the start). */
static uint64_t
write_something (void)
{
   bson_t *cmd = BCON_NEW ("insert", BCON_UTF8 ("c"), "documents", "[", "{", "x", BCON_INT32 (1),
                           "}", "]");
   bson_t reply;
   bson_error_t err;
   uint64_t at;

   assert_true (mongoc_client_write_command_with_opts (g_client, DB, cmd, NULL, &reply, &err));
   at = timestamp_field (&reply, "operationTime");
   bson_destroy (&reply);
   bson_destroy (cmd);
   return at;
}

static void
take (const char *id, fw_group_start_t *out)
{
   fw_error_t err;
   if (!fw_group_start_take (g_client, DB, id, LEASE_MS, out, &err)) {
      fail_msg ("take %s: %s", id, err.message);
   }
}

static void
the_first_take_records_a_start_before_every_later_write (void **state)
{
   fw_group_start_t first, again;
   bson_t doc;
   bson_iter_t it;
   uint64_t later;

   (void) state;
   take ("orders#start", &first);
   assert_true (first.began);
   assert_true (first.at != 0);
   later = write_something ();
   assert_true (later > first.at);
   take ("orders#start", &again);
   assert_false (again.began);
   assert_true (again.at == first.at);
   record ("orders#start", &doc);
   assert_true (timestamp_field (&doc, "startAt") == first.at);
   assert_true (date_field (&doc, "aliveUntil") > date_field (&doc, "startedAt"));
   assert_true (bson_iter_init_find (&it, &doc, "by") && BSON_ITER_HOLDS_UTF8 (&it));
   assert_string_equal (bson_iter_utf8 (&it, NULL), fw_lease_owner_id ());
   bson_destroy (&doc);
}

static void
a_record_nobody_kept_alive_or_a_malformed_one_is_replaced (void **state)
{
   fw_group_start_t first, next, fixed;

   (void) state;
   take ("lapsed#start", &first);
   write_something ();
   update ("lapsed#start", "{\"$set\": {\"aliveUntil\": {\"$date\": 0}}}");
   take ("lapsed#start", &next);
   assert_true (next.began);
   assert_true (next.at > first.at);
   write_something ();
   update ("lapsed#start", "{\"$set\": {\"startAt\": \"not a timestamp\"}}");
   take ("lapsed#start", &fixed);
   assert_true (fixed.began);
   assert_true (fixed.at > next.at);
}

static void
renewals_keep_the_run_they_took_alive_and_create_none (void **state)
{
   const char *ids[] = {"kept#start", "never#start", "other#start"};
   uint64_t ats[3];
   fw_group_start_t kept, other, again;
   bson_error_t berr;
   bson_t doc;
   mongoc_collection_t *coll = records ();
   bson_t *never = BCON_NEW ("_id", BCON_UTF8 ("never#start"));

   (void) state;
   take ("kept#start", &kept);
   take ("other#start", &other);
   update ("kept#start", "{\"$set\": {\"aliveUntil\": {\"$date\": 0}}}");
   update ("other#start", "{\"$set\": {\"aliveUntil\": {\"$date\": 0}}}");
   ats[0] = kept.at;
   ats[1] = kept.at;
   ats[2] = other.at - 1; /* a start another group run recorded since */
   if (!fw_group_start_renew (g_client, DB, ids, ats, 3, LEASE_MS, &berr)) {
      fail_msg ("renew: %s", berr.message);
   }
   record ("kept#start", &doc);
   assert_true (date_field (&doc, "aliveUntil") > date_field (&doc, "startedAt"));
   bson_destroy (&doc);
   take ("kept#start", &again);
   assert_false (again.began); /* alive again: the same start */
   assert_true (again.at == kept.at);
   record ("other#start", &doc);
   assert_int_equal (date_field (&doc, "aliveUntil"), 0); /* not this member's run: left */
   bson_destroy (&doc);
   assert_int_equal (mongoc_collection_count_documents (coll, never, NULL, NULL, NULL, &berr), 0);
   bson_destroy (never);
   mongoc_collection_destroy (coll);
}

static void
the_record_id_is_the_streams_name_and_must_fit (void **state)
{
   char out[16];

   (void) state;
   assert_true (fw_group_start_id ("orders#2/4", 6, out, sizeof out));
   assert_string_equal (out, "orders#start");
   assert_false (fw_group_start_id ("a-long-stream-name", 18, out, sizeof out));
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (the_first_take_records_a_start_before_every_later_write),
      cmocka_unit_test (a_record_nobody_kept_alive_or_a_malformed_one_is_replaced),
      cmocka_unit_test (renewals_keep_the_run_they_took_alive_and_create_none),
      cmocka_unit_test (the_record_id_is_the_streams_name_and_must_fit),
   };
   return cmocka_run_group_tests_name ("group_start", tests, setup, teardown);
}
