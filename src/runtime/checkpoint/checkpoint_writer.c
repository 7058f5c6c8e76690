/*
 * checkpoint_writer.c - a stream's checkpoint writes on threads of their own
 * (checkpoint.mode = "async"; see checkpoint_writer.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/check.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/mono_cond.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/checkpoint_writer.h"

/* A failed write is tried again after this long, unless a newer position
 * comes first (it is then written at once). */
#define RETRY_MS 1000

/* MongoDB's writer keeps this many writes in flight at most: with the
 * handler 19 saves ahead (stream_position.c) and a write every 19 / 5 ~ 4
 * hand-overs, four cover a round trip of ~16 hand-overs (docs/performance.md,
 * "Catching up over a network"). */
#define FW_CHECKPOINT_WRITES_IN_FLIGHT 4

/* The hand-over time of a seq whose time is not known (the position the
 * writer started from): older than any allowance, so until the first write
 * ends only max_behind holds the handler back. */
#define TRIED_LONG_AGO INT64_MIN

/* The MongoDB sink: conn 0's client for the writer's life, the others' for
 * one write at a time; the writer's stamp (fw_checkpoint_save_ordered). */
typedef struct {
   mongoc_client_pool_t *pool;
   mongoc_client_t *client[FW_CHECKPOINT_MAX_IN_FLIGHT];
   char *database;
   char *stream;
   int64_t gen; /* the run's writer generation (fw_checkpoint_claim_generation); 0: none */
   bson_oid_t id;
} mongo_sink_t;

/* One position, as raw BSON: no bson_t lives on the heap. */
typedef struct {
   uint8_t *processed;
   uint32_t processed_len; /* 0: none */
   uint8_t *seen;
   uint32_t seen_len; /* 0: none */
   char *version;     /* NULL: none */
   uint64_t seq;      /* the hand-over it came from, 1, 2, ... */
   int64_t handed_ns; /* when it was handed over (fw_mono_ns) */
} slot_t;

/* A connection: its thread writes the slot the writer gives it. */
typedef struct {
   fw_checkpoint_writer_t *cw;
   int index;
   pthread_t thread;
   bool running;      /* its thread runs (joined at destroy) */
   pthread_cond_t go; /* the thread waits here for a slot or stop */
   bool go_made;      /* go is set up (fw_mono_cond_init): destroyed at free */
   slot_t slot;       /* the position being written (busy) */
   bool busy;
   int64_t epoch; /* the slot's fencing epoch, taken when it was given */
   bool borrowed; /* index > 0: the sink opened it for this write */
} conn_t;

struct fw_checkpoint_writer {
   fw_checkpoint_sink_t sink;
   mongo_sink_t *mongo; /* the sink's ud when it is MongoDB's (owned), else NULL */
   int64_t retry_ms;
   char *stream;
   pthread_mutex_t mu;
   pthread_cond_t done; /* callers wait here for a write to end */
   conn_t conn[FW_CHECKPOINT_MAX_IN_FLIGHT];
   int n_conn;
   slot_t pending;
   bool has_pending;
   uint64_t submitted;  /* seq of the last position handed over */
   uint64_t tried;      /* the newest seq whose write ended (written, failed, superseded) */
   int64_t tried_ns;    /* ... when it was handed over; TRIED_LONG_AGO: unknown (seq 0) */
   uint64_t started;    /* the newest seq given to a connection */
   int64_t started_ns;  /* ... when it was handed over */
   uint64_t gap;        /* a second write in flight starts this many hand-overs apart */
   int64_t gap_ns;      /* ... and this long apart (their hand-overs) */
   uint64_t lagging;    /* ... and only this many hand-overs past the newest tried */
   int64_t lagging_ns;  /* ... handed over this long after it */
   uint64_t retry_seq;  /* a failed position waiting for its retry; 0: none */
   int64_t retry_at_ms; /* ... not before this CLOCK_MONOTONIC time */
   bool stop;
   bool quiescing;    /* quiesce waits: nothing starts */
   int64_t epoch;     /* ha.mode = "leader": writes are fenced with it; 0: plain */
   int64_t max_epoch; /* the highest epoch set (checked: epochs only grow) */
   uint64_t written;  /* the newest seq stored (checked: never back) */
   /* a newer run of the stream refused a write (FW_CHECKPOINT_REFUSED):
    * nothing starts again; refusal says why (fw_checkpoint_writer_refused).
    * Set under the lock, once, with a release store after refusal. */
   bool refused;
   fw_error_t refusal;
   int ok;
   int failed;
   int64_t last_ok_ms;
};

/* Copies len bytes of src into *buf (grown as needed). False when out of
 * memory: *len is then 0 and the field is left out of the write. */
static bool
copy_bytes (uint8_t **buf, uint32_t *len, const bson_t *src)
{
   uint8_t *grown;
   *len = 0;
   if (!src) {
      return true;
   }
   if (!(grown = realloc (*buf, src->len))) {
      return false;
   }
   *buf = grown;
   memcpy (*buf, bson_get_data (src), src->len);
   *len = src->len;
   return true;
}

static void
slot_free (slot_t *s)
{
   free (s->processed);
   free (s->seen);
   free (s->version);
   memset (s, 0, sizeof *s);
}

static void
slot_swap (slot_t *a, slot_t *b)
{
   slot_t t = *a;
   *a = *b;
   *b = t;
}

/* ---- the MongoDB sink ---- */

static bool
mongo_open (void *ud, int conn, bool wait)
{
   mongo_sink_t *m = ud;
   m->client[conn] = wait ? mongoc_client_pool_pop (m->pool) : mongoc_client_pool_try_pop (m->pool);
   return m->client[conn] != NULL;
}

static void
mongo_close (void *ud, int conn)
{
   mongo_sink_t *m = ud;
   if (m->client[conn]) {
      mongoc_client_pool_push (m->pool, m->client[conn]);
      m->client[conn] = NULL;
   }
}

static fw_checkpoint_saved_t
mongo_write (void *ud, int conn, const fw_checkpoint_write_t *w, fw_error_t *error)
{
   mongo_sink_t *m = ud;

   if (!m->client[conn]) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "cannot save checkpoint of stream \"%s\": no client for the checkpoint "
                    "writer",
                    m->stream);
      return FW_CHECKPOINT_NOT_SAVED;
   }
   return fw_checkpoint_save_ordered (m->client[conn], m->database, m->stream, w->processed,
                                      w->seen, w->version, w->epoch, m->gen, &m->id,
                                      (int64_t) w->seq, error);
}

static void
mongo_free (mongo_sink_t *m)
{
   if (m) {
      free (m->database);
      free (m->stream);
      free (m);
   }
}

/* ---- scheduling, with the lock held ---- */

/* True when pending may be written now; else *wait_ms says how long to wait
 * for its retry (-1: until signalled). */
static bool
writable (const fw_checkpoint_writer_t *cw, int64_t *wait_ms)
{
   int64_t now;
   *wait_ms = -1;
   if (!cw->has_pending) {
      return false;
   }
   if (cw->retry_seq == 0 || cw->pending.seq > cw->retry_seq) {
      return true;
   }
   now = fw_mono_ms ();
   if (now >= cw->retry_at_ms) {
      return true;
   }
   *wait_ms = cw->retry_at_ms - now;
   return false;
}

static int
busy_count (const fw_checkpoint_writer_t *cw)
{
   int n = 0;
   for (int i = 0; i < cw->n_conn; i++) {
      n += cw->conn[i].busy;
   }
   return n;
}

static void *conn_main (void *arg);

/* Whether the writer lags: the handler has used half of its bound, in
 * hand-overs past the newest tried and in time since that one's hand-over
 * (both halves, as the handler waits only when both are used up). */
static bool
lagging (const fw_checkpoint_writer_t *cw)
{
   return cw->submitted - cw->tried >= cw->lagging &&
          (cw->tried_ns == TRIED_LONG_AGO ||
           cw->pending.handed_ns - cw->tried_ns >= cw->lagging_ns);
}

/* Whether pending is far enough past the last write started, in hand-overs
 * and in time, for one more write in flight: the writes start spread over
 * the handler's bound. */
static bool
spaced (const fw_checkpoint_writer_t *cw)
{
   return cw->pending.seq >= cw->started + cw->gap &&
          cw->pending.handed_ns - cw->started_ns >= cw->gap_ns;
}

/* c's thread, started the first time c is needed (conn 0's with the
 * writer): a writer that never lags keeps one thread. False when it cannot
 * start: the writer then keeps the connections it has (none after c has
 * started, as they are taken in order). */
static bool
conn_running (fw_checkpoint_writer_t *cw, conn_t *c)
{
   if (!c->running && !(c->running = pthread_create (&c->thread, NULL, conn_main, c) == 0)) {
      cw->n_conn = c->index;
   }
   return c->running;
}

/* Gives pending to a free connection when it may start: conn 0 (the
 * writer's own) first; another only while a write is in flight, when the
 * writer lags (lagging hand-overs past the newest tried: on a fast network
 * the one write keeps up, and a server that stalls every write is not sent
 * more) and pending is gap hand-overs past the last one started, and only
 * when the sink lends it a connection now. */
static void
dispatch (fw_checkpoint_writer_t *cw)
{
   int64_t wait_ms = -1;
   int busy;

   if (cw->stop || cw->quiescing || cw->refused || !writable (cw, &wait_ms)) {
      if (wait_ms >= 0 && !cw->conn[0].busy) {
         pthread_cond_signal (&cw->conn[0].go); /* conn 0 keeps the retry's time */
      }
      return;
   }
   busy = busy_count (cw);
   if (busy > 0 && !(lagging (cw) && spaced (cw))) {
      return; /* it waits for a write to end */
   }
   for (int i = 0; i < cw->n_conn; i++) {
      conn_t *c = &cw->conn[i];
      if (c->busy ||
          (i > 0 && (!conn_running (cw, c) ||
                     !(c->borrowed = !cw->sink.open || cw->sink.open (cw->sink.ud, i, false))))) {
         continue;
      }
      /* Positions start in the order they were handed over (a retry again),
       * and never one that a later write stored already. */
      FW_ASSERT (cw->pending.seq > cw->written && cw->pending.seq >= cw->started);
      slot_swap (&c->slot, &cw->pending); /* the next hand-over reuses the old buffers */
      cw->has_pending = false;
      c->busy = true;
      c->epoch = cw->epoch;
      cw->started = c->slot.seq;
      cw->started_ns = c->slot.handed_ns;
      pthread_cond_signal (&c->go);
      return;
   }
}

/* Whether a write newer than seq is handed over, in flight or stored. */
static bool
newer_than (const fw_checkpoint_writer_t *cw, uint64_t seq)
{
   if (cw->written >= seq || (cw->has_pending && cw->pending.seq > seq)) {
      return true;
   }
   for (int i = 0; i < cw->n_conn; i++) {
      if (cw->conn[i].busy && cw->conn[i].slot.seq > seq) {
         return true;
      }
   }
   return false;
}

/* c's write ended with saved (err when not saved). */
static void
finish (fw_checkpoint_writer_t *cw, conn_t *c, fw_checkpoint_saved_t saved, const fw_error_t *err)
{
   uint64_t seq = c->slot.seq;

   c->busy = false;
   c->borrowed = false;
   if (seq > cw->tried) {
      cw->tried = seq;
      cw->tried_ns = c->slot.handed_ns;
   }
   if (saved == FW_CHECKPOINT_REFUSED) {
      /* A newer run holds the checkpoint: no write of this run can land
       * again. Nothing is tried again; the stream learns it and stops. */
      cw->failed++;
      if (!cw->refused) {
         cw->refusal = *err;
         __atomic_store_n (&cw->refused, true, __ATOMIC_RELEASE); /* after refusal */
      }
      cw->has_pending = false;
      cw->retry_seq = 0;
   } else if (saved != FW_CHECKPOINT_NOT_SAVED) {
      /* Superseded: a later position of this writer is stored, which holds
       * this one. */
      if (seq > cw->written) {
         cw->written = seq;
      }
      cw->ok++;
      cw->last_ok_ms = fw_now_ms ();
      if (cw->retry_seq <= seq) {
         cw->retry_seq = 0;
      }
   } else {
      cw->failed++;
      fw_log (FW_LOG_ERROR, cw->stream, "%s (checkpoint writer); will try again", err->message);
      /* Nothing newer handed over, in flight or stored: this position is the
       * one to write, after the wait. A newer one is written instead (at
       * once), and tried again itself if it fails. */
      if (!newer_than (cw, seq)) {
         FW_ASSERT (!cw->has_pending);
         slot_swap (&cw->pending, &c->slot);
         cw->has_pending = true;
         cw->retry_seq = seq;
         cw->retry_at_ms = fw_mono_ms () + cw->retry_ms;
      }
   }
   pthread_cond_broadcast (&cw->done);
}

/* ---- the connections' threads ---- */

/* With the lock held: waits until c has a slot to write or the writer
 * stops. conn 0 also keeps the time of a retry: when it is due, dispatch
 * gives it to a connection. False: stop. */
static bool
await_slot (fw_checkpoint_writer_t *cw, conn_t *c)
{
   while (!c->busy && !cw->stop) {
      int64_t wait_ms = -1;
      if (c->index == 0 && cw->has_pending && !cw->refused) {
         dispatch (cw);
         if (c->busy) {
            break;
         }
         writable (cw, &wait_ms);
      }
      if (wait_ms >= 0) {
         fw_mono_cond_wait_ms (&c->go, &cw->mu, wait_ms);
      } else {
         pthread_cond_wait (&c->go, &cw->mu);
      }
   }
   return c->busy;
}

static void *
conn_main (void *arg)
{
   conn_t *c = arg;
   fw_checkpoint_writer_t *cw = c->cw;

   if (c->index == 0 && cw->sink.open) {
      cw->sink.open (cw->sink.ud, 0, true);
   }
   pthread_mutex_lock (&cw->mu);
   while (await_slot (cw, c)) {
      fw_error_t err = {0};
      bson_t processed, seen;
      const slot_t *s = &c->slot;
      bool has_processed = s->processed_len > 0 &&
                           bson_init_static (&processed, s->processed, s->processed_len);
      bool has_seen = s->seen_len > 0 && bson_init_static (&seen, s->seen, s->seen_len);
      fw_checkpoint_write_t w = {has_processed ? &processed : NULL, has_seen ? &seen : NULL,
                                 s->version, c->epoch, s->seq};
      fw_checkpoint_saved_t saved;

      pthread_mutex_unlock (&cw->mu);
      saved = cw->sink.write (cw->sink.ud, c->index, &w, &err);
      if (c->index > 0 && c->borrowed && cw->sink.close) {
         cw->sink.close (cw->sink.ud, c->index);
      }
      pthread_mutex_lock (&cw->mu);
      finish (cw, c, saved, &err);
      dispatch (cw);
   }
   pthread_mutex_unlock (&cw->mu);
   if (c->index == 0 && cw->sink.close) {
      cw->sink.close (cw->sink.ud, 0);
   }
   return NULL;
}

/* ---- the writer ---- */

static void
writer_free (fw_checkpoint_writer_t *cw)
{
   for (int i = 0; i < FW_CHECKPOINT_MAX_IN_FLIGHT; i++) { /* n_conn may have shrunk */
      slot_free (&cw->conn[i].slot);
      if (cw->conn[i].go_made) {
         pthread_cond_destroy (&cw->conn[i].go);
      }
   }
   slot_free (&cw->pending);
   pthread_cond_destroy (&cw->done);
   pthread_mutex_destroy (&cw->mu);
   free (cw->stream);
   free (cw);
}

/* cw's lock and its done condition: 0, or the pthread error code with neither
 * set up. */
static int
init_lock (fw_checkpoint_writer_t *cw)
{
   int rc = pthread_mutex_init (&cw->mu, NULL);

   if (rc == 0 && (rc = pthread_cond_init (&cw->done, NULL)) != 0) {
      pthread_mutex_destroy (&cw->mu);
   }
   return rc;
}

/* Stops the connections' threads (quiesced: none is busy) and joins them. */
static void
stop_conns (fw_checkpoint_writer_t *cw)
{
   pthread_mutex_lock (&cw->mu);
   cw->stop = true;
   for (int i = 0; i < cw->n_conn; i++) {
      pthread_cond_signal (&cw->conn[i].go);
   }
   pthread_mutex_unlock (&cw->mu);
   for (int i = 0; i < cw->n_conn; i++) {
      if (cw->conn[i].running) {
         pthread_join (cw->conn[i].thread, NULL);
      }
   }
}

fw_checkpoint_writer_t *
fw_checkpoint_writer_start (const fw_checkpoint_sink_t *sink, const char *stream, int64_t retry_ms,
                            int max_in_flight, fw_error_t *error)
{
   fw_checkpoint_writer_t *cw = calloc (1, sizeof *cw);
   int rc = 0;

   FW_ASSERT (max_in_flight >= 1 && max_in_flight <= FW_CHECKPOINT_MAX_IN_FLIGHT);
   if (!cw || !(cw->stream = strdup (stream))) {
      fw_error_set (error, FW_ERROR_NOMEM,
                    "out of memory starting the checkpoint writer of "
                    "stream \"%s\"",
                    stream);
      free (cw);
      return NULL;
   }
   cw->sink = *sink;
   cw->retry_ms = retry_ms;
   cw->tried_ns = TRIED_LONG_AGO;
   cw->gap = 1;
   cw->n_conn = max_in_flight;
   if ((rc = init_lock (cw)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot set up the checkpoint writer of stream \"%s\": %s",
                    stream, strerror (rc));
      free (cw->stream);
      free (cw);
      return NULL;
   }
   for (int i = 0; i < FW_CHECKPOINT_MAX_IN_FLIGHT; i++) {
      cw->conn[i].cw = cw;
      cw->conn[i].index = i;
      if ((rc = fw_mono_cond_init (&cw->conn[i].go)) != 0) {
         fw_error_set (error, FW_ERROR_IO,
                       "cannot set up the checkpoint writer of stream \"%s\": %s", stream,
                       strerror (rc));
         writer_free (cw);
         return NULL;
      }
      cw->conn[i].go_made = true;
   }
   rc = pthread_create (&cw->conn[0].thread, NULL, conn_main, &cw->conn[0]);
   cw->conn[0].running = rc == 0;
   if (rc != 0) {
      fw_error_set (error, FW_ERROR_IO,
                    "cannot start the checkpoint writer threads of stream \"%s\": %s", stream,
                    strerror (rc));
      stop_conns (cw);
      writer_free (cw);
      return NULL;
   }
   return cw;
}

fw_checkpoint_writer_t *
fw_checkpoint_writer_new (mongoc_client_pool_t *pool, const char *database, const char *stream,
                          int64_t gen, fw_error_t *error)
{
   mongo_sink_t *m = calloc (1, sizeof *m);
   fw_checkpoint_writer_t *cw;

   if (!m || !(m->database = strdup (database)) || !(m->stream = strdup (stream))) {
      mongo_free (m);
      fw_error_set (error, FW_ERROR_NOMEM,
                    "out of memory starting the checkpoint writer of "
                    "stream \"%s\"",
                    stream);
      return NULL;
   }
   m->pool = pool;
   m->gen = gen;
   bson_oid_init (&m->id, NULL); /* unique per writer: this process's, counted */
   fw_checkpoint_sink_t sink = {mongo_open, mongo_write, mongo_close, m};
   if (!(cw = fw_checkpoint_writer_start (&sink, stream, RETRY_MS, FW_CHECKPOINT_WRITES_IN_FLIGHT,
                                          error))) {
      mongo_free (m);
      return NULL;
   }
   cw->mongo = m;
   return cw;
}

/* With the lock held: whether a hand-over made at now_ns must wait for the
 * writer: no newer run refused a write, max_behind hand-overs or more are
 * past the newest tried and that one was handed over max_unsaved_ns or
 * longer ago. Time only makes the newest tried older, so only a write's end
 * ends the wait. */
static bool
must_wait (const fw_checkpoint_writer_t *cw, int max_behind, int64_t max_unsaved_ns, int64_t now_ns)
{
   return max_behind > 0 && !cw->refused && cw->submitted - cw->tried >= (uint64_t) max_behind &&
          (cw->tried_ns == TRIED_LONG_AGO || now_ns - cw->tried_ns >= max_unsaved_ns);
}

/* With the lock held: the in-flight policy for a bound of max_behind
 * hand-overs and max_unsaved_ns (see dispatch). */
static void
set_policy (fw_checkpoint_writer_t *cw, int max_behind, int64_t max_unsaved_ns)
{
   /* max_behind / (n + 1) apart, rounded up: n writes in flight and the
    * handler's lead split the bound evenly; more than one once half of it is
    * used. The same for the time allowance. */
   cw->gap = max_behind > 0
                ? ((uint64_t) max_behind + (uint64_t) cw->n_conn) / ((uint64_t) cw->n_conn + 1)
                : 1;
   cw->lagging = max_behind > 0 ? (uint64_t) max_behind / 2 : 0;
   cw->gap_ns = max_behind > 0 ? max_unsaved_ns / (cw->n_conn + 1) : 0;
   cw->lagging_ns = max_behind > 0 ? max_unsaved_ns / 2 : 0;
}

void
fw_checkpoint_writer_submit (fw_checkpoint_writer_t *cw, const bson_t *processed,
                             const bson_t *seen, const char *script_version, int max_behind,
                             int64_t max_unsaved_ms)
{
   int64_t max_unsaved_ns = max_unsaved_ms > 0 ? max_unsaved_ms * 1000000 : 0;
   int64_t now_ns = fw_mono_ns ();

   pthread_mutex_lock (&cw->mu);
   set_policy (cw, max_behind, max_unsaved_ns);
   if (must_wait (cw, max_behind, max_unsaved_ns, now_ns)) {
      dispatch (cw); /* a further write may start now that the writer lags */
      while (must_wait (cw, max_behind, max_unsaved_ns, now_ns)) {
         pthread_cond_wait (&cw->done, &cw->mu);
      }
      now_ns = fw_mono_ns (); /* the hand-over's time: after the wait */
   }
   if (cw->refused) {
      /* Nothing of this run is written any more: the hand-over ends here. */
      cw->tried = ++cw->submitted;
      pthread_mutex_unlock (&cw->mu);
      return;
   }
   /* Out of memory for a token: the field is left as it is in the store,
    * which only holds it back (an older token, never a later one). */
   if (!copy_bytes (&cw->pending.processed, &cw->pending.processed_len, processed) ||
       !copy_bytes (&cw->pending.seen, &cw->pending.seen_len, seen)) {
      fw_log (FW_LOG_ERROR, cw->stream,
              "out of memory handing a checkpoint to its writer; the stored checkpoint stays "
              "behind until the next one");
   }
   free (cw->pending.version);
   cw->pending.version = script_version ? strdup (script_version) : NULL;
   cw->pending.seq = ++cw->submitted;
   cw->pending.handed_ns = now_ns;
   cw->has_pending = true;
   dispatch (cw);
   pthread_mutex_unlock (&cw->mu);
}

void
fw_checkpoint_writer_set_origin (fw_checkpoint_writer_t *cw, int64_t handed_ns)
{
   pthread_mutex_lock (&cw->mu);
   FW_ASSERT (cw->submitted == 0);
   cw->tried_ns = handed_ns;
   pthread_mutex_unlock (&cw->mu);
}

void
fw_checkpoint_writer_quiesce (fw_checkpoint_writer_t *cw)
{
   pthread_mutex_lock (&cw->mu);
   cw->quiescing = true;
   while (busy_count (cw) > 0) {
      pthread_cond_wait (&cw->done, &cw->mu);
   }
   /* What waits (a write that failed meanwhile may have put its position
    * back) is superseded by the caller's save. */
   cw->quiescing = false;
   cw->has_pending = false;
   cw->retry_seq = 0;
   cw->tried = cw->submitted;
   cw->tried_ns = fw_mono_ns (); /* the caller's save, which follows, holds what was handled */
   pthread_mutex_unlock (&cw->mu);
}

bool
fw_checkpoint_writer_stamp (fw_checkpoint_writer_t *cw, bson_oid_t *writer, int64_t *seq)
{
   pthread_mutex_lock (&cw->mu);
   FW_ASSERT (busy_count (cw) == 0 && !cw->has_pending); /* quiesced */
   /* The caller's save takes a hand-over's place: the next ones come after
    * it, and the handler's bound counts from it. */
   *seq = (int64_t) ++cw->submitted;
   cw->tried = cw->submitted;
   cw->tried_ns = fw_mono_ns ();
   pthread_mutex_unlock (&cw->mu);
   if (!cw->mongo) {
      return false;
   }
   bson_oid_copy (&cw->mongo->id, writer);
   return true;
}

void
fw_checkpoint_writer_set_epoch (fw_checkpoint_writer_t *cw, int64_t epoch)
{
   pthread_mutex_lock (&cw->mu);
   /* Fencing epochs only grow: a new lead has a higher one (0: none). */
   FW_ASSERT (epoch == 0 || epoch >= cw->max_epoch);
   cw->epoch = epoch;
   if (epoch > cw->max_epoch) {
      cw->max_epoch = epoch;
   }
   pthread_mutex_unlock (&cw->mu);
}

bool
fw_checkpoint_writer_refused (fw_checkpoint_writer_t *cw, fw_error_t *why)
{
   /* Asked at every event boundary: no lock until it is refused. */
   if (!__atomic_load_n (&cw->refused, __ATOMIC_ACQUIRE)) {
      return false;
   }
   if (why) {
      pthread_mutex_lock (&cw->mu);
      *why = cw->refusal;
      pthread_mutex_unlock (&cw->mu);
   }
   return true;
}

void
fw_checkpoint_writer_take_results (fw_checkpoint_writer_t *cw, int *ok, int *failed,
                                   int64_t *last_ok_ms)
{
   pthread_mutex_lock (&cw->mu);
   *ok = cw->ok;
   *failed = cw->failed;
   *last_ok_ms = cw->last_ok_ms;
   cw->ok = cw->failed = 0;
   pthread_mutex_unlock (&cw->mu);
}

void
fw_checkpoint_writer_destroy (fw_checkpoint_writer_t *cw)
{
   if (!cw) {
      return;
   }
   fw_checkpoint_writer_quiesce (cw);
   stop_conns (cw);
   mongo_free (cw->mongo);
   writer_free (cw);
}
