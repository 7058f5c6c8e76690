/*
 * checkpoint_writer.c - a stream's checkpoint writes on a thread of their own
 * (checkpoint.mode = "async"; see checkpoint_writer.h).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flowwarden/check.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/checkpoint_writer.h"

/* A failed write is tried again after this long, unless a newer position
 * comes first (it is then written at once). */
#define RETRY_MS 1000

/* The MongoDB sink: a client of the stream's pool for the writer's life. */
typedef struct {
   mongoc_client_pool_t *pool;
   mongoc_client_t *client;
   char *database;
   char *stream;
} mongo_sink_t;

/* One position, as raw BSON: no bson_t lives on the heap. */
typedef struct {
   uint8_t *processed;
   uint32_t processed_len; /* 0: none */
   uint8_t *seen;
   uint32_t seen_len; /* 0: none */
   char *version;     /* NULL: none */
   uint64_t seq;      /* the hand-over it came from, 1, 2, ... */
} slot_t;

struct fw_checkpoint_writer {
   fw_checkpoint_sink_t sink;
   mongo_sink_t *mongo; /* the sink's ud when it is MongoDB's (owned), else NULL */
   int64_t retry_ms;
   char *stream;
   pthread_t thread;
   pthread_mutex_t mu;
   pthread_cond_t work; /* the thread waits here for a position or stop */
   pthread_cond_t done; /* callers wait here for a write to end */
   slot_t pending;
   bool has_pending;
   slot_t flight; /* the position being written (the thread's) */
   bool in_flight;
   uint64_t submitted;  /* seq of the last position handed over */
   uint64_t tried;      /* every position up to this seq was tried or superseded */
   uint64_t retry_seq;  /* a failed position waiting for its retry; 0: none */
   int64_t retry_at_ms; /* ... not before this CLOCK_MONOTONIC time */
   bool stop;
   int64_t epoch;     /* ha.mode = "leader": writes are fenced with it; 0: plain */
   int64_t max_epoch; /* the highest epoch set (checked: epochs only grow) */
   uint64_t written;  /* seq of the last position written (checked: never back) */
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
mongo_open (void *ud)
{
   mongo_sink_t *m = ud;
   m->client = mongoc_client_pool_pop (m->pool);
}

static void
mongo_close (void *ud)
{
   mongo_sink_t *m = ud;
   if (m->client) {
      mongoc_client_pool_push (m->pool, m->client);
      m->client = NULL;
   }
}

static bool
mongo_write (void *ud, const bson_t *processed, const bson_t *seen, const char *version,
             int64_t epoch, fw_error_t *error)
{
   mongo_sink_t *m = ud;
   bool fenced;

   if (!m->client) {
      fw_error_set (error, FW_ERROR_MONGO,
                    "cannot save checkpoint of stream \"%s\": no client for the checkpoint "
                    "writer",
                    m->stream);
      return false;
   }
   if (epoch > 0) {
      return fw_checkpoint_save_fenced (m->client, m->database, m->stream, processed, seen, version,
                                        epoch, &fenced, error);
   }
   return fw_checkpoint_save (m->client, m->database, m->stream, processed, seen, version, error);
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

static bool
write_slot (fw_checkpoint_writer_t *cw, const slot_t *s, int64_t epoch, fw_error_t *error)
{
   bson_t processed, seen;
   bool has_processed = s->processed_len > 0 &&
                        bson_init_static (&processed, s->processed, s->processed_len);
   bool has_seen = s->seen_len > 0 && bson_init_static (&seen, s->seen, s->seen_len);

   /* Positions are written in the order they were handed over. */
   FW_ASSERT (s->seq > cw->written);
   return cw->sink.write (cw->sink.ud, has_processed ? &processed : NULL, has_seen ? &seen : NULL,
                          s->version, epoch, error);
}

/* With the lock held: true when pending may be written now; else *wait_ms
 * says how long to wait for its retry (-1: until signalled). */
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

static void *
writer_main (void *arg)
{
   fw_checkpoint_writer_t *cw = arg;

   if (cw->sink.open) {
      cw->sink.open (cw->sink.ud);
   }
   pthread_mutex_lock (&cw->mu);
   for (;;) {
      int64_t wait_ms, epoch;
      fw_error_t err;
      slot_t swap;
      bool ok;

      while (!cw->stop && !writable (cw, &wait_ms)) {
         if (wait_ms < 0) {
            pthread_cond_wait (&cw->work, &cw->mu);
         } else {
            struct timespec until = fw_clock_after (CLOCK_MONOTONIC, wait_ms);
            pthread_cond_timedwait (&cw->work, &cw->mu, &until);
         }
      }
      if (cw->stop) {
         break;
      }
      /* The slots trade buffers: the next hand-over reuses the old ones. */
      swap = cw->flight;
      cw->flight = cw->pending;
      cw->pending = swap;
      cw->has_pending = false;
      cw->in_flight = true;
      epoch = cw->epoch;
      pthread_mutex_unlock (&cw->mu);

      ok = write_slot (cw, &cw->flight, epoch, &err);

      pthread_mutex_lock (&cw->mu);
      cw->in_flight = false;
      if (cw->flight.seq > cw->tried) {
         cw->tried = cw->flight.seq;
      }
      if (ok) {
         cw->written = cw->flight.seq;
         cw->ok++;
         cw->last_ok_ms = fw_now_ms ();
         cw->retry_seq = 0;
      } else {
         cw->failed++;
         fw_log (FW_LOG_ERROR, cw->stream, "%s (checkpoint writer); will try again", err.message);
         /* Nothing newer came: this position is the one to write, after
          * the wait. A newer one that came while this one failed is
          * written at once (it is past retry_seq). */
         cw->retry_seq = cw->flight.seq;
         if (!cw->has_pending) {
            swap = cw->pending;
            cw->pending = cw->flight;
            cw->flight = swap;
            cw->has_pending = true;
         }
         cw->retry_at_ms = fw_mono_ms () + cw->retry_ms;
      }
      pthread_cond_broadcast (&cw->done);
   }
   pthread_mutex_unlock (&cw->mu);
   if (cw->sink.close) {
      cw->sink.close (cw->sink.ud);
   }
   return NULL;
}

fw_checkpoint_writer_t *
fw_checkpoint_writer_start (const fw_checkpoint_sink_t *sink, const char *stream, int64_t retry_ms,
                            fw_error_t *error)
{
   fw_checkpoint_writer_t *cw = calloc (1, sizeof *cw);
   pthread_condattr_t attr;
   int rc;

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
   pthread_mutex_init (&cw->mu, NULL);
   pthread_condattr_init (&attr);
   pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
   pthread_cond_init (&cw->work, &attr);
   pthread_condattr_destroy (&attr);
   pthread_cond_init (&cw->done, NULL);
   if ((rc = pthread_create (&cw->thread, NULL, writer_main, cw)) != 0) {
      fw_error_set (error, FW_ERROR_IO,
                    "cannot start the checkpoint writer thread of stream \"%s\": %s", stream,
                    strerror (rc));
      pthread_cond_destroy (&cw->work);
      pthread_cond_destroy (&cw->done);
      pthread_mutex_destroy (&cw->mu);
      free (cw->stream);
      free (cw);
      return NULL;
   }
   return cw;
}

fw_checkpoint_writer_t *
fw_checkpoint_writer_new (mongoc_client_pool_t *pool, const char *database, const char *stream,
                          fw_error_t *error)
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
   fw_checkpoint_sink_t sink = {mongo_open, mongo_write, mongo_close, m};
   if (!(cw = fw_checkpoint_writer_start (&sink, stream, RETRY_MS, error))) {
      mongo_free (m);
      return NULL;
   }
   cw->mongo = m;
   return cw;
}

void
fw_checkpoint_writer_submit (fw_checkpoint_writer_t *cw, const bson_t *processed,
                             const bson_t *seen, const char *script_version, int max_behind)
{
   pthread_mutex_lock (&cw->mu);
   while (max_behind > 0 && cw->submitted - cw->tried >= (uint64_t) max_behind) {
      pthread_cond_wait (&cw->done, &cw->mu);
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
   cw->has_pending = true;
   pthread_cond_signal (&cw->work);
   pthread_mutex_unlock (&cw->mu);
}

void
fw_checkpoint_writer_quiesce (fw_checkpoint_writer_t *cw)
{
   pthread_mutex_lock (&cw->mu);
   cw->has_pending = false;
   cw->retry_seq = 0;
   while (cw->in_flight) {
      pthread_cond_wait (&cw->done, &cw->mu);
   }
   /* A write that failed while we waited put its position back for a
    * retry: drop it too, or it would land after the caller's own save. */
   cw->has_pending = false;
   cw->retry_seq = 0;
   cw->tried = cw->submitted; /* what was dropped is superseded by the caller */
   pthread_mutex_unlock (&cw->mu);
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
   pthread_mutex_lock (&cw->mu);
   cw->stop = true;
   pthread_cond_signal (&cw->work);
   pthread_mutex_unlock (&cw->mu);
   pthread_join (cw->thread, NULL);
   slot_free (&cw->pending);
   slot_free (&cw->flight);
   pthread_cond_destroy (&cw->work);
   pthread_cond_destroy (&cw->done);
   pthread_mutex_destroy (&cw->mu);
   mongo_free (cw->mongo);
   free (cw->stream);
   free (cw);
}
