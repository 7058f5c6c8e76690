/*
 * Unit tests for event.c's ordering key (issue 23, section 8): lanes and the
 * sequenced DLQ's default sequence order one document's events by
 * documentKey._id, so a shard key beside it (which refineCollectionShardKey
 * or resharding changes) never moves a document to another lane or sequence.
 * And for its type checks (issue 25, section 2): an event with a field of
 * another type than MongoDB's change-event schema gives it is refused, with
 * a message naming the field, so it is dead-lettered instead of reaching a
 * handler.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bson/event.h"
#include "runtime/dlq/dlq_sequence.h"

/* An insert event whose documentKey is key (NULL: none). */
static void
build (bson_t *doc, const bson_t *key)
{
   bson_t id;
   bson_init (doc);
   BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", "8200000001000000012B0229296E04");
   bson_append_document_end (doc, &id);
   BSON_APPEND_UTF8 (doc, "operationType", "insert");
   if (key) {
      BSON_APPEND_DOCUMENT (doc, "documentKey", key);
   }
}

/* The event's order key as canonical Extended JSON (bson_free it), or NULL
 * when it has none; bytes and len: a copy of the key's bytes (free it). */
static char *
order_key (const bson_t *key, uint8_t **bytes, uint32_t *len)
{
   bson_t doc, k;
   fw_event_t ev;
   fw_error_t err;
   bson_value_t v;
   char *json = NULL;

   build (&doc, key);
   assert_true (fw_event_parse (&doc, &ev, &err));
   *bytes = NULL;
   *len = 0;
   if (fw_event_order_key (&ev, &k)) {
      *len = k.len;
      *bytes = malloc (k.len);
      assert_non_null (*bytes);
      memcpy (*bytes, bson_get_data (&k), k.len);
      v.value_type = BSON_TYPE_DOCUMENT;
      v.value.v_doc.data = (uint8_t *) bson_get_data (&k);
      v.value.v_doc.data_len = k.len;
      json = fw_dlq_sequence_id (&v);
      bson_destroy (&k);
   }
   bson_destroy (&doc);
   return json;
}

static void
event_order_key_leaves_the_shard_key_out (void **state)
{
   bson_t *plain = BCON_NEW ("_id", BCON_INT32 (42));
   bson_t *sharded = BCON_NEW ("region", "eu", "_id", BCON_INT32 (42));
   bson_t *after = BCON_NEW ("region", "eu", "tenant", BCON_INT64 (7), "_id", BCON_INT32 (42));
   bson_t *id_first = BCON_NEW ("_id", BCON_INT32 (42), "region", "us");
   bson_t *other = BCON_NEW ("region", "eu", "_id", BCON_INT32 (43));
   uint8_t *b0, *b;
   uint32_t l0, l;
   char *j0, *j;
   (void) state;

   /* Unsharded: the documentKey itself, as before shard keys were left out,
    * so open sequences keep their ids. */
   j0 = order_key (plain, &b0, &l0);
   assert_string_equal (j0, "{ \"_id\" : { \"$numberInt\" : \"42\" } }");
   assert_int_equal (l0, plain->len);
   assert_memory_equal (b0, bson_get_data (plain), l0);

   /* Shard key before or after _id, refined (one more field) or resharded
    * (another value): the same bytes (the lane's hash) and sequence id. */
   const bson_t *same[] = {sharded, after, id_first};
   for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
      j = order_key (same[i], &b, &l);
      assert_string_equal (j, j0);
      assert_int_equal (l, l0);
      assert_memory_equal (b, b0, l0);
      bson_free (j);
      free (b);
   }
   /* Another document is another key. */
   j = order_key (other, &b, &l);
   assert_string_equal (j, "{ \"_id\" : { \"$numberInt\" : \"43\" } }");
   bson_free (j);
   free (b);

   bson_free (j0);
   free (b0);
   bson_destroy (plain);
   bson_destroy (sharded);
   bson_destroy (after);
   bson_destroy (id_first);
   bson_destroy (other);
}

static void
event_order_key_without_id_or_document_key (void **state)
{
   bson_t *no_id = BCON_NEW ("region", "eu");
   uint8_t *b;
   uint32_t l;
   char *j;
   (void) state;

   /* Never from a server: the key whole. */
   j = order_key (no_id, &b, &l);
   assert_string_equal (j, "{ \"region\" : \"eu\" }");
   bson_free (j);
   free (b);
   /* drop, rename, invalidate: no key. */
   assert_null (order_key (NULL, &b, &l));
   assert_null (b);
   bson_destroy (no_id);
}

/* One value to put in the event: a BSON type and what to append. */
typedef enum {
   V_ABSENT,
   V_STRING,
   V_INT32,
   V_INT64,
   V_NULL,
   V_DOCUMENT,
   V_ARRAY,
   V_DATE,
   V_TIMESTAMP
} value_t;

static void
append_value (bson_t *b, const char *key, value_t v)
{
   bson_t child;
   switch (v) {
   case V_ABSENT:
      break;
   case V_STRING:
      BSON_APPEND_UTF8 (b, key, "x");
      break;
   case V_INT32:
      BSON_APPEND_INT32 (b, key, 5);
      break;
   case V_INT64:
      BSON_APPEND_INT64 (b, key, 5);
      break;
   case V_NULL:
      BSON_APPEND_NULL (b, key);
      break;
   case V_DOCUMENT:
      BSON_APPEND_DOCUMENT_BEGIN (b, key, &child);
      BSON_APPEND_INT32 (&child, "a", 1);
      bson_append_document_end (b, &child);
      break;
   case V_ARRAY:
      BSON_APPEND_ARRAY_BEGIN (b, key, &child);
      BSON_APPEND_UTF8 (&child, "0", "a");
      bson_append_array_end (b, &child);
      break;
   case V_DATE:
      BSON_APPEND_DATE_TIME (b, key, 1700000000000);
      break;
   case V_TIMESTAMP:
      BSON_APPEND_TIMESTAMP (b, key, 1700000000, 1);
      break;
   }
}

/* Appends field key (path: its path in the event) with its right value v,
 * or with bad when path is the one to change. */
static void
put (bson_t *b, const char *path, const char *key, value_t v, const char *change, value_t bad)
{
   append_value (b, key, change && strcmp (path, change) == 0 ? bad : v);
}

/* An update event with every field the runtime reads, of MongoDB's types,
 * but the field at path change (NULL: none) as bad instead. */
static void
full_event (bson_t *doc, const char *change, value_t bad)
{
   bson_t id, ns, dk, ud, lsid;

   bson_init (doc);
   BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", "8200000001000000012B0229296E04");
   bson_append_document_end (doc, &id);
   if (!change || strcmp (change, "operationType") != 0) {
      BSON_APPEND_UTF8 (doc, "operationType", "update");
   } else {
      append_value (doc, "operationType", bad);
   }
   put (doc, "clusterTime", "clusterTime", V_TIMESTAMP, change, bad);
   put (doc, "wallTime", "wallTime", V_DATE, change, bad);
   if (!change || strcmp (change, "ns") != 0) {
      BSON_APPEND_DOCUMENT_BEGIN (doc, "ns", &ns);
      put (&ns, "ns.db", "db", V_STRING, change, bad);
      put (&ns, "ns.coll", "coll", V_STRING, change, bad);
      bson_append_document_end (doc, &ns);
   } else {
      append_value (doc, "ns", bad);
   }
   if (!change || strcmp (change, "documentKey") != 0) {
      BSON_APPEND_DOCUMENT_BEGIN (doc, "documentKey", &dk);
      BSON_APPEND_INT32 (&dk, "_id", 1);
      bson_append_document_end (doc, &dk);
   } else {
      append_value (doc, "documentKey", bad);
   }
   put (doc, "fullDocument", "fullDocument", V_DOCUMENT, change, bad);
   put (doc, "fullDocumentBeforeChange", "fullDocumentBeforeChange", V_DOCUMENT, change, bad);
   if (!change || strcmp (change, "updateDescription") != 0) {
      BSON_APPEND_DOCUMENT_BEGIN (doc, "updateDescription", &ud);
      put (&ud, "updateDescription.updatedFields", "updatedFields", V_DOCUMENT, change, bad);
      put (&ud, "updateDescription.removedFields", "removedFields", V_ARRAY, change, bad);
      put (&ud, "updateDescription.truncatedArrays", "truncatedArrays", V_ARRAY, change, bad);
      put (&ud, "updateDescription.disambiguatedPaths", "disambiguatedPaths", V_DOCUMENT, change,
           bad);
      bson_append_document_end (doc, &ud);
   } else {
      append_value (doc, "updateDescription", bad);
   }
   if (!change || strcmp (change, "lsid") != 0) {
      BSON_APPEND_DOCUMENT_BEGIN (doc, "lsid", &lsid);
      BSON_APPEND_UTF8 (&lsid, "id", "session");
      bson_append_document_end (doc, &lsid);
   } else {
      append_value (doc, "lsid", bad);
   }
   put (doc, "txnNumber", "txnNumber", V_INT64, change, bad);
   if (change && strcmp (change, "splitEvent") == 0) {
      append_value (doc, "splitEvent", bad);
   }
   /* Fields the runtime does not read are not checked. */
   BSON_APPEND_INT32 (doc, "collectionUUID", 7);
}

/* Parses the event; the error message, or "" when it was accepted. */
static const char *
parse (const bson_t *doc, fw_event_t *ev, fw_error_t *err)
{
   if (fw_event_parse (doc, ev, err)) {
      return "";
   }
   return err->message;
}

static void
event_parse_accepts_the_manual_s_types (void **state)
{
   static const struct {
      const char *path;
      value_t v;
   } fine[] = {
      {NULL, V_ABSENT},
      /* null: "not available" (a deleted document, no pre-image). */
      {"fullDocument", V_NULL},
      {"fullDocumentBeforeChange", V_NULL},
      /* Absent: the manual has them only for some events, a pipeline may
       * leave them out. */
      {"clusterTime", V_ABSENT},
      {"wallTime", V_ABSENT},
      {"ns", V_ABSENT},
      {"ns.coll", V_ABSENT}, /* dropDatabase */
      {"documentKey", V_ABSENT},
      {"fullDocument", V_ABSENT},
      {"fullDocumentBeforeChange", V_ABSENT},
      {"updateDescription", V_ABSENT},
      {"updateDescription.truncatedArrays", V_ABSENT},
      {"updateDescription.disambiguatedPaths", V_ABSENT},
      {"lsid", V_ABSENT},
      {"txnNumber", V_ABSENT},
      {"splitEvent", V_DOCUMENT},
   };
   fw_event_t ev;
   fw_error_t err;
   bson_t doc;
   (void) state;

   for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
      full_event (&doc, fine[i].path, fine[i].v);
      assert_string_equal (parse (&doc, &ev, &err), "");
      assert_int_equal (ev.op, FW_OP_UPDATE);
      bson_destroy (&doc);
   }
   full_event (&doc, "fullDocument", V_NULL);
   assert_true (fw_event_parse (&doc, &ev, &err));
   assert_true (fw_event_has (&ev, FW_EV_FULL_DOCUMENT));
   assert_string_equal (fw_event_ns_db (&ev), "x");
   bson_destroy (&doc);
}

static void
event_parse_refuses_each_wrong_typed_field (void **state)
{
   static const struct {
      const char *path;
      value_t bad;
      const char *message;
   } wrong[] = {
      {"operationType", V_INT32, "operationType is int, expected string"},
      {"clusterTime", V_DATE, "clusterTime is date, expected timestamp"},
      {"wallTime", V_INT64, "wallTime is long, expected date"},
      {"wallTime", V_TIMESTAMP, "wallTime is timestamp, expected date"},
      {"ns", V_STRING, "ns is string, expected document"},
      {"ns.db", V_INT32, "ns.db is int, expected string"},
      {"ns.coll", V_NULL, "ns.coll is null, expected string"},
      {"documentKey", V_STRING, "documentKey is string, expected document"},
      {"documentKey", V_NULL, "documentKey is null, expected document"},
      {"fullDocument", V_INT32, "fullDocument is int, expected document or null"},
      {"fullDocument", V_ARRAY, "fullDocument is array, expected document or null"},
      {"fullDocumentBeforeChange", V_STRING,
       "fullDocumentBeforeChange is string, expected document or null"},
      {"updateDescription", V_ARRAY, "updateDescription is array, expected document"},
      {"updateDescription.updatedFields", V_ARRAY,
       "updateDescription.updatedFields is array, expected document"},
      {"updateDescription.removedFields", V_DOCUMENT,
       "updateDescription.removedFields is document, expected array"},
      {"updateDescription.truncatedArrays", V_STRING,
       "updateDescription.truncatedArrays is string, expected array"},
      {"updateDescription.disambiguatedPaths", V_NULL,
       "updateDescription.disambiguatedPaths is null, expected document"},
      {"lsid", V_STRING, "lsid is string, expected document"},
      {"txnNumber", V_INT32, "txnNumber is int, expected long"},
      {"splitEvent", V_INT32, "splitEvent is int, expected document"},
   };
   char want[300];
   fw_event_t ev;
   fw_error_t err;
   bson_t doc;
   (void) state;

   for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
      full_event (&doc, wrong[i].path, wrong[i].bad);
      snprintf (want, sizeof want, "change event field %s (MongoDB's change-event schema)",
                wrong[i].message);
      assert_string_equal (parse (&doc, &ev, &err), want);
      /* Its resume token was read: the runtime can dead-letter it whole. */
      assert_true (fw_event_has (&ev, FW_EV_ID));
      bson_destroy (&doc);
   }
}

/* The issue's event: an insert whose documentKey is a string and whose
 * fullDocument is a number. Both are named, in the event's order; the fields
 * are located as they came (the DLQ entry copies them). */
static void
event_parse_refuses_the_insert_of_the_issue (void **state)
{
   bson_t *doc = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "insert",
                           "documentKey", "k1", "fullDocument", BCON_INT32 (42));
   fw_event_t ev;
   fw_error_t err;
   (void) state;

   assert_false (fw_event_parse (doc, &ev, &err));
   assert_string_equal (err.message,
                        "change event field documentKey is string, expected document; field "
                        "fullDocument is int, expected document or null (MongoDB's "
                        "change-event schema)");
   assert_true (fw_event_has (&ev, FW_EV_ID));
   assert_true (fw_event_has (&ev, FW_EV_DOCUMENT_KEY));
   assert_true (fw_event_has (&ev, FW_EV_FULL_DOCUMENT));
   assert_string_equal (ev.operation_type, "insert");
   bson_destroy (doc);
}

/* ns and updateDescription in another shape than a server's are checked
 * all the same. */
static void
event_parse_checks_ns_and_update_description_in_any_shape (void **state)
{
   bson_t *reversed = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "drop", "ns",
                                "{", "coll", "c", "db", "d", "}");
   bson_t *extra = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "drop", "ns", "{",
                             "db", "d", "coll", "c", "x", BCON_INT32 (1), "}");
   bson_t *empty = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "invalidate", "ns",
                             "{", "}");
   bson_t *late = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "drop", "ns", "{",
                            "x", BCON_INT32 (1), "coll", BCON_INT64 (2), "db", "d", "}");
   bson_t *empty_db = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "drop", "ns",
                                "{", "db", "", "coll", "c", "}");
   fw_event_t ev;
   fw_error_t err;
   (void) state;

   assert_string_equal (parse (reversed, &ev, &err), "");
   assert_string_equal (fw_event_ns_db (&ev), "d");
   assert_string_equal (fw_event_ns_coll (&ev), "c");
   assert_string_equal (parse (extra, &ev, &err), "");
   assert_string_equal (parse (empty, &ev, &err), "");
   assert_string_equal (parse (empty_db, &ev, &err), "");
   assert_string_equal (
      parse (late, &ev, &err),
      "change event field ns.coll is long, expected string (MongoDB's change-event schema)");
   bson_destroy (reversed);
   bson_destroy (extra);
   bson_destroy (late);
   /* updateDescription the same. */
   reversed = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "update",
                        "updateDescription", "{", "removedFields", "[", "]", "updatedFields", "{",
                        "}", "}");
   extra = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "update",
                     "updateDescription", "{", "updatedFields", "{", "}", "removedFields", "[", "]",
                     "specialFields", BCON_INT32 (1), "}");
   late = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", "update",
                    "updateDescription", "{", "x", BCON_INT32 (1), "removedFields", "a", "}");
   assert_string_equal (parse (reversed, &ev, &err), "");
   assert_string_equal (parse (extra, &ev, &err), "");
   assert_string_equal (parse (late, &ev, &err),
                        "change event field updateDescription.removedFields is string, expected "
                        "array (MongoDB's change-event schema)");
   bson_destroy (reversed);
   bson_destroy (extra);
   bson_destroy (empty);
   bson_destroy (late);
   bson_destroy (empty_db);
}

/* Every field wrong: the first four are named, in the event's order. */
static void
event_parse_names_the_first_four_wrong_fields (void **state)
{
   bson_t *doc = BCON_NEW ("_id", "{", "_data", "82AB", "}", "operationType", BCON_INT32 (1),
                           "clusterTime", BCON_INT32 (2), "wallTime", BCON_INT32 (3), "ns",
                           BCON_INT32 (4), "documentKey", BCON_INT32 (5), "lsid", BCON_INT32 (6));
   fw_event_t ev;
   fw_error_t err;
   (void) state;

   assert_false (fw_event_parse (doc, &ev, &err));
   assert_string_equal (err.message,
                        "change event field operationType is int, expected string; field "
                        "clusterTime is int, expected timestamp; field wallTime is int, expected "
                        "date; field ns is int, expected document (MongoDB's change-event "
                        "schema)");
   bson_destroy (doc);
}

/* An ns whose own elements do not add up is refused, not read past. */
static void
event_parse_refuses_a_broken_ns (void **state)
{
   bson_t doc, *copy;
   fw_event_t ev;
   fw_error_t err;
   bson_iter_t it;
   uint8_t *data;
   (void) state;

   full_event (&doc, NULL, V_ABSENT);
   assert_true (bson_iter_init_find (&it, &doc, "ns"));
   copy = bson_copy (&doc);
   data = (uint8_t *) bson_get_data (copy);
   /* The type byte of ns's first element (after the type, "ns\0" and the
    * length): a type BSON does not have. */
   data[bson_iter_offset (&it) + 1 + 3 + 4] = 0x50;
   assert_string_equal (parse (copy, &ev, &err), "change event field ns is not valid BSON");
   bson_destroy (copy);
   bson_destroy (&doc);
}

static void
short_id_of (const char *data, char *buf, size_t len)
{
   bson_t doc, id;
   fw_event_t ev;
   fw_error_t err;

   bson_init (&doc);
   BSON_APPEND_DOCUMENT_BEGIN (&doc, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", data);
   bson_append_document_end (&doc, &id);
   BSON_APPEND_UTF8 (&doc, "operationType", "insert");
   assert_true (fw_event_parse (&doc, &ev, &err));
   fw_event_short_id (&ev, buf, len);
   bson_destroy (&doc);
}

/* Issue 38: a warn line's event id. A server's token (~170 characters) is
 * 12 hex digits of its hash and its clusterTime; a short id stays whole. */
static void
event_short_id_is_a_hash_and_the_cluster_time (void **state)
{
   char token[200], other[200], buf[64], buf2[64];
   (void) state;

   /* "82" + Timestamp(1795687200, 3) as 16 hex digits, then the rest. */
   snprintf (token, sizeof token, "82%08X%08X%s", 1795687200u, 3u,
             "2B022C0100296E5A1004A1B2C3D4E5F60718293A4B5C6D7E8F46645F6964006400000000000004");
   short_id_of (token, buf, sizeof buf);
   assert_int_equal (strlen (buf), 12 + 1 + strlen ("1795687200.3"));
   assert_string_equal (buf + 12, "@1795687200.3");
   assert_int_equal (strspn (buf, "0123456789abcdef"), 12);
   /* Another event of the same clusterTime (a transaction's) differs. */
   snprintf (other, sizeof other, "%s", token);
   other[strlen (other) - 3] = '5';
   short_id_of (other, buf2, sizeof buf2);
   assert_string_not_equal (buf, buf2);
   assert_string_equal (buf2 + 12, "@1795687200.3");
   /* Not a server token: the hash alone. */
   memset (other, 'z', 100);
   other[100] = '\0';
   short_id_of (other, buf, sizeof buf);
   assert_int_equal (strlen (buf), 12);
   short_id_of ("826B00AA", buf, sizeof buf);
   assert_string_equal (buf, "826B00AA");
}

/* A log line's event id: whole when it fits, else cut with its length. */
static void
event_log_id_cuts_a_long_id_and_says_its_length (void **state)
{
   char data[1501], buf[200], want[64];
   bson_t doc, id;
   fw_event_t ev;
   fw_error_t err;
   (void) state;

   memset (data, 'A', sizeof data - 1);
   data[sizeof data - 1] = '\0';
   bson_init (&doc);
   BSON_APPEND_DOCUMENT_BEGIN (&doc, "_id", &id);
   BSON_APPEND_UTF8 (&id, "_data", data);
   bson_append_document_end (&doc, &id);
   BSON_APPEND_UTF8 (&doc, "operationType", "insert");
   assert_true (fw_event_parse (&doc, &ev, &err));
   fw_event_log_id (&ev, buf, sizeof buf);
   snprintf (want, sizeof want, "...(%zu characters)", fw_event_id_len (&ev));
   assert_int_equal (strlen (buf), 160 + strlen (want));
   assert_int_equal (strncmp (buf, data, 160), 0);
   assert_string_equal (buf + 160, want);
   bson_destroy (&doc);

   build (&doc, NULL);
   assert_true (fw_event_parse (&doc, &ev, &err));
   fw_event_log_id (&ev, buf, sizeof buf);
   assert_true (fw_event_id (&ev, data, sizeof data));
   assert_string_equal (buf, data);
   bson_destroy (&doc);
}

/* fw_event_field_document: the _id's own bytes (what the position copies
 * an event), nothing for a field of another type or one the event lacks. */
static void
event_field_document_is_the_field_s_bytes (void **state)
{
   bson_t doc;
   bson_iter_t it;
   fw_event_t ev;
   fw_error_t err;
   const uint8_t *data, *want;
   uint32_t len, want_len;

   (void) state;
   build (&doc, NULL);
   BSON_APPEND_UTF8 (&doc, "clusterTime", "not a timestamp");
   /* Refused (clusterTime's type), its fields located as they came. */
   assert_false (fw_event_parse (&doc, &ev, &err));
   assert_true (fw_event_field (&ev, FW_EV_ID, &it));
   bson_iter_document (&it, &want_len, &want);
   assert_true (fw_event_field_document (&ev, FW_EV_ID, &data, &len));
   assert_ptr_equal (data, want);
   assert_int_equal (len, want_len);
   assert_false (fw_event_field_document (&ev, FW_EV_CLUSTER_TIME, &data, &len));
   assert_false (fw_event_field_document (&ev, FW_EV_FULL_DOCUMENT, &data, &len));
   bson_destroy (&doc);
}

/* The lag's time: wallTime, else clusterTime's seconds, else 0. */
static void
event_time_is_wall_time_else_cluster_time (void **state)
{
   bson_t doc;
   fw_event_t ev;
   fw_error_t err;

   (void) state;
   build (&doc, NULL);
   BSON_APPEND_TIMESTAMP (&doc, "clusterTime", 1700000000u, 7u);
   assert_true (fw_event_parse (&doc, &ev, &err));
   assert_int_equal (fw_event_time_ms (&ev), INT64_C (1700000000000));
   BSON_APPEND_DATE_TIME (&doc, "wallTime", INT64_C (1700000000123));
   assert_true (fw_event_parse (&doc, &ev, &err));
   assert_int_equal (fw_event_time_ms (&ev), INT64_C (1700000000123));
   bson_destroy (&doc);

   build (&doc, NULL);
   assert_true (fw_event_parse (&doc, &ev, &err));
   assert_int_equal (fw_event_time_ms (&ev), 0);
   bson_destroy (&doc);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (event_order_key_leaves_the_shard_key_out),
      cmocka_unit_test (event_order_key_without_id_or_document_key),
      cmocka_unit_test (event_parse_accepts_the_manual_s_types),
      cmocka_unit_test (event_parse_refuses_each_wrong_typed_field),
      cmocka_unit_test (event_parse_refuses_the_insert_of_the_issue),
      cmocka_unit_test (event_parse_checks_ns_and_update_description_in_any_shape),
      cmocka_unit_test (event_parse_names_the_first_four_wrong_fields),
      cmocka_unit_test (event_parse_refuses_a_broken_ns),
      cmocka_unit_test (event_log_id_cuts_a_long_id_and_says_its_length),
      cmocka_unit_test (event_short_id_is_a_hash_and_the_cluster_time),
      cmocka_unit_test (event_field_document_is_the_field_s_bytes),
      cmocka_unit_test (event_time_is_wall_time_else_cluster_time),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
