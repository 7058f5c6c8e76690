/*
 * snapshot_read.c - reading a snapshot's chunk (snapshot.h,
 * fw_snapshot_read_chunk): its filter (after the boundary, by MongoDB's
 * order of _id types), its low and high watermarks on one causally
 * consistent session, its find, and the largest _id the snapshot stops at.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/snapshot/snapshot-private.h"

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
 * that type (s->jump), the types ordered after it; and the snapshot's own
 * filter. False when no type is left (*none) or out of memory. */
static bool
chunk_filter (const fw_snapshot_t *s, bson_t *out, bool *none)
{
   bson_t and, c, id, types;
   bson_iter_t it, until;
   int n = 0, last_rank = 16;
   char key[16];
   const char *kp;
   bool ok = BSON_APPEND_ARRAY_BEGIN (out, "$and", &and);

   *none = false;
   if (s->progress.has_until && bson_iter_init_find (&until, &s->progress.until, "_id")) {
      last_rank = canonical (bson_iter_type (&until));
   }
   if (ok && bson_iter_init_find (&it, &s->read_after, "_id")) {
      int rank = canonical (bson_iter_type (&it));
      if (rank > last_rank || (s->jump && rank == last_rank)) {
         *none = true; /* past the largest _id the snapshot began with */
         return false;
      }
      bson_uint32_to_string ((uint32_t) n++, &kp, key, sizeof key);
      ok = BSON_APPEND_DOCUMENT_BEGIN (&and, kp, &c) && BSON_APPEND_DOCUMENT_BEGIN (&c, "_id", &id);
      if (ok && !s->jump) {
         ok = append_after (&id, &it) && (rank != last_rank || !s->progress.has_until ||
                                          bson_append_iter (&id, "$lte", 4, &until));
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
write_mark (fw_snapshot_t *s, mongoc_client_t *client, mongoc_client_session_t *cs,
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

/* n zeroed rows. A row holds a bson_t, which libbson aligns to 128 bytes:
 * calloc's alignment is not enough (a small chunk's rows were misaligned). */
static row_t *
rows_new (int64_t n)
{
   size_t size = (size_t) n * sizeof (row_t);
   row_t *rows = n > 0 && (size_t) n <= SIZE_MAX / sizeof (row_t)
                    ? aligned_alloc (_Alignof(row_t), size)
                    : NULL;

   if (rows) {
      memset (rows, 0, size);
   }
   return rows;
}

/* The chunk's filter into filter (initialized): false when out of memory;
 * *none when no type is left after the boundary's (an empty chunk). */
static bool
chunk_query (const fw_snapshot_t *s, bson_t *filter, bool *none, fw_error_t *error)
{
   if (!chunk_filter (s, filter, none) && !*none) {
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
         row_t *r = &ch->rows[ch->n_rows];
         bson_iter_t it;
         if (!bson_iter_init_find (&it, doc, "_id") ||
             !fw_snapshot_key_of (&it, &r->key, &r->hash)) {
            continue; /* every document has an _id */
         }
         if (!(r->doc = bson_copy (doc))) {
            bson_destroy (&r->key);
            fw_error_set (error, FW_ERROR_NOMEM, "out of memory reading the snapshot's chunk");
            ok = false;
            break;
         }
         ch->n_rows++;
      }
      if (ok && mongoc_cursor_error (cur, &berr)) {
         fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                            "cannot read the snapshot's chunk of %s.%s: %s", s->cfg.database,
                            s->cfg.collection, berr.message);
         ok = false;
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
find_until (fw_snapshot_t *s, mongoc_client_t *client, mongoc_client_session_t *cs,
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
   bool ok = opts && rp && mongoc_client_session_append (cs, opts, &berr);

   if (ok) {
      cur = mongoc_collection_find_with_opts (
         coll, s->progress.has_filter ? &s->progress.filter : &empty, opts, rp);
      if (mongoc_cursor_next (cur, &doc) && bson_iter_init_find (&it, doc, "_id")) {
         bson_reinit (&s->progress.until);
         s->progress.has_until = bson_append_iter (&s->progress.until, "_id", 3, &it);
      } else if (!mongoc_cursor_error (cur, &berr)) {
         s->exhausted = true;
         s->progress.done = fw_snapshot_finished (s);
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
   mongoc_cursor_destroy (cur);
   mongoc_read_prefs_destroy (rp);
   bson_destroy (opts);
   mongoc_collection_destroy (coll);
   return ok;
}

/* The session of the run of reads (started with the run) and the chunk's
 * low watermark: the last read's high one when a read of the run came
 * before, else a new mark. */
static bool
open_window (fw_snapshot_t *s, mongoc_client_t *client, chunk_t *ch, fw_error_t *error)
{
   bson_error_t berr;

   if (s->cs && s->last_high) {
      ch->low = s->last_high;
      return true;
   }
   if (!s->cs && !(s->cs = mongoc_client_start_session (client, NULL, &berr))) {
      fw_error_set_code (error, FW_ERROR_MONGO, (int) berr.code,
                         "cannot start a session for the snapshot: %s", berr.message);
      return false;
   }
   return write_mark (s, client, s->cs, "low", &ch->low, error);
}

/* A chunk read between its watermarks: queued, or an empty one ends its
 * type of _id or the reads. */
static void
take_chunk (fw_snapshot_t *s, chunk_t *ch)
{
   bson_iter_t it;

   s->last_high = ch->n_rows > 0 ? ch->high : ch->low; /* the next read's low */
   s->read += ch->n_rows;
   if (ch->n_rows == 0 && !s->jump && s->read_after.len > 5) {
      s->jump = true; /* nothing more of the boundary's type: the types after it next */
      fw_snapshot_chunk_clear (ch);
      return;
   }
   s->jump = false;
   if (ch->n_rows == 0) {
      s->exhausted = true;
      s->progress.done = fw_snapshot_finished (s);
      fw_snapshot_end_reads (s);
      fw_snapshot_chunk_clear (ch);
      return;
   }
   s->chunks++;
   if (bson_iter_init (&it, &ch->rows[ch->n_rows - 1].key) && bson_iter_next (&it)) {
      bson_reinit (&s->read_after);
      bson_append_iter (&s->read_after, "_id", 3, &it);
   }
   s->chunk[s->n_chunks++] = *ch;
}

bool
fw_snapshot_read_chunk (fw_snapshot_t *s, mongoc_client_t *client, fw_error_t *error)
{
   chunk_t ch = {0};
   bson_t filter = BSON_INITIALIZER;
   bool ok, none = false;

   if (!fw_snapshot_wants_chunk (s)) {
      return true;
   }
   /* One causally consistent session: the reads (the first chunk's upper
    * bound too) are at or after the low watermark on whichever member they
    * go to, and the high watermark is written after them. Within a run of
    * reads (no live event handled between them) a chunk's high watermark is
    * the next chunk's low one: that read is on the same session, after it,
    * so the window still brackets the read (one write less a chunk). */
   ok = open_window (s, client, &ch, error);
   if (ok && !s->progress.has_until && !s->progress.has_after) {
      ok = find_until (s, client, s->cs, error);
      if (ok && s->exhausted) {
         fw_snapshot_end_reads (s);
         bson_destroy (&filter);
         return true; /* nothing to read */
      }
   }
   ok = ok && chunk_query (s, &filter, &none, error) &&
        find_chunk (s, client, s->cs, none ? NULL : &filter, &ch, error);
   bson_destroy (&filter);
   /* A chunk without a row needs no window: nothing of it is handed out. */
   ok = ok && (ch.n_rows == 0 || write_mark (s, client, s->cs, "high", &ch.high, error));
   if (!ok) {
      fw_snapshot_end_reads (s);
      fw_snapshot_chunk_clear (&ch);
      return false;
   }
   take_chunk (s, &ch);
   return true;
}
