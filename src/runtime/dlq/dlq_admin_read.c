/*
 * dlq_admin_read.c - what `flowwarden dlq list|show|stats` read: entries by
 * filter, and the counts by stream, status and error type (see dlq_admin.h).
 * The sequences' own stats are in dlq_admin_sequences.c.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_admin-private.h"

/* --- reading ------------------------------------------------------------ */

typedef struct {
   const fw_dlq_target_t *target;
   fw_dlq_visit_fn visit;
   void *ud;
} find_t;

static bool
found (const bson_t *entry, void *ud, fw_error_t *error)
{
   find_t *f = ud;
   return f->visit (entry, f->target, f->ud, error);
}

/* Counts the entries a visitor is given, for the limit across targets. */
static bool
counted (const bson_t *entry, void *ud, fw_error_t *error)
{
   void **args = ud;
   (*(int64_t *) args[1])++;
   return found (entry, args[0], error);
}

bool
fw_dlq_admin_find (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter, const char *default_status,
                   bool with_documents, fw_dlq_visit_fn visit, void *ud, fw_error_t *error)
{
   int64_t left = filter->limit;
   bool ok = fw_dlq_filter_check (filter, default_status, error);

   for (int i = 0; ok && i < admin->n_targets && (filter->limit == 0 || left > 0); i++) {
      fw_dlq_query_t q = {filter, default_status, NULL, filter->limit > 0 ? left : 0,
                          with_documents};
      find_t f = {&admin->targets[i], visit, ud};
      int64_t seen = 0;
      void *args[2] = {&f, &seen};
      fw_dlq_store_t *store;

      if (!fw_dlq__selected (admin, i)) {
         continue;
      }
      ok = (store = fw_dlq__store (admin, i, error)) &&
           store->query (store, &q, counted, args, error);
      left -= seen;
   }
   return ok;
}

/* --- stats -------------------------------------------------------------- */

typedef struct {
   char **names;
   int64_t *counts;
   int n;
} counter_t;

static bool
count_add (counter_t *c, const char *name, int64_t n)
{
   int64_t *grown;
   for (int i = 0; i < c->n; i++) {
      if (fw_dlq__same (c->names[i], name)) {
         c->counts[i] += n;
         return true;
      }
   }
   if (!(grown = realloc (c->counts, (size_t) (c->n + 1) * sizeof *grown))) {
      return false;
   }
   c->counts = grown;
   grown[c->n] = n;
   return fw_dlq__push_string (&c->names, &c->n, name) != NULL;
}

/* Appends {name: count} to out, largest count first, then by name. */
static void
count_append (bson_t *out, const char *key, counter_t *c)
{
   bson_t doc;
   for (int i = 1; i < c->n; i++) {
      for (int j = i; j > 0 && (c->counts[j] > c->counts[j - 1] ||
                                (c->counts[j] == c->counts[j - 1] &&
                                 strcmp (c->names[j], c->names[j - 1]) < 0));
           j--) {
         char *name = c->names[j];
         int64_t n = c->counts[j];
         c->names[j] = c->names[j - 1];
         c->counts[j] = c->counts[j - 1];
         c->names[j - 1] = name;
         c->counts[j - 1] = n;
      }
   }
   BSON_APPEND_DOCUMENT_BEGIN (out, key, &doc);
   for (int i = 0; i < c->n; i++) {
      BSON_APPEND_INT64 (&doc, c->names[i], c->counts[i]);
   }
   bson_append_document_end (out, &doc);
}

static void
count_free (counter_t *c)
{
   for (int i = 0; i < c->n; i++) {
      free (c->names[i]);
   }
   free (c->names);
   free (c->counts);
}

/* A group's error type: an entry parked behind its sequence's head has no
 * error of its own, which is not the "?" of an entry edited into nonsense. */
static bool
count_group (const fw_dlq_group_t *g, void *ud, fw_error_t *error)
{
   counter_t *c = ud;
   bool ok = count_add (&c[0], g->stream, g->n) && count_add (&c[1], g->status, g->n) &&
             count_add (&c[2], g->parked ? "(parked)" : g->error_type, g->n);
   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
   }
   return ok;
}

/* One target's counts by (stream, status, error type), and its oldest
 * PENDING entry. */
static bool
stats_of (fw_dlq_admin_t *admin, int i, const fw_dlq_filter_t *filter, const char *default_status,
          counter_t c[3], int64_t *oldest_ms, fw_error_t *error)
{
   fw_dlq_query_t q = {filter, default_status, NULL, 0, false};
   fw_dlq_store_t *store = fw_dlq__store (admin, i, error);
   return store && store->tally (store, &q, count_group, c, oldest_ms, error);
}

bool
fw_dlq_admin_stats (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                    const char *default_status, int64_t now_ms, bson_t *out, fw_error_t *error)
{
   counter_t c[3] = {{0}};
   int64_t total = 0, oldest_ms = INT64_MAX;
   bool ok = fw_dlq_filter_check (filter, default_status, error);

   bson_init (out);
   for (int i = 0; ok && i < admin->n_targets; i++) {
      if (fw_dlq__selected (admin, i)) {
         ok = stats_of (admin, i, filter, default_status, c, &oldest_ms, error);
      }
   }
   for (int k = 0; ok && k < c[0].n; k++) {
      total += c[0].counts[k];
   }
   if (ok) {
      BSON_APPEND_INT64 (out, "total", total);
      count_append (out, "by_stream", &c[0]);
      count_append (out, "by_status", &c[1]);
      count_append (out, "by_error_type", &c[2]);
      if (oldest_ms == INT64_MAX) {
         BSON_APPEND_NULL (out, "oldest_pending_age_s");
      } else {
         BSON_APPEND_INT64 (out, "oldest_pending_age_s", (now_ms - oldest_ms) / 1000);
      }
      ok = fw_dlq__sequence_stats (admin, filter->stream, out, error);
   }
   for (int k = 0; k < 3; k++) {
      count_free (&c[k]);
   }
   return ok;
}
