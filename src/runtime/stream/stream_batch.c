/*
 * stream_batch.c - on_batch on the stream's own thread (issue 30): taking a
 * batch from the reader, handing it to the dispatcher, and moving the
 * position past it once every event of it is finished with.
 *
 * A batch starts with the first event there and takes what the reader has
 * or brings within batch.max_wait, up to batch.max_events: a backlog gives
 * full batches, a quiet stream batches of one with no wait. An event that
 * cannot join (a fragment of a split event, an oversize stub, an
 * invalidate) ends the batch and is taken next, on its usual path. The
 * events read are copies (in the batch's arena, freed with it): the
 * reader's buffer lasts only until its next event.
 */
#include <stdlib.h>
#include <string.h>

#include "bson/bson_arena.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/stream/event_oversize-private.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_batch-private.h"
#include "runtime/stream/stream_control-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_read-private.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_snapshot-private.h"
#include "runtime/stream/stream_worker-private.h"

typedef struct {
   const bson_t **docs; /* in copies */
   fw_event_t *evs;
   const fw_event_t **ptrs;
   size_t n;
   bson_t resume; /* the reader's resume token after the last event taken */
   size_t cap;    /* room in docs, evs and ptrs */
   fw_bson_arena_t copies;
} batch_t;

/* Room in b for one more event. False when out of memory. */
static bool
batch_room (batch_t *b)
{
   size_t cap = b->cap ? b->cap * 2 : 16;
   void *docs, *evs, *ptrs;

   if (b->n < b->cap) {
      return true;
   }
   if (!(docs = realloc (b->docs, cap * sizeof *b->docs))) {
      return false;
   }
   b->docs = docs;
   if (!(evs = realloc (b->evs, cap * sizeof *b->evs))) {
      return false;
   }
   b->evs = evs;
   if (!(ptrs = realloc (b->ptrs, cap * sizeof *b->ptrs))) {
      return false;
   }
   b->ptrs = ptrs;
   for (size_t i = 0; i < b->n; i++) {
      b->ptrs[i] = &b->evs[i]; /* evs may have moved */
   }
   b->cap = cap;
   return true;
}

/* Whether ev (parsed from doc) may be an oversize stub. A stub carries only
 * what identifies the event (event_oversize.c, append_stub): one with a
 * document or an update description is not one, and its top level is not
 * searched for the stub's field (a search of every key per event). */
static bool
maybe_stub (const bson_t *doc, const fw_event_t *ev)
{
   int64_t size;

   return !fw_event_has (ev, FW_EV_FULL_DOCUMENT) && !fw_event_has (ev, FW_EV_UPDATE_DESCRIPTION) &&
          !fw_event_has (ev, FW_EV_BEFORE) && fw_oversize_stub_size (doc, &size);
}

bool
fw_stream_batch_joins (const bson_t *doc, const fw_event_t *ev)
{
   return !fw_event_has (ev, FW_EV_SPLIT) && !maybe_stub (doc, ev) &&
          strcmp (ev->operation_type, "invalidate") != 0;
}

/* Adds a copy of ev (read from rd just now) to b. False when out of
 * memory or the copy does not parse (it did before). */
static bool
batch_add (fw_stream_worker_t *w, fw_stream_reader_t *rd, batch_t *b, const fw_event_t *ev)
{
   fw_error_t err;
   const bson_t *copy;

   if (!batch_room (b)) {
      return false;
   }
   copy = fw_bson_arena_copy (&b->copies, ev->doc);
   if (!copy || !fw_event_parse (copy, &b->evs[b->n], &err)) {
      if (copy) {
         fw_bson_arena_drop_last (&b->copies, copy);
      }
      return false;
   }
   b->docs[b->n] = copy;
   b->ptrs[b->n] = &b->evs[b->n];
   b->n++;
   fw_position_set_token (&b->resume, fw_stream_reader_resume_token (rd));
   fw_event_received (w->metrics, ev);
   return true;
}

/* Adds to b a copy of doc (read from rd just now) when the event can join
 * the batch: the copy is parsed, not doc and then the copy again. False
 * (nothing added) when it cannot join, does not parse or memory runs out:
 * the caller holds doc. */
static bool
batch_add_read (fw_stream_worker_t *w, fw_stream_reader_t *rd, batch_t *b, const bson_t *doc)
{
   fw_event_t *ev;
   fw_error_t err;
   const bson_t *copy;

   if (!batch_room (b) || !(copy = fw_bson_arena_copy (&b->copies, doc))) {
      return false;
   }
   ev = &b->evs[b->n];
   /* A snapshot sees each event of the batch (its key's rows dropped);
    * one its rows are due before ends the batch, and is taken next. */
   if (!fw_event_parse (copy, ev, &err) || !fw_stream_batch_joins (copy, ev) ||
       (w->snap.run && !fw_stream_snapshot_shown (w, ev))) {
      fw_bson_arena_drop_last (&b->copies, copy);
      return false;
   }
   b->docs[b->n] = copy;
   b->ptrs[b->n] = ev;
   b->n++;
   fw_position_set_token (&b->resume, fw_stream_reader_resume_token (rd));
   fw_event_received (w->metrics, ev);
   return true;
}

/* Reads on into b until it is full, max_wait passed or an event that cannot
 * join comes (left in w->batch_held). False when the reader was idle (a
 * getMore returned nothing) or failed. */
static bool
batch_fill (fw_stream_worker_t *w, fw_stream_reader_t *rd, batch_t *b, size_t max,
            int64_t deadline_ms)
{
   const bson_t *doc;

   while (b->n < max && fw_stream_reader_ready (rd, deadline_ms)) {
      if (!fw_stream_reader_next (rd, &doc)) {
         return false; /* idle, or the error, which the next read gives again */
      }
      if (!batch_add_read (w, rd, b, doc)) {
         w->batch_held = doc;
         return true;
      }
   }
   return true;
}

/* exactly_once: reads on into b while the events are of the source
 * transaction of b's last, until an event of another one (left in
 * w->batch_held) or a getMore that returns nothing. What MongoDB gives
 * (document_source_change_stream_unwind_transaction.cpp): a committed
 * transaction's applyOps is unwound into its events one after the other,
 * each with the commit's clusterTime, its lsid and txnNumber (a long); the
 * endOfTransaction event sits behind a feature flag that is off in 5.0-8.0,
 * so nothing marks the last one. Batched writes and a retryable write's
 * applyOps carry no lsid/txnNumber and are not grouped. Through mongos a
 * cross-shard transaction comes as one group per shard. An event split over
 * fragments (> 16 MiB) cannot join: it ends the group and starts the next.
 * False when a stop came first. */
static bool
group_fill (fw_stream_worker_t *w, fw_stream_reader_t *rd, batch_t *b)
{
   const bson_t *doc;

   for (;;) {
      fw_event_t ev;
      fw_error_t err;
      /* The reader has the next item within its getMore's maxAwaitTimeMS. */
      while (!fw_stream_reader_ready (rd, fw_mono_ms () + 200)) {
         if (fw_shutdown_requested (w->shutdown)) {
            return false;
         }
      }
      if (!fw_stream_reader_next (rd, &doc)) {
         return true; /* idle: the transaction ended (or the error, read again next) */
      }
      if (!fw_event_parse (doc, &ev, &err) || !fw_stream_batch_joins (doc, &ev) ||
          !fw_event_same_txn (b->ptrs[b->n - 1], &ev)) {
         w->batch_held = doc;
         return true;
      }
      /* A snapshot sees it (its key's rows dropped). It has the clusterTime
       * of the group's first, which the snapshot saw (take_event): no rows
       * can be due before it that were not before the first. */
      if (w->snap.run) {
         (void) fw_stream_snapshot_shown (w, &ev);
      }
      if (!batch_add (w, rd, b, &ev)) {
         w->batch_held = doc;
         return true;
      }
   }
}

static void
batch_free (batch_t *b)
{
   fw_bson_arena_clear (&b->copies);
   free (b->docs);
   free (b->evs);
   free (b->ptrs);
   bson_destroy (&b->resume);
}

/* Where a batch's outcome is settled. */
typedef struct {
   fw_stream_worker_t *w;
   fw_position_t *p;
   batch_t *b;
} batch_place_t;

/* Every event of the batch is finished with (o: the batch's outcome):
 * counted, a due dlq.reprocess round runs, and the position moves past the
 * last. */
static fw_read_end_t
batch_done (void *ud, const fw_outcome_t *o)
{
   batch_place_t *at = ud;
   fw_stream_worker_t *w = at->w;
   fw_position_t *p = at->p;
   batch_t *b = at->b;

   fw_stream_count_dispatched (w, o);
   if (w->dlq.reprocess_at_ms >= 0) {
      fw_dlq_reprocess_tick (w->d, &w->dlq.reprocess_at_ms); /* between batches */
   }
   if (fw_position_set_event_token (&p->processed, b->ptrs[b->n - 1])) {
      p->has_processed = true;
   }
   fw_position_set_token (&p->resume, &b->resume);
   p->has_resume = true;
   p->dirty = true;
   p->since_save += (int) b->n;
   if (p->since_save >= w->cfg->save_every) {
      fw_position_save_async (&w->ckpt, p, "save_every");
   }
   return FW_READ_NEXT;
}

static void
batch_fail (void *ud, const char *why)
{
   fw_stream_failed (((batch_place_t *) ud)->w, why);
}

static bool
batch_lease_lost (void *ud)
{
   fw_stream_worker_t *w = ((batch_place_t *) ud)->w;
   return fw_stream_lease_lost (w) && !fw_shutdown_requested (w->shutdown);
}

/* Settles o, the outcome of b's events (no_dlq_why: why the stream stops
 * when one of them has no DLQ to keep it), and frees b. */
static fw_read_end_t
settle_batch (fw_stream_worker_t *w, fw_position_t *p, batch_t *b, const fw_outcome_t *o,
              const char *no_dlq_why)
{
   batch_place_t at = {w, p, b};
   fw_settle_place_t place = {w->d, w->metrics, batch_done, batch_fail, batch_lease_lost,
                              &at,  no_dlq_why};
   fw_read_end_t end = fw_stream_settle (&place, o);

   if (end != FW_READ_NEXT) {
      w->batch_held = NULL; /* the read ends: the position re-reads it all */
   }
   batch_free (b);
   return end;
}

fw_read_end_t
fw_stream_batch_take (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p,
                      const fw_event_t *ev)
{
   int max = 1;
   int64_t wait_ms = 0;
   batch_t b = {NULL, NULL, NULL, 0, BSON_INITIALIZER, 0, FW_BSON_ARENA_INIT};
   fw_outcome_t o;

   fw_dispatcher_batching (w->d, &max, &wait_ms);
   b.docs = malloc ((size_t) max * sizeof *b.docs);
   b.evs = malloc ((size_t) max * sizeof *b.evs);
   b.ptrs = malloc ((size_t) max * sizeof *b.ptrs);
   b.cap = (size_t) max;
   if (!b.docs || !b.evs || !b.ptrs || !batch_add (w, rd, &b, ev)) {
      batch_free (&b);
      fw_stream_failed (w, "out of memory taking a batch");
      return FW_READ_FAILED;
   }
   bool more = batch_fill (w, rd, &b, (size_t) max, fw_mono_ms () + wait_ms);
   /* exactly_once: the batch never ends inside a source transaction (it
    * grows past max_events to its end, unless a getMore that returned
    * nothing already ended it). */
   if (w->cfg->exactly_once && more && !w->batch_held && fw_event_in_txn (b.ptrs[b.n - 1]) &&
       !group_fill (w, rd, &b)) {
      w->batch_held = NULL;
      batch_free (&b);
      return FW_READ_STOP;
   }
   if (fw_stream_lease_lost (w)) {
      batch_free (&b);
      return FW_READ_LOST;
   }
   fw_stream_reload_apply (&w->pending); /* between batches, never inside one */
   o = fw_batch_dispatch (w->d, b.ptrs, b.n, NULL);
   return settle_batch (w, p, &b, &o, "a batch's event could not be dead-lettered");
}

bool
fw_stream_group_wanted (const fw_stream_worker_t *w, const bson_t *doc, const fw_event_t *ev)
{
   return w->cfg->exactly_once && fw_event_in_txn (ev) && fw_stream_batch_joins (doc, ev);
}

fw_read_end_t
fw_stream_group_take (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p,
                      const fw_event_t *ev)
{
   batch_t b = {NULL, NULL, NULL, 0, BSON_INITIALIZER, 0, FW_BSON_ARENA_INIT};
   fw_outcome_t o;

   if (!batch_add (w, rd, &b, ev)) {
      batch_free (&b);
      fw_stream_failed (w, "out of memory taking a source transaction's events");
      return FW_READ_FAILED;
   }
   if (!group_fill (w, rd, &b)) {
      w->batch_held = NULL; /* a stop: the position re-reads them all */
      batch_free (&b);
      return FW_READ_STOP;
   }
   if (fw_stream_lease_lost (w)) {
      w->batch_held = NULL;
      batch_free (&b);
      return FW_READ_LOST;
   }
   o = fw_group_dispatch (w->d, b.ptrs, b.n, NULL);
   return settle_batch (w, p, &b, &o, "an event could not be dead-lettered");
}
