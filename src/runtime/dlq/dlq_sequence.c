/*
 * dlq_sequence.c - the sequences of a sequenced DLQ: a stream's open
 * sequence ids in memory (a hash set of strings) and the per-sequence
 * documents both the live stream and replays update (see dlq_sequence.h
 * for the protocol).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bson/write_reply.h"
#include "flowwarden/clock.h"
#include "runtime/collections/owned_collections.h"
#include "runtime/collections/sharding.h"
#include "runtime/dlq/dlq_sequence-private.h"

/* --- the set ------------------------------------------------------------------ */

typedef struct slot {
   struct slot *next;
   uint64_t hash;
   char id[]; /* NUL-terminated */
} slot_t;

struct fw_dlq_sequences {
   slot_t **buckets;
   size_t n_buckets; /* a power of two */
   size_t count;
};

static uint64_t
hash_of (const char *s)
{
   uint64_t h = 1469598103934665603ULL; /* FNV-1a */
   for (; *s; s++) {
      h = (h ^ (unsigned char) *s) * 1099511628211ULL;
   }
   return h;
}

fw_dlq_sequences_t *
fw_dlq_sequences_new (void)
{
   fw_dlq_sequences_t *s = calloc (1, sizeof *s);
   if (!s) {
      return NULL;
   }
   s->n_buckets = 16;
   s->buckets = calloc (s->n_buckets, sizeof *s->buckets);
   if (!s->buckets) {
      free (s);
      return NULL;
   }
   return s;
}

void
fw_dlq_sequences_clear (fw_dlq_sequences_t *s)
{
   for (size_t i = 0; i < s->n_buckets; i++) {
      slot_t *e = s->buckets[i];
      while (e) {
         slot_t *next = e->next;
         free (e);
         e = next;
      }
      s->buckets[i] = NULL;
   }
   s->count = 0;
}

void
fw_dlq_sequences_destroy (fw_dlq_sequences_t *s)
{
   if (!s) {
      return;
   }
   fw_dlq_sequences_clear (s);
   free (s->buckets);
   free (s);
}

size_t
fw_dlq_sequences_count (const fw_dlq_sequences_t *s)
{
   return s ? s->count : 0;
}

static slot_t **
find (const fw_dlq_sequences_t *s, const char *id, uint64_t h)
{
   slot_t **at = &s->buckets[h & (s->n_buckets - 1)];
   for (; *at; at = &(*at)->next) {
      if ((*at)->hash == h && strcmp ((*at)->id, id) == 0) {
         break;
      }
   }
   return at;
}

bool
fw_dlq_sequences_has (const fw_dlq_sequences_t *s, const char *id)
{
   return s && s->count && *find (s, id, hash_of (id));
}

/* Doubles the buckets; on failure keeps the old ones (only slower). */
static void
grow (fw_dlq_sequences_t *s)
{
   size_t n = s->n_buckets * 2;
   slot_t **b = calloc (n, sizeof *b);
   if (!b) {
      return;
   }
   for (size_t i = 0; i < s->n_buckets; i++) {
      slot_t *e = s->buckets[i];
      while (e) {
         slot_t *next = e->next;
         e->next = b[e->hash & (n - 1)];
         b[e->hash & (n - 1)] = e;
         e = next;
      }
   }
   free (s->buckets);
   s->buckets = b;
   s->n_buckets = n;
}

bool
fw_dlq_sequences_add (fw_dlq_sequences_t *s, const char *id)
{
   uint64_t h = hash_of (id);
   size_t len = strlen (id);
   slot_t **at = find (s, id, h);
   slot_t *e;

   if (*at) {
      return true;
   }
   if (!(e = malloc (sizeof *e + len + 1))) {
      return false;
   }
   e->hash = h;
   e->next = NULL;
   memcpy (e->id, id, len + 1);
   *at = e;
   if (++s->count > s->n_buckets * 3 / 4) {
      grow (s);
   }
   return true;
}

void
fw_dlq_sequences_remove (fw_dlq_sequences_t *s, const char *id)
{
   slot_t **at;
   slot_t *e;

   if (!s || !s->count) {
      return;
   }
   at = find (s, id, hash_of (id));
   if ((e = *at)) {
      *at = e->next;
      free (e);
      s->count--;
   }
}

/* --- ids --------------------------------------------------------------------------- */

char *
fw_dlq_sequence_id (const bson_value_t *value)
{
   bson_t doc = BSON_INITIALIZER;
   char *json, *id = NULL;
   size_t len;
   static const char head[] = "{ \"\" : ";
   static const char tail[] = " }";

   if (!bson_append_value (&doc, "", 0, value)) {
      bson_destroy (&doc);
      return NULL;
   }
   /* libbson writes { "" : <value> }: the id is what lies between. */
   json = bson_as_canonical_extended_json (&doc, &len);
   bson_destroy (&doc);
   if (json && len > sizeof head + sizeof tail - 2 && strncmp (json, head, sizeof head - 1) == 0 &&
       strcmp (json + len - (sizeof tail - 1), tail) == 0) {
      size_t n = len - (sizeof head - 1) - (sizeof tail - 1);
      if ((id = bson_malloc (n + 1))) {
         memcpy (id, json + sizeof head - 1, n);
         id[n] = '\0';
      }
   }
   bson_free (json);
   return id;
}

/* --- the sequences collection ------------------------------------------------------- */

mongoc_collection_t *
fw_dlq_sequence_collection (mongoc_client_t *client, const char *database,
                            const char *dlq_collection)
{
   char *name = fw_dlq_sequences_name (dlq_collection);
   mongoc_collection_t *coll;

   if (!name) {
      return NULL;
   }
   coll = mongoc_client_get_collection (client, database, name);
   bson_free (name);
   return coll;
}

static void
append_key (bson_t *doc, const char *stream, const char *id)
{
   bson_t key;
   BSON_APPEND_DOCUMENT_BEGIN (doc, "_id", &key);
   BSON_APPEND_UTF8 (&key, "streamName", stream);
   BSON_APPEND_UTF8 (&key, "sequenceId", id);
   bson_append_document_end (doc, &key);
}

bool
fw_dlq_sequence_load (mongoc_collection_t *seqs, const char *stream, fw_dlq_sequences_t *into,
                      fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER, opts = BSON_INITIALIZER, proj, update = BSON_INITIALIZER, set,
          gt;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   BSON_APPEND_UTF8 (&filter, "streamName", stream);
   BSON_APPEND_BOOL (&filter, "open", true);
   BSON_APPEND_DOCUMENT_BEGIN (&opts, "projection", &proj);
   BSON_APPEND_INT32 (&proj, "sequenceId", 1);
   bson_append_document_end (&opts, &proj);
   fw_dlq_sequences_clear (into);
   cursor = mongoc_collection_find_with_opts (seqs, &filter, &opts, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      if (bson_iter_init_find (&it, doc, "sequenceId") && BSON_ITER_HOLDS_UTF8 (&it) &&
          !fw_dlq_sequences_add (into, bson_iter_utf8 (&it, NULL))) {
         fw_error_set (error, FW_ERROR_NOMEM, "not enough memory for the open sequences");
         ok = false;
      }
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read the open DLQ sequences: %s", berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);

   if (ok) {
      BSON_APPEND_DOCUMENT_BEGIN (&filter, "inflight", &gt);
      BSON_APPEND_INT32 (&gt, "$gt", 0);
      bson_append_document_end (&filter, &gt);
      BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &set);
      BSON_APPEND_INT64 (&set, "inflight", 0);
      bson_append_document_end (&update, &set);
      if (!mongoc_collection_update_many (seqs, &filter, &update, NULL, NULL, &berr)) {
         fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                            "cannot reset the DLQ sequences' inflight counts: %s", berr.message);
         ok = false;
      }
   }
   bson_destroy (&filter);
   bson_destroy (&opts);
   bson_destroy (&update);
   return ok;
}

bool
fw_dlq_sequence_take (mongoc_collection_t *seqs, const char *stream, const char *id, bool open,
                      int64_t *index, fw_seq_take_t *result, fw_error_t *error)
{
   int64_t now = fw_now_ms ();
   bson_t query = BSON_INITIALIZER, update = BSON_INITIALIZER, child, reply;
   mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new ();
   bson_error_t berr;
   bson_iter_t it;
   bool ok;

   append_key (&query, stream, id);
   if (!open) {
      BSON_APPEND_BOOL (&query, "open", true);
   }
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$inc", &child);
   BSON_APPEND_INT64 (&child, "next", 1);
   BSON_APPEND_INT64 (&child, "inflight", 1);
   bson_append_document_end (&update, &child);
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &child);
   BSON_APPEND_DATE_TIME (&child, "lastTouched", now);
   if (open) {
      BSON_APPEND_BOOL (&child, "open", true);
      BSON_APPEND_DATE_TIME (&child, "openedAt", now);
   }
   bson_append_document_end (&update, &child);
   if (open) {
      BSON_APPEND_DOCUMENT_BEGIN (&update, "$setOnInsert", &child);
      BSON_APPEND_UTF8 (&child, "streamName", stream);
      BSON_APPEND_UTF8 (&child, "sequenceId", id);
      BSON_APPEND_DATE_TIME (&child, "createdAt", now);
      bson_append_document_end (&update, &child);
   }
   mongoc_find_and_modify_opts_set_update (fam, &update);
   mongoc_find_and_modify_opts_set_flags (fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW |
                                                  (open ? MONGOC_FIND_AND_MODIFY_UPSERT : 0));
   ok = mongoc_collection_find_and_modify_with_opts (seqs, &query, fam, &reply, &berr);
   *result = FW_SEQ_CLOSED;
   if (!ok) {
      char hint[400];
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot take an index in DLQ sequence %.200s: %s%s", id, berr.message,
                         fw_sharding_hint (&berr, mongoc_collection_get_name (seqs),
                                           FW_SHARD_KEY_BY_ID, hint, sizeof hint));
   } else if (bson_iter_init_find (&it, &reply, "value") && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_iter_t value, next;
      if (bson_iter_recurse (&it, &value) && bson_iter_find (&value, "next") &&
          BSON_ITER_HOLDS_NUMBER (&value)) {
         next = value;
         *index = bson_iter_as_int64 (&next) - 1;
         *result = FW_SEQ_TAKEN;
      } else {
         fw_error_set (error, FW_ERROR_MONGO, "DLQ sequence %.200s: its document has no next", id);
         ok = false;
      }
   } else if (open) {
      fw_error_set (error, FW_ERROR_MONGO, "DLQ sequence %.200s: findAndModify returned nothing",
                    id);
      ok = false;
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   bson_destroy (&update);
   mongoc_find_and_modify_opts_destroy (fam);
   return ok;
}

bool
fw_dlq_sequence_settle (mongoc_collection_t *seqs, const char *stream, const char *id,
                        fw_error_t *error)
{
   bson_t query = BSON_INITIALIZER, update = BSON_INITIALIZER, child, gt;
   bson_error_t berr;
   bool ok;

   append_key (&query, stream, id);
   BSON_APPEND_DOCUMENT_BEGIN (&query, "inflight", &gt);
   BSON_APPEND_INT32 (&gt, "$gt", 0);
   bson_append_document_end (&query, &gt);
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$inc", &child);
   BSON_APPEND_INT64 (&child, "inflight", -1);
   bson_append_document_end (&update, &child);
   ok = mongoc_collection_update_one (seqs, &query, &update, NULL, NULL, &berr);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot settle DLQ sequence %.200s: %s", id, berr.message);
   }
   bson_destroy (&query);
   bson_destroy (&update);
   return ok;
}

bool
fw_dlq_sequence_read (mongoc_collection_t *seqs, const char *stream, const char *id,
                      fw_seq_state_t *out, fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   memset (out, 0, sizeof *out);
   append_key (&filter, stream, id);
   cursor = mongoc_collection_find_with_opts (seqs, &filter, NULL, NULL);
   if (mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      out->exists = true;
      out->open = bson_iter_init_find (&it, doc, "open") && bson_iter_as_bool (&it);
      out->next = bson_iter_init_find (&it, doc, "next") && BSON_ITER_HOLDS_NUMBER (&it)
                     ? bson_iter_as_int64 (&it)
                     : 0;
      out->inflight = bson_iter_init_find (&it, doc, "inflight") && BSON_ITER_HOLDS_NUMBER (&it)
                         ? bson_iter_as_int64 (&it)
                         : 0;
   } else if (mongoc_cursor_error (cursor, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot read DLQ sequence %.200s: %s", id, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (&filter);
   return ok;
}

bool
fw_dlq_sequence_close (mongoc_collection_t *seqs, const char *stream, const char *id,
                       int64_t expected_next, bool *closed, fw_error_t *error)
{
   bson_t query = BSON_INITIALIZER, update = BSON_INITIALIZER, child, reply;
   bson_error_t berr;
   bson_iter_t it;
   int64_t now = fw_now_ms ();
   bool ok;

   append_key (&query, stream, id);
   BSON_APPEND_BOOL (&query, "open", true);
   BSON_APPEND_INT64 (&query, "next", expected_next);
   BSON_APPEND_INT64 (&query, "inflight", 0);
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &child);
   BSON_APPEND_BOOL (&child, "open", false);
   BSON_APPEND_DATE_TIME (&child, "closedAt", now);
   BSON_APPEND_DATE_TIME (&child, "lastTouched", now);
   bson_append_document_end (&update, &child);
   ok = mongoc_collection_update_one (seqs, &query, &update, NULL, &reply, &berr);
   *closed = ok && bson_iter_init_find (&it, &reply, "modifiedCount") &&
             bson_iter_as_int64 (&it) > 0;
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot close DLQ sequence %.200s: %s", id, berr.message);
   }
   bson_destroy (&reply);
   bson_destroy (&query);
   bson_destroy (&update);
   return ok;
}

bool
fw_dlq_sequence_size (mongoc_collection_t *dlq, const char *stream, const char *id, int64_t *out,
                      fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER, in, arr;
   bson_error_t berr;

   BSON_APPEND_UTF8 (&filter, "streamName", stream);
   BSON_APPEND_UTF8 (&filter, "sequenceId", id);
   BSON_APPEND_DOCUMENT_BEGIN (&filter, "status", &in);
   BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
   BSON_APPEND_UTF8 (&arr, "0", "PENDING");
   BSON_APPEND_UTF8 (&arr, "1", "REPROCESSING");
   bson_append_array_end (&in, &arr);
   bson_append_document_end (&filter, &in);
   *out = mongoc_collection_count_documents (dlq, &filter, NULL, NULL, NULL, &berr);
   bson_destroy (&filter);
   if (*out < 0) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot count DLQ sequence %.200s: %s", id, berr.message);
      return false;
   }
   return true;
}

bool
fw_dlq_sequence_indexes (mongoc_collection_t *dlq, fw_error_t *error)
{
   bson_t cmd = BSON_INITIALIZER, indexes, index, key, partial, exists, reply;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_UTF8 (&cmd, "createIndexes", mongoc_collection_get_name (dlq));
   BSON_APPEND_ARRAY_BEGIN (&cmd, "indexes", &indexes);
   BSON_APPEND_DOCUMENT_BEGIN (&indexes, "0", &index);
   BSON_APPEND_DOCUMENT_BEGIN (&index, "key", &key);
   BSON_APPEND_INT32 (&key, "streamName", 1);
   BSON_APPEND_INT32 (&key, "sequenceId", 1);
   BSON_APPEND_INT32 (&key, "sequenceIndex", 1);
   bson_append_document_end (&index, &key);
   BSON_APPEND_UTF8 (&index, "name", "streamName_sequence");
   BSON_APPEND_DOCUMENT_BEGIN (&index, "partialFilterExpression", &partial);
   BSON_APPEND_DOCUMENT_BEGIN (&partial, "sequenceId", &exists);
   BSON_APPEND_BOOL (&exists, "$exists", true);
   bson_append_document_end (&partial, &exists);
   bson_append_document_end (&index, &partial);
   bson_append_document_end (&indexes, &index);
   bson_append_array_end (&cmd, &indexes);
   ok = fw_write_reply_ok (
      mongoc_collection_write_command_with_opts (dlq, &cmd, NULL, &reply, &berr), &reply, &berr);
   bson_destroy (&reply);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot create the DLQ's sequence index: %s", berr.message);
   }
   bson_destroy (&cmd);
   return ok;
}
