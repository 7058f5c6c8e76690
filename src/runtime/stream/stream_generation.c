/*
 * stream_generation.c - a change of a stream's number of partitions (issue
 * 31). The old generation (M units, or the unpartitioned stream) stopped
 * with a checkpoint per unit; each key was handled by exactly one old unit
 * up to that unit's checkpoint. The new generation (N units) starts at the
 * oldest of those checkpoints' clusterTime, and a $match first in its
 * pipeline keeps, for each event, only what comes after the checkpoint of
 * the old unit its key hashed to: resume tokens compare in the order of the
 * change stream (their _data is hex of a KeyString, clusterTime first), so
 * "$_id._data" > that checkpoint's token, leaving the token's version out
 * at the same clusterTime when the two differ (build). Every event is then handled by
 * one generation only: up to the old unit's checkpoint by the old, after it
 * by the new. The switch is one conditional write of the generation
 * document "<stream>#generation" ({n, from, startAt, cutoffs}); whoever
 * loses reads what the winner wrote, so every unit uses the same cutoffs,
 * and a restart (the document already names N) does not switch again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowwarden/log.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/ha/lease.h"
#include "runtime/stream/stream_generation-private.h"
#include "runtime/stream/stream_partition-private.h"

#define MAX_OLD 256 /* partitions of a generation (config/partitions.lua) */

typedef struct {
   int n;                 /* the generation the document names; -1: no document */
   int from;              /* the one it switched from */
   uint32_t t, i;         /* its startAt */
   char *cutoff[MAX_OLD]; /* its cutoffs: per old unit, its checkpoint's _data ("": none) */
   int ncutoff;
   int found;          /* other generation among the checkpoints: -1 none, -2 several */
   char *old[MAX_OLD]; /* the positions (_data) of the generation scanned for, by k */
} scan_t;

void
fw_generation_init (fw_generation_t *g)
{
   memset (g, 0, sizeof *g);
}

void
fw_generation_cleanup (fw_generation_t *g)
{
   if (g && g->has_stage) {
      bson_destroy (&g->stage);
      g->has_stage = false;
   }
}

static void
scan_free (scan_t *s)
{
   for (int k = 0; k < MAX_OLD; k++) {
      free (s->cutoff[k]);
      free (s->old[k]);
   }
   memset (s, 0, sizeof *s);
}

/* The checkpoint's position: lastProcessedToken, else lastSeenToken (what
 * the unit resumes from, stream_lead.c); NULL when it has none. */
static const char *
position_of (const bson_t *doc)
{
   static const char *const fields[] = {"lastProcessedToken._data", "lastSeenToken._data"};
   bson_iter_t it, d;

   for (int f = 0; f < 2; f++) {
      if (bson_iter_init (&it, doc) && bson_iter_find_descendant (&it, fields[f], &d) &&
          BSON_ITER_HOLDS_UTF8 (&d)) {
         return bson_iter_utf8 (&d, NULL);
      }
   }
   return NULL;
}

static int
int_field (const bson_t *doc, const char *name)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, name) && BSON_ITER_HOLDS_INT32 (&it)
             ? bson_iter_int32 (&it)
             : -1;
}

static bool
read_doc (scan_t *s, const bson_t *doc)
{
   bson_iter_t it, a;

   s->n = int_field (doc, "n");
   s->from = int_field (doc, "from");
   if (bson_iter_init_find (&it, doc, "startAt") && BSON_ITER_HOLDS_TIMESTAMP (&it)) {
      bson_iter_timestamp (&it, &s->t, &s->i);
   }
   if (bson_iter_init_find (&it, doc, "cutoffs") && BSON_ITER_HOLDS_ARRAY (&it) &&
       bson_iter_recurse (&it, &a)) {
      while (s->ncutoff < MAX_OLD && bson_iter_next (&a)) {
         s->cutoff[s->ncutoff] = strdup (BSON_ITER_HOLDS_UTF8 (&a) ? bson_iter_utf8 (&a, NULL)
                                                                   : "");
         if (!s->cutoff[s->ncutoff++]) {
            return false;
         }
      }
   }
   return true;
}

/* One checkpoint (not the generation document) seen by scan. */
static bool
scan_one (scan_t *s, const bson_t *doc, const char *id, size_t n, int mine, int want)
{
   int g = fw_stream_partition_generation_of (id, id, n), k = 0,
       parts; /* id starts with the base */
   const char *pos;

   if (g < 0 || g == mine) {
      return true;
   }
   s->found = s->found == -1 || s->found == g ? g : -2;
   if (g != want || (g > 0 && sscanf (id + n, "#%d/%d", &k, &parts) != 2) || k < 0 ||
       k >= MAX_OLD || s->old[k] || !(pos = position_of (doc))) {
      return true;
   }
   return (s->old[k] = strdup (pos)) != NULL;
}

/* Reads the generation document and the stream's checkpoints of other
 * generations (the positions of generation want's, by k). False (why in
 * what) on a read error or no memory. */
static bool
scan (const fw_stream_config_t *cfg, mongoc_client_t *client, int want, scan_t *s, char *what,
      size_t len)
{
   size_t n = fw_stream_partition_base_len (cfg);
   int mine = cfg->partitions > 0 ? cfg->partitions : 0;
   char *re = fw_stream_partition_regex (cfg->name, n);
   mongoc_collection_t *coll = NULL;
   mongoc_cursor_t *cur = NULL;
   bson_t *filter = NULL;
   const bson_t *doc;
   bson_error_t berr;
   bson_iter_t it;
   bool ok = true;

   scan_free (s);
   s->n = s->from = s->found = -1;
   if (!re || !(filter = BCON_NEW ("_id", "{", "$regex", BCON_UTF8 (re), "}")) ||
       !(coll = mongoc_client_get_collection (client, cfg->database, FW_CHECKPOINT_COLLECTION)) ||
       !(cur = mongoc_collection_find_with_opts (coll, filter, NULL, NULL))) {
      ok = false;
   }
   while (ok && mongoc_cursor_next (cur, &doc)) {
      const char *id;
      if (!bson_iter_init_find (&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8 (&it) ||
          strncmp ((id = bson_iter_utf8 (&it, NULL)), cfg->name, n) != 0) {
         continue;
      }
      ok = fw_stream_partition_is_generation_doc (id, cfg->name, n)
              ? read_doc (s, doc)
              : scan_one (s, doc, id, n, mine, want);
   }
   if (!ok) {
      snprintf (what, len, "stream \"%.*s\": out of memory reading its checkpoints", (int) n,
                cfg->name);
   } else if (mongoc_cursor_error (cur, &berr)) {
      snprintf (what, len, "stream \"%.*s\": cannot read its checkpoints in %s.%s: %s", (int) n,
                cfg->name, cfg->database, FW_CHECKPOINT_COLLECTION, berr.message);
      ok = false;
   }
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (filter);
   free (re);
   return ok;
}

/* The clusterTime a resume token starts with ("82" and 8 bytes of a
 * KeyString Timestamp); 0 when it does not. */
static uint64_t
token_time (const char *data)
{
   char hex[17];
   char *end;
   uint64_t ts;

   if (strncmp (data, "82", 2) != 0 || strlen (data) < 18) {
      return 0;
   }
   memcpy (hex, data + 2, 16);
   hex[16] = '\0';
   ts = strtoull (hex, &end, 16);
   return *end == '\0' ? ts : 0;
}

/* "partitions = N", or "no partitions" for 0. */
static void
describe (int parts, char *out, size_t len)
{
   snprintf (out, len, parts > 0 ? "partitions = %d" : "no partitions", parts);
}

/* Whether a unit of generation old is still held by a live member (a lease
 * in _fw_leases with an owner, not expired on the server's clock): then the
 * old generation runs somewhere, and switching would run two at once. */
static bool
old_units_held (const fw_stream_config_t *cfg, mongoc_client_t *client, int old, char *holder,
                size_t hlen)
{
   size_t n = fw_stream_partition_base_len (cfg);
   char *re = fw_stream_partition_regex (cfg->name, n), units[700];
   mongoc_collection_t *coll = NULL;
   mongoc_cursor_t *cur = NULL;
   bson_t *pipeline = NULL;
   const bson_t *doc;
   bson_iter_t it;
   bool held = false;

   if (re) {
      re[strlen (re) - 5] = '\0'; /* drop "(#|$)" */
      if (old > 0) {
         snprintf (units, sizeof units, "%s#[0-9]+/%d$", re, old);
      } else {
         snprintf (units, sizeof units, "%s$", re);
      }
      pipeline = BCON_NEW ("pipeline", "[", "{", "$match", "{", "_id", "{", "$regex",
                           BCON_UTF8 (units), "}", "}", "}", "{", "$match", "{", "$expr", "{",
                           "$and", "[", "{", "$eq", "[", "{", "$type", BCON_UTF8 ("$owner"), "}",
                           BCON_UTF8 ("string"), "]", "}", "{", "$gt", "[",
                           BCON_UTF8 ("$expiresAt"), BCON_UTF8 ("$$NOW"), "]", "}", "]", "}", "}",
                           "}", "{", "$limit", BCON_INT32 (1), "}", "]");
   }
   if (pipeline &&
       (coll = mongoc_client_get_collection (client, cfg->database, FW_LEASE_COLLECTION)) &&
       (cur = mongoc_collection_aggregate (coll, MONGOC_QUERY_NONE, pipeline, NULL, NULL)) &&
       mongoc_cursor_next (cur, &doc)) {
      held = true;
      snprintf (holder, hlen, "\"%s\" (held by %s)",
                bson_iter_init_find (&it, doc, "_id") && BSON_ITER_HOLDS_UTF8 (&it)
                   ? bson_iter_utf8 (&it, NULL)
                   : "?",
                bson_iter_init_find (&it, doc, "owner") && BSON_ITER_HOLDS_UTF8 (&it)
                   ? bson_iter_utf8 (&it, NULL)
                   : "?");
   }
   /* A read error counts as not held: the checkpoint reads of the open report it. */
   mongoc_cursor_destroy (cur);
   mongoc_collection_destroy (coll);
   bson_destroy (pipeline);
   free (re);
   return held;
}

/* The generation document: n units (mine) switched from old at the time at,
 * with the old units' positions (s->old) as their cutoffs. */
static void
generation_doc (bson_t *doc, const char *id, int mine, int old, uint64_t at, const scan_t *s,
                int units)
{
   char key[16];
   const char *k;
   bson_t cut;

   BSON_APPEND_UTF8 (doc, "_id", id);
   BSON_APPEND_INT32 (doc, "n", mine);
   BSON_APPEND_INT32 (doc, "from", old);
   BSON_APPEND_TIMESTAMP (doc, "startAt", (uint32_t) (at >> 32), (uint32_t) at);
   BSON_APPEND_ARRAY_BEGIN (doc, "cutoffs", &cut);
   for (int j = 0; j < units; j++) {
      bson_uint32_to_string ((uint32_t) j, &k, key, sizeof key);
      BSON_APPEND_UTF8 (&cut, k, s->old[j] ? s->old[j] : "");
   }
   bson_append_array_end (doc, &cut);
   BSON_APPEND_DATE_TIME (doc, "switchedAt", (int64_t) time (NULL) * 1000);
}

/* The one conditional write of the switch from generation old to cfg's,
 * with the positions s->old: SWITCH_WON when this call wrote it,
 * SWITCH_LOST when another writer did (the caller reads the document
 * again), SWITCH_REFUSED (why in what) when the old positions cannot be
 * switched from, SWITCH_ERROR (why in what) when the write failed. */
enum { SWITCH_WON, SWITCH_LOST, SWITCH_REFUSED, SWITCH_ERROR };

static int
switch_to (const fw_stream_config_t *cfg, mongoc_client_t *client, const scan_t *s, int old,
           char *what, size_t len)
{
   int n = (int) fw_stream_partition_base_len (cfg),
       mine = cfg->partitions > 0 ? cfg->partitions : 0;
   int units = old > 1 ? old : 1;
   char id[600];
   uint64_t at = 0;
   bson_t doc = BSON_INITIALIZER, sel = BSON_INITIALIZER, upd = BSON_INITIALIZER, set;
   bson_error_t berr;
   mongoc_collection_t *coll;
   bson_iter_t it;
   bool ok;
   int res = SWITCH_WON;

   snprintf (id, sizeof id, "%.*s%s", n, cfg->name, FW_GENERATION_SUFFIX);
   for (int j = 0; j < units; j++) {
      uint64_t t = s->old[j] ? token_time (s->old[j]) : 0;
      if (s->old[j] && !t) {
         snprintf (what, len,
                   "stream \"%.*s\": the checkpoint of old unit %d has a resume token "
                   "without a clusterTime: cannot switch from partitions = %d to %d",
                   n, cfg->name, j, old, mine);
         return SWITCH_REFUSED;
      }
      at = t && (!at || t < at) ? t : at;
   }
   if (!at) {
      char was[32], now[32];
      describe (old, was, sizeof was);
      describe (mine, now, sizeof now);
      snprintf (what, len,
                "stream \"%.*s\": %s.%s holds checkpoints of the stream with %s, "
                "but none has a position, and the script says %s: there is nothing to switch "
                "generations from. The stream is stopped; set partitions back to the stored "
                "number, or stop every instance, delete the old checkpoints (ids \"%.*s\" and "
                "\"%.*s#K/N\") and start again from start_position",
                n, cfg->name, cfg->database, FW_CHECKPOINT_COLLECTION, was, now, n, cfg->name, n,
                cfg->name);
      return SWITCH_REFUSED;
   }
   generation_doc (&doc, id, mine, old, at, s, units);
   coll = mongoc_client_get_collection (client, cfg->database, FW_CHECKPOINT_COLLECTION);
   if (s->n < 0) {
      ok = mongoc_collection_insert_one (coll, &doc, NULL, NULL, &berr);
      if (!ok && berr.code == 11000) {
         ok = true; /* a duplicate key: another unit or member switched first */
         res = SWITCH_LOST;
      }
   } else {
      bson_t reply;
      BSON_APPEND_UTF8 (&sel, "_id", id);
      BSON_APPEND_INT32 (&sel, "n", old);
      BSON_APPEND_DOCUMENT_BEGIN (&upd, "$set", &set);
      bson_copy_to_excluding_noinit (&doc, &set, "_id", NULL);
      bson_append_document_end (&upd, &set);
      ok = mongoc_collection_update_one (coll, &sel, &upd, NULL, &reply, &berr);
      if (ok &&
          (!bson_iter_init_find (&it, &reply, "modifiedCount") || bson_iter_as_int64 (&it) < 1)) {
         res = SWITCH_LOST; /* the filter {n: old} matched nothing: switched already */
      }
      bson_destroy (&reply);
   }
   if (!ok) {
      snprintf (what, len,
                "stream \"%.*s\": cannot write its generation document %s.%s "
                "\"%s\": %s",
                n, cfg->name, cfg->database, FW_CHECKPOINT_COLLECTION, id, berr.message);
   }
   mongoc_collection_destroy (coll);
   bson_destroy (&doc);
   bson_destroy (&sel);
   bson_destroy (&upd);
   return ok ? res : SWITCH_ERROR;
}

/* The length in hex digits of the KeyString int at p (key_string.cpp: 29 is
 * 0, 2B..32 a positive int of 1..8 bytes); 0 when p holds none. */
static size_t
ks_int_len (const char *p)
{
   unsigned kind;

   if (strncmp (p, "29", 2) == 0) {
      return 2;
   }
   if (sscanf (p, "%2X", &kind) != 1 || kind < 0x2B || kind > 0x32 ||
       strlen (p) < 2 + 2 * (size_t) (kind - 0x2A)) {
      return 0;
   }
   return 2 + 2 * (size_t) (kind - 0x2A);
}

/* The length of a resume token's head as MongoDB encodes it
 * (resume_token.cpp): clusterTime ("82" + 16 hex), version (a 1-byte int
 * at [18, 22)), tokenType and txnOpIndex (ints), fromInvalidate (6E/6F);
 * the collection UUID and the event identifier follow. 0 when data does
 * not start so. */
static size_t
token_head (const char *data)
{
   size_t at = 22, n;

   if (strlen (data) < 22 || strncmp (data, "82", 2) != 0 || strncmp (data + 18, "2B", 2) != 0) {
      return 0;
   }
   for (int field = 0; field < 2; field++) {
      if (!(n = ks_int_len (data + at))) {
         return 0;
      }
      at += n;
   }
   return strncmp (data + at, "6E", 2) == 0 || strncmp (data + at, "6F", 2) == 0 ? at + 2 : 0;
}

/* One old unit's cut-off as the $match reads it: {t: the token, v: its
 * version's digits, p: its clusterTime's, m: what follows the version up to
 * the end of the head, then "FF"}. A token of another version at the same
 * clusterTime compares with p + its own version + m: after the cut-off only
 * when its (tokenType, txnOpIndex, fromInvalidate) are, since "FF" sorts
 * after whatever can follow a head; a cut-off of another layout gives m ""
 * and every such token passes (handled again: never lost). */
static bool
append_cutoff (bson_t *arr, const char *key, const char *cut)
{
   size_t len = strlen (cut), head = token_head (cut);
   char v[5] = "", pre[19] = "", *m;
   bson_t d;
   bool ok;

   if (len >= 22) {
      memcpy (pre, cut, 18);
      memcpy (v, cut + 18, 4);
   }
   if (!(m = calloc (1, head ? head - 22 + 3 : 1))) {
      return false;
   }
   if (head) {
      memcpy (m, cut + 22, head - 22);
      strcat (m, "FF");
   }
   ok = BSON_APPEND_DOCUMENT_BEGIN (arr, key, &d) && BSON_APPEND_UTF8 (&d, "t", cut) &&
        BSON_APPEND_UTF8 (&d, "v", v) && BSON_APPEND_UTF8 (&d, "p", pre) &&
        BSON_APPEND_UTF8 (&d, "m", m) && bson_append_document_end (arr, &d);
   free (m);
   return ok;
}

/* The $match of a switched generation: an event passes when its token is
 * after the checkpoint of the old unit its key hashed to. Resume tokens
 * sort by clusterTime, then version, then the rest (resume_token.cpp), and
 * a server renders every event in the version of the moment, so an old
 * unit's cut-off may be of another version than the events read now; then
 * (same clusterTime, other version) the event's version is left out of the
 * comparison (append_cutoff):
 * { $match: { $expr: { $let: { vars: { c: { $arrayElemAt: [ cutoffs, unit ] } },
 *   in: { $gt: [ "$_id._data", { $cond: [ { $eq: [ V, "$$c.v" ] }, "$$c.t",
 *     { $concat: [ "$$c.p", V, "$$c.m" ] } ] } ] } } } } }
 * with V = { $substrBytes: [ "$_id._data", 18, 4 ] }. False: no memory. */
static bool
build (const scan_t *s, fw_generation_t *g)
{
   bson_t *stage = NULL, *unit;
   bson_t cut = BSON_INITIALIZER;
   char key[16];
   const char *k;
   bool ok = true;

   for (int j = 0; ok && j < s->ncutoff; j++) {
      bson_uint32_to_string ((uint32_t) j, &k, key, sizeof key);
      ok = append_cutoff (&cut, k, s->cutoff[j]);
   }
   /* the old unit of the event's key; 0 when the old generation had one or none */
   unit = s->ncutoff > 1
             ? BCON_NEW ("$abs", "{", "$mod", "[", "{", "$toHashedIndexKey",
                         BCON_UTF8 ("$documentKey._id"), "}", BCON_INT32 (s->ncutoff), "]", "}")
             : BCON_NEW ("$literal", BCON_INT32 (0));
   stage = ok && unit
              ? BCON_NEW ("$match", "{", "$expr", "{", "$let", "{", "vars", "{", "c", "{",
                          "$arrayElemAt", "[", BCON_ARRAY (&cut), BCON_DOCUMENT (unit), "]", "}",
                          "}", "in", "{", "$gt", "[", BCON_UTF8 ("$_id._data"), "{", "$cond", "[",
                          "{", "$eq", "[", "{", "$substrBytes", "[", BCON_UTF8 ("$_id._data"),
                          BCON_INT32 (18), BCON_INT32 (4), "]", "}", BCON_UTF8 ("$$c.v"), "]", "}",
                          BCON_UTF8 ("$$c.t"), "{", "$concat", "[", BCON_UTF8 ("$$c.p"), "{",
                          "$substrBytes", "[", BCON_UTF8 ("$_id._data"), BCON_INT32 (18),
                          BCON_INT32 (4), "]", "}", BCON_UTF8 ("$$c.m"), "]", "}", "]", "}", "]",
                          "}", "}", "}", "}")
              : NULL;
   bson_destroy (&cut);
   bson_destroy (unit);
   if (!stage) {
      return false;
   }
   bson_copy_to (stage, &g->stage);
   bson_destroy (stage);
   g->has_stage = true;
   g->start_at = ((uint64_t) s->t << 32) | s->i;
   return true;
}

fw_generation_open_t
fw_stream_generation_open (const fw_stream_config_t *cfg, mongoc_client_t *client,
                           fw_generation_t *g, char *what, size_t len)
{
   int n = (int) fw_stream_partition_base_len (cfg),
       mine = cfg->partitions > 0 ? cfg->partitions : 0;
   int old;
   scan_t s;
   bool ok, later = false;
   char holder[700];
   int sw;

   memset (&s, 0, sizeof s);
   if (!(ok = scan (cfg, client, -1, &s, what, len)) || s.n == mine) {
      later = !ok; /* a read error: tried again at the next open */
      goto done;   /* or switched to this N already */
   }
   if ((old = s.n >= 0 ? s.n : s.found) == -1) {
      goto done; /* no other generation: nothing to do */
   }
   if (old == -2) {
      snprintf (what, len,
                "stream \"%.*s\": %s.%s holds checkpoints of several other numbers "
                "of partitions than the script's (%d) and no generation document: cannot tell "
                "which to switch from. The stream is stopped; delete the checkpoints of the "
                "generations that no longer run",
                n, cfg->name, cfg->database, FW_CHECKPOINT_COLLECTION, mine);
      ok = false;
      goto done;
   }
   if (old_units_held (cfg, client, old, holder, sizeof holder)) {
      char was[32], now[32];
      describe (old, was, sizeof was);
      describe (mine, now, sizeof now);
      snprintf (what, len,
                "the stream's checkpoints are of %s and the script says %s, but old "
                "unit %s is still running: the new generation waits until every old unit is "
                "released (stopped) or its lease expired",
                was, now, holder);
      ok = false;
      later = true;
      goto done;
   }
   if (!(ok = scan (cfg, client, old, &s, what, len))) {
      later = true;
      goto done;
   }
   sw = switch_to (cfg, client, &s, old, what, len);
   if (sw == SWITCH_REFUSED || sw == SWITCH_ERROR || !scan (cfg, client, -1, &s, what, len)) {
      later = sw != SWITCH_REFUSED;
      ok = false;
      goto done;
   }
   if (s.n != mine) {
      snprintf (what, len,
                "stream \"%.*s\": its generation document says partitions = %d (another "
                "instance switched to it), but the script says %d: the stream is stopped",
                n, cfg->name, s.n, mine);
      ok = false;
      goto done;
   }
   if (sw == SWITCH_WON) {
      fw_log (FW_LOG_INFO, cfg->name,
              "partitions changed from %d to %d: this generation starts "
              "at Timestamp(%u, %u), each key after its old unit's checkpoint",
              s.from, mine, s.t, s.i);
   }
done:
   if (ok && s.n == mine && s.ncutoff > 0 && !build (&s, g)) {
      snprintf (what, len, "stream \"%.*s\": out of memory building its generation's $match", n,
                cfg->name);
      ok = false;
      later = true;
   }
   scan_free (&s);
   return ok ? FW_GENERATION_OPEN : later ? FW_GENERATION_LATER : FW_GENERATION_STOP;
}

bool
fw_stream_generation_has_past (const fw_stream_config_t *cfg, mongoc_client_t *client)
{
   scan_t s;
   char what[256];
   bool past;

   memset (&s, 0, sizeof s);
   /* A read error counts as a past: no snapshot now; the open reports the error. */
   past = !scan (cfg, client, -1, &s, what, sizeof what) || s.n >= 0 || s.found != -1;
   scan_free (&s);
   return past;
}

bool
fw_stream_generation_stale (const fw_generation_t *g, const bson_t *resume)
{
   bson_iter_t it;
   uint64_t t;

   if (!g->start_at || !resume || !bson_iter_init_find (&it, resume, "_data") ||
       !BSON_ITER_HOLDS_UTF8 (&it)) {
      return false;
   }
   t = token_time (bson_iter_utf8 (&it, NULL));
   return t && t < g->start_at;
}
