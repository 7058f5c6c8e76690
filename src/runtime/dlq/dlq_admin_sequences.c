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
#include "runtime/dlq/dlq_sequence.h"

typedef struct {
   char *stream;
   char *id;
   int open;        /* 1, 0, or -1: no sequence document, or open not a bool */
   int64_t size;    /* waiting entries */
   bson_t *group;   /* the aggregation's group (head fields); NULL when nothing waits */
   char *head_key;  /* canonical Extended JSON of the head's _id, or NULL */
   int64_t head_ms; /* the head's createdAt; INT64_MAX when none or not a date */
   bool selected;
} seq_t;

typedef struct {
   seq_t *v;
   size_t n, cap;
   size_t n_sorted; /* v[0, n_sorted) is sorted by (stream, id) */
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

/* One group of the waiting entries (the store's seq_waiting) into seqs. */
static bool
add_group (const bson_t *doc, void *ud, fw_error_t *error)
{
   seqs_t *seqs = ud;
   seq_t *q = seqs_push (seqs, fw_dlq__string_at (doc, "_id.s"), fw_dlq__string_at (doc, "_id.q"));
   bson_iter_t it;

   if (!q || !(q->group = bson_copy (doc))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
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
   return true;
}

/* One group per sequence with waiting entries: its size and its head's
 * fields. */
static bool
waiting_groups (fw_dlq_store_t *store, const char *stream, seqs_t *seqs, fw_error_t *error)
{
   bool ok = store->seq_waiting (store, stream, add_group, seqs, error);
   if (ok && seqs->n > 1) {
      qsort (seqs->v, seqs->n, sizeof *seqs->v, by_key);
   }
   seqs->n_sorted = seqs->n;
   return ok;
}

/* One sequence's record (the store's seq_list) into seqs. */
static bool
add_record (const fw_dlq_seq_t *seq, void *ud, fw_error_t *error)
{
   seqs_t *seqs = ud;
   seq_t *q = seqs_find (seqs, seq->stream, seq->id);

   if (q) {
      q->open = seq->open;
   } else if (seq->open != 0 && !seqs_push (seqs, seq->stream, seq->id)) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      return false;
   } else if (seq->open != 0) {
      seqs->v[seqs->n - 1].open = seq->open;
   }
   return true;
}

/* Reads the sequence documents that matter: those not closed, and those of
 * the sequences with waiting entries (to tell closed from missing). */
static bool
read_documents (fw_dlq_store_t *store, const char *stream, seqs_t *seqs, fw_error_t *error)
{
   bson_t ids = BSON_INITIALIZER;
   bool ok;

   for (size_t i = 0; i < seqs->n_sorted; i++) {
      char key[24];
      const char *k;
      bson_uint32_to_string ((uint32_t) i, &k, key, sizeof key);
      BSON_APPEND_UTF8 (&ids, k, seqs->v[i].id);
   }
   ok = store->seq_list (store, stream, &ids, add_record, seqs, error);
   bson_destroy (&ids);
   return ok;
}

static int
by_head_key (const void *a, const void *b)
{
   const seq_t *x = *(seq_t *const *) a, *y = *(seq_t *const *) b;
   return strcmp (x->head_key, y->head_key);
}

/* ids gets the head of each sequence with one; index[] (room for seqs->n)
 * those sequences, *n their number. */
static void
head_ids (seqs_t *seqs, bson_t *ids, seq_t **index, size_t *n)
{
   for (size_t i = 0; i < seqs->n; i++) {
      bson_iter_t it;
      char key[24];
      const char *k;
      if (!seqs->v[i].group || !seqs->v[i].head_key ||
          !bson_iter_init_find (&it, seqs->v[i].group, "head")) {
         continue;
      }
      bson_uint32_to_string ((uint32_t) *n, &k, key, sizeof key);
      bson_append_iter (ids, k, -1, &it);
      index[(*n)++] = &seqs->v[i];
   }
}

/* Marks selected every sequence of index (n of them, sorted by head_key)
 * whose head is the entry doc. */
typedef struct {
   seq_t **index;
   size_t n;
} heads_t;

static bool
select_head_of (const bson_t *doc, void *ud, fw_error_t *error)
{
   seq_t **index = ((heads_t *) ud)->index;
   size_t n = ((heads_t *) ud)->n;
   bson_iter_t it;
   seq_t probe, *p = &probe, **hit;

   if (!bson_iter_init_find (&it, doc, "_id") ||
       !(probe.head_key = fw_dlq_sequence_id (bson_iter_value (&it)))) {
      return true;
   }
   (void) error;
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
   return true;
}

/* Keeps selected only the sequences whose head entry the filters (other
 * than stream and limit) select. */
static bool
select_by_head (fw_dlq_store_t *store, const fw_dlq_filter_t *filter, seqs_t *seqs,
                fw_error_t *error)
{
   fw_dlq_filter_t hf = *filter;
   bson_t ids = BSON_INITIALIZER;
   fw_dlq_query_t q = {&hf, NULL, &ids, 0, false};
   heads_t heads = {NULL, 0};
   bool ok = true;

   hf.stream = NULL;
   hf.limit = 0;
   for (size_t i = 0; i < seqs->n; i++) {
      seqs->v[i].selected = false;
   }
   if (seqs->n && !(heads.index = malloc (seqs->n * sizeof *heads.index))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory");
      ok = false;
   }
   if (ok) {
      head_ids (seqs, &ids, heads.index, &heads.n);
   }
   if (ok && heads.n > 0) {
      qsort (heads.index, heads.n, sizeof *heads.index, by_head_key);
      ok = store->query (store, &q, select_head_of, &heads, error);
   }
   free (heads.index);
   bson_destroy (&ids);
   return ok;
}

static bool
has_head_filter (const fw_dlq_filter_t *f)
{
   return f->status || f->error_type || f->since_ms || f->until_ms || f->n_ids || f->filter_json;
}

/* Every sequence of target i into seqs; filter may be NULL (stream only). */
static bool
collect (fw_dlq_admin_t *admin, int i, const char *stream, const fw_dlq_filter_t *filter,
         seqs_t *seqs, fw_error_t *error)
{
   fw_dlq_store_t *store = fw_dlq__store (admin, i, error);
   bool ok = store && waiting_groups (store, stream, seqs, error) &&
             read_documents (store, stream, seqs, error);

   if (ok && filter && has_head_filter (filter)) {
      ok = select_by_head (store, filter, seqs, error);
   }
   if (ok && seqs->n > 1) {
      qsort (seqs->v, seqs->n, sizeof *seqs->v, by_age);
      seqs->n_sorted = 0;
   }
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
fw_dlq_admin_sequences (fw_dlq_admin_t *admin, const fw_dlq_filter_t *filter, int64_t now_ms,
                        fw_dlq_visit_fn visit, void *ud, fw_error_t *error)
{
   int64_t left = filter->limit;
   bool ok = fw_dlq_filter_check (filter, NULL, error);

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
fw_dlq__sequence_stats (fw_dlq_admin_t *admin, const char *stream, bson_t *out, fw_error_t *error)
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
