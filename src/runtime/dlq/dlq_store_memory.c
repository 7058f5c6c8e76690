/*
 * dlq_store_memory.c - seed 004's in-memory DLQ store (dlq = { store =
 * "memory" }, and flowwarden.testing's): the entries stay in the process.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dlq/dlq_entry.h"
#include "runtime/dlq/dlq_store_memory-private.h"

typedef fw_memory_seq_t memory_seq_t;
typedef fw_memory_store_t memory_store_t;

static bool memory_save (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error);

static memory_store_t *
as_memory (fw_dlq_store_t *store)
{
   return store && store->save == memory_save ? (memory_store_t *) store : NULL;
}

static bool
same_value (const bson_t *a, const bson_t *b, const char *key)
{
   bson_iter_t ia, ib;
   return bson_iter_init_find (&ia, a, key) && bson_iter_init_find (&ib, b, key) &&
          bson_iter_type (&ia) == bson_iter_type (&ib) &&
          bson_iter_value (&ia)->value_type == BSON_TYPE_UTF8 &&
          strcmp (bson_iter_utf8 (&ia, NULL), bson_iter_utf8 (&ib, NULL)) == 0;
}

/* The index of the entry with doc's value of key (a string), or -1. */
static long
find_index (memory_store_t *m, const bson_t *doc, const char *key, const char *key2)
{
   for (size_t i = 0; i < m->n; i++) {
      if (same_value (m->entries[i], doc, key) &&
          (!key2 || same_value (m->entries[i], doc, key2))) {
         return (long) i;
      }
   }
   return -1;
}

static bool
append_entry (memory_store_t *m, bson_t *doc)
{
   if (m->n == m->cap) {
      size_t cap = m->cap ? m->cap * 2 : 16;
      bson_t **grown = realloc (m->entries, cap * sizeof *grown);
      if (!grown) {
         return false;
      }
      m->entries = grown;
      m->cap = cap;
   }
   m->entries[m->n++] = doc;
   return true;
}

/* The history of old followed by the items of new, the last
 * FW_DLQ_HISTORY_MAX kept, as the MongoDB store's $push with $slice. */
static void
append_history (bson_t *out, const bson_t *old, const bson_t *new_entry)
{
   const bson_t *sources[2] = {old, new_entry};
   bson_iter_t it, item;
   bson_t arr;
   uint32_t total = 0, skip, k = 0;

   for (int s = 0; s < 2; s++) {
      if (bson_iter_init_find (&it, sources[s], "history") && BSON_ITER_HOLDS_ARRAY (&it) &&
          bson_iter_recurse (&it, &item)) {
         while (bson_iter_next (&item)) {
            total++;
         }
      }
   }
   skip = total > FW_DLQ_HISTORY_MAX ? total - FW_DLQ_HISTORY_MAX : 0;
   BSON_APPEND_ARRAY_BEGIN (out, "history", &arr);
   for (int s = 0; s < 2; s++) {
      if (bson_iter_init_find (&it, sources[s], "history") && BSON_ITER_HOLDS_ARRAY (&it) &&
          bson_iter_recurse (&it, &item)) {
         while (bson_iter_next (&item)) {
            char key[16];
            const char *kk;
            if (skip > 0) {
               skip--;
               continue;
            }
            bson_uint32_to_string (k++, &kk, key, sizeof key);
            bson_append_iter (&arr, kk, -1, &item);
         }
      }
   }
   bson_append_array_end (out, &arr);
}

/* The entry of an event dead-lettered again: attempts added, lastAttemptAt,
 * error, lastTouched and status replaced, history appended; every other field
 * keeps its first value (the MongoDB store's upsert). */
static bson_t *
updated (const bson_t *old, const bson_t *new_entry)
{
   static const char *const replaced[] = {"lastAttemptAt", "error", "lastTouched", "status"};
   bson_t *out = bson_new ();
   bson_iter_t it, nv;

   bson_iter_init (&it, old);
   while (bson_iter_next (&it)) {
      const char *key = bson_iter_key (&it);
      bool done = false;
      for (size_t i = 0; i < sizeof replaced / sizeof *replaced; i++) {
         if (strcmp (key, replaced[i]) == 0 && bson_iter_init_find (&nv, new_entry, key)) {
            bson_append_iter (out, key, -1, &nv);
            done = true;
         }
      }
      if (done) {
         continue;
      }
      if (strcmp (key, "attempts") == 0 && bson_iter_init_find (&nv, new_entry, "attempts")) {
         BSON_APPEND_INT32 (out, "attempts",
                            (int32_t) (bson_iter_as_int64 (&it) + bson_iter_as_int64 (&nv)));
      } else if (strcmp (key, "history") == 0) {
         append_history (out, old, new_entry);
      } else {
         bson_append_iter (out, key, -1, &it);
      }
   }
   return out;
}

static void
set_last (memory_store_t *m, const bson_t *doc)
{
   bson_destroy (m->last);
   m->last = bson_copy (doc);
}

static bool
memory_save (fw_dlq_store_t *store, const bson_t *entry, fw_error_t *error)
{
   memory_store_t *m = (memory_store_t *) store;
   bool ok = true;
   long i;

   pthread_mutex_lock (&m->mu);
   if (find_index (m, entry, "_id", NULL) >= 0) {
      /* A retried save of an entry already stored. */
   } else if (fw_dlq__utf8_field (entry, "eventId") &&
              (i = find_index (m, entry, "streamName", "eventId")) >= 0) {
      bson_t *doc = updated (m->entries[i], entry);
      bson_destroy (m->entries[i]);
      m->entries[i] = doc;
      set_last (m, doc);
   } else {
      bson_t *doc = bson_copy (entry);
      ok = doc && append_entry (m, doc);
      if (ok) {
         set_last (m, doc);
      } else {
         bson_destroy (doc);
         fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      }
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_find_by_id (fw_dlq_store_t *store, const char *id, bson_t *out, bool *found,
                   fw_error_t *error)
{
   memory_store_t *m = (memory_store_t *) store;
   (void) error;

   bson_init (out);
   *found = false;
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n && !*found; i++) {
      const char *eid = fw_dlq__utf8_field (m->entries[i], "_id");
      if (eid && strcmp (eid, id) == 0) {
         bson_concat (out, m->entries[i]);
         *found = true;
      }
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static bool
memory_find_by_stream (fw_dlq_store_t *store, const char *stream, bson_t *out, fw_error_t *error)
{
   memory_store_t *m = (memory_store_t *) store;
   uint32_t k = 0;
   (void) error;

   bson_init (out);
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) {
      const char *name = fw_dlq__utf8_field (m->entries[i], "streamName");
      if (!stream || (name && strcmp (name, stream) == 0)) {
         char key[16];
         const char *kk;
         bson_uint32_to_string (k++, &kk, key, sizeof key);
         BSON_APPEND_DOCUMENT (out, kk, m->entries[i]);
      }
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static bool
memory_count (fw_dlq_store_t *store, const char *stream, int64_t *out, fw_error_t *error)
{
   memory_store_t *m = (memory_store_t *) store;
   (void) error;

   *out = 0;
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) {
      const char *name = fw_dlq__utf8_field (m->entries[i], "streamName");
      if (!stream || (name && strcmp (name, stream) == 0)) {
         (*out)++;
      }
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static void
memory_destroy (fw_dlq_store_t *store)
{
   memory_store_t *m = (memory_store_t *) store;
   for (size_t i = 0; i < m->n; i++) {
      bson_destroy (m->entries[i]);
   }
   free (m->entries);
   bson_destroy (m->last);
   for (size_t i = 0; i < m->n_seqs; i++) {
      free (m->seqs[i].stream);
      free (m->seqs[i].id);
   }
   free (m->seqs);
   pthread_mutex_destroy (&m->mu);
   free (m);
}

static bool memory_put (fw_dlq_store_t *, const bson_t *, bool *, fw_error_t *);
static bool memory_seq_load (fw_dlq_store_t *, const char *, fw_dlq_sequences_t *, fw_error_t *);
static bool memory_seq_take (fw_dlq_store_t *, const char *, const char *, bool, int64_t *,
                             fw_seq_take_t *, fw_error_t *);
static bool memory_seq_settle (fw_dlq_store_t *, const char *, const char *, fw_error_t *);
static bool memory_seq_read (fw_dlq_store_t *, const char *, const char *, fw_seq_state_t *,
                             fw_error_t *);
static bool memory_seq_close (fw_dlq_store_t *, const char *, const char *, int64_t, bool *,
                              fw_error_t *);
static bool memory_seq_size (fw_dlq_store_t *, const char *, const char *, int64_t *, fw_error_t *);

fw_dlq_store_t *
fw_dlq_store_memory_new (fw_error_t *error)
{
   memory_store_t *m = calloc (1, sizeof *m);

   if (!m) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      return NULL;
   }
   if (pthread_mutex_init (&m->mu, NULL) != 0) {
      fw_error_set (error, FW_ERROR_IO, "in-memory DLQ: cannot set up its lock");
      free (m);
      return NULL;
   }
   m->base.save = memory_save;
   m->base.find_by_id = memory_find_by_id;
   m->base.find_by_stream = memory_find_by_stream;
   m->base.count = memory_count;
   m->base.destroy = memory_destroy;
   m->base.put = memory_put;
   m->base.seq_load = memory_seq_load;
   m->base.seq_take = memory_seq_take;
   m->base.seq_settle = memory_seq_settle;
   m->base.seq_read = memory_seq_read;
   m->base.seq_close = memory_seq_close;
   m->base.seq_size = memory_seq_size;
   fw_dlq__memory_methods (&m->base);
   return &m->base;
}

/* The put method: replaces the entry with entry's _id, or adds it. */
static bool
memory_put (fw_dlq_store_t *store, const bson_t *entry, bool *inserted, fw_error_t *error)
{
   memory_store_t *m = as_memory (store);
   bson_t *doc;
   bool ok = true;
   long i;

   *inserted = false;
   if (!m || !fw_dlq__utf8_field (entry, "_id")) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "in-memory DLQ: the entry has no string _id (or the store is not in memory)");
      return false;
   }
   if (!(doc = bson_copy (entry))) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      return false;
   }
   pthread_mutex_lock (&m->mu);
   if ((i = find_index (m, entry, "_id", NULL)) >= 0) {
      bson_destroy (m->entries[i]);
      m->entries[i] = doc;
   } else if (!append_entry (m, doc)) {
      bson_destroy (doc);
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory");
      ok = false;
   } else {
      *inserted = true;
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

bool
fw_dlq_store_memory_take_last (fw_dlq_store_t *store, bson_t *out)
{
   memory_store_t *m = as_memory (store);
   bool got = false;

   bson_init (out);
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   if (m->last) {
      bson_concat (out, m->last);
      bson_destroy (m->last);
      m->last = NULL;
      got = true;
   }
   pthread_mutex_unlock (&m->mu);
   return got;
}

/* --- the sequences of a sequenced DLQ -------------------------------------------- */

static memory_store_t *
seq_store (fw_dlq_store_t *store, fw_error_t *error)
{
   memory_store_t *m = as_memory (store);
   if (!m) {
      fw_error_set (error, FW_ERROR_INVALID, "in-memory DLQ sequences: the store is not in memory");
   }
   return m;
}

/* The sequence (stream, id), or NULL. Under the lock. */
static memory_seq_t *
find_seq (memory_store_t *m, const char *stream, const char *id)
{
   for (size_t i = 0; i < m->n_seqs; i++) {
      if (strcmp (m->seqs[i].id, id) == 0 && strcmp (m->seqs[i].stream, stream) == 0) {
         return &m->seqs[i];
      }
   }
   return NULL;
}

/* A new closed sequence (stream, id) with next 0, or NULL when memory runs
 * out. Under the lock. */
static memory_seq_t *
add_seq (memory_store_t *m, const char *stream, const char *id)
{
   memory_seq_t *s;
   if (m->n_seqs == m->cap_seqs) {
      size_t cap = m->cap_seqs ? m->cap_seqs * 2 : 8;
      memory_seq_t *grown = realloc (m->seqs, cap * sizeof *grown);
      if (!grown) {
         return NULL;
      }
      m->seqs = grown;
      m->cap_seqs = cap;
   }
   s = &m->seqs[m->n_seqs];
   memset (s, 0, sizeof *s);
   if (!(s->stream = strdup (stream)) || !(s->id = strdup (id))) {
      free (s->stream);
      free (s->id);
      return NULL;
   }
   m->n_seqs++;
   return s;
}

static bool
memory_seq_load (fw_dlq_store_t *store, const char *stream, fw_dlq_sequences_t *into,
                 fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);
   bool ok = true;

   if (!m) {
      return false;
   }
   fw_dlq_sequences_clear (into);
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n_seqs; i++) {
      memory_seq_t *s = &m->seqs[i];
      if (!s->open || strcmp (s->stream, stream) != 0) {
         continue;
      }
      s->inflight = 0; /* the caller is the stream: none of its requests is in flight */
      if (ok && !fw_dlq_sequences_add (into, s->id)) {
         fw_error_set (error, FW_ERROR_NOMEM, "not enough memory for the open sequences");
         ok = false;
      }
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_seq_take (fw_dlq_store_t *store, const char *stream, const char *id, bool open,
                 int64_t *index, fw_seq_take_t *result, fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);
   memory_seq_t *s;
   bool ok = true;

   *result = FW_SEQ_CLOSED;
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   s = find_seq (m, stream, id);
   if (!s && open && !(s = add_seq (m, stream, id))) {
      fw_error_set (error, FW_ERROR_NOMEM, "in-memory DLQ: out of memory opening sequence %.200s",
                    id);
      ok = false;
   }
   if (s && (open || s->open)) {
      s->open = true;
      *index = s->next++;
      s->inflight++;
      *result = FW_SEQ_TAKEN;
   }
   pthread_mutex_unlock (&m->mu);
   return ok;
}

static bool
memory_seq_settle (fw_dlq_store_t *store, const char *stream, const char *id, fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);
   memory_seq_t *s;

   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   if ((s = find_seq (m, stream, id)) && s->inflight > 0) {
      s->inflight--;
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static bool
memory_seq_read (fw_dlq_store_t *store, const char *stream, const char *id, fw_seq_state_t *out,
                 fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);
   memory_seq_t *s;

   memset (out, 0, sizeof *out);
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   if ((s = find_seq (m, stream, id))) {
      out->exists = true;
      out->open = s->open;
      out->next = s->next;
      out->inflight = s->inflight;
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static bool
memory_seq_close (fw_dlq_store_t *store, const char *stream, const char *id, int64_t expected_next,
                  bool *closed, fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);
   memory_seq_t *s;

   *closed = false;
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   if ((s = find_seq (m, stream, id)) && s->open && s->next == expected_next && s->inflight == 0) {
      s->open = false;
      *closed = true;
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

static bool
waiting (const bson_t *entry)
{
   const char *status = fw_dlq__utf8_field (entry, "status");
   return status && (strcmp (status, "PENDING") == 0 || strcmp (status, "REPROCESSING") == 0);
}

static bool
memory_seq_size (fw_dlq_store_t *store, const char *stream, const char *id, int64_t *out,
                 fw_error_t *error)
{
   memory_store_t *m = seq_store (store, error);

   *out = 0;
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n; i++) {
      const char *name = fw_dlq__utf8_field (m->entries[i], "streamName");
      const char *seq = fw_dlq__utf8_field (m->entries[i], "sequenceId");
      if (name && seq && strcmp (seq, id) == 0 && strcmp (name, stream) == 0 &&
          waiting (m->entries[i])) {
         (*out)++;
      }
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}

bool
fw_dlq_store_memory_sequences (fw_dlq_store_t *store, const char *stream, bson_t *out)
{
   memory_store_t *m = as_memory (store);
   uint32_t k = 0;

   bson_init (out);
   if (!m) {
      return false;
   }
   pthread_mutex_lock (&m->mu);
   for (size_t i = 0; i < m->n_seqs; i++) {
      const memory_seq_t *s = &m->seqs[i];
      char key[16];
      const char *kk;
      bson_t doc;
      if (stream && strcmp (s->stream, stream) != 0) {
         continue;
      }
      bson_uint32_to_string (k++, &kk, key, sizeof key);
      BSON_APPEND_DOCUMENT_BEGIN (out, kk, &doc);
      BSON_APPEND_UTF8 (&doc, "streamName", s->stream);
      BSON_APPEND_UTF8 (&doc, "sequenceId", s->id);
      BSON_APPEND_BOOL (&doc, "open", s->open);
      BSON_APPEND_INT64 (&doc, "next", s->next);
      BSON_APPEND_INT64 (&doc, "inflight", s->inflight);
      bson_append_document_end (out, &doc);
   }
   pthread_mutex_unlock (&m->mu);
   return true;
}
