/*
 * stream_reader.c - read-ahead (issue 16): a thread that owns a stream's
 * change stream and asks for the next batch (getMore) while the stream's
 * thread handles the events of the current one, through a bounded queue.
 *
 * The reader hands over what mongoc_change_stream_next gives, in order, as
 * copies: each event with the resume token the change stream had after it,
 * an "idle" mark (no event within maxAwaitTimeMS) with the post-batch token,
 * and the error that ended the change stream with the token it had then.
 * The stream's thread sees the same sequence it would have read itself, one
 * call at a time (see the declarations in stream_read-private.h).
 *
 * The lock is taken once an item by the reader (its wait for room, the copy
 * and the hand-over under one) and once a run by the stream's thread, which
 * takes what waits at once and hands it out from its own array (issue 41:
 * three locks an event on the reader's side were ~13% of its time).
 *
 * The copies are carved out of blocks of BLOCK_BYTES, one malloc for dozens
 * of small events (issue 41: a malloc an event on the reader's thread and
 * its free on the stream's, across threads, were ~10% of both); an event
 * over a quarter of a block has a buffer of its own, freed as soon as the
 * stream's thread is done with it, as before.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bson/bson_alloc.h"
#include "flowwarden/clock.h"
#include "flowwarden/mono_cond.h"
#include "runtime/stream/stream_read-private.h"

typedef enum { ITEM_NONE, ITEM_EVENT, ITEM_IDLE, ITEM_ERROR } item_kind_t;

/* One thing read, as raw BSON: the event (doc_len 0 for idle and error)
 * followed by the token, at blk + at. An error is the last item: its
 * bson_error_t is the reader's end_error (an item stays 24 bytes). */
typedef struct {
   uint8_t *blk; /* the block holding the bytes; NULL when there are none */
   uint32_t at;
   uint32_t doc_len;
   uint32_t tok_len;
   uint8_t kind;   /* item_kind_t */
   bool own_block; /* blk holds this item alone */
} item_t;

/* The reader carves its copies out of blocks of this size, in order: the
 * stream's thread frees a block once it is handed an item of the next one
 * (every item of a block comes before those of the next), so a block is
 * freed by the stream's thread alone, with no count. What is held beyond
 * the bytes counted (max_bytes) is at most the block the stream's thread is
 * on and the one the reader fills. An item over a quarter of a block gets
 * one of its own, which goes with the item. */
#define BLOCK_BYTES ((uint32_t) 32 * 1024)

/* The ring's first size; it doubles up to max_events while the stream is
 * behind, so a quiet stream keeps a small one. */
#define RING_FIRST 1024

/* The stream's thread takes what waits in runs of at most this many items
 * and half of max_bytes (one item at least), under one lock, and hands them
 * out from its own copy: the lock is taken once a run, not once an event,
 * and the reader fills the other half meanwhile. */
#define RUN_MAX 256

/* What the stream's thread took and works from without the lock: its run,
 * what it holds of it and of cur, and the item it is on. */
typedef struct {
   item_t run[RUN_MAX];
   int run_at;
   int run_n;
   size_t mine;
   bool cur_counted; /* cur's bytes are in mine */
   item_t cur;
   bool has_cur;
   uint8_t *blk; /* the shared block of the last item handed out (freed here) */
} taken_t;

struct fw_stream_reader {
   bson_t cur_doc; /* views of cur (first: bson_t wants the struct's alignment) */
   bson_t cur_tok;
   bson_t empty;
   mongoc_change_stream_t *cs;
   bool (*hold) (void *ud);
   void *hold_ud;
   bool direct; /* no thread: the calls go straight to cs */
   pthread_t thread;
   pthread_mutex_t mu;       /* mu and the two below exist only without direct */
   pthread_cond_t not_full;  /* on the monotonic clock (fw_mono_cond_init) */
   pthread_cond_t not_empty; /* likewise */
   item_t *ring;
   int cap;     /* slots in ring */
   int max_cap; /* at most this many events wait (ring and run) */
   int head;
   int count;
   size_t bytes; /* held in the ring */
   size_t max_bytes;
   /* What the stream's thread held at its last lock (run and event in
    * hand): the reader counts it. It only shrinks between locks. */
   size_t taken_bytes;
   int taken_n;
   bool stop;
   bool ended;             /* the reader handed over an error and left */
   bson_error_t end_error; /* ... that error */
   uint8_t *blk;           /* the block the reader fills (NULL: none yet) ... */
   uint32_t blk_used;      /* ... and its bytes carved out (the reader's) */
   taken_t own;            /* the stream's thread's own (no lock) */
};

static size_t
item_len (const item_t *it)
{
   return (size_t) it->doc_len + it->tok_len;
}

/* Doubles the ring (up to max_cap slots), keeping the order; under mu.
 * False when it is at max_cap or out of memory: the reader waits instead. */
static bool
ring_grow (fw_stream_reader_t *r)
{
   int cap = r->cap * 2 > r->max_cap ? r->max_cap : r->cap * 2;
   item_t *ring;

   if (cap <= r->cap || !(ring = malloc ((size_t) cap * sizeof *ring))) {
      return false;
   }
   for (int i = 0; i < r->count; i++) {
      ring[i] = r->ring[(r->head + i) % r->cap];
   }
   free (r->ring);
   r->ring = ring;
   r->cap = cap;
   r->head = 0;
   return true;
}

static uint8_t *
item_buf (const item_t *it)
{
   return it->blk + it->at;
}

/* Done with it: a block of its own goes with it (a shared one stays, see
 * BLOCK_BYTES). */
static void
item_free (item_t *it)
{
   if (it->own_block) {
      free (it->blk);
   }
   it->blk = NULL;
   it->own_block = false;
   it->doc_len = it->tok_len = 0;
}

/* Room for need bytes (need > 0) in r's block, or in a new one (the
 * reader's, under mu); NULL when out of memory. */
static uint8_t *
carve (fw_stream_reader_t *r, uint32_t need, uint32_t *at)
{
   uint32_t rounded = (need + 7u) & ~7u; /* the next copy 8-aligned */

   if (!r->blk || BLOCK_BYTES - r->blk_used < need) {
      uint8_t *blk = malloc (BLOCK_BYTES);
      if (!blk) {
         return NULL;
      }
      r->blk = blk; /* the one before is the stream's thread's to free */
      r->blk_used = 0;
   }
   *at = r->blk_used;
   r->blk_used = BLOCK_BYTES - r->blk_used < rounded ? BLOCK_BYTES : r->blk_used + rounded;
   return r->blk;
}

/* Copies doc and tok (either may be NULL) into it (the reader's, under mu).
 * False when out of memory. */
static bool
item_fill (fw_stream_reader_t *r, item_t *it, item_kind_t kind, const bson_t *doc,
           const bson_t *tok)
{
   uint32_t dl = doc ? doc->len : 0;
   uint32_t tl = tok ? tok->len : 0;
   uint8_t *buf;

   *it = (item_t){.kind = (uint8_t) kind, .doc_len = dl, .tok_len = tl};
   if (dl + tl == 0) {
      return true;
   }
   if (dl + tl > BLOCK_BYTES / 4) {
      it->own_block = true;
      it->blk = malloc ((size_t) dl + tl);
   } else {
      it->blk = carve (r, dl + tl, &it->at);
   }
   if (!it->blk) {
      it->own_block = false;
      return false;
   }
   buf = item_buf (it);
   if (dl) {
      memcpy (buf, bson_get_data (doc), dl);
   }
   if (tl) {
      memcpy (buf + dl, bson_get_data (tok), tl);
   }
   return true;
}

/* Whether the reader may read the next item (under mu): at most max_cap
 * items and max_bytes bytes wait, counting what the stream's thread took
 * (one always fits). */
static bool
may_read (fw_stream_reader_t *r)
{
   if (r->count == 0) {
      return true;
   }
   if (r->count + r->taken_n >= r->max_cap || r->bytes + r->taken_bytes >= r->max_bytes) {
      return false;
   }
   return r->count < r->cap || ring_grow (r);
}

/* Waits (under mu) until the reader may read; held: the stream's thread is
 * about to stop reading, so no new getMore, whose wait (maxAwaitTimeMS)
 * would delay its stop, for up to 100 ms. False on stop. */
static bool
wait_read (fw_stream_reader_t *r, bool held)
{
   while (!r->stop && !may_read (r)) {
      pthread_cond_wait (&r->not_full, &r->mu);
   }
   if (!r->stop && held) {
      /* Woken early by a stop; either way the caller looks again. */
      (void) fw_mono_cond_wait_ms (&r->not_full, &r->mu, 100);
   }
   return !r->stop;
}

/* Reads the next thing of cs (not under mu): an event (*doc, libmongoc's),
 * an idle mark, the error that ended it (*err), or ITEM_NONE while held. */
static item_kind_t
read_one (fw_stream_reader_t *r, bool *held, const bson_t **doc, bson_error_t *err)
{
   if (r->hold && r->hold (r->hold_ud)) {
      /* One idle mark wakes the stream's thread if it waits for events. */
      if (*held) {
         return ITEM_NONE;
      }
      *held = true;
      return ITEM_IDLE;
   }
   *held = false;
   if (mongoc_change_stream_next (r->cs, doc)) {
      return ITEM_EVENT;
   }
   /* An error with the token, as libmongoc keeps it: where a change stream
    * the server closed without an error stopped (issue 23). */
   return mongoc_change_stream_error_document (r->cs, err, NULL) ? ITEM_ERROR : ITEM_IDLE;
}

/* Hands over what read_one read (under mu, as the wait for room before it
 * and the copy: one lock an item). The next batch is read (libmongoc holds
 * it): an event's copy waits for room, counting what the stream's thread
 * holds, so that a large event is held once by libmongoc, once in hand, not
 * a third time. False on stop; *more false once the error is handed over. */
static bool
hand_over (fw_stream_reader_t *r, item_kind_t kind, const bson_t *doc, bson_error_t *err,
           bool *more)
{
   size_t len = kind == ITEM_EVENT ? doc->len : 0;
   item_t it = {0};

   while (!r->stop && (r->count > 0 || r->taken_bytes > 0) &&
          r->bytes + r->taken_bytes + len > r->max_bytes) {
      pthread_cond_wait (&r->not_full, &r->mu);
   }
   if (r->stop) {
      return false;
   }
   if (!item_fill (r, &it, kind, len ? doc : NULL, mongoc_change_stream_get_resume_token (r->cs))) {
      /* The change stream fails for the stream's thread, which re-opens
       * it from its own position: nothing read ahead is lost. */
      item_free (&it);
      it.kind = ITEM_ERROR;
      bson_set_error (err, MONGOC_ERROR_CLIENT, MONGOC_ERROR_CLIENT_NO_ACCEPTABLE_PEER,
                      "out of memory reading ahead");
   }
   r->ring[(r->head + r->count) % r->cap] = it;
   r->count++;
   r->bytes += item_len (&it);
   if (it.kind == ITEM_ERROR) {
      r->ended = true;
      r->end_error = *err;
      *more = false;
   }
   pthread_cond_signal (&r->not_empty);
   return true;
}

static void *
reader_main (void *arg)
{
   fw_stream_reader_t *r = arg;
   bool more = true;
   bool held = false;

   pthread_mutex_lock (&r->mu);
   while (more && wait_read (r, held)) {
      const bson_t *doc = NULL;
      bson_error_t err;
      item_kind_t kind;

      pthread_mutex_unlock (&r->mu);
      kind = read_one (r, &held, &doc, &err);
      pthread_mutex_lock (&r->mu);
      if (kind != ITEM_NONE && !hand_over (r, kind, doc, &err, &more)) {
         break;
      }
   }
   pthread_mutex_unlock (&r->mu);
   return NULL;
}

/* Tells the reader what the stream's thread holds now (under mu), waking it
 * when that shrank. */
static void
report_taken (fw_stream_reader_t *r)
{
   int n = r->own.run_n - r->own.run_at;
   if (r->taken_bytes != r->own.mine || r->taken_n != n) {
      r->taken_bytes = r->own.mine;
      r->taken_n = n;
      pthread_cond_signal (&r->not_full);
   }
}

/* Takes a run of what waits into r->own.run (under mu; its own is used up). */
static void
take_run (fw_stream_reader_t *r)
{
   size_t most = r->max_bytes / 2;
   size_t took = 0;

   r->own.run_at = r->own.run_n = 0;
   while (r->count > 0 && r->own.run_n < RUN_MAX) {
      item_t *it = &r->ring[r->head];
      if (r->own.run_n > 0 && took + item_len (it) > most) {
         break;
      }
      took += item_len (it);
      r->own.run[r->own.run_n++] = *it;
      r->head = (r->head + 1) % r->cap;
      r->count--;
   }
   r->bytes -= took;
   r->own.mine += took;
   report_taken (r);
}

/* Sets up r's lock and its condition variables: all or none. */
static bool
sync_init (fw_stream_reader_t *r)
{
   if (fw_mono_lock_init (&r->mu, &r->not_empty) != 0) {
      return false;
   }
   if (fw_mono_cond_init (&r->not_full) != 0) {
      fw_mono_lock_destroy (&r->mu, &r->not_empty);
      return false;
   }
   return true;
}

static void
sync_destroy (fw_stream_reader_t *r)
{
   pthread_cond_destroy (&r->not_empty);
   pthread_cond_destroy (&r->not_full);
   pthread_mutex_destroy (&r->mu);
}

fw_stream_reader_t *
fw_stream_reader_start (mongoc_change_stream_t *cs, int max_events, size_t max_bytes,
                        bool (*hold) (void *ud), void *hold_ud)
{
   fw_stream_reader_t *r = fw_bson_aligned_calloc (sizeof *r);

   if (!r) {
      return NULL;
   }
   r->cs = cs;
   r->hold = hold;
   r->hold_ud = hold_ud;
   bson_init (&r->empty);
   bson_init (&r->cur_doc);
   bson_init (&r->cur_tok);
   r->max_cap = max_events > 0 ? max_events : 1;
   r->cap = r->max_cap < RING_FIRST ? r->max_cap : RING_FIRST;
   r->max_bytes = max_bytes;
   if (!sync_init (r)) {
      r->direct = true; /* read on the caller's thread, as without read-ahead */
   } else if (!(r->ring = calloc ((size_t) r->cap, sizeof *r->ring)) ||
              pthread_create (&r->thread, NULL, reader_main, r) != 0) {
      sync_destroy (r); /* direct takes no lock */
      r->direct = true;
   }
   return r;
}

bool
fw_stream_reader_next (fw_stream_reader_t *r, const bson_t **doc)
{
   bool event;

   if (r->direct) {
      return mongoc_change_stream_next (r->cs, doc);
   }
   if (r->own.has_cur) {
      if (r->own.cur_counted) {
         r->own.mine -= item_len (&r->own.cur);
      }
      item_free (&r->own.cur);
      r->own.has_cur = false;
   }
   if (r->own.run_at == r->own.run_n) {
      pthread_mutex_lock (&r->mu);
      report_taken (r); /* room for the reader's copy */
      while (r->count == 0 && !r->ended) {
         pthread_cond_wait (&r->not_empty, &r->mu);
      }
      take_run (r);
      pthread_mutex_unlock (&r->mu);
   }
   if (r->own.run_at == r->own.run_n) {
      /* Asked again after the error: it stays, as with libmongoc. */
      r->own.cur = (item_t){.kind = ITEM_ERROR};
      r->own.cur_counted = false;
      r->own.has_cur = true;
      return false;
   }
   r->own.cur = r->own.run[r->own.run_at++];
   r->own.cur_counted = true;
   r->own.has_cur = true;
   if (r->own.cur.blk && !r->own.cur.own_block && r->own.cur.blk != r->own.blk) {
      free (r->own.blk); /* every item of the block before is done */
      r->own.blk = r->own.cur.blk;
   }

   event = r->own.cur.kind == ITEM_EVENT;
   bson_destroy (&r->cur_doc);
   bson_destroy (&r->cur_tok);
   if (!r->own.cur.doc_len ||
       !bson_init_static (&r->cur_doc, item_buf (&r->own.cur), r->own.cur.doc_len)) {
      bson_init (&r->cur_doc);
   }
   if (!r->own.cur.tok_len ||
       !bson_init_static (&r->cur_tok, item_buf (&r->own.cur) + r->own.cur.doc_len,
                          r->own.cur.tok_len)) {
      bson_init (&r->cur_tok);
   }
   if (event) {
      *doc = &r->cur_doc;
   }
   return event;
}

bool
fw_stream_reader_ready (fw_stream_reader_t *r, int64_t deadline_ms)
{
   bool ready;

   if (r->direct || r->own.run_at < r->own.run_n) {
      return true; /* next reads cs itself, or hands out the run */
   }
   pthread_mutex_lock (&r->mu);
   if (r->count == 0 && r->own.has_cur && r->own.cur_counted && deadline_ms > fw_mono_ms ()) {
      /* The caller waits for the next event with the one in hand copied
       * (a batch's): that one no longer holds the reader back. */
      r->own.mine -= item_len (&r->own.cur);
      r->own.cur_counted = false;
   }
   report_taken (r);
   while (r->count == 0 && !r->ended && deadline_ms > fw_mono_ms ()) {
      /* Signalled, woken or timed out: the loop looks again. */
      (void) fw_mono_cond_wait_until_ms (&r->not_empty, &r->mu, deadline_ms);
   }
   ready = r->count > 0 || r->ended;
   take_run (r); /* next needs no lock */
   pthread_mutex_unlock (&r->mu);
   return ready;
}

bool
fw_stream_reader_error (fw_stream_reader_t *r, bson_error_t *error)
{
   if (r->direct) {
      return mongoc_change_stream_error_document (r->cs, error, NULL);
   }
   if (r->own.has_cur && r->own.cur.kind == ITEM_ERROR) {
      *error = r->end_error; /* the last item: the reader wrote it before handing it over */
      return true;
   }
   return false;
}

const bson_t *
fw_stream_reader_resume_token (fw_stream_reader_t *r)
{
   const bson_t *tok;
   if (r->direct) {
      tok = mongoc_change_stream_get_resume_token (r->cs);
      return tok ? tok : &r->empty;
   }
   return r->own.has_cur ? &r->cur_tok : &r->empty;
}

/* At the stop: frees it, and the shared block before its own (t->blk) once
 * it is past it. */
static void
drop_waiting (taken_t *t, item_t *it)
{
   if (it->blk && !it->own_block && it->blk != t->blk) {
      free (t->blk);
      t->blk = it->blk;
   }
   item_free (it);
}

void
fw_stream_reader_stop (fw_stream_reader_t *r)
{
   if (!r) {
      return;
   }
   if (!r->direct) {
      pthread_mutex_lock (&r->mu);
      r->stop = true;
      pthread_cond_signal (&r->not_full);
      pthread_mutex_unlock (&r->mu);
      /* After its getMore in flight, if any: at most maxAwaitTimeMS when idle. */
      pthread_join (r->thread, NULL);
      if (r->own.has_cur) {
         item_free (&r->own.cur);
      }
      /* The shared blocks in order, each once: the stream's thread's, those
       * of what waits, the reader's. */
      while (r->own.run_at < r->own.run_n) {
         drop_waiting (&r->own, &r->own.run[r->own.run_at++]);
      }
      while (r->count > 0) {
         drop_waiting (&r->own, &r->ring[r->head]);
         r->head = (r->head + 1) % r->cap;
         r->count--;
      }
      if (r->blk != r->own.blk) {
         free (r->blk);
      }
      free (r->own.blk);
      sync_destroy (r);
   }
   bson_destroy (&r->cur_doc);
   bson_destroy (&r->cur_tok);
   free (r->ring);
   bson_destroy (&r->empty);
   free (r);
}
