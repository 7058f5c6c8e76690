/*
 * dlq_admin_sequences.c - what `flowwarden dlq list --sequences` and `dlq
 * stats` say about the sequences of a sequenced DLQ (issue 14; the protocol
 * is dlq_sequence.h's): per sequence its size, head entry and age, from one
 * aggregation of the waiting entries and one read of the sequence
 * documents. Both may have been edited by hand: nothing is assumed about a
 * field's type.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_admin-private.h"
#include "flowwarden/dlq_sequence.h"

typedef struct {
   char *stream;
   char *id;
   int open;          /* 1, 0, or -1: no sequence document, or open not a bool */
   int64_t size;      /* waiting entries */
   bson_t *group;     /* the aggregation's group (head fields); NULL when nothing waits */
   char *head_key;    /* canonical Extended JSON of the head's _id, or NULL */
   int64_t head_ms;   /* the head's createdAt; INT64_MAX when none or not a date */
   bool selected;
} seq_t;

typedef struct {
   seq_t *v;
   size_t n, cap;
   size_t n_sorted;   /* v[0, n_sorted) is sorted by (stream, id) */
} seqs_t;

static void
seqs_free (seqs_t *s)
{
   for (size_t i = 0; i < s->n; i++) {
      free (s->v[i].stream);
      free (s->v[i].id);
      bson_free (s->v[i].head_key);
      if (s->v[i].group) {
         bson_destroy (s->v[i].group);
      }
   }
   free (s->v);
   memset (s, 0, sizeof *s);
}

/* A new sequence with nothing waiting; NULL when out of memory. The pointer
 * is valid until the next push. */
static seq_t *
seqs_push (seqs_t *s, const char *stream, const char *id)
{
   seq_t *q;
   if (s->n == s->cap) {
      size_t cap = s->cap ? s->cap * 2 : 16;
      seq_t *grown = realloc (s->v, cap * sizeof *grown);
      if (!grown) {
         return NULL;
      }
      s->v = grown;
      s->cap = cap;
   }
   q = &s->v[s->n];
   memset (q, 0, sizeof *q);
   q->open = -1;
   q->head_ms = INT64_MAX;
   q->selected = true;
   q->stream = strdup (stream);
   q->id = strdup (id);
   s->n++; /* freed with the others even when a strdup failed */
   return q->stream && q->id ? q : NULL;
}

static int
by_key (const void *a, const void *b)
{
   const seq_t *x = a, *y = b;
   int c = strcmp (x->stream, y->stream);
   return c ? c : strcmp (x->id, y->id);
}

/* Oldest head first, sequences with no head last, then by key. */
static int
by_age (const void *a, const void *b)
{
   const seq_t *x = a, *y = b;
   if (x->head_ms != y->head_ms) {
      return x->head_ms < y->head_ms ? -1 : 1;
   }
   return by_key (a, b);
}

static seq_t *
seqs_find (seqs_t *s, const char *stream, const char *id)
{
   seq_t key;
   key.stream = (char *) stream;
   key.id = (char *) id;
   return s->n_sorted ? bsearch (&key, s->v, s->n_sorted, sizeof *s->v, by_key) : NULL;
}

static void
append_waiting_status (bson_t *query)
{
   bson_t in, arr;
   BSON_APPEND_DOCUMENT_BEGIN (query, "status", &in);
   BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
   BSON_APPEND_UTF8 (&arr, "0", "PENDING");
   BSON_APPEND_UTF8 (&arr, "1", "REPROCESSING");
   bson_append_array_end (&in, &arr);
   bson_append_document_end (query, &in);
}

/* One group per sequence with waiting entries: its size and its head's
 * fields. The sort follows the DLQ's (streamName, sequenceId,
 * sequenceIndex) index, so the server needs no in-memory sort. */
static bool
waiting_groups (mongoc_collection_t *coll, const fw_dlq_target_t *t, const char *stream,
                seqs_t *seqs, fw_error_t *error)
{
   bson_t *pipeline;
   bson_t match = BSON_INITIALIZER, type;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   if (stream) {
      BSON_APPEND_UTF8 (&match, "streamName", stream);
   }
   BSON_APPEND_DOCUMENT_BEGIN (&match, "sequenceId", &type);
   BSON_APPEND_UTF8 (&type, "$type", "string");
   bson_append_document_end (&match, &type);
   append_waiting_status (&match);
   pipeline = BCON_NEW (
      "pipeline", "[", "{", "$match", BCON_DOCUMENT (&match), "}", "{", "$sort", "{",
      "streamName", BCON_INT32 (1), "sequenceId", BCON_INT32 (1), "sequenceIndex", BCON_INT32 (1),
      "}", "}", "{", "$group", "{", "_id", "{", "s", BCON_UTF8 ("$streamName"), "q",
      BCON_UTF8 ("$sequenceId"), "}", "n", "{", "$sum", BCON_INT32 (1), "}", "head", "{",
      "$first", BCON_UTF8 ("$_id"), "}", "sequenceIndex", "{", "$first",
      BCON_UTF8 ("$sequenceIndex"), "}", "status", "{", "$first", BCON_UTF8 ("$status"), "}",
      "error", "{", "$first", BCON_UTF8 ("$error"), "}", "createdAt", "{", "$first",
      BCON_UTF8 ("$createdAt"), "}", "}", "}", "]");
   bson_destroy (&match);
   cursor = mongoc_collection_aggregate (coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      seq_t *q = seqs_push (seqs, fw_dlq__string_at (doc, "_id.s"), fw_dlq__string_at (doc, "_id.q"));
      bson_iter_t it;

      if (!q || !(q->group = bson_copy (doc))) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         ok = false;
         break;
      }
      q->size = bson_iter_init_find (&it, doc, "n") && BSON_ITER_HOLDS_NUMBER (&it)
                   ? bson_iter_as_int64 (&it)
                   : 0;
      if (bson_iter_init_find (&it, doc, "createdAt") && BSON_ITER_HOLDS_DATE_TIME (&it)) {
         q->head_ms = bson_iter_date_time (&it);
      }
      if (bson_iter_init_find (&it, doc, "head")) {
         /* NULL only when the _id has no JSON form; the head then matches no
          * head filter. */
         q->head_key = fw_dlq_sequence_id (bson_iter_value (&it));
      }
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__set_error_at (error, t, "reading the sequences", &berr);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (pipeline);
   if (ok && seqs->n > 1) {
      qsort (seqs->v, seqs->n, sizeof *seqs->v, by_key);
   }
   seqs->n_sorted = seqs->n;
   return ok;
}

/* The string at key, else at _id.key (the document's key), else "?". */
static const char *
doc_string (const bson_t *doc, const char *key)
{
   const char *s = fw_dlq__string_at (doc, key);
   char path[64];
   if (strcmp (s, "?") != 0) {
      return s;
   }
   snprintf (path, sizeof path, "_id.%s", key);
   return fw_dlq__string_at (doc, path);
}

/* Reads the sequence documents that matter: those not closed, and those of
 * the sequences with waiting entries (to tell closed from missing). */
static bool
read_documents (mongoc_collection_t *scoll, const fw_dlq_target_t *t, const char *stream,
                seqs_t *seqs, fw_error_t *error)
{
   bson_t query = BSON_INITIALIZER, or, alt, ne, in, arr;
   mongoc_cursor_t *cursor;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = true;

   if (stream) {
      BSON_APPEND_UTF8 (&query, "streamName", stream);
   }
   BSON_APPEND_ARRAY_BEGIN (&query, "$or", &or);
   BSON_APPEND_DOCUMENT_BEGIN (&or, "0", &alt);
   BSON_APPEND_DOCUMENT_BEGIN (&alt, "open", &ne);
   BSON_APPEND_BOOL (&ne, "$ne", false);
   bson_append_document_end (&alt, &ne);
   bson_append_document_end (&or, &alt);
   if (seqs->n_sorted > 0) {
      BSON_APPEND_DOCUMENT_BEGIN (&or, "1", &alt);
      BSON_APPEND_DOCUMENT_BEGIN (&alt, "sequenceId", &in);
      BSON_APPEND_ARRAY_BEGIN (&in, "$in", &arr);
      for (size_t i = 0; i < seqs->n_sorted; i++) {
         char key[24];
         const char *k;
         bson_uint32_to_string ((uint32_t) i, &k, key, sizeof key);
         BSON_APPEND_UTF8 (&arr, k, seqs->v[i].id);
      }
      bson_append_array_end (&in, &arr);
      bson_append_document_end (&alt, &in);
      bson_append_document_end (&or, &alt);
   }
   bson_append_array_end (&query, &or);

   cursor = mongoc_collection_find_with_opts (scoll, &query, NULL, NULL);
   while (ok && mongoc_cursor_next (cursor, &doc)) {
      const char *s = doc_string (doc, "streamName");
      const char *id = doc_string (doc, "sequenceId");
      bson_iter_t it;
      int open = bson_iter_init_find (&it, doc, "open") && BSON_ITER_HOLDS_BOOL (&it)
                    ? bson_iter_bool (&it)
                    : -1;
      seq_t *q = seqs_find (seqs, s, id);

      if (q) {
         q->open = open;
      } else if (open != 0 && !seqs_push (seqs, s, id)) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         ok = false;
      } else if (open != 0) {
         seqs->v[seqs->n - 1].open = open;
      }
   }
   if (ok && mongoc_cursor_error (cursor, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "reading the sequence documents on %s.%s_sequences (connection \"%s\") "
                         "failed: %s",
                         t->database, t->collection, t->connection, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cursor);
   bson_destroy (&query);
   return ok;
}

static int
by_head_key (const void *a, const void *b)
{
   const seq_t *x = *(seq_t *const *) a, *y = *(seq_t *const *) b;
   return strcmp (x->head_key, y->head_key);
}

/* query = { $and: [ head, { _id: { $in: [the head of each sequence] } } ] };
 * index[] (room for seqs->n) gets the sequences with a head, *n their
 * number. */
static void
append_head_query (bson_t *query, const bson_t *head, seqs_t *seqs, seq_t **index, size_t *n)
{
   bson_t and, in, arr, ids;

   BSON_APPEND_ARRAY_BEGIN (query, "$and", &and);
   BSON_APPEND_DOCUMENT (&and, "0", head);
   BSON_APPEND_DOCUMENT_BEGIN (&and, "1", &in);
   BSON_APPEND_DOCUMENT_BEGIN (&in, "_id", &arr);
   BSON_APPEND_ARRAY_BEGIN (&arr, "$in", &ids);
   for (size_t i = 0; i < seqs->n; i++) {
      bson_iter_t it;
      char key[24];
      const char *k;
      if (!seqs->v[i].group || !seqs->v[i].head_key ||
          !bson_iter_init_find (&it, seqs->v[i].group, "head")) {
         continue;
      }
      bson_uint32_to_string ((uint32_t) *n, &k, key, sizeof key);
      bson_append_iter (&ids, k, -1, &it);
      index[(*n)++] = &seqs->v[i];
   }
   bson_append_array_end (&arr, &ids);
   bson_append_document_end (&in, &arr);
   bson_append_document_end (&and, &in);
   bson_append_array_end (query, &and);
}

/* Marks selected every sequence of index (n of them, sorted by head_key)
 * whose head is the entry doc. */
static void
select_head_of (const bson_t *doc, seq_t **index, size_t n)
{
   bson_iter_t it;
   seq_t probe, *p = &probe, **hit;

   if (!bson_iter_init_find (&it, doc, "_id") ||
       !(probe.head_key = fw_dlq_sequence_id (bson_iter_value (&it)))) {
      return;
   }
   /* Several sequences may share a head only in a DLQ edited by hand. */
   if ((hit = bsearch (&p, index, n, sizeof *index, by_head_key))) {
      while (hit > index && by_head_key (hit - 1, &p) == 0) {
         hit--;
      }
      for (; hit < index + n && by_head_key (hit, &p) == 0; hit++) {
         (*hit)->selected = true;
      }
   }
   bson_free (probe.head_key);
}

/* Keeps selected only the sequences whose head entry the filters (other
 * than stream and limit) select. */
static bool
select_by_head (mongoc_collection_t *coll, const fw_dlq_target_t *t,
                const fw_dlq_filter_t *filter, seqs_t *seqs, fw_error_t *error)
{
   fw_dlq_filter_t hf = *filter;
   bson_t query = BSON_INITIALIZER, head = BSON_INITIALIZER;
   bson_t *opts = BCON_NEW ("projection", "{", "_id", BCON_INT32 (1), "}");
   seq_t **index = NULL;
   size_t n = 0;
   mongoc_cursor_t *cursor = NULL;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = false;

   hf.stream = NULL;
   hf.limit = 0;
   for (size_t i = 0; i < seqs->n; i++) {
      seqs->v[i].selected = false;
   }
   if (!fw_dlq_filter_to_query (&hf, NULL, &head, error)) {
      goto done;
   }
   if (seqs->n && !(index = malloc (seqs->n * sizeof *index))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      goto done;
   }
   append_head_query (&query, &head, seqs, index, &n);
   if (n == 0) {
      ok = true;
      goto done;
   }
   qsort (index, n, sizeof *index, by_head_key);

   cursor = mongoc_collection_find_with_opts (coll, &query, opts, NULL);
   while (mongoc_cursor_next (cursor, &doc)) {
      select_head_of (doc, index, n);
   }
   if (mongoc_cursor_error (cursor, &berr)) {
      fw_dlq__set_error_at (error, t, "selecting sequences by their head", &berr);
      goto done;
   }
   ok = true;

done:
   mongoc_cursor_destroy (cursor);
   free (index);
   bson_destroy (opts);
   bson_destroy (&head);
   bson_destroy (&query);
   return ok;
}

static bool
has_head_filter (const fw_dlq_filter_t *f)
{
   return f->status || f->error_type || f->since_ms || f->until_ms || f->n_ids ||
          f->filter_json;
}

/* Every sequence of target i into seqs; filter may be NULL (stream only). */
static bool
collect (fw_dlq_admin_t *admin, int i, const char *stream, const fw_dlq_filter_t *filter,
         seqs_t *seqs, fw_error_t *error)
{
   const fw_dlq_target_t *t = &admin->targets[i];
   mongoc_collection_t *coll = fw_dlq_admin_collection (admin, i, error);
   mongoc_collection_t *scoll = coll ? fw_dlq__sequence_collection (admin, i, error) : NULL;
   bool ok = coll && scoll && waiting_groups (coll, t, stream, seqs, error) &&
             read_documents (scoll, t, stream, seqs, error);

   if (ok && filter && has_head_filter (filter)) {
      ok = select_by_head (coll, t, filter, seqs, error);
   }
   if (ok && seqs->n > 1) {
      qsort (seqs->v, seqs->n, sizeof *seqs->v, by_age);
      seqs->n_sorted = 0;
   }
   mongoc_collection_destroy (scoll);
   mongoc_collection_destroy (coll);
   return ok;
}

/* Appends the value at key of group as out's key, null when it is missing. */
static void
append_group_value (bson_t *out, const char *as, const bson_t *group, const char *key)
{
   bson_iter_t it;
   if (bson_iter_init_find (&it, group, key)) {
      bson_append_iter (out, as, -1, &it);
   } else {
      BSON_APPEND_NULL (out, as);
   }
}

/* The head's error as { type, message } (each null when missing), null
 * when it has none (parked), or as found when it is not a document. */
static void
append_head_error (bson_t *head, const bson_t *group)
{
   bson_iter_t it, f;
   bson_t err;

   if (!bson_iter_init_find (&it, group, "error") || BSON_ITER_HOLDS_NULL (&it)) {
      BSON_APPEND_NULL (head, "error");
      return;
   }
   if (!BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_append_iter (head, "error", -1, &it);
      return;
   }
   BSON_APPEND_DOCUMENT_BEGIN (head, "error", &err);
   for (int k = 0; k < 2; k++) {
      const char *key = k == 0 ? "type" : "message";
      bson_iter_t sub = it;
      if (bson_iter_recurse (&sub, &f) && bson_iter_find (&f, key)) {
         bson_append_iter (&err, key, -1, &f);
      } else {
         BSON_APPEND_NULL (&err, key);
      }
   }
   bson_append_document_end (head, &err);
}

static void
sequence_doc (const seq_t *q, int64_t now_ms, bson_t *out)
{
   bson_t head;

   BSON_APPEND_UTF8 (out, "streamName", q->stream);
   BSON_APPEND_UTF8 (out, "sequenceId", q->id);
   if (q->open < 0) {
      BSON_APPEND_NULL (out, "open");
   } else {
      BSON_APPEND_BOOL (out, "open", q->open == 1);
   }
   BSON_APPEND_INT64 (out, "size", q->size);
   BSON_APPEND_INT64 (out, "parked", q->size > 0 ? q->size - 1 : 0);
   if (!q->group) {
      BSON_APPEND_NULL (out, "head");
   } else {
      BSON_APPEND_DOCUMENT_BEGIN (out, "head", &head);
      append_group_value (&head, "_id", q->group, "head");
      append_group_value (&head, "sequenceIndex", q->group, "sequenceIndex");
      append_group_value (&head, "status", q->group, "status");
      append_head_error (&head, q->group);
      append_group_value (&head, "createdAt", q->group, "createdAt");
      bson_append_document_end (out, &head);
   }
   if (q->head_ms == INT64_MAX) {
      BSON_APPEND_NULL (out, "ageSeconds");
   } else {
      BSON_APPEND_INT64 (out, "ageSeconds", (now_ms - q->head_ms) / 1000);
   }
}

bool
fw_dlq_admin_sequences (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter,
                        int64_t now_ms, fw_dlq_visit_fn visit, void *ud, fw_error_t *error)
{
   int64_t left = filter->limit;
   bson_t scratch = BSON_INITIALIZER;
   bool ok = fw_dlq_filter_to_query (filter, NULL, &scratch, error);

   bson_destroy (&scratch);
   for (int i = 0; ok && i < admin->n_targets && (filter->limit == 0 || left > 0); i++) {
      seqs_t seqs = {0};
      if (!fw_dlq__selected (admin, i)) {
         continue;
      }
      ok = collect (admin, i, filter->stream, filter, &seqs, error);
      for (size_t k = 0; ok && k < seqs.n && (filter->limit == 0 || left > 0); k++) {
         bson_t doc = BSON_INITIALIZER;
         if (!seqs.v[k].selected) {
            bson_destroy (&doc);
            continue;
         }
         sequence_doc (&seqs.v[k], now_ms, &doc);
         left--;
         ok = visit (&doc, &admin->targets[i], ud, error);
         bson_destroy (&doc);
      }
      seqs_free (&seqs);
   }
   return ok;
}

/* --- stats ---------------------------------------------------------------- */

typedef struct {
   char *stream;
   int64_t open, parked, largest;
} per_stream_t;

typedef struct {
   per_stream_t *v;
   int n;
} per_streams_t;

static per_stream_t *
per_stream (per_streams_t *p, const char *stream)
{
   per_stream_t *grown;
   for (int i = 0; i < p->n; i++) {
      if (fw_dlq__same (p->v[i].stream, stream)) {
         return &p->v[i];
      }
   }
   if (!(grown = realloc (p->v, (size_t) (p->n + 1) * sizeof *grown))) {
      return NULL;
   }
   p->v = grown;
   memset (&grown[p->n], 0, sizeof *grown);
   if (!(grown[p->n].stream = strdup (stream))) {
      return NULL;
   }
   return &grown[p->n++];
}

bool
fw_dlq__sequence_stats (fw_dlq_admin_t *admin, const char *stream, bson_t *out,
                        fw_error_t *error)
{
   per_streams_t p = {0};
   bool ok = true;

   /* Declared sequenced streams show even with nothing open: their zeros
    * are an answer. */
   for (int i = 0; ok && i < admin->n_seq_streams; i++) {
      const char *name = admin->seq_streams[i];
      const fw_dlq_target_t *t = fw_dlq_admin_target_of (admin, name);
      if ((stream && !fw_dlq__same (stream, name)) ||
          (t && !fw_dlq__selected (admin, (int) (t - admin->targets)))) {
         continue;
      }
      if (!per_stream (&p, name)) {
         fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
         ok = false;
      }
   }
   for (int i = 0; ok && i < admin->n_targets; i++) {
      seqs_t seqs = {0};
      if (!fw_dlq__selected (admin, i)) {
         continue;
      }
      ok = collect (admin, i, stream, NULL, &seqs, error);
      for (size_t k = 0; ok && k < seqs.n; k++) {
         const seq_t *q = &seqs.v[k];
         per_stream_t *s = per_stream (&p, q->stream);
         if (!s) {
            fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
            ok = false;
            break;
         }
         s->open += q->open == 1;
         s->parked += q->size > 0 ? q->size - 1 : 0;
         s->largest = q->size > s->largest ? q->size : s->largest;
      }
      seqs_free (&seqs);
   }
   if (ok && p.n > 0) {
      bson_t all, one;
      BSON_APPEND_DOCUMENT_BEGIN (out, "sequences", &all);
      for (int i = 0; i < p.n; i++) {
         BSON_APPEND_DOCUMENT_BEGIN (&all, p.v[i].stream, &one);
         BSON_APPEND_INT64 (&one, "open", p.v[i].open);
         BSON_APPEND_INT64 (&one, "parked", p.v[i].parked);
         BSON_APPEND_INT64 (&one, "largest", p.v[i].largest);
         bson_append_document_end (&all, &one);
      }
      bson_append_document_end (out, &all);
   }
   for (int i = 0; i < p.n; i++) {
      free (p.v[i].stream);
   }
   free (p.v);
   return ok;
}
