/*
 * dlq_store.c - the MongoDB implementation of the DLQ store.
 */
#include <stdlib.h>
#include <string.h>

#include "flowwarden/dlq_store.h"

typedef struct {
   fw_dlq_store_t base; /* first: a store pointer is a mongo_store pointer */
   mongoc_collection_t *coll;
   mongoc_write_concern_t *wc;
   char *name;          /* db.collection, for messages */
} mongo_store_t;

#define FW_ERR_DUPLICATE_KEY 11000

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

static bool
mongo_save (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error)
{
   mongo_store_t *m = (mongo_store_t *) store;
   bson_t opts = BSON_INITIALIZER;
   bson_t reply;
   bson_error_t berr;
   bool ok;

   if (!mongoc_write_concern_append (m->wc, &opts)) {
      bson_destroy (&opts);
      fw_error_set (error, FW_ERROR_INVALID, "invalid DLQ write concern");
      return false;
   }
   ok = mongoc_collection_insert_one (m->coll, entry, &opts, &reply, &berr);
   if (!ok && berr.code == FW_ERR_DUPLICATE_KEY && already_saved (m, entry)) {
      /* An earlier try of this same entry was applied but not acknowledged
       * (a write concern error, a lost reply). Its _id is a fresh UUID drawn
       * for this entry, so the document there is ours: the save is done. */
      ok = true;
   }
   if (!ok) {
      fw_error_set (error, FW_ERROR_MONGO, "DLQ insert into %s failed: %s", m->name,
                    berr.message);
   }
   bson_destroy (&reply);
   bson_destroy (&opts);
   return ok;
}

static bool
mongo_find (mongo_store_t *m, const bson_t *filter, const bson_t *opts, bson_t *out,
            bool as_array, bool *found, fw_error_t *error)
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
      fw_error_set (error, FW_ERROR_MONGO, "DLQ query on %s failed: %s", m->name,
                    berr.message);
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
mongo_find_by_stream (fw_dlq_store_t *store, const char *stream, bson_t *out,
                      fw_error_t *error)
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
      fw_error_set (error, FW_ERROR_MONGO, "DLQ count on %s failed: %s", m->name, berr.message);
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
   mongoc_write_concern_destroy (m->wc);
   free (m->name);
   free (m);
}

/* Both indexes are declared with the same keys and options every start, so
 * createIndexes is a no-op once they exist. */
static bool
ensure_indexes (mongo_store_t *m, fw_error_t *error)
{
   bson_t cmd = BSON_INITIALIZER;
   bson_t indexes, idx, key;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_UTF8 (&cmd, "createIndexes", mongoc_collection_get_name (m->coll));
   BSON_APPEND_ARRAY_BEGIN (&cmd, "indexes", &indexes);

   BSON_APPEND_DOCUMENT_BEGIN (&indexes, "0", &idx);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "key", &key);
   BSON_APPEND_INT32 (&key, "expiresAt", 1);
   bson_append_document_end (&idx, &key);
   BSON_APPEND_UTF8 (&idx, "name", "expiresAt_ttl");
   BSON_APPEND_INT32 (&idx, "expireAfterSeconds", 0);
   bson_append_document_end (&indexes, &idx);

   BSON_APPEND_DOCUMENT_BEGIN (&indexes, "1", &idx);
   BSON_APPEND_DOCUMENT_BEGIN (&idx, "key", &key);
   BSON_APPEND_INT32 (&key, "streamName", 1);
   BSON_APPEND_INT32 (&key, "createdAt", 1);
   bson_append_document_end (&idx, &key);
   BSON_APPEND_UTF8 (&idx, "name", "streamName_createdAt");
   bson_append_document_end (&indexes, &idx);
   bson_append_array_end (&cmd, &indexes);

   ok = mongoc_collection_write_command_with_opts (m->coll, &cmd, NULL, NULL, &berr);
   if (!ok) {
      fw_error_set (error, FW_ERROR_MONGO, "cannot create the DLQ indexes on %s: %s", m->name,
                    berr.message);
   }
   bson_destroy (&cmd);
   return ok;
}

fw_dlq_store_t *
fw_dlq_store_mongo_new (mongoc_client_t *client, const char *database, const char *collection,
                        const char *write_concern_tag, int write_concern_w, fw_error_t *error)
{
   mongo_store_t *m = calloc (1, sizeof *m);

   if (!m) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return NULL;
   }
   m->base.save = mongo_save;
   m->base.find_by_id = mongo_find_by_id;
   m->base.find_by_stream = mongo_find_by_stream;
   m->base.count = mongo_count;
   m->base.destroy = mongo_destroy;
   m->coll = mongoc_client_get_collection (client, database, collection);
   m->wc = mongoc_write_concern_new ();
   m->name = bson_strdup_printf ("%s.%s", database, collection);
   if (!m->coll || !m->wc || !m->name) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      mongo_destroy (&m->base);
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

void
fw_dlq_store_destroy (fw_dlq_store_t *store)
{
   if (store) {
      store->destroy (store);
   }
}
