/*
 * dlq_admin_change.c - what `flowwarden dlq` changes: the selection an
 * operator confirms, discard, purge, and import (see dlq_admin.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/bson_alloc.h"
#include "runtime/dlq/dlq_admin-private.h"

/* _ids per updateMany / deleteMany: small enough for any BSON limit. */
#define BATCH 500

struct fw_dlq_selection {
   bson_t query;
   bson_t *ids;          /* per target: an array document of the selected _ids */
   int64_t *counts;
   int n_targets;
   int64_t size;
};

void
fw_dlq_selection_destroy (fw_dlq_selection_t *sel)
{
   if (!sel) {
      return;
   }
   for (int i = 0; sel->ids && i < sel->n_targets; i++) {
      bson_destroy (&sel->ids[i]);
   }
   free (sel->ids);
   free (sel->counts);
   bson_destroy (&sel->query);
   free (sel);
}

int64_t
fw_dlq_selection_size (const fw_dlq_selection_t *sel)
{
   return sel->size;
}

typedef struct {
   fw_dlq_selection_t *sel;
   int target;
} collect_t;

static bool
collect_id (const bson_t *entry, const fw_dlq_target_t *target, void *ud, fw_error_t *error)
{
   collect_t *c = ud;
   bson_iter_t it;
   (void) target;
   (void) error;
   if (bson_iter_init_find (&it, entry, "_id")) {
      char key[16];
      const char *k;
      bson_uint32_to_string ((uint32_t) c->sel->counts[c->target]++, &k, key, sizeof key);
      bson_append_iter (&c->sel->ids[c->target], k, -1, &it);
      c->sel->size++;
   }
   return true;
}

static bool
selection_has (const fw_dlq_selection_t *sel, const char *id)
{
   for (int i = 0; i < sel->n_targets; i++) {
      bson_iter_t it;
      if (!bson_iter_init (&it, &sel->ids[i])) {
         continue;
      }
      while (bson_iter_next (&it)) {
         if (BSON_ITER_HOLDS_UTF8 (&it) && fw_dlq__same (bson_iter_utf8 (&it, NULL), id)) {
            return true;
         }
      }
   }
   return false;
}

static bool
note_status (const bson_t *entry, const fw_dlq_target_t *target, void *ud, fw_error_t *error)
{
   (void) target;
   (void) error;
   snprintf (ud, 64, "%s", fw_dlq__string_at (entry, "status"));
   return false;
}

/* Why id, given with --id, is not in sel: it does not exist, or the other
 * filters leave it out. */
static void
explain_missing (fw_dlq_admin_t *admin, const char *id, fw_error_t *error)
{
   fw_dlq_filter_t only = {0};
   char status[64] = "";
   fw_error_t ignored;

   only.ids[0] = id;
   only.n_ids = 1;
   fw_dlq_admin_find (admin, &only, NULL, false, note_status, status, &ignored);
   if (status[0]) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "DLQ entry \"%s\" (status %s) does not match the filters; nothing was changed",
                    id, status);
   } else {
      fw_error_set (error, FW_ERROR_INVALID, "no DLQ entry with _id \"%s\"%s%s; nothing was changed",
                    id, admin->only_stream ? " in stream " : "",
                    admin->only_stream ? admin->only_stream : "");
   }
}

fw_dlq_selection_t *
fw_dlq_admin_select (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                     const char *default_status, fw_error_t *error)
{
   fw_dlq_selection_t *sel = fw_bson_aligned_calloc (sizeof *sel);
   fw_dlq_filter_t one = *filter;
   int64_t left = filter->limit;
   bool ok;

   if (!sel || !(sel->ids = fw_bson_aligned_calloc ((size_t) admin->n_targets * sizeof (bson_t))) ||
       !(sel->counts = calloc ((size_t) admin->n_targets, sizeof (int64_t)))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      fw_dlq_selection_destroy (sel);
      return NULL;
   }
   bson_init (&sel->query);
   ok = fw_dlq_filter_to_query (filter, default_status, &sel->query, error);
   /* One target at a time, so collect_id knows which target it is in. */
   for (int i = 0; ok && i < admin->n_targets; i++) {
      int saved = admin->only;
      collect_t c = {sel, i};
      bson_init (&sel->ids[i]);
      sel->n_targets = i + 1;
      if (!fw_dlq__selected (admin, i) || (filter->limit > 0 && left <= 0)) {
         continue;
      }
      one.limit = filter->limit > 0 ? left : 0;
      admin->only = i;
      ok = fw_dlq_admin_find (admin, &one, default_status, false, collect_id, &c, error);
      admin->only = saved;
      left -= sel->counts[i];
   }
   for (int i = 0; ok && i < filter->n_ids; i++) {
      if (!selection_has (sel, filter->ids[i])) {
         explain_missing (admin, filter->ids[i], error);
         ok = false;
      }
   }
   if (!ok) {
      fw_dlq_selection_destroy (sel);
      return NULL;
   }
   return sel;
}

typedef bool (*batch_fn) (mongoc_collection_t *coll, const bson_t *filter, const void *ud,
                          int64_t *n, bson_error_t *berr);

/* Applies fn to the selection's entries that still match its query, BATCH
 * _ids at a time. */
static bool
each_batch (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, batch_fn fn, const void *ud,
            const char *what, int64_t *touched, fw_error_t *error)
{
   bool ok = true;

   *touched = 0;
   for (int i = 0; ok && i < sel->n_targets; i++) {
      mongoc_collection_t *coll;
      bson_iter_t it;
      bool more;

      if (sel->counts[i] == 0) {
         continue;
      }
      if (!(coll = fw_dlq_admin_collection (admin, i, error)) ||
          !bson_iter_init (&it, &sel->ids[i])) {
         mongoc_collection_destroy (coll);
         return false;
      }
      more = bson_iter_next (&it);
      while (ok && more) {
         bson_t filter = BSON_INITIALIZER, and, clause, in, arr;
         bson_error_t berr;
         int64_t n = 0;

         BSON_APPEND_ARRAY_BEGIN (&filter, "$and", &and);
         BSON_APPEND_DOCUMENT (&and, "0", &sel->query);
         BSON_APPEND_DOCUMENT_BEGIN (&and, "1", &clause);
         BSON_APPEND_DOCUMENT_BEGIN (&clause, "_id", &in);
         BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
         for (uint32_t k = 0; more && k < BATCH; k++, more = bson_iter_next (&it)) {
            char key[16];
            const char *ks;
            bson_uint32_to_string (k, &ks, key, sizeof key);
            bson_append_iter (&arr, ks, -1, &it);
         }
         bson_append_array_end (&in, &arr);
         bson_append_document_end (&clause, &in);
         bson_append_document_end (&and, &clause);
         bson_append_array_end (&filter, &and);
         if (fn (coll, &filter, ud, &n, &berr)) {
            *touched += n;
         } else {
            fw_dlq__set_error_at (error, &admin->targets[i], what, &berr);
            ok = false;
         }
         bson_destroy (&filter);
      }
      mongoc_collection_destroy (coll);
   }
   return ok;
}

static int64_t
reply_count (const bson_t *reply, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, reply, key) ? bson_iter_as_int64 (&it) : 0;
}

static bool
discard_batch (mongoc_collection_t *coll, const bson_t *filter, const void *update, int64_t *n,
               bson_error_t *berr)
{
   bson_t reply;
   bool ok = mongoc_collection_update_many (coll, filter, update, NULL, &reply, berr);
   *n = reply_count (&reply, "modifiedCount");
   bson_destroy (&reply);
   return ok;
}

bool
fw_dlq_admin_discard (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, const char *reason,
                      const char *actor, int64_t now_ms, int64_t *touched, fw_error_t *error)
{
   bson_t *update = BCON_NEW (
      "$set", "{", "status", BCON_UTF8 ("DISCARDED"), "discardedAt", BCON_DATE_TIME (now_ms),
      "discardReason", BCON_UTF8 (reason), "lastTouched", BCON_DATE_TIME (now_ms), "}", "$push",
      "{", "history", "{", "$each", "[", "{", "at", BCON_DATE_TIME (now_ms), "action",
      BCON_UTF8 ("discarded"), "actor", BCON_UTF8 (actor), "result", BCON_UTF8 (reason), "}",
      "]", "$slice", BCON_INT32 (-20), "}", "}");
   bool ok = each_batch (admin, sel, discard_batch, update, "discard", touched, error);
   bson_destroy (update);
   return ok;
}

static bool
purge_batch (mongoc_collection_t *coll, const bson_t *filter, const void *ud, int64_t *n,
             bson_error_t *berr)
{
   bson_t reply;
   bool ok = mongoc_collection_delete_many (coll, filter, NULL, &reply, berr);
   (void) ud;
   *n = reply_count (&reply, "deletedCount");
   bson_destroy (&reply);
   return ok;
}

bool
fw_dlq_admin_purge (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, int64_t *touched,
                    fw_error_t *error)
{
   return each_batch (admin, sel, purge_batch, NULL, "purge", touched, error);
}

/* --- import ---------------------------------------------------------------- */

bool
fw_dlq_admin_import (fw_dlq_admin_t *admin, const bson_t *entry, fw_dlq_import_result_t *result,
                     fw_error_t *error)
{
   const fw_dlq_target_t *t;
   mongoc_collection_t *coll;
   bson_iter_t id, stream;
   bson_t filter = BSON_INITIALIZER, reply;
   bson_t *opts;
   bson_error_t berr;
   const char *name;
   char names[1024];
   bool ok;

   if (!bson_iter_init_find (&id, entry, "_id")) {
      fw_error_set (error, FW_ERROR_INVALID, "the entry has no _id");
      return false;
   }
   if (!bson_iter_init_find (&stream, entry, "streamName") || !BSON_ITER_HOLDS_UTF8 (&stream)) {
      fw_error_set (error, FW_ERROR_INVALID, "the entry has no streamName string");
      return false;
   }
   name = bson_iter_utf8 (&stream, NULL);
   if (admin->only_stream && !fw_dlq__same (admin->only_stream, name)) {
      *result = FW_DLQ_IMPORT_SKIPPED;
      return true;
   }
   if (!(t = fw_dlq_admin_target_of (admin, name))) {
      fw_dlq__name_list (admin->streams, admin->n_streams, names, sizeof names);
      fw_error_set (error, FW_ERROR_INVALID,
                    "unknown stream \"%s\": the script has no stream of that name with a DLQ "
                    "(its streams: %s)",
                    name, names);
      return false;
   }
   if (!(coll = fw_dlq_admin_collection (admin, (int) (t - admin->targets), error))) {
      return false;
   }
   bson_append_iter (&filter, "_id", 3, &id);
   /* validate: false: the entry is stored exactly as exported, field names
    * with dots or dollars included (the server still checks it). */
   opts = BCON_NEW ("upsert", BCON_BOOL (true), "validate", BCON_BOOL (false));
   ok = mongoc_collection_replace_one (coll, &filter, entry, opts, &reply, &berr);
   if (ok) {
      *result = reply_count (&reply, "upsertedCount") > 0 ? FW_DLQ_IMPORT_INSERTED
                                                           : FW_DLQ_IMPORT_REPLACED;
   } else {
      fw_dlq__set_error_at (error, t, "the upsert", &berr);
   }
   bson_destroy (&reply);
   bson_destroy (opts);
   bson_destroy (&filter);
   mongoc_collection_destroy (coll);
   return ok;
}
