/*
 * dlq_store.c - the MongoDB implementation of the DLQ store.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/write_reply.h"
#include "flowwarden/log.h"
#include "runtime/collections/sharding.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_sequence-private.h"
#include "runtime/dlq/dlq_store-private.h"

typedef fw_mongo_store_t mongo_store_t;

#define FW_ERR_DUPLICATE_KEY 11000
#define FW_UNIQUE_INDEX "fw_stream_event_unique"
#define FW_DLQ_DUE_INDEX "streamName_status_nextAttemptAt"

/* True when a document with entry's _id is already in the collection. */
static bool
already_saved (mongo_store_t *m, const bson_t *entry)
{
   bson_iter_t id;
   bson_t filter = BSON_INITIALIZER;
   bson_error_t berr;
   int64_t n;

   if (!bson_iter_init_find (&id, entry, "_id")) {
      bson_destroy (&filter);
      return false;
   }
   bson_append_iter (&filter, "_id", -1, &id);
   n = mongoc_collection_count_documents (m->coll, &filter, NULL, NULL, NULL, &berr);
   bson_destroy (&filter);
   return n == 1;
}

/* True when entry's own "enqueued" history item (same at, same actor) is
 * already stored for its event: an earlier try of this save was applied but
 * not acknowledged, and applying it again would count it twice. */
static bool
already_enqueued (mongo_store_t *m, const bson_t *entry, const bson_t *key)
{
   bson_iter_t it, item;
   bson_t filter, history;
   bson_error_t berr;
   int64_t n;

   if (!bson_iter_init (&it, entry) || !bson_iter_find_descendant (&it, "history.0", &item) ||
       !BSON_ITER_HOLDS_DOCUMENT (&item)) {
      return false;
   }
   bson_copy_to (key, &filter);
   BSON_APPEND_DOCUMENT_BEGIN (&filter, "history", &history);
   bson_append_iter (&history, "$elemMatch", -1, &item);
   bson_append_document_end (&filter, &history);
   n = mongoc_collection_count_documents (m->coll, &filter, NULL, NULL, NULL, &berr);
   bson_destroy (&filter);
   return n >= 1;
}

/* One entry per (streamName, eventId). With the unique index in place the
 * first write is a plain insert, so a new entry keeps seed 002's field order
 * (an upsert's insert would sort the fields by name); a duplicate-key error
 * on that index means the event was dead-lettered before, and the upsert
 * updates it. Without the index (duplicates already in the collection) the
 * upsert alone does both. */
static bool
mongo_save (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error)
{
   mongo_store_t *m = (mongo_store_t *) store;
   bson_t opts = BSON_INITIALIZER;
   bson_t key = BSON_INITIALIZER;
   bson_iter_t stream, event;
   bson_error_t berr;
   bool keyed, ok;

   if (!mongoc_write_concern_append (m->wc, &opts)) {
      bson_destroy (&opts);
      bson_destroy (&key);
      fw_error_set (error, FW_ERROR_INVALID, "invalid DLQ write concern");
      return false;
   }
   keyed = bson_iter_init_find (&stream, entry, "streamName") &&
           bson_iter_init_find (&event, entry, "eventId") && BSON_ITER_HOLDS_UTF8 (&event);
   if (keyed) {
      bson_append_iter (&key, "streamName", -1, &stream);
      bson_append_iter (&key, "eventId", -1, &event);
   }

   if (m->unsure && (keyed ? already_enqueued (m, entry, &key) : already_saved (m, entry))) {
      /* An earlier try of this same save was applied but not acknowledged
       * (a write concern error, a lost reply): the save is done. */
      ok = true;
   } else if (keyed && !m->unique_index) {
      ok = fw_dlq__mongo_upsert (m, entry, &key, &opts, &berr);
   } else {
      ok = mongoc_collection_insert_one (m->coll, entry, &opts, NULL, &berr);
      if (!ok && berr.code == FW_ERR_DUPLICATE_KEY) {
         /* The entry's _id is a fresh UUID drawn for this entry, so a
          * document there with it is ours, from an earlier try; otherwise the
          * duplicate is on (streamName, eventId). */
         if (already_saved (m, entry)) {
            ok = true;
         } else if (keyed) {
            ok = fw_dlq__mongo_upsert (m, entry, &key, &opts, &berr);
         }
      }
   }
   m->unsure = !ok;
   if (!ok) {
      char hint[400];
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "DLQ write to %s failed: %s%s",
                         m->name, berr.message,
                         fw_sharding_hint (&berr, m->name, FW_SHARD_KEY_DLQ, hint, sizeof hint));
   }
   bson_destroy (&key);
   bson_destroy (&opts);
   return ok;
}

static bool
mongo_find (mongo_store_t *m, const bson_t *filter, const bson_t *opts, bson_t *out, bool as_array,
            bool *found, fw_error_t *error)
{
   mongoc_cursor_t *cursor = mongoc_collection_find_with_opts (m->coll, filter, opts, NULL);
   const bson_t *doc;
   bson_error_t berr;
   uint32_t i = 0;
   bool ok = true;

   bson_init (out);
   if (found) {
      *found = false;
   }
   while (mongoc_cursor_next (cursor, &doc)) {
      if (as_array) {
         char key[16];
         const char *k;
         bson_uint32_to_string (i++, &k, key, sizeof key);
         BSON_APPEND_DOCUMENT (out, k, doc);
      } else {
         bson_destroy (out);
         bson_copy_to (doc, out);
         if (found) {
            *found = true;
         }
         break;
      }
   }
   if (mongoc_cursor_error (cursor, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "DLQ query on %s failed: %s",
                         m->name, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   return ok;
}

static bool
mongo_find_by_id (fw_dlq_store_t *store, const char *id, bson_t *out, bool *found,
                  fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER;
   bool ok;
   BSON_APPEND_UTF8 (&filter, "_id", id);
   ok = mongo_find ((mongo_store_t *) store, &filter, NULL, out, false, found, error);
   bson_destroy (&filter);
   return ok;
}

static bool
mongo_find_by_stream (fw_dlq_store_t *store, const char *stream, bson_t *out, fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER;
   bson_t opts = BSON_INITIALIZER;
   bson_t sort;
   bool ok;
   BSON_APPEND_UTF8 (&filter, "streamName", stream);
   BSON_APPEND_DOCUMENT_BEGIN (&opts, "sort", &sort);
   BSON_APPEND_INT32 (&sort, "createdAt", 1);
   bson_append_document_end (&opts, &sort);
   ok = mongo_find ((mongo_store_t *) store, &filter, &opts, out, true, NULL, error);
   bson_destroy (&filter);
   bson_destroy (&opts);
   return ok;
}

static bool
mongo_count (fw_dlq_store_t *store, const char *stream, int64_t *out, fw_error_t *error)
{
   mongo_store_t *m = (mongo_store_t *) store;
   bson_t filter = BSON_INITIALIZER;
   bson_error_t berr;
   int64_t n;

   if (stream) {
      BSON_APPEND_UTF8 (&filter, "streamName", stream);
   }
   n = mongoc_collection_count_documents (m->coll, &filter, NULL, NULL, NULL, &berr);
   bson_destroy (&filter);
   if (n < 0) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code, "DLQ count on %s failed: %s",
                         m->name, berr.message);
      return false;
   }
   *out = n;
   return true;
}

static void
mongo_destroy (fw_dlq_store_t *store)
{
   mongo_store_t *m = (mongo_store_t *) store;
   mongoc_collection_destroy (m->coll);
   mongoc_collection_destroy (m->seqs);
   mongoc_write_concern_destroy (m->wc);
   bson_free (m->name);
   bson_free (m->seqs_name);
   free (m);
}

/* How many (streamName, eventId) pairs have more than one entry, or -1 when
 * the count itself fails. */
static int64_t
count_duplicate_groups (mongo_store_t *m)
{
   bson_t *pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "eventId", "{", "$exists",
                                BCON_BOOL (true), "}", "}", "}", "{", "$group", "{", "_id", "{",
                                "s", BCON_UTF8 ("$streamName"), "e", BCON_UTF8 ("$eventId"), "}",
                                "n", "{", "$sum", BCON_INT32 (1), "}", "}", "}", "{", "$match", "{",
                                "n", "{", "$gt", BCON_INT32 (1), "}", "}", "}", "{", "$count",
                                BCON_UTF8 ("groups"), "}", "]");
   mongoc_cursor_t *cursor = mongoc_collection_aggregate (m->coll, MONGOC_QUERY_NONE, pipeline,
                                                          NULL, NULL);
   const bson_t *doc;
   bson_iter_t it;
   int64_t n = 0;

   if (mongoc_cursor_next (cursor, &doc) && bson_iter_init_find (&it, doc, "groups") &&
       BSON_ITER_HOLDS_NUMBER (&it)) {
      n = bson_iter_as_int64 (&it);
   }
   if (mongoc_cursor_error (cursor, NULL)) {
      n = -1;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   return n;
}

static bool
create_indexes (mongo_store_t *m, const bson_t *indexes, bson_error_t *berr)
{
   bson_t cmd = BSON_INITIALIZER;
   bson_t reply;
   bool ok;

   BSON_APPEND_UTF8 (&cmd, "createIndexes", mongoc_collection_get_name (m->coll));
   BSON_APPEND_ARRAY (&cmd, "indexes", indexes);
   ok = fw_write_reply_ok (
      mongoc_collection_write_command_with_opts (m->coll, &cmd, NULL, &reply, berr), &reply, berr);
   bson_destroy (&reply);
   bson_destroy (&cmd);
   return ok;
}

/* An ascending index named `name` on `keys` (NULL-terminated), appended to
 * createIndexes' array `indexes` at position `pos`. */
static void
append_index (bson_t *indexes, const char *pos, const char *name, const char *const *keys)
{
   bson_t idx, key;
   BSON_APPEND_DOCUMENT_BEGIN (indexes, pos, &idx);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "key", &key);
   for (int i = 0; keys[i]; i++) {
      BSON_APPEND_INT32 (&key, keys[i], 1);
   }
   bson_append_document_end (&idx, &key);
   BSON_APPEND_UTF8 (&idx, "name", name);
   bson_append_document_end (indexes, &idx);
}

/* The TTL index on expiresAt, the indexes of the readers' sorts and the
 * deferred retries' claim. */
static bool
create_plain_indexes (mongo_store_t *m, fw_error_t *error)
{
   bson_t indexes = BSON_INITIALIZER;
   bson_t idx, key;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_DOCUMENT_BEGIN (&indexes, "0", &idx);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "key", &key);
   BSON_APPEND_INT32 (&key, "expiresAt", 1);
   bson_append_document_end (&idx, &key);
   BSON_APPEND_UTF8 (&idx, "name", "expiresAt_ttl");
   BSON_APPEND_INT32 (&idx, "expireAfterSeconds", 0);
   bson_append_document_end (&indexes, &idx);

   append_index (&indexes, "1", "streamName_createdAt",
                 (const char *const[]){"streamName", "createdAt", NULL});
   /* One per sort the DLQ's readers ask for with a stream's name pinned, in
    * the order they ask (MongoDB 5.0 fails an unindexed sort over 100 MB
    * without allowDiskUse): dlq.reprocess and `dlq replay` by clusterTime,
    * `dlq list --stream` by createdAt. */
   append_index (&indexes, "2", "streamName_clusterTime_createdAt__id",
                 (const char *const[]){"streamName", "clusterTime", "createdAt", "_id", NULL});
   append_index (&indexes, "3", "streamName_createdAt__id",
                 (const char *const[]){"streamName", "createdAt", "_id", NULL});
   /* Deferred retries' claim (dlq_store_mongo_deferred.c, due_query): equality
    * on streamName and, in each $or branch, status; a range on and the sort
    * by nextAttemptAt. Without it each claim reads the stream's whole DLQ. */
   append_index (&indexes, "4", FW_DLQ_DUE_INDEX,
                 (const char *const[]){"streamName", "status", "nextAttemptAt", NULL});

   ok = create_indexes (m, &indexes, &berr);
   bson_destroy (&indexes);
   if (!ok) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot create the DLQ indexes on %s: %s", m->name, berr.message);
      return false;
   }
   return true;
}

/* The unique index cannot be built over existing duplicates: says how many
 * groups of them there are and that the stream carries on without it. */
static void
warn_duplicates (mongo_store_t *m)
{
   int64_t groups = count_duplicate_groups (m);
   char count[32];

   if (groups >= 0) {
      snprintf (count, sizeof count, "%lld", (long long) groups);
   } else {
      snprintf (count, sizeof count, "an unknown number of");
   }
   fw_log (FW_LOG_WARN, NULL,
           "DLQ collection %s holds %s group(s) of entries with the same (streamName, "
           "eventId), so its unique index %s cannot be built: carrying on without it (a "
           "later failure of such an event updates one of its entries); remove the extra "
           "entries and the index is built at the next start",
           m->name, count, FW_UNIQUE_INDEX);
}

/* The unique (streamName, eventId) index; m->unique_index says whether it
 * exists. Only entries with an eventId are keyed: a document without one
 * (an event id too long to store, or one written by another tool) is not
 * "the same event" as another. */
static bool
create_unique_index (mongo_store_t *m, fw_error_t *error)
{
   bson_t indexes = BSON_INITIALIZER;
   bson_t idx, key, partial, cond;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_DOCUMENT_BEGIN (&indexes, "0", &idx);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "key", &key);
   BSON_APPEND_INT32 (&key, "streamName", 1);
   BSON_APPEND_INT32 (&key, "eventId", 1);
   bson_append_document_end (&idx, &key);
   BSON_APPEND_UTF8 (&idx, "name", FW_UNIQUE_INDEX);
   BSON_APPEND_BOOL (&idx, "unique", true);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "partialFilterExpression", &partial);
   BSON_APPEND_DOCUMENT_BEGIN (&partial, "eventId", &cond);
   BSON_APPEND_BOOL (&cond, "$exists", true);
   bson_append_document_end (&partial, &cond);
   bson_append_document_end (&idx, &partial);
   bson_append_document_end (&indexes, &idx);
   ok = create_indexes (m, &indexes, &berr);
   bson_destroy (&indexes);
   if (ok) {
      m->unique_index = true;
      return true;
   }
   if (berr.code != FW_ERR_DUPLICATE_KEY) {
      char hint[400];
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot create the DLQ index %s on %s: %s%s", FW_UNIQUE_INDEX, m->name,
                         berr.message,
                         fw_sharding_hint (&berr, m->name, FW_SHARD_KEY_DLQ, hint, sizeof hint));
      return false;
   }
   warn_duplicates (m);
   m->unique_index = false;
   return true;
}

/* The indexes are declared with the same keys and options every start, so
 * createIndexes is a no-op once they exist. The unique index is created on
 * its own: entries written before it existed may already hold duplicates,
 * which must not stop the stream (see mongo_save). */
static bool
ensure_indexes (mongo_store_t *m, fw_error_t *error)
{
   return create_plain_indexes (m, error) && create_unique_index (m, error);
}

/* A store on database.collection with no index ensured yet; NULL when out
 * of memory (error filled). connection, when set, is named in messages. */
static mongo_store_t *
mongo_store_new (mongoc_client_t *client, const char *database, const char *collection,
                 const char *connection, fw_error_t *error)
{
   mongo_store_t *m = calloc (1, sizeof *m);
   char *suffix = connection ? bson_strdup_printf (" (connection \"%s\")", connection)
                             : bson_strdup ("");

   if (!m || !suffix) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      free (m);
      bson_free (suffix);
      return NULL;
   }
   m->base.save = mongo_save;
   m->base.find_by_id = mongo_find_by_id;
   m->base.find_by_stream = mongo_find_by_stream;
   m->base.count = mongo_count;
   m->base.destroy = mongo_destroy;
   fw_dlq__mongo_methods (&m->base);
   fw_dlq__mongo_claim_methods (&m->base);
   fw_dlq__mongo_deferred_methods (&m->base);
   fw_dlq__mongo_txn_methods (&m->base);
   m->coll = mongoc_client_get_collection (client, database, collection);
   m->seqs = fw_dlq_sequence_collection (client, database, collection);
   m->wc = mongoc_write_concern_new ();
   m->name = bson_strdup_printf ("%s.%s%s", database, collection, suffix);
   m->seqs_name = bson_strdup_printf ("%s.%s_sequences%s", database, collection, suffix);
   bson_free (suffix);
   if (!m->coll || !m->seqs || !m->wc || !m->name || !m->seqs_name) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      mongo_destroy (&m->base);
      return NULL;
   }
   return m;
}

fw_dlq_store_t *
fw_dlq_store_mongo_new (mongoc_client_t *client, const char *database, const char *collection,
                        const char *write_concern_tag, int write_concern_w, fw_error_t *error)
{
   mongo_store_t *m = mongo_store_new (client, database, collection, NULL, error);

   if (!m) {
      return NULL;
   }
   if (write_concern_tag && strcmp (write_concern_tag, "majority") == 0) {
      mongoc_write_concern_set_w (m->wc, MONGOC_WRITE_CONCERN_W_MAJORITY);
   } else if (write_concern_tag) {
      mongoc_write_concern_set_wtag (m->wc, write_concern_tag);
   } else {
      mongoc_write_concern_set_w (m->wc, write_concern_w);
   }
   if (!ensure_indexes (m, error)) {
      mongo_destroy (&m->base);
      return NULL;
   }
   return &m->base;
}

fw_dlq_store_t *
fw_dlq_store_mongo_open (mongoc_client_t *client, const char *database, const char *collection,
                         const char *connection, fw_error_t *error)
{
   mongo_store_t *m = mongo_store_new (client, database, collection, connection, error);
   return m ? &m->base : NULL;
}

void
fw_dlq_store_destroy (fw_dlq_store_t *store)
{
   if (store) {
      store->destroy (store);
   }
}
