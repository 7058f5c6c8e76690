/*
 * test_dlq_entry.c - seed 002's DLQ document as fw_dlq_entry_build writes
 * it: every field, type for type, the include flags, ttl_days, and the
 * upper-case operation types; the entry's life fields (issue 12), the event
 * fields a replay needs, the omitted list and the 16 MiB truncation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include <cmocka.h>

#include "runtime/dlq/dlq_entry.h"

#define DAY_MS (24LL * 60 * 60 * 1000)
#define TOKEN "826B024E7C0000000401800000000000"

typedef struct {
   bson_t event;
   bson_t full; /* the fullDocument, kept to compare bytes */
   bson_t metadata;
   fw_event_t ev;
} fixture_t;

static const fw_dlq_config_t defaults = {true, "_fw_dlq", 30,    true, true, "majority", 0,
                                         NULL, NULL,      false, 1024, 1024, false};

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
   const char *keys[] = {"_id",
                         "streamName",
                         "operationType",
                         "documentKey",
                         "fullDocument",
                         "resumeToken",
                         "error",
                         "attempts",
                         "status",
                         "firstAttemptAt",
                         "lastAttemptAt",
                         "createdAt",
                         "expiresAt",
                         "metadata",
                         "eventId",
                         "ns",
                         "clusterTime",
                         "lastTouched",
                         "reprocessAttempts",
                         "diagnostics",
                         "history",
                         "wallTime"};
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
   assert_string_equal (utf8_of (&entry, "error.message"), "Connection refused to payment gateway");
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
dlq_entry_carries_the_leaders_epoch_only_in_ha_mode (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry;
   bson_iter_t it;

   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_int_equal (type_of (&entry, "epoch"), BSON_TYPE_EOD);
   bson_destroy (&entry);
   fl.epoch = 42;
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_true (bson_iter_init_find (&it, &entry, "epoch") && BSON_ITER_HOLDS_INT64 (&it));
   assert_int_equal (bson_iter_int64 (&it), 42);
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

static int32_t
int32_of (const bson_t *doc, const char *dotted)
{
   bson_iter_t it, child;
   assert_true (bson_iter_init (&it, doc));
   assert_true (bson_iter_find_descendant (&it, dotted, &child));
   assert_int_equal (bson_iter_type (&child), BSON_TYPE_INT32);
   return bson_iter_int32 (&child);
}

/* The strings of the array at key, joined with commas ("" when absent). */
static void
joined (const bson_t *doc, const char *key, char *buf, size_t len)
{
   bson_iter_t it, arr;
   buf[0] = '\0';
   if (!bson_iter_init_find (&it, doc, key)) {
      return;
   }
   assert_int_equal (bson_iter_type (&it), BSON_TYPE_ARRAY);
   assert_true (bson_iter_recurse (&it, &arr));
   while (bson_iter_next (&arr)) {
      assert_int_equal (bson_iter_type (&arr), BSON_TYPE_UTF8);
      if (buf[0]) {
         strncat (buf, ",", len - strlen (buf) - 1);
      }
      strncat (buf, bson_iter_utf8 (&arr, NULL), len - strlen (buf) - 1);
   }
}

/* An update event with everything a replay needs: updateDescription, the
 * pre-image, wallTime, txnNumber and lsid, each of a type Lua would not keep
 * as it is. */
static void
build_update_event (fixture_t *f, bson_t *before, bson_t *desc, bson_t *lsid)
{
   bson_t child, sub, arr;
   bson_decimal128_t dec;
   uint8_t uuid[16] = {0x55, 0x0e, 0x84, 0x00, 0xe2, 0x9b, 0x41, 0xd4,
                       0xa7, 0x16, 0x44, 0x66, 0x55, 0x44, 0x00, 0x00};
   fw_error_t err;

   bson_decimal128_from_string ("10.50", &dec);
   bson_init (before);
   BSON_APPEND_INT32 (before, "_id", 7);
   BSON_APPEND_DECIMAL128 (before, "total", &dec);
   BSON_APPEND_INT64 (before, "version", 1);

   bson_init (desc);
   BSON_APPEND_DOCUMENT_BEGIN (desc, "updatedFields", &sub);
   BSON_APPEND_INT64 (&sub, "version", 2);
   BSON_APPEND_DATE_TIME (&sub, "paidAt", 1768473000999LL);
   bson_append_document_end (desc, &sub);
   BSON_APPEND_ARRAY_BEGIN (desc, "removedFields", &arr);
   BSON_APPEND_UTF8 (&arr, "0", "draft");
   bson_append_array_end (desc, &arr);
   BSON_APPEND_ARRAY_BEGIN (desc, "truncatedArrays", &arr);
   bson_append_array_end (desc, &arr);

   bson_init (lsid);
   BSON_APPEND_BINARY (lsid, "id", BSON_SUBTYPE_UUID, uuid, sizeof uuid);
   BSON_APPEND_BINARY (lsid, "uid", BSON_SUBTYPE_BINARY, uuid, 8);

   bson_init (&f->full);
   bson_init (&f->metadata);
   bson_init (&f->event);
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "_id", &child);
   BSON_APPEND_UTF8 (&child, "_data", TOKEN);
   bson_append_document_end (&f->event, &child);
   BSON_APPEND_UTF8 (&f->event, "operationType", "update");
   BSON_APPEND_TIMESTAMP (&f->event, "clusterTime", 1768473000, 9);
   BSON_APPEND_DATE_TIME (&f->event, "wallTime", 1768473000777LL);
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "ns", &sub);
   BSON_APPEND_UTF8 (&sub, "db", "shop");
   BSON_APPEND_UTF8 (&sub, "coll", "orders");
   bson_append_document_end (&f->event, &sub);
   BSON_APPEND_DOCUMENT_BEGIN (&f->event, "documentKey", &child);
   BSON_APPEND_INT32 (&child, "_id", 7);
   bson_append_document_end (&f->event, &child);
   BSON_APPEND_DOCUMENT (&f->event, "updateDescription", desc);
   BSON_APPEND_DOCUMENT (&f->event, "fullDocumentBeforeChange", before);
   BSON_APPEND_INT64 (&f->event, "txnNumber", 42);
   BSON_APPEND_DOCUMENT (&f->event, "lsid", lsid);
   assert_true (fw_event_parse (&f->event, &f->ev, &err));
}

static void
replace_with_update_event (fixture_t *f, bson_t *before, bson_t *desc, bson_t *lsid)
{
   bson_destroy (&f->event);
   bson_destroy (&f->full);
   bson_destroy (&f->metadata);
   build_update_event (f, before, desc, lsid);
}

static void
dlq_entry_life_fields_are_set_at_enqueue (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry, sub, item;
   bson_iter_t it;
   char actor[300], expected_actor[300], host[256];
   const char *absent[] = {"lastReprocessAt", "lastReprocessError", "resolvedAt", "resolution",
                           "discardedAt",     "discardReason",      "claimedBy",  "claimedUntil",
                           "omitted",         "truncated"};
   const char *item_keys[] = {"at", "action", "actor", "result"};
   size_t n = 0;

   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_string_equal (utf8_of (&entry, "status"), "PENDING");
   assert_int_equal (date_of (&entry, "lastTouched"), fl.created_ms);
   assert_int_equal (int32_of (&entry, "reprocessAttempts"), 0);
   sub_document (&entry, "diagnostics", &sub);
   assert_true (bson_empty (&sub));
   for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
      if (type_of (&entry, absent[i]) != BSON_TYPE_EOD) {
         fail_msg ("%s must not be set at enqueue", absent[i]);
      }
   }

   /* history: one item, { at, action, actor, result } in that order. */
   assert_int_equal (type_of (&entry, "history"), BSON_TYPE_ARRAY);
   assert_int_equal (type_of (&entry, "history.1"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "history.0"), BSON_TYPE_DOCUMENT);
   {
      bson_iter_t h, k;
      const uint8_t *data;
      uint32_t len;
      assert_true (bson_iter_init (&h, &entry));
      assert_true (bson_iter_find_descendant (&h, "history.0", &it));
      bson_iter_document (&it, &len, &data);
      assert_true (bson_init_static (&item, data, len));
      assert_true (bson_iter_init (&k, &item));
      while (bson_iter_next (&k)) {
         assert_true (n < 4);
         assert_string_equal (bson_iter_key (&k), item_keys[n++]);
      }
      assert_int_equal (n, 4);
   }
   assert_int_equal (date_of (&item, "at"), fl.created_ms);
   assert_string_equal (utf8_of (&item, "action"), "enqueued");
   assert_string_equal (utf8_of (&item, "result"), "Payment.Unavailable");
   snprintf (actor, sizeof actor, "%s", utf8_of (&item, "actor"));
   fw_dlq_actor (expected_actor, sizeof expected_actor);
   assert_string_equal (actor, expected_actor);
   assert_int_equal (gethostname (host, sizeof host), 0);
   snprintf (expected_actor, sizeof expected_actor, "%s:%ld", host, (long) getpid ());
   assert_string_equal (actor, expected_actor);
   bson_destroy (&entry);

   fl.actor = "worker-7:123";
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_string_equal (utf8_of (&entry, "history.0.actor"), "worker-7:123");
   bson_destroy (&entry);
}

static void
dlq_entry_keeps_what_a_replay_needs_byte_for_byte (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl;
   fw_error_t err;
   bson_t entry, sub, before, desc, lsid;
   bson_iter_t it;

   replace_with_update_event (f, &before, &desc, &lsid);
   fl = failure (f);
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));

   sub_document (&entry, "updateDescription", &sub);
   assert_true (bson_equal (&sub, &desc));
   assert_int_equal (type_of (&entry, "updateDescription.updatedFields.version"), BSON_TYPE_INT64);
   assert_int_equal (type_of (&entry, "updateDescription.updatedFields.paidAt"),
                     BSON_TYPE_DATE_TIME);
   assert_int_equal (type_of (&entry, "updateDescription.truncatedArrays"), BSON_TYPE_ARRAY);
   sub_document (&entry, "fullDocumentBeforeChange", &sub);
   assert_true (bson_equal (&sub, &before));
   assert_int_equal (type_of (&entry, "fullDocumentBeforeChange.total"), BSON_TYPE_DECIMAL128);
   assert_int_equal (date_of (&entry, "wallTime"), 1768473000777LL);
   assert_int_equal (type_of (&entry, "txnNumber"), BSON_TYPE_INT64);
   assert_true (bson_iter_init_find (&it, &entry, "txnNumber"));
   assert_int_equal (bson_iter_int64 (&it), 42);
   sub_document (&entry, "lsid", &sub);
   assert_true (bson_equal (&sub, &lsid));
   assert_int_equal (type_of (&entry, "lsid.id"), BSON_TYPE_BINARY);
   /* An update without updateLookup has no fullDocument: null, as before. */
   assert_int_equal (type_of (&entry, "fullDocument"), BSON_TYPE_NULL);
   assert_int_equal (type_of (&entry, "omitted"), BSON_TYPE_EOD);
   bson_destroy (&entry);
   bson_destroy (&before);
   bson_destroy (&desc);
   bson_destroy (&lsid);
}

static void
dlq_entry_without_original_document_lists_what_it_omitted (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_dlq_config_t cfg = defaults;
   fw_error_t err;
   bson_t entry, before, desc, lsid;
   char list[256];

   cfg.include_original_document = false;
   /* An insert: only its fullDocument was left out. */
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   joined (&entry, "omitted", list, sizeof list);
   assert_string_equal (list, "fullDocument");
   assert_int_equal (type_of (&entry, "wallTime"), BSON_TYPE_DATE_TIME);
   bson_destroy (&entry);

   /* An update: the pre-image and updateDescription too; the small fields a
    * replay needs stay whatever the flag says. */
   replace_with_update_event (f, &before, &desc, &lsid);
   fl = failure (f);
   assert_true (fw_dlq_entry_build (&entry, &f->ev, &cfg, &fl, &err));
   joined (&entry, "omitted", list, sizeof list);
   assert_string_equal (list, "fullDocumentBeforeChange,updateDescription");
   assert_int_equal (type_of (&entry, "fullDocument"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "fullDocumentBeforeChange"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "updateDescription"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "wallTime"), BSON_TYPE_DATE_TIME);
   assert_int_equal (type_of (&entry, "txnNumber"), BSON_TYPE_INT64);
   assert_int_equal (type_of (&entry, "lsid"), BSON_TYPE_DOCUMENT);
   assert_int_equal (type_of (&entry, "truncated"), BSON_TYPE_EOD);
   bson_destroy (&entry);
   bson_destroy (&before);
   bson_destroy (&desc);
   bson_destroy (&lsid);
}

/* An entry over 16 MiB is slimmed rather than refused forever: the bulky
 * parts go, omitted and truncated say so, the rest stays. */
static void
dlq_entry_over_16_mib_drops_the_bulky_parts_and_says_so (void **state)
{
   fixture_t *f = *state;
   fw_dlq_failure_t fl = failure (f);
   fw_error_t err;
   bson_t entry, big, ev = BSON_INITIALIZER;
   size_t n = 17 * 1024 * 1024;
   char *blob = malloc (n + 1);
   char list[256];
   bson_iter_t it;

   assert_non_null (blob);
   memset (blob, 'x', n);
   blob[n] = '\0';
   bson_init (&big);
   BSON_APPEND_INT32 (&big, "_id", 1);
   BSON_APPEND_UTF8 (&big, "blob", blob);
   free (blob);
   /* The fixture's insert event, its fullDocument replaced by the big one. */
   assert_true (bson_iter_init (&it, &f->event));
   while (bson_iter_next (&it)) {
      if (strcmp (bson_iter_key (&it), "fullDocument") != 0) {
         bson_append_iter (&ev, NULL, 0, &it);
      }
   }
   BSON_APPEND_DOCUMENT (&ev, "fullDocument", &big);
   bson_destroy (&big);
   bson_destroy (&f->event);
   assert_true (bson_steal (&f->event, &ev));
   assert_true (fw_event_parse (&f->event, &f->ev, &err));

   assert_true (fw_dlq_entry_build (&entry, &f->ev, &defaults, &fl, &err));
   assert_true (entry.len < 16 * 1024 * 1024);
   assert_true (bson_iter_init_find (&it, &entry, "truncated"));
   assert_true (bson_iter_as_bool (&it));
   joined (&entry, "omitted", list, sizeof list);
   assert_string_equal (list, "fullDocument,error.stackTrace");
   assert_int_equal (type_of (&entry, "fullDocument"), BSON_TYPE_EOD);
   assert_int_equal (type_of (&entry, "error.stackTrace"), BSON_TYPE_EOD);
   assert_string_equal (utf8_of (&entry, "error.type"), "Payment.Unavailable");
   assert_string_equal (utf8_of (&entry, "history.0.action"), "enqueued");
   assert_int_equal (type_of (&entry, "wallTime"), BSON_TYPE_DATE_TIME);
   assert_int_equal (type_of (&entry, "documentKey"), BSON_TYPE_DOCUMENT);
   bson_destroy (&entry);
}

static void
dlq_operation_type_is_seed_upper_case (void **state)
{
   const char *cases[][2] = {{"insert", "INSERT"},
                             {"update", "UPDATE"},
                             {"replace", "REPLACE"},
                             {"delete", "DELETE"},
                             {"drop", "DROP"},
                             {"rename", "RENAME"},
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
      cmocka_unit_test_setup_teardown (dlq_entry_ttl_zero_stores_null_expires_at, setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_long_ttl_does_not_overflow, setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_without_metadata_or_trace_stores_empty_values,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_event_without_full_document_stores_null, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_script_version_is_added_when_known, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_life_fields_are_set_at_enqueue, setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_keeps_what_a_replay_needs_byte_for_byte, setup,
                                       teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_without_original_document_lists_what_it_omitted,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_over_16_mib_drops_the_bulky_parts_and_says_so,
                                       setup, teardown),
      cmocka_unit_test_setup_teardown (dlq_entry_carries_the_leaders_epoch_only_in_ha_mode, setup,
                                       teardown),
      cmocka_unit_test (dlq_operation_type_is_seed_upper_case),
      cmocka_unit_test (dlq_operation_type_truncates_within_the_buffer),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
