/*
 * test_dlq_entry.c - seed 002's DLQ document as fw_dlq_entry_build writes
 * it: every field, type for type, the include flags, ttl_days, and the
 * upper-case operation types.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/dlq_entry.h"

#define DAY_MS (24LL * 60 * 60 * 1000)
#define TOKEN "826B024E7C0000000401800000000000"

typedef struct {
   bson_t event;
   bson_t full;      /* the fullDocument, kept to compare bytes */
   bson_t metadata;
   fw_event_t ev;
} fixture_t;

static const fw_dlq_config_t defaults = {true, "_fw_dlq", 30, true, true, "majority", 0, NULL};

static void
build_event (fixture_t *f, const char *op, bool with_full_document)
{
   bson_t child, ns;
   bson_decimal128_t dec;
   bson_oid_t oid;
   uint8_t bin[3] = {0, 1, 0xff};
   fw_error_t err;

   bson_oid_init_from_string (&oid, "64f1a2b3c4d5e6f7a8b9c0d1");
   bson_decimal128_from_string ("99.99", &dec);
   bson_init (&f->full);
   BSON_APPEND_OID (&f->full, "_id", &oid);
   BSON_APPEND_UTF8 (&f->full, "status", "PAID");
   BSON_APPEND_DECIMAL128 (&f->full, "total", &dec);
   BSON_APPEND_INT64 (&f->full, "big", 5);
   BSON_APPEND_INT32 (&f->full, "small", 5);
   BSON_APPEND_DATE_TIME (&f->full, "at", 1768473000123LL);
   BSON_APPEND_BINARY (&f->full, "bin", BSON_SUBTYPE_USER, bin, sizeof bin);
   BSON_APPEND_TIMESTAMP (&f->full, "ts", 1700000000, 5);

   bson_init (&f->event);
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "_id", &child);
   BSON_APPEND_UTF8 (&child, "_data", TOKEN);
   bson_append_document_end (&f->event, &child);
   BSON_APPEND_UTF8 (&f->event, "operationType", op);
   BSON_APPEND_TIMESTAMP (&f->event, "clusterTime", 1768473000, 4);
   BSON_APPEND_DATE_TIME (&f->event, "wallTime", 1768473000000LL);
   if (with_full_document) {
      BSON_APPEND_DOCUMENT (&f->event, "fullDocument", &f->full);
   }
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "ns", &ns);
   BSON_APPEND_UTF8 (&ns, "db", "shop");
   BSON_APPEND_UTF8 (&ns, "coll", "orders");
   bson_append_document_end (&f->event, &ns);
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "documentKey", &child);
   BSON_APPEND_OID (&child, "_id", &oid);
   bson_append_document_end (&f->event, &child);

   bson_init (&f->metadata);
   BSON_APPEND_UTF8 (&f->metadata, "rule", "total must be >= 0");
   assert_true (fw_event_parse (&f->event, &f->ev, &err));
}

static int
setup (void **state)
{
   fixture_t *f = calloc (1, sizeof *f);
   build_event (f, "insert", true);
   *state = f;
   return 0;
}

static int
teardown (void **state)
{
   fixture_t *f = *state;
   bson_destroy (&f->event);
   bson_destroy (&f->full);
   bson_destroy (&f->metadata);
   free (f);
   return 0;
}

static fw_dlq_failure_t
failure (const fixture_t *f)
{
   fw_dlq_failure_t fl = {0};
   fl.stream_name = "order-stream";
   fl.error_type = "Payment.Unavailable";
   fl.error_message = "Connection refused to payment gateway";
   fl.stack_trace = "stack traceback:\n\t[C]: in function 'error'";
   fl.attempts = 3;
   fl.first_attempt_ms = 1768473000000LL;
   fl.last_attempt_ms = 1768473005000LL;
   fl.created_ms = 1768473005100LL;
   fl.metadata = &f->metadata;
   return fl;
}

static bson_type_t
type_of (const bson_t *doc, const char *dotted)
{
   bson_iter_t it, child;
   if (!bson_iter_init (&it, doc) || !bson_iter_find_descendant (&it, dotted, &child)) {
      return BSON_TYPE_EOD;
   }
   return bson_iter_type (&child);
}

static const char *
utf8_of (const bson_t *doc, const char *dotted)
{
   bson_iter_t it, child;
   assert_true (bson_iter_init (&it, doc));
   assert_true (bson_iter_find_descendant (&it, dotted, &child));
   assert_int_equal (bson_iter_type (&child), BSON_TYPE_UTF8);
   return bson_iter_utf8 (&child, NULL);
}

static int64_t
date_of (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   assert_true (bson_iter_init_find (&it, doc, key));
   assert_int_equal (bson_iter_type (&it), BSON_TYPE_DATE_TIME);
   return bson_iter_date_time (&it);
}

/* The sub-document at key, as a view valid while doc lives. */
static void
sub_document (const bson_t *doc, const char *key, bson_t *out)
{
   bson_iter_t it;
   const uint8_t *data;
   uint32_t len;
   assert_true (bson_iter_init_find (&it, doc, key));
   assert_int_equal (bson_iter_type (&it), BSON_TYPE_DOCUMENT);
   bson_iter_document (&it, &len, &data);
   assert_true (bson_init_static (out, data, len));
}

static void
dlq_entry_has_every_seed_field_type_for_type (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry, sub, expected_key;
   bson_iter_t it;
   const char *id;
   const char *keys[] = {"_id",        "streamName",     "operationType", "documentKey",
                         "fullDocument", "resumeToken",  "error",         "attempts",
                         "status",     "firstAttemptAt", "lastAttemptAt", "createdAt",
                         "expiresAt",  "metadata",       "eventId",       "ns",
                         "clusterTime"};
   size_t i = 0;

   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));

   /* The seed's fields in the seed's order, then the added ones. */
   assert_true (bson_iter_init (&it, &entry));
   while (bson_iter_next (&it)) {
      assert_true (i < sizeof keys / sizeof keys[0]);
      assert_string_equal (bson_iter_key (&it), keys[i]);
      i++;
   }
   assert_int_equal (i, sizeof keys / sizeof keys[0]);

   id = utf8_of (&entry, "_id");
   assert_int_equal (strlen (id), 36);
   assert_true (id[8] == '-' && id[13] == '-' && id[18] == '-' && id[23] == '-');
   assert_int_equal (id[14], '4'); /* version 4 */
   assert_non_null (strchr ("89ab", id[19]));
   assert_string_equal (utf8_of (&entry, "streamName"), "order-stream");
   assert_string_equal (utf8_of (&entry, "operationType"), "INSERT");

   sub_document (&entry, "documentKey", &sub);
   bson_init (&expected_key);
   {
      bson_oid_t oid;
      bson_oid_init_from_string (&oid, "64f1a2b3c4d5e6f7a8b9c0d1");
      BSON_APPEND_OID (&expected_key, "_id", &oid);
   }
   assert_true (bson_equal (&sub, &expected_key));
   bson_destroy (&expected_key);

   /* fullDocument: the event's bytes, every type kept. */
   sub_document (&entry, "fullDocument", &sub);
   assert_true (bson_equal (&sub, &f->full));
   assert_int_equal (type_of (&entry, "fullDocument.total"), BSON_TYPE_DECIMAL128);
   assert_int_equal (type_of (&entry, "fullDocument.big"), BSON_TYPE_INT64);
   assert_int_equal (type_of (&entry, "fullDocument.small"), BSON_TYPE_INT32);
   assert_int_equal (type_of (&entry, "fullDocument.at"), BSON_TYPE_DATE_TIME);
   assert_int_equal (type_of (&entry, "fullDocument._id"), BSON_TYPE_OID);
   assert_int_equal (type_of (&entry, "fullDocument.bin"), BSON_TYPE_BINARY);
   assert_int_equal (type_of (&entry, "fullDocument.ts"), BSON_TYPE_TIMESTAMP);

   assert_int_equal (type_of (&entry, "resumeToken"), BSON_TYPE_DOCUMENT);
   assert_string_equal (utf8_of (&entry, "resumeToken._data"), TOKEN);

   assert_string_equal (utf8_of (&entry, "error.type"), "Payment.Unavailable");
   assert_string_equal (utf8_of (&entry, "error.message"),
                        "Connection refused to payment gateway");
   assert_string_equal (utf8_of (&entry, "error.stackTrace"),
                        "stack traceback:\n\t[C]: in function 'error'");

   assert_int_equal (type_of (&entry, "attempts"), BSON_TYPE_INT32);
   assert_true (bson_iter_init_find (&it, &entry, "attempts"));
   assert_int_equal (bson_iter_int32 (&it), 3);
   assert_string_equal (utf8_of (&entry, "status"), "PENDING");
   assert_int_equal (date_of (&entry, "firstAttemptAt"), 1768473000000LL);
   assert_int_equal (date_of (&entry, "lastAttemptAt"), 1768473005000LL);
   assert_int_equal (date_of (&entry, "createdAt"), 1768473005100LL);
   assert_int_equal (date_of (&entry, "expiresAt"), 1768473005100LL + 30 * DAY_MS);

   sub_document (&entry, "metadata", &sub);
   assert_true (bson_equal (&sub, &f->metadata));

   assert_string_equal (utf8_of (&entry, "eventId"), TOKEN);
   assert_string_equal (utf8_of (&entry, "ns.db"), "shop");
   assert_string_equal (utf8_of (&entry, "ns.coll"), "orders");
   assert_int_equal (type_of (&entry, "clusterTime"), BSON_TYPE_TIMESTAMP);
   {
      uint32_t t, inc;
      assert_true (bson_iter_init_find (&it, &entry, "clusterTime"));
      bson_iter_timestamp (&it, &t, &inc);
      assert_int_equal (t, 1768473000);
      assert_int_equal (inc, 4);
   }
   bson_destroy (&entry);
}

static void
dlq_entry_ids_differ_between_entries (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t a, b;
   char first[64];

   assert_true (fw_dlq_entry_build (&a, &f->ev, &defaults, &fl, &err));
   assert_true (fw_dlq_entry_build (&b, &f->ev, &defaults, &fl, &err));
   snprintf (first, sizeof first, "%s", utf8_of (&a, "_id"));
   assert_string_not_equal (first, utf8_of (&b, "_id"));
   bson_destroy (&a);
   bson_destroy (&b);
}

static void
dlq_entry_include_flags_off_leave_fields_out (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_dlq_config_t cfg = defaults;
   fw_error_t err;
   bson_t entry;

   cfg.include_original_document = false;
   cfg.include_stack_trace = false;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   assert_int_equal (type_of (&entry, "fullDocument"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "error.stackTrace"), BSON_TYPE_EOD);
   assert_string_equal (utf8_of (&entry, "error.type"), "Payment.Unavailable");
   assert_int_equal (type_of (&entry, "documentKey"), BSON_TYPE_DOCUMENT);
   bson_destroy (&entry);
}

static void
dlq_entry_ttl_zero_stores_null_expires_at (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_dlq_config_t cfg = defaults;
   fw_error_t err;
   bson_t entry;

   cfg.ttl_days = 0;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   assert_int_equal (type_of (&entry, "expiresAt"), BSON_TYPE_NULL);
   bson_destroy (&entry);

   cfg.ttl_days = 90;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   assert_int_equal (date_of (&entry, "expiresAt"), fl.created_ms + 90 * DAY_MS);
   bson_destroy (&entry);
}

/* A ttl that overflows int arithmetic (ttl_days * ms per day) must still give
 * the right date: 36500 days is a legal "keep for a century". */
static void
dlq_entry_long_ttl_does_not_overflow (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_dlq_config_t cfg = defaults;
   fw_error_t err;
   bson_t entry;

   cfg.ttl_days = 36500;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   assert_int_equal (date_of (&entry, "expiresAt"), fl.created_ms + 36500LL * DAY_MS);
   bson_destroy (&entry);
}

static void
dlq_entry_without_metadata_or_trace_stores_empty_values (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry, sub;

   fl.metadata = NULL;
   fl.stack_trace = NULL;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   sub_document (&entry, "metadata", &sub);
   assert_true (bson_empty (&sub));
   assert_string_equal (utf8_of (&entry, "error.stackTrace"), "");
   bson_destroy (&entry);
}

static void
dlq_entry_event_without_full_document_stores_null (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry;

   bson_destroy (&f->event);
   bson_destroy (&f->full);
   bson_destroy (&f->metadata);
   build_event (f, "delete", false);
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_string_equal (utf8_of (&entry, "operationType"), "DELETE");
   assert_int_equal (type_of (&entry, "fullDocument"), BSON_TYPE_NULL);
   bson_destroy (&entry);
}

static void
dlq_entry_script_version_is_added_when_known (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry;

   fl.script_version = "0123456789ab";
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_string_equal (utf8_of (&entry, "scriptVersion"), "0123456789ab");
   bson_destroy (&entry);
}

static void
dlq_operation_type_is_seed_upper_case (void **state)
{
   const char *cases[][2] = {{"insert", "INSERT"},   {"update", "UPDATE"},
                             {"replace", "REPLACE"}, {"delete", "DELETE"},
                             {"drop", "DROP"},       {"rename", "RENAME"},
                             {"dropDatabase", "DROP_DATABASE"},
                             {"invalidate", "INVALIDATE"}};
   char buf[64];
   (void) state;
   for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      fw_dlq_operation_type (cases[i][0], buf, sizeof buf);
      assert_string_equal (buf, cases[i][1]);
   }
}

static void
dlq_operation_type_truncates_within_the_buffer (void **state)
{
   char buf[6];
   (void) state;
   memset (buf, 'Z', sizeof buf);
   fw_dlq_operation_type ("dropDatabase", buf, sizeof buf);
   assert_true (strlen (buf) < sizeof buf);
   assert_int_equal (strncmp (buf, "DROP", 4), 0);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown (dlq_entry_has_every_seed_field_type_for_type, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_ids_differ_between_entries, setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_include_flags_off_leave_fields_out, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_ttl_zero_stores_null_expires_at, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_long_ttl_does_not_overflow, setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_without_metadata_or_trace_stores_empty_values,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_event_without_full_document_stores_null, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_script_version_is_added_when_known, setup,
                                       teardown),
      cmocka_unit_test (dlq_operation_type_is_seed_upper_case),
      cmocka_unit_test (dlq_operation_type_truncates_within_the_buffer),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
