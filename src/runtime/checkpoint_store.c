/*
 * checkpoint_store.c - loads and saves resume tokens in _fw_checkpoints.
 */
#include <time.h>

#include "flowwarden/checkpoint_store.h"

/* Copies the sub-document field of doc into out (already initialised). */
static bool
copy_token (const bson_t *doc, const char *field, bson_t *out)
{
   bson_iter_t it;
   uint32_t len;
   const uint8_t *data;
   bson_t view;

   if (!bson_iter_init_find (&it, doc, field) || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      return false;
   }
   bson_iter_document (&it, &len, &data);
   if (!bson_init_static (&view, data, len)) {
      return false;
   }
   bson_destroy (out);
   bson_copy_to (&view, out);
   return true;
}

static int64_t
now_ms (void)
{
   struct timespec ts;
   clock_gettime (CLOCK_REALTIME, &ts);
   return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool
fw_checkpoint_load (mongoc_client_t *client, const char *database, const char *stream,
                    fw_checkpoint_t *cp, fw_error_t *error)
{
   mongoc_collection_t *coll;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_t filter = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok = true;

   cp->has_processed = cp->has_seen = false;
   bson_init (&cp->processed);
   bson_init (&cp->seen);

   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   BSON_APPEND_UTF8 (&filter, "_id", stream);
   cursor = mongoc_collection_find_with_opts (coll, &filter, NULL, NULL);
   if (mongoc_cursor_next (cursor, &doc)) {
      cp->has_processed = copy_token (doc, "lastProcessedToken", &cp->processed);
      cp->has_seen = copy_token (doc, "lastSeenToken", &cp->seen);
   }
   if (mongoc_cursor_error (cursor, &berr)) {
      fw_error_set (error, FW_ERROR_MONGO, "cannot read checkpoint of stream \"%s\" from %s.%s: %s",
                    stream, database, FW_CHECKPOINT_COLLECTION, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   mongoc_collection_destroy (coll);
   bson_destroy (&filter);
   return ok;
}

bool
fw_checkpoint_save (mongoc_client_t *client, const char *database, const char *stream,
                    const bson_t *processed, const bson_t *seen, const char *script_version,
                    fw_error_t *error)
{
   mongoc_collection_t *coll;
   bson_t selector = BSON_INITIALIZER;
   bson_t update = BSON_INITIALIZER;
   bson_t set;
   bson_t opts = BSON_INITIALIZER;
   bson_error_t berr;
   bool ok;

   BSON_APPEND_UTF8 (&selector, "_id", stream);
   BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &set);
   if (processed) {
      BSON_APPEND_DOCUMENT (&set, "lastProcessedToken", processed);
   }
   if (seen) {
      BSON_APPEND_DOCUMENT (&set, "lastSeenToken", seen);
   }
   if (script_version) {
      BSON_APPEND_UTF8 (&set, "scriptVersion", script_version);
   }
   BSON_APPEND_DATE_TIME (&set, "updatedAt", now_ms ());
   bson_append_document_end (&update, &set);
   BSON_APPEND_BOOL (&opts, "upsert", true);

   coll = mongoc_client_get_collection (client, database, FW_CHECKPOINT_COLLECTION);
   ok = mongoc_collection_update_one (coll, &selector, &update, &opts, NULL, &berr);
   if (!ok) {
      fw_error_set (error, FW_ERROR_MONGO, "cannot save checkpoint of stream \"%s\": %s",
                    stream, berr.message);
   }
   mongoc_collection_destroy (coll);
   bson_destroy (&selector);
   bson_destroy (&update);
   bson_destroy (&opts);
   return ok;
}

void
fw_checkpoint_cleanup (fw_checkpoint_t *cp)
{
   if (!cp) {
      return;
   }
   bson_destroy (&cp->processed);
   bson_destroy (&cp->seen);
   cp->has_processed = cp->has_seen = false;
}
