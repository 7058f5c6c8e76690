/*
 * snapshot.c - the incremental snapshot's engine (snapshot.h): one chunk at
 * a time read by _id between a low and a high watermark, its rows dropped by
 * the live events between them, the rest handed out as snapshot events.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/snapshot/snapshot.h"

typedef struct {
   bson_t *doc;   /* the row, owned */
   bson_t key;    /* { "": _id }: compared with a live event's documentKey._id */
   uint64_t hash; /* of key's bytes */
   bool dropped;  /* a live change between the watermarks */
} row_t;

/* One chunk read between its watermarks, waiting for the stream to pass
 * high. */
typedef struct {
   row_t *rows;
   int n_rows;
   int next; /* the next row to hand out */
   uint64_t low, high;
} chunk_t;

/* Chunks read ahead at most: on an idle collection the stream passes a
 * high watermark only with its next post-batch resume token (a getMore waits
 * up to maxAwaitTimeMS, and writes to other collections do not end the wait),
 * so several chunks wait together and are handed out at once. */
#define MAX_CHUNKS 16

struct fw_snapshot {
   struct {
      char *name, *database, *collection;
      int64_t chunk_size;
      int read_mode;
      int partition, partitions;    /* a unit of a partitioned stream: only its keys */
   } cfg;                           /* copied: a reload frees the stream's settings */
   fw_snapshot_progress_t progress; /* after: the last row handed out of a whole chunk */
   bson_t read_after;               /* { _id: the last row read }; empty: from the start */
   chunk_t chunk[MAX_CHUNKS];       /* a queue, oldest first */
   int n_chunks;
   bool jump;       /* a read found no row after read_after of its type: the next
                        * one reads the types MongoDB orders after it */
   bool exhausted;  /* no row is left after read_after */
   uint64_t passed; /* the stream has read everything before this time */
   /* A run of reads (fw_snapshot_end_reads ends it): the session they share
    * and the high watermark of the last one, the next chunk's low. */
   mongoc_client_session_t *cs;
   uint64_t last_high;
   bson_t event; /* the snapshot event handed out last */
   int64_t read, dropped, chunks;
};

void
fw_snapshot_progress_init (fw_snapshot_progress_t *p)
{
   memset (p, 0, sizeof *p);
   bson_init (&p->after);
   bson_init (&p->filter);
   bson_init (&p->until);
}

void
fw_snapshot_progress_cleanup (fw_snapshot_progress_t *p)
{
   if (!p) {
      return;
   }
   bson_destroy (&p->after);
   bson_destroy (&p->filter);
   bson_destroy (&p->until);
   memset (p, 0, sizeof *p);
}

static uint64_t
fnv (const uint8_t *data, size_t len)
{
   uint64_t h = 1469598103934665603ULL;
   for (size_t i = 0; i < len; i++) {
      h = (h ^ data[i]) * 1099511628211ULL;
   }
   return h;
}

fw_snapshot_t *
fw_snapshot_new (const fw_stream_config_t *cfg, const fw_snapshot_progress_t *progress)
{
   fw_snapshot_t *s = calloc (1, sizeof *s);

   if (!s) {
      return NULL;
   }
   s->cfg.name = bson_strdup (cfg->name);
   s->cfg.database = bson_strdup (cfg->database);
   s->cfg.collection = bson_strdup (cfg->collection);
   s->cfg.chunk_size = cfg->snapshot.chunk_size;
   s->cfg.read_mode = cfg->snapshot.read_mode;
   s->cfg.partition = cfg->partition;
   s->cfg.partitions = cfg->partitions;
   fw_snapshot_progress_init (&s->progress);
   bson_init (&s->event);
   bson_init (&s->read_after);
   if (progress) {
      s->progress.documents = progress->documents;
      if ((s->progress.has_after = progress->has_after)) {
         bson_destroy (&s->progress.after);
         bson_copy_to (&progress->after, &s->progress.after);
         bson_destroy (&s->read_after);
         bson_copy_to (&progress->after, &s->read_after);
      }
      if ((s->progress.has_filter = progress->has_filter)) {
         bson_destroy (&s->progress.filter);
         bson_copy_to (&progress->filter, &s->progress.filter);
      }
      if ((s->progress.has_until = progress->has_until)) {
         bson_destroy (&s->progress.until);
         bson_copy_to (&progress->until, &s->progress.until);
      }
   }
   s->progress.present = true;
   return s;
}

static void
chunk_clear (chunk_t *c)
{
   for (int i = 0; i < c->n_rows; i++) {
      bson_destroy (c->rows[i].doc);
      bson_destroy (&c->rows[i].key);
   }
   free (c->rows);
   memset (c, 0, sizeof *c);
}

void
fw_snapshot_end_reads (fw_snapshot_t *s)
{
   if (s->cs) {
      mongoc_client_session_destroy (s->cs);
      s->cs = NULL;
   }
   s->last_high = 0;
}

void
fw_snapshot_discard (fw_snapshot_t *s)
{
   fw_snapshot_end_reads (s);
   for (int i = 0; i < s->n_chunks; i++) {
      chunk_clear (&s->chunk[i]);
   }
   s->n_chunks = 0;
   s->exhausted = false;
   s->jump = false;
   bson_reinit (&s->read_after);
   if (s->progress.has_after) {
      bson_concat (&s->read_after, &s->progress.after);
   }
}

void
fw_snapshot_destroy (fw_snapshot_t *s)
{
   if (!s) {
      return;
   }
   fw_snapshot_discard (s);
   bson_destroy (&s->event);
   bson_destroy (&s->read_after);
   fw_snapshot_progress_cleanup (&s->progress);
   bson_free (s->cfg.name);
   bson_free (s->cfg.database);
   bson_free (s->cfg.collection);
   free (s);
}

bool
fw_snapshot_chunk_open (const fw_snapshot_t *s)
{
   return s->n_chunks > 0;
}

bool
fw_snapshot_wants_chunk (const fw_snapshot_t *s)
{
   return !s->exhausted && s->n_chunks < MAX_CHUNKS;
}

bool
fw_snapshot_finished (const fw_snapshot_t *s)
{
   return s->exhausted && s->n_chunks == 0;
}

const fw_snapshot_progress_t *
fw_snapshot_progress (const fw_snapshot_t *s)
{
   return &s->progress;
}

/* dst (initialized) = src. */
static bool
copy_into (bson_t *dst, const bson_t *src)
{
   bson_reinit (dst);
   return bson_concat (dst, src);
}

bool
fw_snapshot_progress_past (const fw_snapshot_t *s, const fw_event_t *row,
                           fw_snapshot_progress_t *out)
{
   const fw_snapshot_progress_t *p = &s->progress;
   bson_iter_t dk, id;

   if (!fw_event_field (row, FW_EV_DOCUMENT_KEY, &dk) || !BSON_ITER_HOLDS_DOCUMENT (&dk) ||
       !bson_iter_recurse (&dk, &id) || !bson_iter_find (&id, "_id")) {
      return false;
   }
   out->present = true;
   out->done = false; /* a row is being handed out */
   out->documents = p->documents;
   out->has_filter = p->has_filter;
   out->has_until = p->has_until;
   bson_reinit (&out->after);
   out->has_after = bson_append_iter (&out->after, "_id", 3, &id);
   return out->has_after && copy_into (&out->filter, &p->filter) &&
          copy_into (&out->until, &p->until);
}

void
fw_snapshot_counts (const fw_snapshot_t *s, int64_t *read, int64_t *dropped, int64_t *chunks)
{
   *read = s->read;
   *dropped = s->dropped;
   *chunks = s->chunks;
}

uint64_t
fw_snapshot_token_time (const bson_t *token)
{
   bson_iter_t it;
   const char *data;
   uint32_t len;
   uint64_t t = 0;

   if (!token || !bson_iter_init_find (&it, token, "_data") || !BSON_ITER_HOLDS_UTF8 (&it)) {
      return 0;
   }
   /* The KeyString of a token starts with its clusterTime: type byte 130
    * (a Timestamp), then its 8 bytes big-endian. */
   data = bson_iter_utf8 (&it, &len);
   if (len < 18 || data[0] != '8' || data[1] != '2') {
      return 0;
   }
   for (int i = 2; i < 18; i++) {
      char c = data[i];
      int v = c >= '0' && c <= '9'   ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                     : -1;
      if (v < 0) {
         return 0;
      }
      t = t << 4 | (uint64_t) v;
   }
   return t;
}

/* The key of an _id value at it: { "": value } and its hash. */
static bool
key_of (bson_iter_t *it, bson_t *key, uint64_t *hash)
{
   bson_init (key);
   if (!bson_append_iter (key, "", 0, it)) {
      bson_destroy (key);
      return false;
   }
   *hash = fnv (bson_get_data (key), key->len);
   return true;
}

static uint64_t
event_time (const fw_event_t *ev)
{
   bson_iter_t it;
   uint32_t t, i;

   if (!fw_event_field (ev, FW_EV_CLUSTER_TIME, &it) || !BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      return 0;
   }
   bson_iter_timestamp (&it, &t, &i);
   return (uint64_t) t << 32 | i;
}

/* Drops the rows of key in every chunk whose window holds ts. */
static void
drop_key (fw_snapshot_t *s, uint64_t ts, const bson_t *key, uint64_t hash)
{
   for (int c = 0; c < s->n_chunks; c++) {
      chunk_t *ch = &s->chunk[c];
      if (ts <= ch->low || ts >= ch->high) {
         continue;
      }
      for (int i = ch->next; i < ch->n_rows; i++) {
         row_t *r = &ch->rows[i];
         if (!r->dropped && r->hash == hash && r->key.len == key->len &&
             memcmp (bson_get_data (&r->key), bson_get_data (key), key->len) == 0) {
            r->dropped = true;
            s->dropped++;
         }
      }
   }
}

bool
fw_snapshot_live (fw_snapshot_t *s, const fw_event_t *ev)
{
   uint64_t ts, hash;
   bson_iter_t dk, id;
   bson_t key;

   if (s->n_chunks == 0) {
      return false;
   }
   /* No clusterTime (a pipeline removed it): the event cannot be placed, so
    * its key's rows are dropped from every chunk, to be safe. */
   ts = event_time (ev);
   if (fw_event_field (ev, FW_EV_DOCUMENT_KEY, &dk) && BSON_ITER_HOLDS_DOCUMENT (&dk) &&
       bson_iter_recurse (&dk, &id) && bson_iter_find (&id, "_id") && key_of (&id, &key, &hash)) {
      if (ts) {
         drop_key (s, ts, &key, hash);
      } else {
         for (int c = 0; c < s->n_chunks; c++) {
            drop_key (s, s->chunk[c].low + 1, &key, hash);
         }
      }
      bson_destroy (&key);
   }
   if (ts > s->passed) {
      s->passed = ts;
   }
   return s->passed >= s->chunk[0].high;
}

bool
fw_snapshot_token_past (fw_snapshot_t *s, const bson_t *token)
{
   uint64_t t = fw_snapshot_token_time (token);

   if (t > s->passed) {
      s->passed = t;
   }
   return s->n_chunks > 0 && s->passed >= s->chunk[0].high;
}

/* data = "fwsnapshot-<high, 16 hex digits>-<index>", as snprintf's
 * "fwsnapshot-%016llx-%d" (whose parsing of the format showed in a profile
 * of the hand-out, once per row). data holds 48 bytes. */
static void
event_id (char *data, uint64_t high, int index)
{
   static const char hex[] = "0123456789abcdef";
   char digits[12];
   int n = 0;
   unsigned v = (unsigned) (index < 0 ? 0 : index);

   memcpy (data, "fwsnapshot-", 11);
   for (int i = 0; i < 16; i++) {
      data[11 + i] = hex[(high >> (60 - 4 * i)) & 0xf];
   }
   data[27] = '-';
   do {
      digits[n++] = (char) ('0' + v % 10);
      v /= 10;
   } while (v && n < (int) sizeof digits);
   for (int i = 0; i < n; i++) {
      data[28 + i] = digits[n - 1 - i];
   }
   data[28 + n] = '\0';
}

/* The snapshot event of row r: the shape of an insert's change event, with
 * operationType "snapshot" and its chunk's high watermark as its
 * clusterTime. */
static bool
build_event (fw_snapshot_t *s, const chunk_t *ch, const row_t *r, int index)
{
   bson_t *e = &s->event;
   bson_t id, ns, dk;
   bson_iter_t it;
   char data[80];

   bson_reinit (e);
   event_id (data, ch->high, index);
   if (!bson_iter_init (&it, &r->key) || !bson_iter_next (&it)) {
      return false;
   }
   return BSON_APPEND_DOCUMENT_BEGIN (e, "_id", &id) && BSON_APPEND_UTF8 (&id, "_data", data) &&
          bson_append_document_end (e, &id) && BSON_APPEND_UTF8 (e, "operationType", "snapshot") &&
          BSON_APPEND_TIMESTAMP (e, "clusterTime", (uint32_t) (ch->high >> 32),
                                 (uint32_t) ch->high) &&
          BSON_APPEND_DATE_TIME (e, "wallTime", fw_now_ms ()) &&
          BSON_APPEND_DOCUMENT_BEGIN (e, "ns", &ns) &&
          BSON_APPEND_UTF8 (&ns, "db", s->cfg.database) &&
          BSON_APPEND_UTF8 (&ns, "coll", s->cfg.collection) && bson_append_document_end (e, &ns) &&
          BSON_APPEND_DOCUMENT_BEGIN (e, "documentKey", &dk) &&
          bson_append_iter (&dk, "_id", 3, &it) && bson_append_document_end (e, &dk) &&
          BSON_APPEND_DOCUMENT (e, "fullDocument", r->doc);
}

/* The oldest chunk is handed out: its last row is the boundary. */
static void
close_chunk (fw_snapshot_t *s)
{
   chunk_t *ch = &s->chunk[0];
   bson_iter_t it;

   if (ch->n_rows > 0 && bson_iter_init (&it, &ch->rows[ch->n_rows - 1].key) &&
       bson_iter_next (&it)) {
      bson_reinit (&s->progress.after);
      bson_append_iter (&s->progress.after, "_id", 3, &it);
      s->progress.has_after = true;
   }
   chunk_clear (ch);
   memmove (&s->chunk[0], &s->chunk[1], (size_t) (s->n_chunks - 1) * sizeof s->chunk[0]);
   memset (&s->chunk[--s->n_chunks], 0, sizeof s->chunk[0]);
   s->progress.done = fw_snapshot_finished (s);
}

bool
fw_snapshot_due (const fw_snapshot_t *s)
{
   return s->n_chunks > 0 && s->passed >= s->chunk[0].high;
}

bool
fw_snapshot_next_event (fw_snapshot_t *s, fw_event_t *ev)
{
   fw_error_t err;

   while (s->n_chunks > 0 && s->passed >= s->chunk[0].high) {
      chunk_t *ch = &s->chunk[0];
      if (ch->next >= ch->n_rows) {
         close_chunk (s);
         return false; /* one chunk at a time: its progress is stored first */
      }
      int i = ch->next++;
      if (ch->rows[i].dropped) {
         continue;
      }
      if (build_event (s, ch, &ch->rows[i], i) && fw_event_parse (&s->event, ev, &err)) {
         s->progress.documents++;
         return true;
      }
      /* A row too large to wrap (near 16 MiB) cannot be handed out. */
   }
   return false;
}

/* --- reading a chunk ----------------------------------------------------- */

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
         if (!bson_iter_init_find (&it, doc, "_id") || !key_of (&it, &r->key, &r->hash)) {
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
      chunk_clear (ch);
      return;
   }
   s->jump = false;
   if (ch->n_rows == 0) {
      s->exhausted = true;
      s->progress.done = fw_snapshot_finished (s);
      fw_snapshot_end_reads (s);
      chunk_clear (ch);
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
      chunk_clear (&ch);
      return false;
   }
   take_chunk (s, &ch);
   return true;
}
