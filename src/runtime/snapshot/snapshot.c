/*
 * snapshot.c - the incremental snapshot's engine (snapshot.h): one chunk at
 * a time read by _id between a low and a high watermark (snapshot_read.c),
 * its rows dropped by the live events between them, the rest handed out as
 * snapshot events.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/clock.h"
#include "runtime/snapshot/snapshot-private.h"

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
   bson_init (&s->ns);
   BSON_APPEND_UTF8 (&s->ns, "db", s->cfg.database);
   BSON_APPEND_UTF8 (&s->ns, "coll", s->cfg.collection);
   if (progress) {
      s->progress.documents = progress->documents;
      if ((s->progress.has_after = progress->has_after)) {
         bson_destroy (&s->progress.after);
         bson_copy_to (&progress->after, &s->progress.after);
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
   fw_snapshot_cursor_init (&s->cur, s, NULL);
   return s;
}

void
fw_snapshot_end_reads (fw_snapshot_t *s)
{
   fw_snapshot_cursor_end (&s->cur);
}

void
fw_snapshot_discard (fw_snapshot_t *s)
{
   fw_snapshot_ahead_stop (s);
   for (int i = 0; i < s->n_chunks; i++) {
      fw_snapshot_chunk_clear (&s->chunk[i]);
   }
   s->n_chunks = 0;
   s->exhausted = false;
   fw_snapshot_cursor_cleanup (&s->cur);
   fw_snapshot_cursor_init (&s->cur, s, NULL);
}

void
fw_snapshot_destroy (fw_snapshot_t *s)
{
   if (!s) {
      return;
   }
   fw_snapshot_discard (s);
   bson_destroy (&s->event);
   free (s->ev_buf);
   bson_destroy (&s->ns);
   fw_snapshot_cursor_cleanup (&s->cur);
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
   return !s->exhausted && s->n_chunks < FW_SNAPSHOT_MAX_CHUNKS;
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

/* Drops the rows of key in every chunk whose low watermark ts is after. */
static void
drop_key (fw_snapshot_t *s, uint64_t ts, const bson_t *key, uint64_t hash)
{
   for (int c = 0; c < s->n_chunks; c++) {
      fw_snapshot_drop_rows (s, &s->chunk[c], ts, bson_get_data (key), key->len, hash);
   }
}

/* Keeps the live event of key (its clusterTime ts, 0: none) for the chunks
 * being read ahead: they drop its rows when they join the queue. When it
 * cannot be kept (out of memory or too many), log_full: the reads ahead
 * start again. */
static void
log_live (fw_snapshot_t *s, uint64_t ts, const bson_t *key, uint64_t hash, uint64_t run)
{
   live_t *e;

   if (s->log_full) {
      return;
   }
   if (s->n_log == s->cap_log) {
      int cap = s->cap_log ? 2 * s->cap_log : 64;
      live_t *log = cap <= FW_SNAPSHOT_MAX_LOG ? realloc (s->log, (size_t) cap * sizeof *log)
                                               : NULL;
      if (!log) {
         s->log_full = true;
         return;
      }
      s->log = log;
      s->cap_log = cap;
   }
   e = &s->log[s->n_log];
   if (!(e->key = malloc (key->len))) {
      s->log_full = true;
      return;
   }
   memcpy (e->key, bson_get_data (key), key->len);
   e->len = key->len;
   e->ts = ts;
   e->hash = hash;
   e->run = run;
   s->n_log++;
}

bool
fw_snapshot_live (fw_snapshot_t *s, const fw_event_t *ev)
{
   uint64_t ts, hash;
   bson_iter_t dk, id;
   bson_t key;

   /* While the reads ahead are in a run whose chunks are not all queued,
    * the event is kept for them (their windows may hold it). */
   uint64_t run = s->ahead ? fw_snapshot_ahead_run (s->ahead) : 0;
   bool logging = run > s->logged_upto;

   if (s->n_chunks == 0 && !logging) {
      return false;
   }
   /* No clusterTime (a pipeline removed it): the event cannot be placed, so
    * its key's rows are dropped from every chunk, to be safe. */
   ts = event_time (ev);
   if (fw_event_field (ev, FW_EV_DOCUMENT_KEY, &dk) && BSON_ITER_HOLDS_DOCUMENT (&dk) &&
       bson_iter_recurse (&dk, &id) && bson_iter_find (&id, "_id") &&
       fw_snapshot_key_of (&id, &key, &hash)) {
      if (ts) {
         drop_key (s, ts, &key, hash);
      } else {
         for (int c = 0; c < s->n_chunks; c++) {
            drop_key (s, s->chunk[c].low + 1, &key, hash);
         }
      }
      if (logging) {
         log_live (s, ts, &key, hash, run);
      }
      bson_destroy (&key);
   }
   if (ts > s->passed) {
      s->passed = ts;
   }
   return s->n_chunks > 0 && s->passed >= s->chunk[0].high;
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

/* Writing the snapshot event's bytes (BSON, little-endian) into a buffer
 * with room for them. */
typedef struct {
   uint8_t *b;
   size_t off;
} ev_writer_t;

static void
put_bytes (ev_writer_t *w, const void *p, size_t n)
{
   memcpy (w->b + w->off, p, n);
   w->off += n;
}

static void
put_u32 (ev_writer_t *w, uint32_t v)
{
   v = BSON_UINT32_TO_LE (v);
   put_bytes (w, &v, sizeof v);
}

static void
put_u64 (ev_writer_t *w, uint64_t v)
{
   v = BSON_UINT64_TO_LE (v);
   put_bytes (w, &v, sizeof v);
}

/* An element's type and key (len: the key's length). */
static void
put_key (ev_writer_t *w, uint8_t type, const char *key, size_t len)
{
   put_bytes (w, &type, 1);
   put_bytes (w, key, len + 1);
}

#define KEY(k) k, sizeof (k) - 1
#define ELEM(k) (1 + sizeof (k)) /* a key's type byte, the key and its NUL */

/* s->ev_buf holds need bytes at least. */
static bool
event_room (fw_snapshot_t *s, size_t need)
{
   size_t cap = s->ev_cap ? s->ev_cap : 1024;
   uint8_t *buf;

   if (need <= s->ev_cap) {
      return true;
   }
   while (cap < need) {
      cap *= 2; /* need <= INT32_MAX */
   }
   if (!(buf = realloc (s->ev_buf, cap))) {
      return false;
   }
   s->ev_buf = buf;
   s->ev_cap = cap;
   return true;
}

/* The snapshot event of row index of ch into s->event: the shape of an
 * insert's change event (_id {_data}, operationType "snapshot",
 * clusterTime its chunk's high watermark, wallTime now, ns, documentKey
 * the row's key, fullDocument the row), its bytes written by hand (the
 * same bytes libbson's appends made, at a third of their instructions: a
 * generic append per field was most of building a row's event). False
 * when the row is too large to wrap (near 2 GiB) or out of memory. */
static bool
build_event (fw_snapshot_t *s, const chunk_t *ch, int index)
{
   const row_t *r = &ch->rows[index];
   char data[80];
   size_t dlen, id_len, total;
   ev_writer_t w;

   event_id (data, ch->high, index);
   dlen = strlen (data);
   id_len = 4 + ELEM ("_data") + 4 + dlen + 1 + 1;
   total = 4 + ELEM ("_id") + id_len + ELEM ("operationType") + 4 + sizeof ("snapshot") +
           ELEM ("clusterTime") + 8 + ELEM ("wallTime") + 8 + ELEM ("ns") + s->ns.len +
           ELEM ("documentKey") + r->key_len + ELEM ("fullDocument") + (size_t) r->len + 1;
   if (total > INT32_MAX || !event_room (s, total)) {
      return false;
   }
   w.b = s->ev_buf;
   w.off = 0;
   put_u32 (&w, (uint32_t) total);
   put_key (&w, BSON_TYPE_DOCUMENT, KEY ("_id"));
   put_u32 (&w, (uint32_t) id_len);
   put_key (&w, BSON_TYPE_UTF8, KEY ("_data"));
   put_u32 (&w, (uint32_t) dlen + 1);
   put_bytes (&w, data, dlen + 1);
   put_bytes (&w, "", 1); /* the end of _id */
   put_key (&w, BSON_TYPE_UTF8, KEY ("operationType"));
   put_u32 (&w, sizeof ("snapshot"));
   put_bytes (&w, "snapshot", sizeof ("snapshot"));
   put_key (&w, BSON_TYPE_TIMESTAMP, KEY ("clusterTime"));
   put_u64 (&w, ch->high); /* (t << 32 | i): a Timestamp's 8 bytes, increment first */
   put_key (&w, BSON_TYPE_DATE_TIME, KEY ("wallTime"));
   put_u64 (&w, (uint64_t) fw_now_ms ());
   put_key (&w, BSON_TYPE_DOCUMENT, KEY ("ns"));
   put_bytes (&w, bson_get_data (&s->ns), s->ns.len);
   put_key (&w, BSON_TYPE_DOCUMENT, KEY ("documentKey"));
   put_bytes (&w, ch->data + r->off + r->len, r->key_len);
   put_key (&w, BSON_TYPE_DOCUMENT, KEY ("fullDocument"));
   put_bytes (&w, ch->data + r->off, r->len);
   put_bytes (&w, "", 1); /* the end of the event */
   bson_destroy (&s->event);
   return w.off == total && bson_init_static (&s->event, s->ev_buf, total);
}

/* The oldest chunk is handed out: its last row is the boundary. */
static void
close_chunk (fw_snapshot_t *s)
{
   chunk_t *ch = &s->chunk[0];
   bson_iter_t it;
   bson_t last;

   if (ch->n_rows > 0) {
      fw_snapshot_row_key (ch, ch->n_rows - 1, &last);
   }
   if (ch->n_rows > 0 && bson_iter_init (&it, &last) && bson_iter_next (&it)) {
      bson_reinit (&s->progress.after);
      bson_append_iter (&s->progress.after, "_id", 3, &it);
      s->progress.has_after = true;
   }
   fw_snapshot_chunk_clear (ch);
   memmove (&s->chunk[0], &s->chunk[1], (size_t) (s->n_chunks - 1) * sizeof s->chunk[0]);
   memset (&s->chunk[--s->n_chunks], 0, sizeof s->chunk[0]);
   s->progress.done = fw_snapshot_finished (s);
   if (s->ahead) {
      fw_snapshot_ahead_room (s);
   }
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
      if (build_event (s, ch, i) && fw_event_parse (&s->event, ev, &err)) {
         s->progress.documents++;
         return true;
      }
      /* A row too large to wrap (near 16 MiB) cannot be handed out. */
   }
   return false;
}

bool
fw_snapshot_read_chunk (fw_snapshot_t *s, mongoc_client_t *client, fw_error_t *error)
{
   chunk_t ch = {0};

   if (!fw_snapshot_wants_chunk (s) || s->ahead) {
      return true;
   }
   /* A run's reads follow each other while no live event is handled
    * between them: no live event is kept for them here. */
   if (!fw_snapshot_cursor_read (s, &s->cur, client, &ch, error)) {
      return false;
   }
   fw_snapshot_bound_found (s, &s->cur);
   if (ch.n_rows > 0) {
      fw_snapshot_queue (s, &ch);
   } else if (s->cur.ended) {
      s->exhausted = true;
      s->progress.done = fw_snapshot_finished (s);
   }
   fw_snapshot_chunk_clear (&ch);
   return true;
}
