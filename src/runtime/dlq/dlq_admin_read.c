/*
 * dlq_admin_read.c - what `flowwarden dlq list|show|stats` read: entries by
 * filter, and the counts by stream, status and error type (see dlq_admin.h).
 * The sequences' own stats are in dlq_admin_sequences.c.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_admin-private.h"

/* --- reading ------------------------------------------------------------ */

/* Oldest first. With --stream the DLQ's streamName_createdAt__id index
 * serves the sort; without it (or on a DLQ a runtime never indexed) the sort
 * blocks, and MongoDB 5.0 refuses one over 100 MB unless it may use disk. */
static void
append_sort (bson_t *opts)
{
   bson_t sort;
   BSON_APPEND_DOCUMENT_BEGIN (opts, "sort", &sort);
   BSON_APPEND_INT32 (&sort, "createdAt", 1);
   BSON_APPEND_INT32 (&sort, "_id", 1);
   bson_append_document_end (opts, &sort);
   BSON_APPEND_BOOL (opts, "allowDiskUse", true);
}

bool
fw_dlq_admin_find (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                   const char *default_status, bool with_documents, fw_dlq_visit_fn visit,
                   void *ud, fw_error_t *error)
{
   bson_t query = BSON_INITIALIZER;
   int64_t left = filter->limit;
   bool ok = fw_dlq_filter_to_query (filter, default_status, &query, error);

   for (int i = 0; ok && i < admin->n_targets && (filter->limit == 0 || left > 0); i++) {
      mongoc_collection_t *coll;
      mongoc_cursor_t *cursor;
      const bson_t *doc;
      bson_error_t berr;
      bson_t opts = BSON_INITIALIZER;

      if (!fw_dlq__selected (admin, i)) {
         continue;
      }
      if (!(coll = fw_dlq_admin_collection (admin, i, error))) {
         ok = false;
         bson_destroy (&opts);
         break;
      }
      append_sort (&opts);
      if (!with_documents) {
         bson_t proj;
         BSON_APPEND_DOCUMENT_BEGIN (&opts, "projection", &proj);
         BSON_APPEND_INT32 (&proj, "fullDocument", 0);
         BSON_APPEND_INT32 (&proj, "fullDocumentBeforeChange", 0);
         BSON_APPEND_INT32 (&proj, "updateDescription", 0);
         bson_append_document_end (&opts, &proj);
      }
      if (filter->limit > 0) {
         BSON_APPEND_INT64 (&opts, "limit", left);
      }
      cursor = mongoc_collection_find_with_opts (coll, &query, &opts, NULL);
      while (ok && mongoc_cursor_next (cursor, &doc)) {
         left--;
         ok = visit (doc, &admin->targets[i], ud, error);
      }
      if (ok && mongoc_cursor_error (cursor, &berr)) {
         fw_dlq__set_error_at (error, &admin->targets[i], "the query", &berr);
         ok = false;
      }
      mongoc_cursor_destroy (cursor);
      mongoc_collection_destroy (coll);
      bson_destroy (&opts);
   }
   bson_destroy (&query);
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
static const char *
error_type_of (const bson_t *group)
{
   if (strcmp (fw_dlq__string_at (group, "_id.e"), "missing") == 0 &&
       strcmp (fw_dlq__string_at (group, "_id.q"), "?") != 0) {
      return "(parked)";
   }
   return fw_dlq__string_at (group, "_id.t");
}

/* One target's counts by (stream, status, error type), grouped by the server
 * (and by sequence, to tell parked entries apart). */
static bool
stats_of (fw_dlq_admin_t *admin, int i, const bson_t *query, counter_t c[3], int64_t *total,
          int64_t *oldest_ms, fw_error_t *error)
{
   const fw_dlq_target_t *t = &admin->targets[i];
   mongoc_collection_t *coll = fw_dlq_admin_collection (admin, i, error);
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bson_t *pipeline, *opts;
   bool ok = true;

   if (!coll) {
      return false;
   }
   pipeline = BCON_NEW ("pipeline", "[", "{", "$match", BCON_DOCUMENT (query), "}", "{",
                        "$group", "{", "_id", "{", "s", BCON_UTF8 ("$streamName"), "st",
                        BCON_UTF8 ("$status"), "t", BCON_UTF8 ("$error.type"), "q",
                        BCON_UTF8 ("$sequenceId"), "e", "{", "$type", BCON_UTF8 ("$error"), "}",
                        "}", "n", "{",
                        "$sum", BCON_INT32 (1), "}", "}", "}", "]");
   cursor = mongoc_collection_aggregate (coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      int64_t n = bson_iter_init_find (&it, doc, "n") ? bson_iter_as_int64 (&it) : 0;
      *total += n;
      ok = count_add (&c[0], fw_dlq__string_at (doc, "_id.s"), n) &&
           count_add (&c[1], fw_dlq__string_at (doc, "_id.st"), n) &&
           count_add (&c[2], error_type_of (doc), n);
      if (!ok) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      }
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__set_error_at (error, t, "counting", &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);

   /* The oldest PENDING entry among the selected ones with a real date. */
   pipeline = BCON_NEW ("$and", "[", BCON_DOCUMENT (query), "{", "status", BCON_UTF8 ("PENDING"),
                        "createdAt", "{", "$type", BCON_UTF8 ("date"), "}", "}", "]");
   opts = BCON_NEW ("sort", "{", "createdAt", BCON_INT32 (1), "}", "projection", "{",
                    "createdAt", BCON_INT32 (1), "}", "limit", BCON_INT64 (1));
   cursor = ok ? mongoc_collection_find_with_opts (coll, pipeline, opts, NULL) : NULL;
   if (cursor && mongoc_cursor_next (cursor, &doc)) {
      bson_iter_t it;
      if (bson_iter_init_find (&it, doc, "createdAt") && BSON_ITER_HOLDS_DATE_TIME (&it) &&
          (*oldest_ms == INT64_MAX || bson_iter_date_time (&it) < *oldest_ms)) {
         *oldest_ms = bson_iter_date_time (&it);
      }
   }
   if (cursor && mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__set_error_at (error, t, "the oldest PENDING query", &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   bson_destroy (opts);
   mongoc_collection_destroy (coll);
   return ok;
}

bool
fw_dlq_admin_stats (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                    const char *default_status, int64_t now_ms, bson_t *out, fw_error_t *error)
{
   bson_t query = BSON_INITIALIZER;
   counter_t c[3] = {{0}};
   int64_t total = 0, oldest_ms = INT64_MAX;
   bool ok = fw_dlq_filter_to_query (filter, default_status, &query, error);

   bson_init (out);
   for (int i = 0; ok && i < admin->n_targets; i++) {
      if (fw_dlq__selected (admin, i)) {
         ok = stats_of (admin, i, &query, c, &total, &oldest_ms, error);
      }
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
   bson_destroy (&query);
   return ok;
}
