/*
 * Unit tests for event.c's ordering key (issue 23, section 8): lanes and the
 * sequenced DLQ's default sequence order one document's events by
 * documentKey._id, so a shard key beside it (which refineCollectionShardKey
 * or resharding changes) never moves a document to another lane or sequence.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "flowwarden/dlq_sequence.h"
#include "flowwarden/event.h"

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

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (event_order_key_leaves_the_shard_key_out),
      cmocka_unit_test (event_order_key_without_id_or_document_key),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
