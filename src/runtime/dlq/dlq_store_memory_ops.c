/*
 * dlq_store_memory_ops.c - the in-memory store's reading and changing
 * methods (dlq_store.h), with the MongoDB store's semantics: the filters of
 * `flowwarden dlq` are matched here (fw_dlq_query_matches). A visitor is
 * called with the lock released, on copies, so it may use the store.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store_memory-private.h"

#define utf8_field fw_dlq__utf8_field

typedef struct {
   bson_t **v;
   size_t n;
} copies_t;

static void
copies_free (copies_t *c)
{
   for (size_t i = 0; i < c->n; i++) {
      bson_destroy (c->v[i]);
   }
   free (c->v);
}

static int64_t
created_of (const bson_t *doc)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, "createdAt") && BSON_ITER_HOLDS_DATE_TIME (&it)
             ? bson_iter_date_time (&it)
             : INT64_MIN;
}

/* createdAt, then _id, as the MongoDB store's sort. */
static int
oldest_first (const void *a, const void *b)
{
   const bson_t *x = *(bson_t *const *) a, *y = *(bson_t *const *) b;
   int64_t cx = created_of (x), cy = created_of (y);
   const char *ix = utf8_field (x, "_id"), *iy = utf8_field (y, "_id");
   if (cx != cy) {
      return cx < cy ? -1 : 1;
   }
   return strcmp (ix ? ix : "", iy ? iy : "");
}

/* A copy of entry, without the event's documents unless with_documents. */
static bson_t *
copy_for (const bson_t *entry, bool with_documents)
{
   bson_t *out;
   if (with_documents) {
      return bson_copy (entry);
   }
   out = bson_new ();
   bson_copy_to_excluding_noinit (entry, out, "fullDocument", "fullDocumentBeforeChange",
                                  "updateDescription", NULL);
   return out;
}

/* Copies of the entries q selects, oldest first (limit applied). */
static bool
select_copies (fw_memory_store_t *m, const fw_dlq_query_t *q, copies_t *out, fw_error_t *error)
{
   bool ok = true, match;

   memset (out, 0, sizeof *out);
   pthread_mutex_lock (&m->mu);
   if (m->n && !(out->v = calloc (m->n, sizeof *out->v))) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      ok = false;
   }
   for (size_t i = 0; ok && i < m->n; i++) {
      ok = fw_dlq_query_matches (q, m->entries[i], &match, error);
      if (ok && match && !(out->v[out->n++] = copy_for (m->entries[i], q->with_documents))) {
         fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
         out->n--;
         ok = false;
      }
   }
   pthread_mutex_unlock (&m->mu);
   if (ok && out->n > 1) {
      qsort (out->v, out->n, sizeof *out->v, oldest_first);
   }
   if (ok && q->limit > 0 && out->n > (size_t) q->limit) {
      for (size_t i = (size_t) q->limit; i < out->n; i++) {
         bson_destroy (out->v[i]);
      }
      out->n = (size_t) q->limit;
   }
   return ok;
}

static bool
memory_query (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_entry_fn visit, void *ud,
              fw_error_t *error)
{
   copies_t c;
   bool ok = select_copies ((fw_memory_store_t *) store, q, &c, error);
   for (size_t i = 0; ok && i < c.n; i++) {
      ok = visit (c.v[i], ud, error);
   }
   copies_free (&c);
   return ok;
}

/* Whether c allows entry, and no live claim holds it. */
static bool
claimable_entry (const bson_t *entry, const fw_dlq_claimable_t *c)
{
   const char *status = utf8_field (entry, "status");
   const char *seq = utf8_field (entry, "sequenceId");
   bson_iter_t it;
   bool expired = bson_iter_init_find (&it, entry, "claimedUntil") &&
                  BSON_ITER_HOLDS_DATE_TIME (&it) && bson_iter_date_time (&it) < c->now_ms;

   if (c->sequence ? !seq || strcmp (seq, c->sequence) != 0
                   : c->in_sequence && !bson_iter_init_find (&it, entry, "sequenceId")) {
      return false;
   }
   if (c->max_attempts > 0 && bson_iter_init_find (&it, entry, "reprocessAttempts") &&
       !(BSON_ITER_HOLDS_NUMBER (&it) && bson_iter_as_int64 (&it) < c->max_attempts)) {
      return false;
   }
   return !status || strcmp (status, "REPROCESSING") != 0 || expired;
}

/* clusterTime (missing first), then createdAt and _id. */
static int
by_cluster_time (const void *a, const void *b)
{
   const bson_t *x = *(bson_t *const *) a, *y = *(bson_t *const *) b;
   uint32_t tx = 0, ix = 0, ty = 0, iy = 0;
   bson_iter_t it;
   if (bson_iter_init_find (&it, x, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &tx, &ix);
   }
   if (bson_iter_init_find (&it, y, "clusterTime") && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &ty, &iy);
   }
   if (tx != ty || ix != iy) {
      return tx < ty || (tx == ty && ix < iy) ? -1 : 1;
   }
   return oldest_first (a, b);
}

static bool
memory_claimable (fw_dlq_store_t *store, const fw_dlq_query_t *q, const fw_dlq_claimable_t *cl,
                  fw_dlq_entry_fn visit, void *ud, fw_error_t *error)
{
   fw_dlq_query_t all = *q;
   copies_t c;
   size_t n = 0;
   bool ok;

   all.limit = 0;
   ok = select_copies ((fw_memory_store_t *) store, &all, &c, error);
   for (size_t i = 0; ok && i < c.n; i++) {
      if (claimable_entry (c.v[i], cl)) {
         c.v[n++] = c.v[i];
      } else {
         bson_destroy (c.v[i]);
      }
   }
   c.n = ok ? n : c.n;
   if (ok && n > 1) {
      qsort (c.v, n, sizeof *c.v, by_cluster_time);
   }
   for (size_t i = 0; ok && i < n && (q->limit <= 0 || (int64_t) i < q->limit); i++) {
      ok = visit (c.v[i], ud, error);
   }
   copies_free (&c);
   return ok;
}

static bool
memory_pending (fw_dlq_store_t *store, const char *stream, int64_t *count, int64_t *oldest_ms,
                fw_error_t *error)
{
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {0};
   copies_t c;
   bool ok;

   f.stream = stream;
   f.status = "PENDING";
   q.filter = &f;
   ok = select_copies ((fw_memory_store_t *) store, &q, &c, error);
   *count = ok ? (int64_t) c.n : 0;
   *oldest_ms = ok && c.n && created_of (c.v[0]) != INT64_MIN ? created_of (c.v[0]) : 0;
   copies_free (&c);
   return ok;
}

typedef struct {
   fw_dlq_group_t *v;
   size_t n;
} groups_t;

static bool
group_add (groups_t *g, const fw_dlq_group_t *one)
{
   fw_dlq_group_t *grown;
   for (size_t i = 0; i < g->n; i++) {
      if (strcmp (g->v[i].stream, one->stream) == 0 && strcmp (g->v[i].status, one->status) == 0 &&
          strcmp (g->v[i].error_type, one->error_type) == 0 && g->v[i].parked == one->parked) {
         g->v[i].n++;
         return true;
      }
   }
   if (!(grown = realloc (g->v, (g->n + 1) * sizeof *grown))) {
      return false;
   }
   g->v = grown;
   grown[g->n++] = *one;
   return true;
}

static const char *
or_unknown (const char *s)
{
   return s ? s : "?";
}

/* The groups point into c's copies. */
static bool
tally_groups (const copies_t *c, groups_t *g, int64_t *oldest_pending_ms)
{
   for (size_t i = 0; i < c->n; i++) {
      const bson_t *e = c->v[i];
      bson_iter_t it, t;
      fw_dlq_group_t one = {0};
      bool has_error = bson_iter_init_find (&it, e, "error");
      one.stream = or_unknown (utf8_field (e, "streamName"));
      one.status = or_unknown (utf8_field (e, "status"));
      one.error_type = "?";
      if (has_error && BSON_ITER_HOLDS_DOCUMENT (&it) && bson_iter_recurse (&it, &t) &&
          bson_iter_find (&t, "type") && BSON_ITER_HOLDS_UTF8 (&t)) {
         one.error_type = bson_iter_utf8 (&t, NULL);
      }
      one.parked = !has_error && utf8_field (e, "sequenceId");
      one.n = 1;
      if (!group_add (g, &one)) {
         return false;
      }
      if (strcmp (one.status, "PENDING") == 0 && created_of (e) != INT64_MIN &&
          created_of (e) < *oldest_pending_ms) {
         *oldest_pending_ms = created_of (e);
      }
   }
   return true;
}

static bool
memory_tally (fw_dlq_store_t *store, const fw_dlq_query_t *q, fw_dlq_group_fn visit, void *ud,
              int64_t *oldest_pending_ms, fw_error_t *error)
{
   fw_dlq_query_t all = *q;
   groups_t g = {0};
   copies_t c;
   bool ok;

   all.limit = 0;
   ok = select_copies ((fw_memory_store_t *) store, &all, &c, error);
   if (ok && !tally_groups (&c, &g, oldest_pending_ms)) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      ok = false;
   }
   for (size_t i = 0; ok && i < g.n; i++) {
      ok = visit (&g.v[i], ud, error);
   }
   free (g.v);
   copies_free (&c);
   return ok;
}

/* entry marked DISCARDED (the MongoDB store's update); NULL when out of
 * memory. */
static bson_t *
discarded (const bson_t *entry, const char *reason, const char *actor, int64_t now_ms)
{
   bson_t *set = BCON_NEW ("status", BCON_UTF8 ("DISCARDED"), "discardedAt",
                           BCON_DATE_TIME (now_ms), "discardReason", BCON_UTF8 (reason),
                           "lastTouched", BCON_DATE_TIME (now_ms));
   bson_t *item = BCON_NEW ("at", BCON_DATE_TIME (now_ms), "action", BCON_UTF8 ("discarded"),
                            "actor", BCON_UTF8 (actor), "result", BCON_UTF8 (reason));
   bson_t *out = fw_dlq__memory_rebuilt (entry, set, NULL, false, NULL, item);
   bson_destroy (set);
   bson_destroy (item);
   return out;
}

/* Applies discard (reason set) or purge (reason NULL) to the entries q
 * selects, under the lock. */
static bool
change (fw_memory_store_t *m, const fw_dlq_query_t *q, const char *reason, const char *actor,
        int64_t now_ms, int64_t *touched, fw_error_t *error)
{
   bool ok = true, match;
   size_t kept = 0;

   *touched = 0;
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) {
      bson_t *e = m->entries[i], *d = NULL;
      if (ok && !(ok = fw_dlq_query_matches (q, e, &match, error))) {
         match = false;
      }
      if (match && reason && !(d = discarded (e, reason, actor, now_ms))) {
         fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
         ok = match = false;
      }
      if (match) {
         (*touched)++;
         bson_destroy (e);
         e = d; /* NULL: purged */
      }
      if (e) {
         m->entries[kept++] = e;
      }
   }
   m->n = kept;
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_discard (fw_dlq_store_t *store, const fw_dlq_query_t *q, const char *reason,
                const char *actor, int64_t now_ms, int64_t *touched, fw_error_t *error)
{
   return change ((fw_memory_store_t *) store, q, reason, actor, now_ms, touched, error);
}

static bool
memory_purge (fw_dlq_store_t *store, const fw_dlq_query_t *q, int64_t *touched, fw_error_t *error)
{
   return change ((fw_memory_store_t *) store, q, NULL, NULL, 0, touched, error);
}

/* --- the sequences' documents and waiting entries --------------------------- */

static bool
id_listed (const bson_t *ids, const char *id)
{
   bson_iter_t it;
   if (!ids || !bson_iter_init (&it, ids)) {
      return false;
   }
   while (bson_iter_next (&it)) {
      if (BSON_ITER_HOLDS_UTF8 (&it) && strcmp (bson_iter_utf8 (&it, NULL), id) == 0) {
         return true;
      }
   }
   return false;
}

static void
seqs_free (fw_memory_seq_t *v, size_t n)
{
   for (size_t i = 0; i < n; i++) {
      free (v[i].stream);
      free (v[i].id);
   }
   free (v);
}

/* Copies of the sequences seq_list visits into *out (*n of them). */
static bool
copy_seqs (fw_memory_store_t *m, const char *stream, const bson_t *ids, fw_memory_seq_t **out,
           size_t *n)
{
   bool ok = true;

   *n = 0;
   pthread_mutex_lock (&m->mu);
   *out = m->n_seqs ? calloc (m->n_seqs, sizeof **out) : NULL;
   ok = !m->n_seqs || *out;
   for (size_t i = 0; ok && i < m->n_seqs; i++) {
      const fw_memory_seq_t *s = &m->seqs[i];
      fw_memory_seq_t *c = &(*out)[*n];
      if ((stream && strcmp (s->stream, stream) != 0) || (!s->open && !id_listed (ids, s->id))) {
         continue;
      }
      *c = *s;
      c->stream = strdup (s->stream);
      c->id = strdup (s->id);
      (*n)++;
      ok = c->stream && c->id;
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_seq_list (fw_dlq_store_t *store, const char *stream, const bson_t *ids, fw_dlq_seq_fn visit,
                 void *ud, fw_error_t *error)
{
   fw_memory_seq_t *copy;
   size_t n;
   bool ok = copy_seqs ((fw_memory_store_t *) store, stream, ids, &copy, &n);

   if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
   }
   for (size_t i = 0; ok && i < n; i++) {
      fw_dlq_seq_t seq = {copy[i].stream, copy[i].id, copy[i].open, copy[i].next, copy[i].inflight};
      ok = visit (&seq, ud, error);
   }
   seqs_free (copy, n);
   return ok;
}

static int64_t
index_of (const bson_t *entry)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, entry, "sequenceIndex") && BSON_ITER_HOLDS_NUMBER (&it)
             ? bson_iter_as_int64 (&it)
             : INT64_MAX;
}

/* The aggregation's group of the waiting entries v[from, to) (one sequence,
 * lowest sequenceIndex first) into out. */
static void
waiting_group (bson_t **v, size_t from, size_t to, bson_t *out)
{
   static const char *const heads[][2] = {{"head", "_id"},
                                          {"sequenceIndex", NULL},
                                          {"status", NULL},
                                          {"error", NULL},
                                          {"createdAt", NULL}};
   bson_iter_t it;

   BCON_APPEND (out, "_id", "{", "s", BCON_UTF8 (utf8_field (v[from], "streamName")), "q",
                BCON_UTF8 (utf8_field (v[from], "sequenceId")), "}", "n",
                BCON_INT64 ((int64_t) (to - from)));
   for (size_t k = 0; k < sizeof heads / sizeof *heads; k++) {
      const char *from_key = heads[k][1] ? heads[k][1] : heads[k][0];
      if (bson_iter_init_find (&it, v[from], from_key)) {
         bson_append_iter (out, heads[k][0], -1, &it);
      }
   }
}

static int
by_sequence (const void *a, const void *b)
{
   const bson_t *x = *(bson_t *const *) a, *y = *(bson_t *const *) b;
   int c = strcmp (utf8_field (x, "streamName"), utf8_field (y, "streamName"));
   int64_t ix = index_of (x), iy = index_of (y);
   c = c ? c : strcmp (utf8_field (x, "sequenceId"), utf8_field (y, "sequenceId"));
   return c ? c : ix < iy ? -1 : ix > iy;
}

/* Copies of the waiting entries of sequence id of stream, lowest
 * sequenceIndex first. */
static bool
sequence_copies (fw_dlq_store_t *store, const char *stream, const char *id, copies_t *c,
                 fw_error_t *error)
{
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {&f, "PENDING,REPROCESSING", NULL, 0, true};
   size_t n = 0;

   f.stream = stream;
   if (!select_copies ((fw_memory_store_t *) store, &q, c, error)) {
      return false;
   }
   for (size_t i = 0; i < c->n; i++) {
      const char *seq = utf8_field (c->v[i], "sequenceId");
      if (seq && strcmp (seq, id) == 0) {
         c->v[n++] = c->v[i];
      } else {
         bson_destroy (c->v[i]);
      }
   }
   c->n = n;
   if (n > 1) {
      qsort (c->v, n, sizeof *c->v, by_sequence);
   }
   return true;
}

static bool
memory_seq_entries (fw_dlq_store_t *store, const char *stream, const char *id,
                    fw_dlq_entry_fn visit, void *ud, fw_error_t *error)
{
   copies_t c;
   bool ok = sequence_copies (store, stream, id, &c, error);
   for (size_t i = 0; ok && i < c.n; i++) {
      ok = visit (c.v[i], ud, error);
   }
   copies_free (&c);
   return ok;
}

static bool
memory_seq_before (fw_dlq_store_t *store, const char *stream, const char *id, int64_t index,
                   int64_t *out, fw_error_t *error)
{
   copies_t c;
   bool ok = sequence_copies (store, stream, id, &c, error);
   *out = 0;
   for (size_t i = 0; ok && i < c.n; i++) {
      bson_iter_t it;
      *out += bson_iter_init_find (&it, c.v[i], "sequenceIndex") && BSON_ITER_HOLDS_NUMBER (&it) &&
              bson_iter_as_int64 (&it) < index;
   }
   copies_free (&c);
   return ok;
}

static bool
memory_seq_waiting (fw_dlq_store_t *store, const char *stream, fw_dlq_entry_fn visit, void *ud,
                    fw_error_t *error)
{
   fw_dlq_filter_t f = {0};
   fw_dlq_query_t q = {0};
   copies_t c;
   size_t n = 0;
   bool ok;

   f.stream = stream;
   q.filter = &f;
   q.default_status = "PENDING,REPROCESSING";
   q.with_documents = true;
   ok = select_copies ((fw_memory_store_t *) store, &q, &c, error);
   for (size_t i = 0; ok && i < c.n; i++) {
      if (utf8_field (c.v[i], "sequenceId") && utf8_field (c.v[i], "streamName")) {
         c.v[n++] = c.v[i];
      } else {
         bson_destroy (c.v[i]);
      }
   }
   c.n = ok ? n : c.n;
   if (ok && n > 1) {
      qsort (c.v, n, sizeof *c.v, by_sequence);
   }
   for (size_t i = 0; ok && i < n;) {
      size_t j = i + 1;
      bson_t group = BSON_INITIALIZER;
      while (j < n &&
             strcmp (utf8_field (c.v[i], "streamName"), utf8_field (c.v[j], "streamName")) == 0 &&
             strcmp (utf8_field (c.v[i], "sequenceId"), utf8_field (c.v[j], "sequenceId")) == 0) {
         j++;
      }
      waiting_group (c.v, i, j, &group);
      ok = visit (&group, ud, error);
      bson_destroy (&group);
      i = j;
   }
   copies_free (&c);
   return ok;
}

void
fw_dlq__memory_methods (fw_dlq_store_t *s)
{
   s->pending = memory_pending;
   s->query = memory_query;
   s->claimable = memory_claimable;
   s->tally = memory_tally;
   s->discard = memory_discard;
   s->purge = memory_purge;
   s->seq_list = memory_seq_list;
   s->seq_waiting = memory_seq_waiting;
   s->seq_entries = memory_seq_entries;
   s->seq_before = memory_seq_before;
   fw_dlq__memory_claim_methods (s);
}
