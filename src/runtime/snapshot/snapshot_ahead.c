/*
 * snapshot_ahead.c - a snapshot's chunks read ahead on a thread of its own
 * (snapshot.h, fw_snapshot_ahead_start), so that reading the next chunks
 * overlaps the stream's thread handing out the due ones and handling live
 * events.
 *
 * The thread reads in runs (one session, a chunk's high watermark the next
 * one's low), up to FW_SNAPSHOT_MAX_CHUNKS chunks held with the engine's;
 * the stream's thread queues what it read (fw_snapshot_ahead_collect). A
 * chunk's window may hold live events the stream showed the engine before
 * the chunk joined the queue: while a run's chunks are not all queued, the
 * engine keeps the live events it is shown (snapshot.c, log_live), and a
 * chunk joining drops its rows of every kept event after its low watermark
 * (one after its high watermark was handled already, before the row: the
 * row would be stale). An event kept during run r matters only to chunks
 * of runs up to r: a later run writes its first low watermark after the
 * event was shown (the run's number is raised before that write).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "flowwarden/mono_cond.h"
#include "runtime/snapshot/snapshot-private.h"

struct fw_snapshot_ahead {
   fw_snapshot_cursor_t cur; /* the thread's */
   const fw_snapshot_t *s;   /* its settings, filter and bound only */
   mongoc_client_pool_t *pool;
   mongoc_client_t *client; /* popped from pool for the thread's life */
   int64_t pause_ms, retry_ms;
   pthread_t thread;
   pthread_mutex_t mu;
   pthread_cond_t cv; /* on the monotonic clock (fw_mono_cond_init) */
   uint64_t run;      /* atomic: the run of reads, from 1 */
   /* Under mu. */
   bool stop;
   int queued; /* chunks in the engine's queue */
   chunk_t ready[FW_SNAPSHOT_MAX_CHUNKS];
   int n_ready;
   bool run_whole; /* run ended: its chunks are all in ready or queued */
   bool ended;     /* no row is left: the last chunks are in ready */
   bool failed;    /* a read failed since the last collect: error */
   bool has_until; /* the upper bound the first read found: until */
   bson_t until;
   fw_error_t error;
};

uint64_t
fw_snapshot_ahead_run (const fw_snapshot_ahead_t *a)
{
   return __atomic_load_n (&a->run, __ATOMIC_SEQ_CST);
}

/* Ends the thread's run of reads (under mu). */
static void
end_run (fw_snapshot_ahead_t *a)
{
   fw_snapshot_cursor_end (&a->cur);
   a->run_whole = true;
}

/* Waits on cv for ms (under mu), or until signalled. */
static void
wait_ms (fw_snapshot_ahead_t *a, int64_t ms)
{
   (void) fw_mono_cond_wait_ms (&a->cv, &a->mu, ms);
}

/* One read (mu held on entry and return): its chunk into ready. */
static void
read_one (fw_snapshot_ahead_t *a)
{
   chunk_t ch = {0};
   fw_error_t err;
   uint64_t run;
   bool ok;

   if (!a->cur.cs) {
      /* A new run: its number is raised before its low watermark is
       * written, so every live event shown from now on is kept for it. */
      a->run_whole = false;
      __atomic_add_fetch (&a->run, 1, __ATOMIC_SEQ_CST);
   }
   run = a->run;
   pthread_mutex_unlock (&a->mu);
   ok = fw_snapshot_cursor_read (a->s, &a->cur, a->client, &ch, &err);
   pthread_mutex_lock (&a->mu);
   if (!ok) {
      a->failed = true;
      a->error = err;
      end_run (a);
      wait_ms (a, a->retry_ms);
      return;
   }
   if (a->cur.has_until && !a->has_until) {
      a->has_until = bson_concat (&a->until, &a->cur.until);
   }
   if (ch.n_rows > 0) {
      ch.run = run;
      a->ready[a->n_ready++] = ch;
   }
   if (a->cur.ended) {
      a->ended = true;
      end_run (a);
   } else if (a->pause_ms > 0) {
      end_run (a);
      wait_ms (a, a->pause_ms);
   }
}

static void *
ahead_main (void *arg)
{
   fw_snapshot_ahead_t *a = arg;

   pthread_mutex_lock (&a->mu);
   while (!a->stop) {
      if (a->ended || a->queued + a->n_ready >= FW_SNAPSHOT_MAX_CHUNKS) {
         /* No room: the run ends, so that the events shown while it waits
          * need not be kept (the next run writes a low watermark after
          * them). */
         end_run (a);
         pthread_cond_wait (&a->cv, &a->mu);
         continue;
      }
      read_one (a);
   }
   end_run (a);
   pthread_mutex_unlock (&a->mu);
   return NULL;
}

bool
fw_snapshot_may_read_ahead (const fw_snapshot_t *s)
{
   return !s->exhausted && !s->ahead_off;
}

bool
fw_snapshot_reading_ahead (const fw_snapshot_t *s)
{
   return s->ahead != NULL;
}

/* The boundary the reads ahead start after: the last row queued, else the
 * last one handed out (NULL: from the start); into after (initialized). */
static const bson_t *
queue_tail (const fw_snapshot_t *s, bson_t *after)
{
   bson_iter_t it;
   bson_t last;

   if (s->n_chunks > 0) {
      const chunk_t *ch = &s->chunk[s->n_chunks - 1];
      fw_snapshot_row_key (ch, ch->n_rows - 1, &last);
      if (bson_iter_init (&it, &last) && bson_iter_next (&it) &&
          bson_append_iter (after, "_id", 3, &it)) {
         return after;
      }
   }
   return s->progress.has_after ? &s->progress.after : NULL;
}

bool
fw_snapshot_ahead_start (fw_snapshot_t *s, mongoc_client_pool_t *pool, int64_t pause_ms,
                         int64_t retry_ms, fw_error_t *error)
{
   size_t size = (sizeof (fw_snapshot_ahead_t) + 127) / 128 * 128;
   fw_snapshot_ahead_t *a;
   bson_t after = BSON_INITIALIZER;
   bool locks_made;
   int rc;

   if (s->ahead || !fw_snapshot_may_read_ahead (s)) {
      return true;
   }
   if (!(a = aligned_alloc (_Alignof(fw_snapshot_ahead_t), size))) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory starting the snapshot's reads");
      return false;
   }
   memset (a, 0, sizeof *a);
   if (!(a->client = mongoc_client_pool_try_pop (pool))) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "no connection of the pool is free for the snapshot's reads ahead");
      free (a);
      return false;
   }
   fw_snapshot_cursor_end (&s->cur); /* the stream's own run, if any */
   fw_snapshot_cursor_init (&a->cur, s, queue_tail (s, &after));
   bson_init (&a->until);
   bson_destroy (&after);
   a->s = s;
   a->pool = pool;
   a->pause_ms = pause_ms;
   a->retry_ms = retry_ms;
   a->queued = s->n_chunks;
   locks_made = (rc = fw_mono_lock_init (&a->mu, &a->cv)) == 0;
   if (!locks_made || (rc = pthread_create (&a->thread, NULL, ahead_main, a)) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start the snapshot's reading thread: %s",
                    strerror (rc));
      if (locks_made) {
         fw_mono_lock_destroy (&a->mu, &a->cv);
      }
      fw_snapshot_cursor_cleanup (&a->cur);
      bson_destroy (&a->until);
      mongoc_client_pool_push (pool, a->client);
      free (a);
      return false;
   }
   s->ahead = a;
   s->logged_upto = 0;
   return true;
}

/* Frees the engine's kept live events. */
static void
log_clear (fw_snapshot_t *s, int keep_from)
{
   int n = 0;

   for (int i = 0; i < s->n_log; i++) {
      if (i < keep_from) {
         free (s->log[i].key);
      } else {
         s->log[n++] = s->log[i];
      }
   }
   s->n_log = n;
}

void
fw_snapshot_ahead_stop (fw_snapshot_t *s)
{
   fw_snapshot_ahead_t *a = s->ahead;

   if (!a) {
      return;
   }
   pthread_mutex_lock (&a->mu);
   a->stop = true;
   pthread_cond_signal (&a->cv);
   pthread_mutex_unlock (&a->mu);
   pthread_join (a->thread, NULL);
   for (int i = 0; i < a->n_ready; i++) {
      fw_snapshot_chunk_clear (&a->ready[i]);
   }
   fw_snapshot_cursor_cleanup (&a->cur);
   bson_destroy (&a->until);
   mongoc_client_pool_push (a->pool, a->client);
   fw_mono_lock_destroy (&a->mu, &a->cv);
   free (a);
   s->ahead = NULL;
   log_clear (s, s->n_log);
   free (s->log);
   s->log = NULL;
   s->cap_log = 0;
   s->log_full = false;
   s->logged_upto = 0;
}

void
fw_snapshot_ahead_room (fw_snapshot_t *s)
{
   fw_snapshot_ahead_t *a = s->ahead;

   pthread_mutex_lock (&a->mu);
   a->queued = s->n_chunks;
   pthread_cond_signal (&a->cv);
   pthread_mutex_unlock (&a->mu);
}

/* ch joins the queue: its rows of the live events kept for it dropped. */
static void
join (fw_snapshot_t *s, chunk_t *ch)
{
   for (int i = 0; i < s->n_log; i++) {
      const live_t *e = &s->log[i];
      if (e->run >= ch->run) {
         fw_snapshot_drop_rows (s, ch, e->ts ? e->ts : ch->low + 1, e->key, e->len, e->hash);
      }
   }
   fw_snapshot_queue (s, ch);
}

/* After the chunks read were queued: the kept events no chunk still to
 * come can need (all once the run is whole; else those of earlier runs and
 * those at or before floor, the low watermark of the run's next chunk). */
static void
log_prune (fw_snapshot_t *s, uint64_t run, bool whole, uint64_t floor)
{
   int n = 0;

   if (whole) {
      s->logged_upto = run;
      log_clear (s, s->n_log);
      return;
   }
   for (int i = 0; i < s->n_log; i++) {
      live_t *e = &s->log[i];
      if (e->run < run || (e->ts && e->ts <= floor)) {
         free (e->key);
      } else {
         s->log[n++] = *e;
      }
   }
   s->n_log = n;
}

bool
fw_snapshot_ahead_collect (fw_snapshot_t *s, fw_error_t *error)
{
   fw_snapshot_ahead_t *a = s->ahead;
   bool failed, ended, whole;
   uint64_t run, floor = 0;

   if (!a) {
      return true;
   }
   if (s->log_full) {
      /* A live event could not be kept (a stream busy while a read is held
       * up): the chunks not queued yet are read again, on the caller's
       * thread, which shares itself with the live events. */
      bson_t after = BSON_INITIALIZER;
      fw_snapshot_ahead_stop (s);
      s->ahead_off = true;
      fw_snapshot_cursor_cleanup (&s->cur);
      fw_snapshot_cursor_init (&s->cur, s, queue_tail (s, &after));
      bson_destroy (&after);
      return true;
   }
   pthread_mutex_lock (&a->mu);
   for (int i = 0; i < a->n_ready; i++) {
      if (a->ready[i].run == a->run) {
         floor = a->ready[i].high;
      }
      join (s, &a->ready[i]);
   }
   a->n_ready = 0;
   a->queued = s->n_chunks;
   if (a->has_until && !s->progress.has_until) {
      bson_reinit (&s->progress.until);
      s->progress.has_until = bson_concat (&s->progress.until, &a->until);
   }
   run = a->run;
   whole = a->run_whole;
   ended = a->ended;
   if ((failed = a->failed)) {
      *error = a->error;
      a->failed = false;
   }
   pthread_cond_signal (&a->cv);
   pthread_mutex_unlock (&a->mu);
   log_prune (s, run, whole, floor);
   if (ended) {
      s->exhausted = true;
      s->progress.done = s->n_chunks == 0;
      fw_snapshot_ahead_stop (s);
   }
   return !failed;
}
