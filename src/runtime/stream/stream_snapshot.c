/*
 * stream_snapshot.c - a stream's incremental snapshot (issue 28) on its
 * thread: the chunks read ahead on the snapshot's own thread and queued
 * between two live events (or read here when no client of the pool is
 * free), the live events shown to the engine (snapshot/snapshot.c), the
 * snapshot events handed to the dispatcher between live events once the
 * stream passed the chunk's high watermark, and the progress kept with the
 * checkpoint after each chunk. With exactly_once
 * (issue 39) each row's handler call also commits the progress past that
 * row in its transaction (row_in_txn), and the progress is
 * kept on the deployment the transactions run on.
 */
#include <stdlib.h>
#include <string.h>

#include "flowwarden/log.h"
#include "runtime/snapshot/snapshot.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_control-private.h"
#include "runtime/stream/stream_generation-private.h"
#include "runtime/stream/stream_lanes-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_read-private.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_snapshot-private.h"
#include "runtime/stream/stream_worker-private.h"

#define RETRY_MS 2000      /* after a chunk could not be read */
#define LOG_EVERY_MS 10000 /* progress lines */
#define READ_BUDGET_MS 100 /* chunk reads between two live events at most */
#define SLICE_ROWS 64      /* rows handed out at least before a waiting live event */

/* Why a stream with exactly_once into PostgreSQL takes no snapshot. */
#define PG_REFUSED                                                                         \
   "has exactly_once into PostgreSQL, which cannot take a snapshot yet (a snapshot's row " \
   "has no resume token, and its progress is not kept in flowwarden_checkpoints)"

struct fw_stream_snap {
   fw_snapshot_t *engine;
   int64_t next_ms;  /* the next chunk not before (monotonic) */
   int64_t share_ms; /* ... while live events wait: not before (half the thread) */
   bool on_demand;
   bool ahead_refused; /* the reads ahead could not start: on this thread */
   int64_t started_ms, logged_ms;
};

static void
snap_free (fw_stream_worker_t *w)
{
   if (w->snap.run) {
      fw_snapshot_destroy (w->snap.run->engine);
      free (w->snap.run);
      w->snap.run = NULL;
   }
}

static void
publish (fw_stream_worker_t *w, bool running, bool done)
{
   int64_t read = 0, dropped = 0, chunks = 0;
   int64_t docs = 0;

   if (!w->metrics) {
      return;
   }
   if (w->snap.run) {
      fw_snapshot_counts (w->snap.run->engine, &read, &dropped, &chunks);
      docs = fw_snapshot_progress (w->snap.run->engine)->documents;
   }
   fw_stream_metrics_set_snapshot (w->metrics, running, done, docs, chunks);
}

/* The client the progress is read and stored with: the one exactly_once's
 * transactions run on (the stream's own deployment, or the sink's), whose
 * _fw_checkpoints they write the rows' progress to; else the stream's.
 * NULL with error set when the transactions' client cannot be had. */
static mongoc_client_t *
progress_client (fw_stream_worker_t *w, fw_error_t *error)
{
   if (w->cfg->exactly_once && !w->cfg->exactly_once_pg) {
      return fw_dispatcher_txn_client (w->d, error);
   }
   return w->client;
}

static bool
load_progress (fw_stream_worker_t *w, fw_snapshot_progress_t *progress, fw_error_t *err)
{
   mongoc_client_t *client = progress_client (w, err);

   return client &&
          fw_checkpoint_snapshot_load (client, w->cfg->database, w->cfg->name, progress, err);
}

/* Stores p with the run's writer generation (claimed first when no write
 * of the run came first; with exactly_once on the transactions' client,
 * as their writes are). */
static bool
store_progress (fw_stream_worker_t *w, const fw_snapshot_progress_t *p, fw_error_t *err)
{
   mongoc_client_t *client = progress_client (w, err);
   int64_t gen;
   bool refused;

   if (!client) {
      return false;
   }
   if (w->cfg->exactly_once && !w->cfg->exactly_once_pg
          ? !fw_stream_exactly_once_gen (&w->eo, client, &gen, &refused, err)
          : !fw_position_claim (&w->ckpt, client, &gen, err)) {
      return false;
   }
   return fw_checkpoint_snapshot_save (client, w->cfg->database, w->cfg->name, p, w->lead.epoch,
                                       gen, err);
}

static bool row_in_txn (fw_stream_worker_t *w, const fw_event_t *row, mongoc_client_t *client,
                        mongoc_client_session_t *session, int64_t gen, bson_t *reply, bool *fenced,
                        fw_error_t *error);

/* Starts the engine from progress (NULL: from the start). */
static bool
snap_begin (fw_stream_worker_t *w, const fw_snapshot_progress_t *progress, bool on_demand)
{
   struct fw_stream_snap *s = calloc (1, sizeof *s);

   if (!s || !(s->engine = fw_snapshot_new (w->cfg, progress))) {
      free (s);
      fw_log (FW_LOG_ERROR, w->cfg->name, "out of memory starting the snapshot");
      return false;
   }
   s->on_demand = on_demand;
   s->started_ms = s->logged_ms = fw_mono_ms ();
   w->snap.run = s;
   fw_log (FW_LOG_INFO, w->cfg->name,
           "snapshot %s of %s.%s%s: chunks of %lld documents by _id, interleaved with the live "
           "stream",
           progress && progress->has_after ? "resuming after its last finished chunk" : "starting",
           w->cfg->database, w->cfg->collection,
           progress && progress->has_filter ? " (filtered)" : "",
           (long long) w->cfg->snapshot.chunk_size);
   publish (w, true, false);
   return true;
}

bool
fw_stream_snapshot_setup (fw_stream_worker_t *w, const fw_checkpoint_t *cp)
{
   fw_snapshot_progress_t progress;
   fw_error_t err;
   bool ok = true;

   w->eo.row = row_in_txn;
   if (!w->cfg->collection) {
      return true;
   }
   fw_snapshot_progress_init (&progress);
   for (;;) {
      if (load_progress (w, &progress, &err)) {
         break;
      }
      fw_log (FW_LOG_WARN, w->cfg->name, "%s (retrying)", err.message);
      if (fw_stream_wait (w, RETRY_MS) && fw_shutdown_requested (w->shutdown)) {
         fw_snapshot_progress_cleanup (&progress);
         return false;
      }
   }
   if (progress.present && !progress.done && w->cfg->exactly_once_pg) {
      fw_log (FW_LOG_ERROR, w->cfg->name, "the snapshot running is not resumed: the stream %s",
              PG_REFUSED);
   } else if (progress.present && !progress.done) {
      ok = snap_begin (w, &progress, progress.has_filter);
   } else if (!progress.present && w->cfg->snapshot.at_start && !cp->has_processed &&
              !cp->has_seen && !fw_stream_generation_has_past (w->cfg, w->client)) {
      /* Stored before the change stream opens (and saves where it starts):
       * a crash before the first chunk still snapshots on the restart. */
      ok = snap_begin (w, NULL, false);
      while (ok && !store_progress (w, fw_snapshot_progress (w->snap.run->engine), &err)) {
         fw_log (FW_LOG_WARN, w->cfg->name, "%s (retrying)", err.message);
         if (fw_stream_wait (w, RETRY_MS) && fw_shutdown_requested (w->shutdown)) {
            ok = false;
         }
      }
   } else if (progress.done && w->metrics) {
      fw_stream_metrics_set_snapshot (w->metrics, false, true, progress.documents, 0);
   }
   fw_snapshot_progress_cleanup (&progress);
   return ok || !fw_shutdown_requested (w->shutdown);
}

void
fw_stream_snapshot_reopened (fw_stream_worker_t *w)
{
   if (w->snap.run && (fw_snapshot_chunk_open (w->snap.run->engine) ||
                       fw_snapshot_reading_ahead (w->snap.run->engine))) {
      /* The live events of the chunk's window may not all be read again
       * (history lost, a restart from now): the chunk is read again (and
       * those being read ahead, whose windows are open too). */
      fw_snapshot_discard (w->snap.run->engine);
   }
}

void
fw_stream_snapshot_teardown (fw_stream_worker_t *w)
{
   snap_free (w);
   bson_destroy (__atomic_exchange_n (&w->snap.request, NULL, __ATOMIC_ACQ_REL));
}

/* The position and the progress pr in one write of the checkpoint
 * document, when both are kept on the stream's client (not with
 * exactly_once, whose progress is on the transactions' client): false
 * when they were not written together (nothing written but a failure
 * is logged, *failed). */
static bool
save_together (fw_stream_worker_t *w, fw_position_t *p, const fw_snapshot_progress_t *pr,
               bool *failed)
{
   bson_t also = BSON_INITIALIZER;
   fw_position_saved_t saved = FW_POSITION_NONE;

   *failed = false;
   if (!w->cfg->exactly_once && fw_checkpoint_snapshot_fields (pr, &also)) {
      saved = fw_position_save_with (&w->ckpt, p, "snapshot", &also);
      *failed = saved == FW_POSITION_FAILED;
   }
   bson_destroy (&also);
   return saved == FW_POSITION_SAVED;
}

/* After a chunk was handed out, or the snapshot found nothing more to
 * read: the position first, then the progress, so the stored boundary is
 * never ahead of the stored position (one write when both are on the
 * stream's client). A chunk is handed out once every event before its
 * high watermark was handled (with lanes: settled), so the position then
 * is after the last of them, and a restart from it delivers only events
 * after the watermark. */
static void
save_progress (fw_stream_worker_t *w, fw_position_t *p)
{
   const fw_snapshot_progress_t *pr = fw_snapshot_progress (w->snap.run->engine);
   fw_error_t err;
   int64_t now = fw_mono_ms ();
   bool failed;
   bool together = save_together (w, p, pr, &failed);

   if (fw_position_refused (&w->ckpt)) {
      return; /* a newer run holds the checkpoint: the stream stops at its next boundary */
   }
   if (failed) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "the snapshot's progress is not saved either (the chunk is read again after a "
              "restart)");
   } else if (!together) {
      fw_position_save (&w->ckpt, p, "snapshot");
      if (!store_progress (w, pr, &err)) {
         fw_log (FW_LOG_WARN, w->cfg->name, "%s (the chunk is read again after a restart)",
                 err.message);
      }
   }
   if (pr->done) {
      fw_log (FW_LOG_INFO, w->cfg->name, "snapshot finished: %lld documents handed out in %.1f s",
              (long long) pr->documents, (double) (now - w->snap.run->started_ms) / 1000.0);
      publish (w, false, true);
      snap_free (w);
   } else if (now - w->snap.run->logged_ms >= LOG_EVERY_MS) {
      w->snap.run->logged_ms = now;
      fw_log (FW_LOG_INFO, w->cfg->name, "snapshot: %lld documents handed out so far",
              (long long) pr->documents);
   }
}

/* A row's place in the settle (fw_settle_place_t's ud). */
typedef struct {
   fw_stream_worker_t *w;
   const fw_event_t *row;
} row_place_t;

/* Stores the progress past the row (exactly_once: outside a transaction). */
static void
save_past (fw_stream_worker_t *w, const fw_event_t *row)
{
   fw_snapshot_progress_t past;
   fw_error_t err;

   fw_snapshot_progress_init (&past);
   if (!fw_snapshot_progress_past (w->snap.run->engine, row, &past)) {
      fw_log (FW_LOG_WARN, w->cfg->name, "out of memory saving the snapshot's progress");
   } else if (!store_progress (w, &past, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name, "%s (the row may be handed out again after a restart)",
              err.message);
   }
   fw_snapshot_progress_cleanup (&past);
}

/* A row is finished with (o: its outcome): counted; it moves no position:
 * the chunk's progress is saved once it closed.
 * With exactly_once a handled row's transaction committed the progress past
 * it; a row stored in the DLQ outside one (parked behind its sequence, a
 * DLQ elsewhere than the transactions' deployment) has its progress stored
 * now, so a restart does not store it again (a row's entry id names its
 * chunk, which a restart reads anew: the DLQ's unique index would not keep
 * one entry). A dead letter committed with its progress is stored again:
 * rare, and the same progress. */
static fw_read_end_t
row_finished (void *ud, const fw_outcome_t *o)
{
   row_place_t *r = ud;

   fw_stream_count_dispatched (r->w, o);
   if (r->w->cfg->exactly_once && !r->w->cfg->exactly_once_pg &&
       (o->kind == FW_OUTCOME_DEAD_LETTERED || o->kind == FW_OUTCOME_PARKED ||
        o->kind == FW_OUTCOME_DEFERRED)) {
      save_past (r->w, r->row);
   }
   return FW_READ_NEXT;
}

static void
row_fail (void *ud, const char *why)
{
   row_place_t *r = ud;
   fw_stream_failed (r->w, why);
}

static bool
row_lease_lost (void *ud)
{
   row_place_t *r = ud;
   return fw_stream_lease_lost (r->w) && !fw_shutdown_requested (r->w->shutdown);
}

/* exactly_once: w->eo.row, the progress past row (a snapshot event this
 * thread handed out) written in session's transaction, with the run's
 * writer generation gen (0: none). */
static bool
row_in_txn (fw_stream_worker_t *w, const fw_event_t *row, mongoc_client_t *client,
            mongoc_client_session_t *session, int64_t gen, bson_t *reply, bool *fenced,
            fw_error_t *error)
{
   fw_snapshot_progress_t past;
   bool ok;

   *fenced = false;
   bson_init (reply);
   fw_snapshot_progress_init (&past);
   if (!w->snap.run || !fw_snapshot_progress_past (w->snap.run->engine, row, &past)) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "stream \"%s\": the snapshot's progress past the row cannot be made",
                    w->cfg->name);
      fw_snapshot_progress_cleanup (&past);
      return false;
   }
   bson_destroy (reply);
   ok = fw_checkpoint_snapshot_save_in (client, session, w->cfg->database, w->cfg->name, &past,
                                        w->lead.lease ? w->lead.epoch : 0, gen, fenced, reply,
                                        error);
   fw_snapshot_progress_cleanup (&past);
   return ok;
}

/* The due chunks' rows, handled as any event, until none is due or, after
 * SLICE_ROWS rows at least, a live event waits in rd (NULL: none waits): a
 * live event does not wait behind the hand-out of up to 16 chunks, and the
 * rows it overtakes drop its key (fw_snapshot_live). With lanes, after the
 * lanes finished every earlier event (the rows run on the stream's thread),
 * and all of them (a slice would wait for the lanes each time). */
static fw_read_end_t
hand_out (fw_stream_worker_t *w, fw_position_t *p, fw_stream_reader_t *rd)
{
   fw_event_t ev;
   fw_outcome_t o;
   fw_read_end_t end;
   row_place_t row = {w, &ev};
   fw_settle_place_t place = {w->d, w->metrics, row_finished, row_fail, row_lease_lost, &row, NULL};
   int n = 0;

   if (w->lane.run && !fw_stream_lanes_settle (w, p)) {
      if (fw_shutdown_requested (w->shutdown)) {
         return FW_READ_STOP;
      }
      fw_stream_failed (w, w->failure);
      return FW_READ_FAILED;
   }
   while (w->snap.run && fw_snapshot_due (w->snap.run->engine)) {
      if (++n % SLICE_ROWS == 0 && rd && !w->lane.run && fw_stream_reader_ready (rd, 0)) {
         break; /* a live event waits: it goes first, the rest next turn */
      }
      if (!fw_snapshot_next_event (w->snap.run->engine, &ev)) {
         save_progress (w, p); /* a chunk closed (frees w->snap.run once done) */
         continue;             /* the next one may be due too */
      }
      fw_event_received (w->metrics, &ev);
      if (fw_stream_lease_lost (w)) {
         return FW_READ_LOST;
      }
      o = fw_stream_dispatch (&w->pending, &ev);
      if ((end = fw_stream_settle (&place, &o)) != FW_READ_NEXT) {
         return end;
      }
   }
   if (w->snap.run) {
      publish (w, true, false);
   }
   return FW_READ_NEXT;
}

fw_read_end_t
fw_stream_snapshot_live (fw_stream_worker_t *w, fw_position_t *p, const fw_event_t *ev)
{
   (void) p;
   if (w->snap.run) {
      /* Handled before the rows still due: they drop its key (the engine
       * drops a row of its key from every chunk whose low watermark it is
       * after); the rows are handed out between two live events. */
      (void) fw_snapshot_live (w->snap.run->engine, ev);
   }
   return FW_READ_NEXT;
}

bool
fw_stream_snapshot_shown (fw_stream_worker_t *w, const fw_event_t *ev)
{
   (void) fw_stream_snapshot_live (w, NULL, ev);
   return true;
}

static void collect (fw_stream_worker_t *w);

fw_read_end_t
fw_stream_snapshot_idle (fw_stream_worker_t *w, fw_position_t *p, const bson_t *token)
{
   (void) p;
   if (w->snap.run) {
      collect (w); /* the chunks read ahead until now may be due with token */
      /* Due chunks are handed out at the loop's top (between). */
      (void) fw_snapshot_token_past (w->snap.run->engine, token);
   }
   return FW_READ_NEXT;
}

/* An on-demand snapshot asked through the admin endpoint. */
static void
take_request (fw_stream_worker_t *w)
{
   bson_t *req = __atomic_exchange_n (&w->snap.request, NULL, __ATOMIC_ACQ_REL);
   fw_snapshot_progress_t progress;

   if (!req) {
      return;
   }
   if (w->snap.run) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "a snapshot is already running: the one asked is "
              "ignored");
      bson_destroy (req);
      return;
   }
   fw_snapshot_progress_init (&progress);
   if (!bson_empty (req)) {
      bson_destroy (&progress.filter);
      bson_copy_to (req, &progress.filter);
      progress.has_filter = true;
   }
   bson_destroy (req);
   snap_begin (w, &progress, true);
   fw_snapshot_progress_cleanup (&progress);
}

/* Reads one chunk (its cost kept for the next turn's share); false when it
 * could not (retried after RETRY_MS). */
static bool
read_one (fw_stream_worker_t *w, int64_t now)
{
   fw_error_t err;
   int64_t cost;

   if (!fw_snapshot_read_chunk (w->snap.run->engine, w->client, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "%s (the snapshot tries again in %d ms; the live "
              "stream goes on)",
              err.message, RETRY_MS);
      w->snap.run->next_ms = now + RETRY_MS;
      return false;
   }
   cost = fw_mono_ms () - now;
   w->snap.run->next_ms = now + cost + w->cfg->snapshot.pause_ms;
   w->snap.run->share_ms = now + 2 * cost;
   return true;
}

/* The chunks read ahead queued; a failed read logged (the thread tries
 * again after RETRY_MS). */
static void
collect (fw_stream_worker_t *w)
{
   fw_error_t err;

   if (!fw_snapshot_ahead_collect (w->snap.run->engine, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "%s (the snapshot tries again in %d ms; the live stream goes on)", err.message,
              RETRY_MS);
   }
}

/* Reads the chunks ahead on a thread of their own: reading the next
 * chunks overlaps handing out the due ones and handling the live events.
 * True when it does (else they are read on this thread: read_here). */
static bool
reads_ahead (fw_stream_worker_t *w)
{
   fw_snapshot_t *engine = w->snap.run->engine;
   fw_error_t err;

   if (fw_snapshot_reading_ahead (engine)) {
      return true;
   }
   if (w->snap.run->ahead_refused || !w->pool || !fw_snapshot_may_read_ahead (engine)) {
      return false;
   }
   if (!fw_snapshot_ahead_start (engine, w->pool, w->cfg->snapshot.pause_ms, RETRY_MS, &err)) {
      fw_log (FW_LOG_WARN, w->cfg->name, "%s: the snapshot reads its chunks on the stream's thread",
              err.message);
      w->snap.run->ahead_refused = true;
      return false;
   }
   return fw_snapshot_reading_ahead (engine);
}

/* Reads the chunks on this thread (when they cannot be read ahead on a
 * thread of their own). */
static void
read_here (fw_stream_worker_t *w, fw_stream_reader_t *rd)
{
   int64_t began = fw_mono_ms ();

   /* The chunks are read while there is room for them and nothing of the
    * live stream waits (the reader has no event, idle mark or error ready):
    * a quiet stream's snapshot runs at full speed, for at most
    * READ_BUDGET_MS a turn (then the loop's checks run), and a live event
    * that comes during a read waits for that one read at most. While live
    * events wait (a stream catching up), one chunk a turn, and the reads
    * take at most half the stream's thread: the snapshot still ends. The
    * reads of one turn are a run (fw_snapshot_read_chunk): no live event
    * is handled between them, so each chunk's high watermark is the next
    * one's low. */
   for (;;) {
      int64_t now = fw_mono_ms ();
      bool waiting;
      if (!fw_snapshot_wants_chunk (w->snap.run->engine) || now < w->snap.run->next_ms) {
         break;
      }
      waiting = fw_stream_reader_ready (rd, 0);
      if ((waiting && now < w->snap.run->share_ms) || !read_one (w, now) || waiting ||
          w->cfg->snapshot.pause_ms > 0 || fw_mono_ms () - began >= READ_BUDGET_MS ||
          fw_shutdown_requested (w->shutdown)) {
         break;
      }
   }
   fw_snapshot_end_reads (w->snap.run->engine);
}

static fw_read_end_t
between (fw_stream_worker_t *w, fw_position_t *p, fw_stream_reader_t *rd)
{
   if (__atomic_load_n (&w->snap.request, __ATOMIC_ACQUIRE)) {
      take_request (w);
   }
   if (!w->snap.run) {
      return FW_READ_NEXT;
   }
   if (reads_ahead (w)) {
      collect (w);
   }
   if (fw_snapshot_due (w->snap.run->engine)) {
      return hand_out (w, p, rd);
   }
   if (fw_snapshot_finished (w->snap.run->engine)) {
      save_progress (w, p);
      if (!w->snap.run) {
         return FW_READ_NEXT;
      }
   }
   if (!fw_snapshot_reading_ahead (w->snap.run->engine)) {
      read_here (w, rd);
   }
   return FW_READ_NEXT;
}

fw_read_end_t
fw_stream_snapshot_between (fw_stream_worker_t *w, fw_position_t *p, fw_stream_reader_t *rd)
{
   fw_read_end_t end = between (w, p, rd);

   if (end == FW_READ_NEXT && !w->snap.run && w->snap.short_await) {
      /* Finished: the change stream re-opens where the position is (the
       * events read ahead are read again), with the usual maxAwaitTimeMS. */
      fw_log (FW_LOG_INFO, w->cfg->name,
              "the change stream re-opens with its usual getMore wait after the snapshot");
      return FW_READ_REOPEN;
   }
   return end;
}

bool
fw_stream_snapshot_opening (fw_stream_worker_t *w)
{
   w->snap.short_await = w->snap.run != NULL;
   return w->snap.short_await;
}

bool
fw_stream_snapshot_reading (fw_stream_worker_t *w)
{
   if (!w->snap.run || __atomic_load_n (&w->snap.request, __ATOMIC_ACQUIRE)) {
      return false;
   }
   if (fw_snapshot_due (w->snap.run->engine)) {
      return true; /* rows left to hand out */
   }
   return !fw_snapshot_reading_ahead (w->snap.run->engine) &&
          fw_snapshot_wants_chunk (w->snap.run->engine) && fw_mono_ms () >= w->snap.run->next_ms;
}

bool
fw_stream_worker_snapshot (fw_stream_worker_t *w, const bson_t *filter, fw_error_t *error)
{
   bson_t *req;

   if (!w->cfg->collection) {
      fw_error_set (error, FW_ERROR_INVALID,
                    "stream \"%s\" watches a whole database: a snapshot "
                    "needs a collection",
                    w->cfg->name);
      return false;
   }
   if (w->cfg->exactly_once_pg) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\" %s", w->cfg->name, PG_REFUSED);
      return false;
   }
   if (!fw_stream_worker_running (w)) {
      fw_error_set (error, FW_ERROR_INVALID, "stream \"%s\" is not running", w->cfg->name);
      return false;
   }
   if (!(req = filter ? bson_copy (filter) : bson_new ())) {
      fw_error_set (error, FW_ERROR_NOMEM, "out of memory asking for a snapshot");
      return false;
   }
   bson_destroy (__atomic_exchange_n (&w->snap.request, req, __ATOMIC_ACQ_REL));
   return true;
}
