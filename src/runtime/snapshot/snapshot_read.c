/*
 * snapshot_read.c - reading a snapshot's chunk (snapshot-private.h,
 * fw_snapshot_cursor_read): its filter (after the boundary, by MongoDB's
 * order of _id types), its low and high watermarks on one causally
 * consistent session, its find, and the largest _id the snapshot stops at;
 * and its rows' keys, which live events drop.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/snapshot/snapshot-private.h"

static uint64_t
fnv (const uint8_t *data, size_t len)
{
   uint64_t h = 1469598103934665603ULL;
   for (size_t i = 0; i < len; i++) {
      h = (h ^ data[i]) * 1099511628211ULL;
   }
   return h;
}

bool
fw_snapshot_key_of (bson_iter_t *it, bson_t *key, uint64_t *hash)
{
   bson_init (key);
   if (!bson_append_iter (key, "_id", 3, it)) {
      bson_destroy (key);
      return false;
   }
   *hash = fnv (bson_get_data (key), key->len);
   return true;
}

void
fw_snapshot_chunk_clear (chunk_t *c)
{
   free (c->rows);
   free (c->data);
   memset (c, 0, sizeof *c);
}

void
fw_snapshot_row_doc (const chunk_t *c, int i, bson_t *view)
{
   const row_t *r = &c->rows[i];

   (void) bson_init_static (view, c->data + r->off, r->len); /* checked when stored */
}

void
fw_snapshot_row_key (const chunk_t *c, int i, bson_t *view)
{
   const row_t *r = &c->rows[i];

   (void) bson_init_static (view, c->data + r->off + r->len, r->key_len);
}

void
fw_snapshot_drop_rows (fw_snapshot_t *s, chunk_t *ch, uint64_t ts, const uint8_t *key, uint32_t len,
                       uint64_t hash)
{
   if (ts <= ch->low) {
      return;
   }
   for (int i = ch->next; i < ch->n_rows; i++) {
      row_t *r = &ch->rows[i];
      if (!r->dropped && r->hash == hash && r->key_len == len &&
          memcmp (ch->data + r->off + r->len, key, len) == 0) {
         r->dropped = true;
         s->dropped++;
      }
   }
}

/* MongoDB orders values of different types by their canonical type
 * (bsontypes.cpp, canonicalizeBSONType), and $gt compares within one: the
 * types ordered after a boundary of type t are added with $type so that a
 * collection whose _ids mix types is read whole. */
static int
canonical (bson_type_t t)
{
   switch (t) {
   case BSON_TYPE_MINKEY:
      return 0;
   case BSON_TYPE_UNDEFINED:
      return 1;
   case BSON_TYPE_NULL:
      return 2;
   case BSON_TYPE_DOUBLE:
   case BSON_TYPE_INT32:
   case BSON_TYPE_INT64:
   case BSON_TYPE_DECIMAL128:
      return 3;
   case BSON_TYPE_UTF8:
   case BSON_TYPE_SYMBOL:
      return 4;
   case BSON_TYPE_DOCUMENT:
      return 5;
   case BSON_TYPE_ARRAY:
      return 6;
   case BSON_TYPE_BINARY:
      return 7;
   case BSON_TYPE_OID:
      return 8;
   case BSON_TYPE_BOOL:
      return 9;
   case BSON_TYPE_DATE_TIME:
      return 10;
   case BSON_TYPE_TIMESTAMP:
      return 11;
   case BSON_TYPE_REGEX:
      return 12;
   case BSON_TYPE_DBPOINTER:
      return 13;
   case BSON_TYPE_CODE:
      return 14;
   case BSON_TYPE_CODEWSCOPE:
      return 15;
   default:
      return 16; /* MaxKey */
   }
}

static const struct {
   const char *alias;
   int rank;
} type_aliases[] = {
   {"undefined", 1},  {"null", 2},        {"number", 3},
   {"string", 4},     {"symbol", 4},      {"object", 5},
   {"binData", 7},    {"objectId", 8},    {"bool", 9},
   {"date", 10},      {"timestamp", 11},  {"regex", 12},
   {"dbPointer", 13}, {"javascript", 14}, {"javascriptWithScope", 15},
   {"maxKey", 16},
};

/* The types MongoDB orders after a value of type t, as $type aliases, into
 * the array types; false when none is (or out of memory). */
static bool
later_types (bson_type_t t, int last_rank, bson_t *types)
{
   int rank = canonical (t), k = 0;
   char key[16];
   const char *kp;

   for (size_t i = 0; i < sizeof type_aliases / sizeof type_aliases[0]; i++) {
      if (type_aliases[i].rank > rank && type_aliases[i].rank <= last_rank) {
         bson_uint32_to_string ((uint32_t) k++, &kp, key, sizeof key);
         if (!BSON_APPEND_UTF8 (types, kp, type_aliases[i].alias)) {
            return false;
         }
      }
   }
   return k > 0;
}

/* Whether the value at it is a NaN (double or Decimal128). */
static bool
is_nan (const bson_iter_t *it)
{
   char text[BSON_DECIMAL128_STRING];
   bson_decimal128_t d;

   if (BSON_ITER_HOLDS_DOUBLE (it)) {
      return isnan (bson_iter_double (it));
   }
   if (BSON_ITER_HOLDS_DECIMAL128 (it) && bson_iter_decimal128 (it, &d)) {
      bson_decimal128_to_string (&d, text);
      return strcmp (text, "NaN") == 0;
   }
   return false;
}

/* Appends the lower bound of the chunk after the boundary at it to id:
 * {$gt: boundary}, but after a NaN {$gte: -Infinity}. MongoDB sorts NaN
 * before every other number, and {$gt: NaN} matches nothing (NaN compares
 * false to every number but NaN: src/mongo/db/matcher/expression_leaf.cpp,
 * ComparisonMatchExpression::matchesSingleElement), so the numbers after a
 * NaN boundary would all be skipped. The unique _id index holds at most one
 * NaN (a double and a Decimal128 NaN are equal keys). */
static bool
append_after (bson_t *id, bson_iter_t *it)
{
   if (is_nan (it)) {
      return BSON_APPEND_DOUBLE (id, "$gte", -INFINITY);
   }
   return bson_append_iter (id, "$gt", 3, it);
}

/* A unit of a stream with partitions = N reads only the documents whose _id
 * hashes to it, the same hash its change stream's $match takes of
 * documentKey._id (config/partitions.lua): {$expr: {$eq: [{$abs: {$mod:
 * [{$toHashedIndexKey: "$_id"}, N]}}, k]}}. */
static bool
append_partition (bson_t *and, const char *key, int k, int n)
{
   bson_t *clause = BCON_NEW ("$expr", "{", "$eq", "[", "{", "$abs", "{", "$mod", "[", "{",
                              "$toHashedIndexKey", BCON_UTF8 ("$_id"), "}", BCON_INT32 (n), "]",
                              "}", "}", BCON_INT32 (k), "]", "}");
   bool ok = clause && BSON_APPEND_DOCUMENT (and, key, clause);

   if (clause) {
      bson_destroy (clause);
   }
   return ok;
}

/* The chunk's filter: _id after the boundary, with $gt (an index range
 * scan, within the boundary's type), or after a read found nothing more of
 * that type (cur->jump), the types ordered after it; and the snapshot's own
 * filter. False when no type is left (*none) or out of memory. */
static bool
chunk_filter (const fw_snapshot_t *s, const fw_snapshot_cursor_t *cur, bson_t *out, bool *none)
{
   bson_t and, c, id, types;
   bson_iter_t it, until;
   int n = 0, last_rank = 16;
   char key[16];
   const char *kp;
   bool ok = BSON_APPEND_ARRAY_BEGIN (out, "$and", &and);

   *none = false;
   if (cur->has_until && bson_iter_init_find (&until, &cur->until, "_id")) {
      last_rank = canonical (bson_iter_type (&until));
   }
   if (ok && bson_iter_init_find (&it, &cur->read_after, "_id")) {
      int rank = canonical (bson_iter_type (&it));
      if (rank > last_rank || (cur->jump && rank == last_rank)) {
         *none = true; /* past the largest _id the snapshot began with */
         return false;
      }
      bson_uint32_to_string ((uint32_t) n++, &kp, key, sizeof key);
      ok = BSON_APPEND_DOCUMENT_BEGIN (&and, kp, &c) && BSON_APPEND_DOCUMENT_BEGIN (&c, "_id", &id);
      if (ok && !cur->jump) {
         ok = append_after (&id, &it) &&
              (rank != last_rank || !cur->has_until || bson_append_iter (&id, "$lte", 4, &until));
      } else if (ok) {
         ok = BSON_APPEND_ARRAY_BEGIN (&id, "$type", &types);
         if (ok && !later_types (bson_iter_type (&it), last_rank, &types)) {
            *none = true;
            ok = false;
         }
         ok = ok && bson_append_array_end (&id, &types);
      }
      ok = ok && bson_append_document_end (&c, &id) && bson_append_document_end (&and, &c);
   }
   if (ok && s->progress.has_filter) {
      bson_uint32_to_string ((uint32_t) n++, &kp, key, sizeof key);
      ok = BSON_APPEND_DOCUMENT (&and, kp, &s->progress.filter);
   }
   if (ok && s->cfg.partitions > 1) {
      bson_uint32_to_string ((uint32_t) n++, &kp, key, sizeof key);
      ok = append_partition (&and, kp, s->cfg.partition, s->cfg.partitions);
   }
   if (ok && n == 0) {
      ok = BSON_APPEND_DOCUMENT_BEGIN (&and, "0", &c) && bson_append_document_end (&and, &c);
   }
   return ok && bson_append_array_end (out, &and);
}

/* Writes a watermark on session cs and returns its operationTime. */
static bool
write_mark (const fw_snapshot_t *s, mongoc_client_t *client, mongoc_client_session_t *cs,
            const char *which, uint64_t *at, fw_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, s->cfg.database,
                                                             FW_SNAPSHOT_MARKS_COLLECTION);
   bson_t *sel = BCON_NEW ("_id", BCON_UTF8 (s->cfg.name));
   bson_t *upd = BCON_NEW ("$inc", "{", "marks", BCON_INT64 (1), "}", "$set", "{", "mark",
                           BCON_UTF8 (which), "at", BCON_DATE_TIME (fw_now_ms ()), "}");
   bson_t opts = BSON_INITIALIZER;
   mongoc_write_concern_t *wc = mongoc_write_concern_new ();
   bson_error_t berr;
   uint32_t t = 0, i = 0;
   bool ok = sel && upd && wc;

   mongoc_write_concern_set_wmajority (wc, 0);
   ok = ok && BSON_APPEND_BOOL (&opts, "upsert", true) && mongoc_write_concern_append (wc, &opts) &&
        mongoc_client_session_append (cs, &opts, &berr);
   if (ok && !mongoc_collection_update_one (coll, sel, upd, &opts, NULL, &berr)) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot write the snapshot's %s watermark into %s.%s: %s", which,
                         s->cfg.database, FW_SNAPSHOT_MARKS_COLLECTION, berr.message);
      ok = false;
   } else if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory writing the snapshot's watermark");
   }
   if (ok) {
      mongoc_client_session_get_operation_time (cs, &t, &i);
      *at = (uint64_t) t << 32 | i;
      if (*at == 0) {
         fw_error_set (error, FW_ERROR_MONGO,
                       "the server gave the snapshot's %s watermark no "
                       "operationTime (a replica set or sharded cluster is needed)",
                       which);
         ok = false;
      }
   }
   mongoc_write_concern_destroy (wc);
   bson_destroy (&opts);
   bson_destroy (sel);
   bson_destroy (upd);
   mongoc_collection_destroy (coll);
   return ok;
}

/* n zeroed rows. */
static row_t *
rows_new (int64_t n)
{
   return n > 0 && (uint64_t) n <= SIZE_MAX / sizeof (row_t) ? calloc ((size_t) n, sizeof (row_t))
                                                             : NULL;
}

/* Appends the document doc and its key (the _id at it) to ch as its next
 * row (ch->rows has room): both copied into ch's data, which grows by
 * doubling. False when out of memory (ch unchanged). */
static bool
add_row (chunk_t *ch, const bson_t *doc, bson_iter_t *it)
{
   row_t *r = &ch->rows[ch->n_rows];
   bson_t key;
   uint64_t hash;
   size_t need;
   bool ok;

   if (!fw_snapshot_key_of (it, &key, &hash)) {
      return false;
   }
   need = (size_t) doc->len + key.len;
   ok = need <= SIZE_MAX - ch->data_len;
   if (ok && ch->data_len + need > ch->data_cap) {
      size_t cap = ch->data_cap ? ch->data_cap : 65536;
      uint8_t *data = NULL;
      while (cap < ch->data_len + need && cap <= SIZE_MAX / 2) {
         cap *= 2;
      }
      ok = cap >= ch->data_len + need && (data = realloc (ch->data, cap));
      if (ok) {
         ch->data = data;
         ch->data_cap = cap;
      }
   }
   if (ok) {
      r->off = ch->data_len;
      r->len = doc->len;
      r->key_len = key.len;
      r->hash = hash;
      r->dropped = false;
      memcpy (ch->data + r->off, bson_get_data (doc), doc->len);
      memcpy (ch->data + r->off + r->len, bson_get_data (&key), key.len);
      ch->data_len += need;
      ch->n_rows++;
   }
   bson_destroy (&key);
   return ok;
}

/* The chunk's filter into filter (initialized): false when out of memory;
 * *none when no type is left after the boundary's (an empty chunk). */
static bool
chunk_query (const fw_snapshot_t *s, const fw_snapshot_cursor_t *cur, bson_t *filter, bool *none,
             fw_error_t *error)
{
   if (!chunk_filter (s, cur, filter, none) && !*none) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading the snapshot's chunk");
      return false;
   }
   return true;
}

/* The chunk's find (filter NULL: none, an empty chunk) on session cs into
 * ch. Reads only s's settings: runs on a thread of its own too. */
static bool
find_chunk (const fw_snapshot_t *s, mongoc_client_t *client, mongoc_client_session_t *cs,
            const bson_t *filter, chunk_t *ch, fw_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, s->cfg.database,
                                                             s->cfg.collection);
   /* batchSize: the whole chunk in the find's reply (up to 16 MiB), not 101
    * documents and a getMore for the rest: one round trip less per chunk. */
   bson_t *opts = BCON_NEW ("sort", "{", "_id", BCON_INT32 (1), "}", "limit",
                            BCON_INT64 (s->cfg.chunk_size), "batchSize",
                            BCON_INT64 (s->cfg.chunk_size));
   mongoc_read_prefs_t *rp = mongoc_read_prefs_new ((mongoc_read_mode_t) s->cfg.read_mode);
   mongoc_cursor_t *cur = NULL;
   const bson_t *doc;
   bson_error_t berr;
   bool ok = opts && rp && mongoc_client_session_append (cs, opts, &berr) &&
             (ch->rows = rows_new (s->cfg.chunk_size));

   if (!filter) {
      ok = true; /* no type after the boundary's: an empty chunk */
   } else if (!ok) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading the snapshot's chunk");
   } else {
      cur = mongoc_collection_find_with_opts (coll, filter, opts, rp);
      while (ok && ch->n_rows < s->cfg.chunk_size && mongoc_cursor_next (cur, &doc)) {
         bson_iter_t it;
         if (!bson_iter_init_find (&it, doc, "_id")) {
            continue; /* every document has an _id */
         }
         if (!add_row (ch, doc, &it)) {
            fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading the snapshot's chunk");
            ok = false;
         }
      }
      if (ok && mongoc_cursor_error (cur, &berr)) {
         fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                            "cannot read the snapshot's chunk of %s.%s: %s", s->cfg.database,
                            s->cfg.collection, berr.message);
         ok = false;
      }
      if (ok && ch->data_cap - ch->data_len > 65536) {
         /* The data grew by doubling: up to 16 chunks are held. */
         uint8_t *data = realloc (ch->data, ch->data_len);
         if (data) {
            ch->data = data;
            ch->data_cap = ch->data_len;
         }
      }
   }
   mongoc_cursor_destroy (cur);
   mongoc_read_prefs_destroy (rp);
   bson_destroy (opts);
   mongoc_collection_destroy (coll);
   return ok;
}

/* The largest _id (of the documents matching the filter) when the
 * snapshot begins: the chunks stop there. Read on session cs after its low
 * watermark, as the chunks are: a causally consistent read waits until the
 * member it goes to has applied the watermark, so a lagging secondary (with
 * read_preference secondary*) cannot give a stale bound, and the documents
 * inserted before the stream opened but past that bound are read too. False
 * on an error; an empty collection leaves the snapshot exhausted. */
static bool
find_until (const fw_snapshot_t *s, fw_snapshot_cursor_t *c, mongoc_client_t *client,
            fw_error_t *error)
{
   mongoc_collection_t *coll = mongoc_client_get_collection (client, s->cfg.database,
                                                             s->cfg.collection);
   bson_t *opts = BCON_NEW ("sort", "{", "_id", BCON_INT32 (-1), "}", "limit", BCON_INT64 (1),
                            "projection", "{", "_id", BCON_INT32 (1), "}");
   bson_t empty = BSON_INITIALIZER;
   mongoc_read_prefs_t *rp = mongoc_read_prefs_new ((mongoc_read_mode_t) s->cfg.read_mode);
   mongoc_cursor_t *cur = NULL;
   const bson_t *doc;
   bson_error_t berr;
   bson_iter_t it;
   bool ok = opts && rp && mongoc_client_session_append (c->cs, opts, &berr);

   if (ok) {
      cur = mongoc_collection_find_with_opts (
         coll, s->progress.has_filter ? &s->progress.filter : &empty, opts, rp);
      if (mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "_id")) {
         bson_reinit (&c->until);
         c->has_until = bson_append_iter (&c->until, "_id", 3, &it);
      } else if (!mongoc_cursor_error (cur, &berr)) {
         c->ended = true; /* an empty collection */
      }
      if (mongoc_cursor_error (cur, &berr)) {
         fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                            "cannot read the largest _id of %s.%s: %s", s->cfg.database,
                            s->cfg.collection, berr.message);
         ok = false;
      }
   } else {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory starting the snapshot");
   }
   c->needs_until = !ok;
   mongoc_cursor_destroy (cur);
   mongoc_read_prefs_destroy (rp);
   bson_destroy (opts);
   mongoc_collection_destroy (coll);
   return ok;
}

void
fw_snapshot_cursor_init (fw_snapshot_cursor_t *cur, const fw_snapshot_t *s, const bson_t *after)
{
   const fw_snapshot_progress_t *p = &s->progress;

   memset (cur, 0, sizeof *cur);
   bson_init (&cur->read_after);
   bson_init (&cur->until);
   if (!after && p->has_after) {
      after = &p->after;
   }
   if (after) {
      bson_concat (&cur->read_after, after);
   }
   if ((cur->has_until = p->has_until)) {
      bson_concat (&cur->until, &p->until);
   }
   cur->needs_until = !p->has_until && !p->has_after;
}

void
fw_snapshot_cursor_end (fw_snapshot_cursor_t *cur)
{
   if (cur->cs) {
      mongoc_client_session_destroy (cur->cs);
      cur->cs = NULL;
   }
   cur->last_high = 0;
}

void
fw_snapshot_cursor_cleanup (fw_snapshot_cursor_t *cur)
{
   fw_snapshot_cursor_end (cur);
   bson_destroy (&cur->read_after);
   bson_destroy (&cur->until);
}

/* The session of the run of reads (started with the run) and the chunk's
 * low watermark: the last read's high one when a read of the run came
 * before, else a new mark. */
static bool
open_window (const fw_snapshot_t *s, fw_snapshot_cursor_t *cur, mongoc_client_t *client,
             chunk_t *ch, fw_error_t *error)
{
   bson_error_t berr;

   if (cur->cs && cur->last_high) {
      ch->low = cur->last_high;
      return true;
   }
   if (!cur->cs && !(cur->cs = mongoc_client_start_session (client, NULL, &berr))) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot start a session for the snapshot: %s", berr.message);
      return false;
   }
   return write_mark (s, client, cur->cs, "low", &ch->low, error);
}

/* After a read between its watermarks: cur moves past ch's rows, or, when
 * it found none, to the types of _id after the boundary's, or ends. */
static void
advance (fw_snapshot_cursor_t *cur, chunk_t *ch)
{
   bson_iter_t it;
   bson_t last;

   cur->last_high = ch->n_rows > 0 ? ch->high : ch->low; /* the next read's low */
   if (ch->n_rows == 0 && !cur->jump && cur->read_after.len > 5) {
      cur->jump = true; /* nothing more of the boundary's type: the types after it next */
      return;
   }
   cur->jump = false;
   if (ch->n_rows == 0) {
      cur->ended = true;
      fw_snapshot_cursor_end (cur);
      return;
   }
   fw_snapshot_row_key (ch, ch->n_rows - 1, &last);
   if (bson_iter_init (&it, &last) && bson_iter_next (&it)) {
      bson_reinit (&cur->read_after);
      bson_append_iter (&cur->read_after, "_id", 3, &it);
   }
}

/* The find and the high watermark of ch, whose low one is written. */
static bool
read_window (const fw_snapshot_t *s, fw_snapshot_cursor_t *cur, mongoc_client_t *client,
             chunk_t *ch, fw_error_t *error)
{
   bson_t filter = BSON_INITIALIZER;
   bool none = false;
   bool ok = chunk_query (s, cur, &filter, &none, error) &&
             find_chunk (s, client, cur->cs, none ? NULL : &filter, ch, error);

   bson_destroy (&filter);
   /* A chunk without a row needs no window: nothing of it is handed out. */
   return ok && (ch->n_rows == 0 || write_mark (s, client, cur->cs, "high", &ch->high, error));
}

bool
fw_snapshot_cursor_read (const fw_snapshot_t *s, fw_snapshot_cursor_t *cur, mongoc_client_t *client,
                         chunk_t *ch, fw_error_t *error)
{
   /* One causally consistent session: the reads are at or after the low
    * watermark on whichever member they go to, and the high watermark is
    * written after them. Within a run of reads a chunk's high watermark is
    * the next chunk's low one: that read is on the same session, after it,
    * so the window still brackets the read (one write less a chunk). */
   bool ok = open_window (s, cur, client, ch, error);

   /* The first read also finds the upper bound, on the session after the
    * low watermark, as the chunks are read. */
   if (ok && cur->needs_until && (ok = find_until (s, cur, client, error)) && cur->ended) {
      fw_snapshot_cursor_end (cur);
      return true; /* nothing to read */
   }
   if (!ok || !read_window (s, cur, client, ch, error)) {
      fw_snapshot_cursor_end (cur);
      fw_snapshot_chunk_clear (ch);
      return false;
   }
   advance (cur, ch);
   if (ch->n_rows == 0) {
      fw_snapshot_chunk_clear (ch);
   }
   return true;
}

void
fw_snapshot_bound_found (fw_snapshot_t *s, const fw_snapshot_cursor_t *cur)
{
   if (cur->has_until && !s->progress.has_until) {
      bson_reinit (&s->progress.until);
      s->progress.has_until = bson_concat (&s->progress.until, &cur->until);
   }
}

void
fw_snapshot_queue (fw_snapshot_t *s, chunk_t *ch)
{
   s->read += ch->n_rows;
   s->chunks++;
   s->chunk[s->n_chunks++] = *ch;
   memset (ch, 0, sizeof *ch);
}
