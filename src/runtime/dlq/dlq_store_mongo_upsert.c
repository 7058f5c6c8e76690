/*
 * dlq_store_mongo_upsert.c - the upsert that writes a dead letter again: a
 * new event inserts the whole entry, one dead-lettered before adds to it.
 * Used by the plain save (dlq_store.c) and the save inside a caller's
 * transaction (dlq_store_mongo_txn.c).
 */
#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store-private.h"
#include <string.h>

/* Fields a later enqueue of the same event changes; every other field is
 * written only when the entry is first inserted ($setOnInsert). */
static bool
updated_on_reenqueue (const char *key)
{
   static const char *const keys[] = {"streamName", "eventId",     "attempts", "lastAttemptAt",
                                      "error",      "lastTouched", "status",   "history"};
   for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
      if (strcmp (key, keys[i]) == 0) {
         return true;
      }
   }
   return false;
}

/* See dlq_store-private.h. */
bool
fw_dlq__mongo_upsert (fw_mongo_store_t *m, const bson_t *entry, const bson_t *key,
                      const bson_t *wc_opts, bson_error_t *berr)
{
   bson_t update = BSON_INITIALIZER;
   bson_t opts = BSON_INITIALIZER;
   bson_t child, push;
   bson_iter_t it;
   bool ok;

   BSON_APPEND_DOCUMENT_BEGIN (&update, "$setOnInsert", &child);
   bson_iter_init (&it, entry);
   while (bson_iter_next (&it)) {
      if (!updated_on_reenqueue (bson_iter_key (&it))) {
         bson_append_iter (&child, NULL, 0, &it);
      }
   }
   bson_append_document_end (&update, &child);

   BSON_APPEND_DOCUMENT_BEGIN (&update, "$set", &child);
   bson_iter_init (&it, entry);
   while (bson_iter_next (&it)) {
      const char *k = bson_iter_key (&it);
      if (strcmp (k, "lastAttemptAt") == 0 || strcmp (k, "error") == 0 ||
          strcmp (k, "lastTouched") == 0 || strcmp (k, "status") == 0) {
         bson_append_iter (&child, NULL, 0, &it);
      }
   }
   bson_append_document_end (&update, &child);

   /* attempts counts every attempt the event had, over all its deliveries. */
   if (bson_iter_init_find (&it, entry, "attempts")) {
      BSON_APPEND_DOCUMENT_BEGIN (&update, "$inc", &child);
      bson_append_iter (&child, NULL, 0, &it);
      bson_append_document_end (&update, &child);
   }

   if (bson_iter_init_find (&it, entry, "history") && BSON_ITER_HOLDS_ARRAY (&it)) {
      BSON_APPEND_DOCUMENT_BEGIN (&update, "$push", &push);
      BSON_APPEND_DOCUMENT_BEGIN (&push, "history", &child);
      bson_append_iter (&child, "$each", -1, &it);
      BSON_APPEND_INT32 (&child, "$slice", -FW_DLQ_HISTORY_MAX);
      bson_append_document_end (&push, &child);
      bson_append_document_end (&update, &push);
   }

   bson_concat (&opts, wc_opts);
   BSON_APPEND_BOOL (&opts, "upsert", true);
   ok = mongoc_collection_update_one (m->coll, key, &update, &opts, NULL, berr);
   bson_destroy (&opts);
   bson_destroy (&update);
   return ok;
}
