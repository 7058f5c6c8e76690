/*
 * dlq_admin_change.c - what `flowwarden dlq` changes: the selection an
 * operator confirms, discard, purge, and import (see dlq_admin.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_alloc.h"
#include "runtime/dlq/dlq_admin-private.h"
#include "runtime/dlq/dlq_entry.h"

/* _ids per updateMany / deleteMany: small enough for any BSON limit. */
#define BATCH 500

struct fw_dlq_selection {
   fw_dlq_filter_t filter; /* the caller's, its strings borrowed */
   const char *default_status;
   bson_t *ids; /* per target: an array document of the selected _ids */
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
      fw_error_set (error, FW_ERROR_INVALID,
                    "no DLQ entry with _id or eventId \"%s\"%s%s; nothing was changed", id,
                    admin->only_stream ? " in stream " : "",
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
   sel->filter = *filter;
   sel->default_status = default_status;
   ok = fw_dlq_filter_check (filter, default_status, error);
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

typedef struct {
   const char *reason; /* NULL: purge */
   const char *actor;
   int64_t now_ms;
} change_t;

/* Applies the change to the selection's entries that still match its
 * filters, BATCH _ids at a time. */
static bool
each_batch (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, const change_t *c,
            int64_t *touched, fw_error_t *error)
{
   bool ok = true;

   *touched = 0;
   for (int i = 0; ok && i < sel->n_targets; i++) {
      fw_dlq_store_t *store;
      bson_iter_t it;
      bool more;

      if (sel->counts[i] == 0) {
         continue;
      }
      if (!(store = fw_dlq__store (admin, i, error)) || !bson_iter_init (&it, &sel->ids[i])) {
         return false;
      }
      more = bson_iter_next (&it);
      while (ok && more) {
         bson_t ids = BSON_INITIALIZER;
         fw_dlq_query_t q = {&sel->filter, sel->default_status, &ids, 0, false};
         int64_t n = 0;

         for (uint32_t k = 0; more && k < BATCH; k++, more = bson_iter_next (&it)) {
            char key[16];
            const char *ks;
            bson_uint32_to_string (k, &ks, key, sizeof key);
            bson_append_iter (&ids, ks, -1, &it);
         }
         ok = c->reason ? store->discard (store, &q, c->reason, c->actor, c->now_ms, &n, error)
                        : store->purge (store, &q, &n, error);
         *touched += n;
         bson_destroy (&ids);
      }
   }
   return ok;
}

bool
fw_dlq_admin_discard (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, const char *reason,
                      const char *actor, int64_t now_ms, int64_t *touched, fw_error_t *error)
{
   change_t c = {reason, actor, now_ms};
   return each_batch (admin, sel, &c, touched, error);
}

bool
fw_dlq_admin_purge (fw_dlq_admin_t *admin, const fw_dlq_selection_t *sel, int64_t *touched,
                    fw_error_t *error)
{
   change_t c = {NULL, NULL, 0};
   return each_batch (admin, sel, &c, touched, error);
}

/* --- import ---------------------------------------------------------------- */

bool
fw_dlq_admin_import (fw_dlq_admin_t *admin, const bson_t *entry, fw_dlq_import_result_t *result,
                     fw_error_t *error)
{
   const fw_dlq_target_t *t;
   fw_dlq_store_t *store;
   bson_iter_t id;
   const char *name;
   char names[1024];
   bool inserted;

   if (!bson_iter_init_find (&id, entry, "_id")) {
      fw_error_set (error, FW_ERROR_INVALID, "the entry has no _id");
      return false;
   }
   if (!(name = fw_dlq_entry_stream (entry))) {
      fw_error_set (error, FW_ERROR_INVALID, "the entry has no streamName string");
      return false;
   }
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
   if (!(store = fw_dlq__store (admin, (int) (t - admin->targets), error)) ||
       !store->put (store, entry, &inserted, error)) {
      return false;
   }
   *result = inserted ? FW_DLQ_IMPORT_INSERTED : FW_DLQ_IMPORT_REPLACED;
   return true;
}
