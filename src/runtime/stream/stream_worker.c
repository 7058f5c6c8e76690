/*
 * stream_worker.c - a stream's thread: opens the change stream where the
 * checkpoint says, reads events in order, checkpoints, and re-opens it with
 * backoff when it dies.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/mongo_lua.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/stream/event_oversize-private.h"
#include "runtime/stream/event_settle.h"
#include "runtime/stream/stream_batch-private.h"
#include "runtime/stream/stream_connect-private.h"
#include "runtime/stream/stream_control-private.h"
#include "runtime/stream/stream_exactly_once-private.h"
#include "runtime/stream/stream_generation-private.h"
#include "runtime/stream/stream_lanes-private.h"
#include "runtime/stream/stream_lead-private.h"
#include "runtime/stream/stream_position-private.h"
#include "runtime/stream/stream_program-private.h"
#include "runtime/stream/stream_read-private.h"
#include "runtime/stream/stream_restart-private.h"
#include "runtime/stream/stream_settle.h"
#include "runtime/stream/stream_shared-private.h"
#include "runtime/stream/stream_snapshot-private.h"
#include "runtime/stream/stream_worker-private.h"

const char *
fw_stream_worker_name (const fw_stream_worker_t *w)
{
   return w->cfg->name;
}

bool
fw_stream_worker_sequenced (const fw_stream_worker_t *w)
{
   return w->cfg->dlq.enabled && w->cfg->dlq.sequenced;
}

void
fw_stream_worker_stop (fw_stream_worker_t *w)
{
   fw_shutdown_request (w->shutdown);
}

/* --- opening ------------------------------------------------------------- */

/* The server ended the change stream for good (ChangeStreamFatalError), e.g.
 * a pipeline stage changed the events' _id: stop and say so instead of
 * re-opening into the same error for ever. */
static void
fatal_stream_error (fw_stream_worker_t *w, const bson_error_t *berr)
{
   char what[1400];
   snprintf (what, sizeof what,
             "the server ended the change stream for good (ChangeStreamFatalError 280): %.1000s; "
             "the checkpoint stays before the event (check the stream's pipeline)",
             berr->message);
   fw_stream_failed (w, what);
}

/* An event the split stage cannot cut (7182500) under oversize = "skip":
 * true when the stream is to re-open without the stage, so that the skip
 * stage stubs the event and it is dead-lettered; false when the stream stops
 * (oversize = "fail", or without the stage it was already read). */
static bool
read_unsplittable (fw_stream_worker_t *w, fw_position_t *p, const bson_error_t *berr)
{
   if (berr->code != FW_ERR_SPLIT_FAILED || !w->cfg->oversize_skip || p->unsplittable) {
      return false;
   }
   fw_log (FW_LOG_WARN, w->cfg->name,
           "a change event cannot be split (%u: %.500s): reading it without "
           "$changeStreamSplitLargeEvent so that oversize = \"skip\" dead-letters it",
           berr->code, berr->message);
   p->unsplittable = true;
   return true;
}

/* BSONObjectTooLarge or a failed split: re-opening would hit the event again
 * for ever. */
static void
oversize_failed (fw_stream_worker_t *w, const fw_position_t *p, const bson_error_t *berr)
{
   char what[2400];
   fw_oversize_failure (p->has_resume ? &p->resume : NULL,
                        w->cfg->split_large_events && !p->split_rejected && !p->unsplittable,
                        w->cfg->oversize_skip, berr, what, sizeof what);
   fw_stream_failed (w, what);
}

/* The change stream was closed at an invalidate its pipeline filtered out
 * (closed_without_error): once every event read is handled, the position
 * moves to the token it closed at and the stream re-opens with startAfter,
 * as after an invalidate event. */
static fw_read_end_t
closed_at_invalidate (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p,
                      const bson_error_t *berr)
{
   const bson_t *tok = fw_stream_reader_resume_token (rd);

   if (!fw_stream_lanes_settle (w, p)) {
      if (fw_shutdown_requested (w->shutdown)) {
         return FW_READ_STOP;
      }
      fw_stream_failed (w, w->failure);
      return FW_READ_FAILED;
   }
   if (!bson_empty (tok) && !fw_split_buffer_active (&p->split)) {
      fw_position_set_token (&p->resume, tok);
      p->has_resume = true;
   }
   fw_log (FW_LOG_INFO, w->cfg->name,
           "the server closed the change stream (an invalidate the pipeline filtered out: %s, "
           "code %u)",
           berr->message, berr->code);
   p->invalidated = true;
   fw_position_save (&w->ckpt, p, "invalidate");
   return FW_READ_INVALIDATED;
}

/* After the event the split stage could not cut (read without the stage):
 * true when the stream is to re-open with the stage again. */
static bool
split_back (fw_stream_worker_t *w, fw_position_t *p)
{
   if (!p->unsplittable) {
      return false;
   }
   p->unsplittable = false;
   fw_log (FW_LOG_INFO, w->cfg->name,
           "the event that could not be split is done: re-opening with "
           "$changeStreamSplitLargeEvent");
   return true;
}

/* Stops the stream at an event whose "required" image the server has not:
 * every re-open would fail on it again. Says which setting, and the way on. */
static void
image_missing (fw_stream_worker_t *w, const bson_error_t *berr)
{
   bool pre = strstr (berr->message, "pre-image") != NULL;
   char what[1600];

   snprintf (what, sizeof what,
             "the server has no %s for an event and %s = \"required\": %.700s (code %u); the "
             "stream is stopped before the event (the checkpoint stays there). Enable them "
             "for later events with db.runCommand({collMod: \"%s\", "
             "changeStreamPreAndPostImages: {enabled: true}}) (MongoDB 6.0 or later), and use "
             "\"whenAvailable\" to read past events that have none",
             pre ? "pre-image" : "post-image",
             pre ? "full_document_before_change" : "full_document", berr->message, berr->code,
             w->cfg->collection ? w->cfg->collection : "<collection>");
   fw_stream_failed (w, what);
}

/* What an error of the change stream means for this read, at its open (rd
 * NULL) or while reading from rd: the one classification of both. Says what
 * the user is to see (log, p->error, the stream's failure). */
static fw_read_end_t
error_end (fw_stream_worker_t *w, fw_position_t *p, fw_stream_reader_t *rd,
           const bson_error_t *berr)
{
   fw_change_error_t kind = fw_change_error_kind (berr);

   if (kind == FW_CHANGE_HISTORY_LOST) {
      return FW_READ_HISTORY_LOST;
   }
   if (kind == FW_CHANGE_FATAL) {
      fatal_stream_error (w, berr);
      return FW_READ_FAILED;
   }
   if (kind == FW_CHANGE_OVERSIZE) {
      if (read_unsplittable (w, p, berr)) {
         return FW_READ_REOPEN;
      }
      oversize_failed (w, p, berr);
      return FW_READ_FAILED;
   }
   if (kind == FW_CHANGE_FULL_DOCUMENT_REFUSED) {
      char what[1400];
      snprintf (what, sizeof what,
                "the server refuses full_document = \"%s\" (it needs MongoDB 6.0 or later): "
                "%.1000s (code %u); the stream is stopped",
                w->cfg->full_document ? w->cfg->full_document : "default", berr->message,
                berr->code);
      fw_stream_failed (w, what);
      return FW_READ_FAILED;
   }
   if (kind == FW_CHANGE_IMAGE_MISSING) {
      image_missing (w, berr);
      return FW_READ_FAILED;
   }
   if (w->cfg->split_large_events && !p->split_rejected && fw_oversize_stage_rejected (berr)) {
      fw_log (FW_LOG_WARN, w->cfg->name,
              "the server does not support $changeStreamSplitLargeEvent (%s, code %u): "
              "reading without it; events over 16 MiB follow oversize = \"%s\"",
              berr->message, berr->code, w->cfg->oversize_skip ? "skip" : "fail");
      p->split_rejected = true;
      return FW_READ_REOPEN;
   }
   if (rd && kind == FW_CHANGE_CLOSED) {
      return closed_at_invalidate (w, rd, p, berr);
   }
   if (kind == FW_CHANGE_NO_RESUME_TOKEN) {
      /* Re-opening would fail the same way for ever. */
      fw_stream_failed (w,
                        "a change event has no _id (resume token), so it can be neither "
                        "handled nor checkpointed: a pipeline stage must not remove or "
                        "change _id; the checkpoint stays before it");
      return FW_READ_FAILED;
   }
   fw_log (FW_LOG_WARN, w->cfg->name, "%s: %s (code %u)",
           rd ? "change stream failed" : "cannot open change stream", berr->message, berr->code);
   snprintf (p->error, sizeof p->error, "%s: %s (code %u)",
             rd ? "change stream failed" : "cannot open the change stream", berr->message,
             berr->code);
   return FW_READ_ERROR;
}

/* At an event boundary of the read: a pause or restart asked ends it (the
 * checkpoint written), a pending reload is applied, a lost lease ends it.
 * FW_READ_NEXT: read on. */
static fw_read_end_t
event_boundary (fw_stream_worker_t *w, fw_position_t *p)
{
   int control = fw_stream_control_peek (w);
   const char *refused = fw_position_refused (&w->ckpt);

   if (refused) {
      /* A newer run of the stream holds its checkpoint (a second instance
       * without ha, or this one paused and replaced): its events are the
       * newer run's, and no save of this run can land. */
      fw_stream_failed (w, refused);
      return FW_READ_FAILED;
   }
   if (control == W_CONTROL_PAUSE || control == W_CONTROL_RESTART) {
      /* An event boundary: nothing is in flight (once the lanes finished). */
      fw_stream_lanes_stop (w, p);
      fw_position_save (&w->ckpt, p, control == W_CONTROL_PAUSE ? "pause" : "restart");
      return control == W_CONTROL_PAUSE ? FW_READ_PAUSE : FW_READ_RESTART;
   }
   if (control == W_CONTROL_RESUME) {
      fw_stream_control_take (w); /* not paused: nothing to do */
   }
   if (w->lane.run || w->lane.n > 1) {
      if (!fw_stream_lanes_boundary (w, p)) { /* a reload waits for every lane */
         if (fw_shutdown_requested (w->shutdown)) {
            return FW_READ_STOP;
         }
         fw_stream_failed (w, w->failure);
         return FW_READ_FAILED;
      }
   } else if (__atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE)) {
      fw_stream_reload_apply (&w->pending); /* a reload is pending */
   }
   /* The parts an event does not need stay out of its path: the lease's
    * checks without ha, the snapshot's without one, deferred retries
    * without retry.mode = "deferred" (each function checks again). */
   if (w->lead.lease && fw_stream_lease_lost (w)) {
      return FW_READ_LOST;
   }
   return FW_READ_NEXT;
}

/* With lanes: ev goes to its lane (to_lane), or was dead-lettered here; the
 * position follows the watermark. FW_READ_NEXT: read on. */
static fw_read_end_t
lanes_event (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p, const fw_event_t *ev,
             bool to_lane)
{
   fw_lanes_step_t s = fw_stream_lanes_take (w, p, ev, to_lane, fw_stream_reader_resume_token (rd));
   if (s == FW_LANES_FAILED) {
      fw_stream_failed (w, w->failure);
      return FW_READ_FAILED;
   }
   if (s != FW_LANES_NEXT) {
      return s == FW_LANES_INVALIDATED ? FW_READ_INVALIDATED : FW_READ_STOP;
   }
   return split_back (w, p) ? FW_READ_REOPEN : FW_READ_NEXT;
}

/* Without lanes, ev finished with: the position moves past it, saved every
 * save_every events and at an invalidate, which ends the read. FW_READ_NEXT:
 * read on. */
static fw_read_end_t
event_done (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p, const fw_event_t *ev)
{
   fw_position_passed (&w->ckpt, p, ev, fw_stream_reader_resume_token (rd));
   if (strcmp (ev->operation_type, "invalidate") == 0) {
      p->invalidated = true;
      fw_position_save (&w->ckpt, p, "invalidate");
      return FW_READ_INVALIDATED;
   }
   return split_back (w, p) ? FW_READ_REOPEN : FW_READ_NEXT;
}

/* An event the stream's thread finished with (handled here, or
 * dead-lettered as unreadable or oversize): where fw_stream_settle moves
 * its position. */
typedef struct {
   fw_stream_worker_t *w;
   fw_stream_reader_t *rd;
   fw_position_t *p;
   const fw_event_t *ev;
   bool *progressed;
   fw_log_level_t note_level; /* a line about how it ended, or note[0] == '\0' */
   char note[1400];
} here_t;

static void
here_fail (void *ud, const char *why)
{
   fw_stream_failed (((here_t *) ud)->w, why);
}

static bool
here_lease_lost (void *ud)
{
   fw_stream_worker_t *w = ((here_t *) ud)->w;
   return fw_stream_lease_lost (w) && !fw_shutdown_requested (w->shutdown);
}

/* The event is finished with (o: its outcome): counted; with lanes its slot
 * is done; without, the due rounds between two events run, then the
 * position passes it. */
static fw_read_end_t
here_finished (void *ud, const fw_outcome_t *o)
{
   here_t *h = ud;
   fw_stream_worker_t *w = h->w;

   fw_stream_count_dispatched (w, o);
   if (h->note[0]) {
      fw_log (h->note_level, w->cfg->name, "%s", h->note);
   }
   *h->progressed = true;
   if (w->lane.run) {
      return lanes_event (w, h->rd, h->p, h->ev, false);
   }
   if (w->dlq.reprocess_at_ms >= 0) {
      fw_dlq_reprocess_tick (
         w->d, &w->dlq.reprocess_at_ms); /* a due dlq.reprocess round, between events */
   }
   if (w->cfg->retry_deferred) {
      fw_deferred_tick (w->d); /* due deferred retries (issue 29), between events */
   }
   return event_done (w, h->rd, h->p, h->ev);
}

static fw_settle_place_t
here_place (here_t *h)
{
   return (fw_settle_place_t){h->w->d, h->w->metrics, here_finished, here_fail, here_lease_lost,
                              h,       NULL};
}

/* An event the runtime cannot read is never skipped in silence: with its
 * resume token it goes to the DLQ whole; without a DLQ (or a token) the
 * stream stops before it, so nothing is lost. */
static fw_read_end_t
unreadable_event (here_t *h, fw_event_t *ev, const fw_error_t *err)
{
   char eid[1024], what[2200];
   fw_outcome_t o = fw_outcome_of (FW_OUTCOME_NO_DLQ, 0);
   fw_settle_place_t place = here_place (h);
   bson_iter_t tok;
   bool named = fw_event_field (ev, FW_EV_ID, &tok) && BSON_ITER_HOLDS_DOCUMENT (&tok);

   eid[0] = '\0';
   if (named) {
      fw_event_log_id (ev, eid, sizeof eid);
      o = fw_event_dispatch_unreadable (h->w->d, ev, err->message);
   }
   snprintf (what, sizeof what,
             "unreadable change event %s: %.1000s; the checkpoint stays before it (add "
             "dlq = true to keep such events in the dead-letter queue and go on)",
             named ? eid : "(no usable resume token)", err->message);
   place.no_dlq_why = what;
   h->note_level = FW_LOG_ERROR;
   snprintf (h->note, sizeof h->note, "unreadable change event %.300s dead-lettered: %.1000s", eid,
             err->message);
   return fw_stream_settle (&place, &o);
}

/* An oversize = "skip" stub of size bytes, dead-lettered without its
 * document before the event's snapshot rows (see take_event). True with *end
 * set when the stream cannot go on past it. */
static bool
oversize_stub (here_t *h, const fw_event_t *ev, int64_t size, fw_outcome_t *o, fw_read_end_t *end)
{
   char eid[1024], what[2200];
   fw_settle_place_t place = here_place (h);

   *o = fw_event_dispatch_oversize (h->w->d, ev, size);
   /* The warn line names the event by its short id; the entry has it whole. */
   fw_event_short_id (ev, eid, sizeof eid);
   h->note_level = FW_LOG_WARN;
   snprintf (h->note, sizeof h->note,
             "oversize change event %.1000s (%lld bytes) skipped and dead-lettered", eid,
             (long long) size);
   if (fw_outcome_finished (o->kind)) {
      return false;
   }
   fw_event_log_id (ev, eid, sizeof eid);
   snprintf (what, sizeof what,
             "change event %.1000s of %lld bytes is over oversize_threshold and the stream "
             "has no DLQ to record it (oversize = \"skip\" needs dlq); the checkpoint "
             "stays before it",
             eid, (long long) size);
   place.no_dlq_why = what;
   *end = fw_stream_settle (&place, o);
   return true;
}

/* Without lanes: the handlers run for ev on this thread and its outcome is
 * settled. */
static fw_read_end_t
dispatch_here (here_t *h, const fw_event_t *ev)
{
   fw_stream_worker_t *w = h->w;
   fw_settle_place_t place = here_place (h);
   fw_outcome_t o;

   fw_event_received (w->metrics, ev);
   if (w->lead.lease && fw_stream_lease_lost (w)) {
      return FW_READ_LOST; /* checked again here: the read may have waited */
   }
   o = fw_stream_dispatch (&w->pending, ev);
   return fw_stream_settle (&place, &o);
}

/* One change event (or a fragment of one) doc taken from the reader:
 * reassembled or dead-lettered by the oversize policy, dead-lettered when
 * unreadable, handled here or handed to the lanes. FW_READ_NEXT: read on. */
static fw_read_end_t
take_event (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p, const bson_t *doc,
            bool *progressed)
{
   fw_event_t ev;
   fw_error_t err;
   fw_outcome_t stub;
   fw_read_end_t end = FW_READ_NEXT;
   int64_t size = 0;
   here_t h;

   /* The parse's one scan tells a fragment (splitEvent) from a whole
    * event; fields a fragment lacks make it fail, which is fine here. */
   bool parsed = fw_event_parse (doc, &ev, &err);
   fw_oversize_step_t step = fw_oversize_take (w->cfg->oversize_skip, &p->split, &doc, &ev, &parsed,
                                               &size, &err);

   h.w = w;
   h.rd = rd;
   h.p = p;
   h.ev = &ev;
   h.progressed = progressed;
   h.note_level = FW_LOG_INFO;
   h.note[0] = '\0';
   switch (step) {
   case FW_OVERSIZE_FRAGMENT:
      *progressed = true;
      return FW_READ_NEXT;
   case FW_OVERSIZE_BROKEN:
      fw_log (FW_LOG_WARN, w->cfg->name, "%s; re-opening before the split event", err.message);
      snprintf (p->error, sizeof p->error, "%.500s", err.message);
      return FW_READ_ERROR;
   case FW_OVERSIZE_STUB:
      if (oversize_stub (&h, &ev, size, &stub, &end)) {
         return end;
      }
      break;
   default:
      break;
   }
   if (parsed && w->snap.run && (end = fw_stream_snapshot_live (w, p, &ev)) != FW_READ_NEXT) {
      return end;
   }
   if (step == FW_OVERSIZE_STUB) {
      fw_settle_place_t place = here_place (&h);
      return fw_stream_settle (&place, &stub); /* dead-lettered without its document */
   }
   if (!parsed) {
      return unreadable_event (&h, &ev, &err);
   }
   if (w->lane.run) {
      *progressed = true;
      return lanes_event (w, rd, p, &ev, true); /* the router: to its lane */
   }
   if (w->cfg->batch_max_events > 0 && fw_dispatcher_batching (w->d, NULL, NULL) &&
       fw_stream_batch_joins (doc, &ev)) {
      /* on_batch: ev starts a batch, which moves the position itself */
      *progressed = true;
      end = fw_stream_batch_take (w, rd, p, &ev);
      return end == FW_READ_NEXT && split_back (w, p) ? FW_READ_REOPEN : end;
   }
   if (w->cfg->exactly_once && fw_stream_group_wanted (w, doc, &ev)) {
      /* exactly_once: ev's source transaction is applied as one */
      *progressed = true;
      end = fw_stream_group_take (w, rd, p, &ev);
      return end == FW_READ_NEXT && split_back (w, p) ? FW_READ_REOPEN : end;
   }
   return dispatch_here (&h, &ev);
}

/* The reader is idle (no event, no error): a due dlq.reprocess round, the
 * post-batch token as the seen position, and the interval's saves. */
static void
idle_step (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p)
{
   const bson_t *tok;
   int64_t now;

   /* With lanes: only once they are idle too (the round runs here). */
   if (w->dlq.reprocess_at_ms >= 0 && (!w->lane.run || fw_stream_lanes_advance (w, p))) {
      fw_dlq_reprocess_tick (w->d,
                             &w->dlq.reprocess_at_ms); /* a due dlq.reprocess round, while idle */
   }
   if (!w->lane.run || fw_stream_lanes_advance (w, p)) {
      fw_deferred_tick (w->d); /* due deferred retries (issue 29), while idle */
   }
   /* Idle: the post-batch token moves the seen position forward. */
   tok = fw_stream_reader_resume_token (rd);
   now = fw_now_ms ();
   if (w->metrics) {
      fw_stream_metrics_caught_up (w->metrics);
      fw_stream_dlq_count_tick (w, now);
   }
   if ((!w->lane.run || fw_stream_lanes_advance (w, p)) && tok && !bson_empty (tok) &&
       !fw_split_buffer_active (&p->split) && (!p->has_resume || !bson_equal (tok, &p->resume))) {
      fw_position_set_token (&p->resume, tok);
      p->has_resume = true;
      p->dirty = true;
   }
   if ((p->dirty && now - p->last_save_ms >= w->cfg->save_interval_ms) ||
       now - p->last_save_ms >= w->cfg->idle_heartbeat_ms) {
      fw_position_save_async (&w->ckpt, p, "interval");
   }
   fw_position_writer_results (&w->ckpt);
}

/* Reads until shutdown, an error or an invalidate. */
static fw_read_end_t
consume_events (fw_stream_worker_t *w, fw_stream_reader_t *rd, fw_position_t *p, bool *progressed)
{
   const bson_t *doc;
   bson_error_t berr;
   fw_read_end_t end;

   while (!fw_shutdown_requested (w->shutdown)) {
      if ((end = event_boundary (w, p)) != FW_READ_NEXT ||
          ((w->snap.run || __atomic_load_n (&w->snap.request, __ATOMIC_ACQUIRE)) &&
           (end = fw_stream_snapshot_between (w, p, rd)) != FW_READ_NEXT)) {
         return end;
      }
      if (w->snap.run && fw_stream_snapshot_reading (w) && !fw_stream_reader_ready (rd, 0)) {
         continue; /* more chunks to read, nothing live waits: no wait for the stream */
      }
      if (fw_stream_reader_next (rd, &doc)) {
         if ((end = take_event (w, rd, p, doc, progressed)) != FW_READ_NEXT) {
            return end;
         }
         while ((doc = w->batch_held)) { /* read by a batch, not of it */
            w->batch_held = NULL;
            if ((end = take_event (w, rd, p, doc, progressed)) != FW_READ_NEXT) {
               return end;
            }
         }
         continue;
      }
      if (fw_stream_reader_error (rd, &berr)) {
         return error_end (w, p, rd, &berr);
      }
      idle_step (w, rd, p);
      if ((end = fw_stream_snapshot_idle (w, p, fw_stream_reader_resume_token (rd))) !=
          FW_READ_NEXT) {
         return end;
      }
   }
   return FW_READ_STOP;
}

/* The reader's hold: shutdown, or a pause or restart asked. */
static bool
reader_hold (void *ud)
{
   fw_stream_worker_t *w = ud;
   int control = fw_stream_control_peek (w);
   return control == W_CONTROL_PAUSE || control == W_CONTROL_RESTART ||
          fw_shutdown_requested (w->shutdown) || fw_stream_lease_lost (w);
}

/* Reads (ahead, on the reader's thread) until shutdown, an error or an
 * invalidate. What was read ahead and not handled is dropped when it ends:
 * the position re-opens the change stream before it. */
static fw_read_end_t
consume (fw_stream_worker_t *w, mongoc_change_stream_t *cs, fw_position_t *p, bool *progressed)
{
   fw_read_end_t end;
   fw_stream_reader_t *rd = fw_stream_reader_start (cs, FW_READ_AHEAD_EVENTS, FW_READ_AHEAD_BYTES,
                                                    reader_hold, w);

   if (!rd) {
      snprintf (p->error, sizeof p->error, "out of memory starting the change stream's reader");
      fw_log (FW_LOG_ERROR, w->cfg->name, "%s", p->error);
      return FW_READ_ERROR;
   }
   fw_stream_snapshot_reopened (w);
   end = consume_events (w, rd, p, progressed);
   w->batch_held = NULL;        /* the reader's: re-read after the position */
   fw_stream_lanes_stop (w, p); /* p: the watermark once they finished */
   fw_stream_reader_stop (rd);
   return end;
}

/* --- the thread ----------------------------------------------------------- */

static void
set_state (fw_stream_worker_t *w, fw_stream_state_t state, const char *why)
{
   if (w->metrics) {
      fw_stream_metrics_set_state (w->metrics, state, why);
   }
}

/* The thread's setup: its run's buffers, its clients, then the DLQ store,
 * with ha the lease (and the wait to lead), and the checkpoint. False when
 * the thread is to end (shutdown, or the stream failed); run_teardown undoes
 * it either way. */
static bool
run_setup (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   fw_error_t err;
   char why[700];

   bson_init (&run->p->resume);
   bson_init (&run->p->processed);
   fw_split_buffer_init (&run->p->split);
   bson_init (&run->cp.processed);
   bson_init (&run->cp.seen);
   w->client = mongoc_client_pool_pop (w->pool);
   fw_dispatcher_bind (w->d, w->client);
   w->read_client = mongoc_client_pool_pop (w->pool);
   run->p->last_save_ms = fw_now_ms ();
   w->ckpt.origin_ns = fw_mono_ns (); /* before any event of the run */
   /* Bounded probes first: every call below waits out a pooled server
    * selection (30 s) when nothing answers. */
   if (!fw_stream_wait_server (w->client, w->cfg->name, w->shutdown, w->metrics,
                               FW_STREAM_STARTING)) {
      return false;
   }
   set_state (w, FW_STREAM_STARTING, "starting: reading its checkpoint");
   if (w->metrics) {
      fw_stream_metrics_set_script_version (w->metrics, w->ckpt.version);
   }

   if (w->cfg->dlq.enabled && !fw_dispatcher_open_dlq (w->d)) {
      return false;
   }
   if (w->cfg->ha_leader) {
      if (!(w->lead.lease = fw_stream_lease_new (&w->shared, &err))) { /* stream_shared.c */
         fw_stream_failed (w, err.message);
         return false;
      }
      /* "shared": the stream's start in the group, recorded when its
       * first member starts, before any unit opens; else at the open. */
      if (!fw_stream_group_start (&w->shared, w->client, &run->group_at, why, sizeof why)) {
         fw_log (FW_LOG_WARN, w->cfg->name, "%s; trying again at the open", why);
      }
      if (!fw_stream_wait_lead (w)) {
         return false;
      }
   }
   if (!fw_stream_load_checkpoint (w, &run->cp, run->p, &run->candidate, &run->from_checkpoint)) {
      return false;
   }
   if (!w->cfg->ha_leader) {
      fw_stream_exactly_once_recover (&w->eo); /* under ha: by fw_stream_wait_lead */
   }
   if (!fw_stream_snapshot_setup (w, &run->cp)) {
      return false;
   }
   fw_log (FW_LOG_INFO, w->cfg->name, "starting on %s%s%s %s", w->cfg->database,
           w->cfg->collection ? "." : "",
           w->cfg->collection ? w->cfg->collection : " (all collections)",
           run->from_checkpoint ? "from its checkpoint"
           : w->cfg->start_at   ? "at checkpoint.start_at"
           : run->group_at      ? "at the group's start"
                                : "from now");
   return true;
}

/* The thread's end: the final checkpoint, then the lease released, the DLQ
 * store closed and the clients given back. */
static void
run_teardown (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   fw_position_save (&w->ckpt, run->p, "shutdown");
   fw_checkpoint_writer_destroy (w->ckpt.writer); /* idle since the save: gives its client back */
   w->ckpt.writer = NULL;
   w->ckpt.epoch = 0;
   w->ckpt.gen = 0; /* the next run claims its own before its first save */
   w->ckpt.refused = false;
   if (w->lead.lease) {
      /* After the final checkpoint: the standby that takes over at once
       * starts where this leader stopped. */
      fw_lease_release (w->lead.lease, 2000);
      fw_stream_lease_destroy (&w->shared);
      w->lead.lease = NULL;
      w->lead.epoch = 0;
      fw_dispatcher_set_lead (w->d, NULL, 0);
      fw_stream_set_role (w, FW_STREAM_ROLE_STANDBY);
   }
   if (!w->summary.failed) {
      set_state (w, FW_STREAM_STOPPED, "stopped");
   }
   fw_stream_snapshot_teardown (w);
   fw_checkpoint_cleanup (&run->cp);
   bson_destroy (&run->p->resume);
   bson_destroy (&run->p->processed);
   fw_split_buffer_cleanup (&run->p->split);
   fw_dispatcher_release (w->d); /* the DLQ store, fw.mongo's cursors and clients */
   mongoc_client_pool_push (w->pool, w->client);
   mongoc_client_pool_push (w->pool, w->read_client);
   w->client = NULL;
   w->read_client = NULL;
}

/* A pause asked while the change stream was closed (a restart delay): the
 * checkpoint written, waits for resume or restart. False on shutdown. */
static bool
paused_while_closed (fw_stream_worker_t *w, fw_stream_run_t *run)
{
   return fw_stream_pause (w, run, true);
}

/* The change stream cs opened: where a new stream starts is saved at once,
 * and the stream is running. */
static void
stream_opened (fw_stream_worker_t *w, fw_stream_run_t *run, mongoc_change_stream_t *cs)
{
   fw_position_t *p = run->p;
   const bson_t *start = mongoc_change_stream_get_resume_token (cs);
   bool resuming = p->has_resume;

   /* Only a stream that opened gives up the checkpoint's fallbacks. */
   run->candidate = 2;
   fw_stream_exactly_once_opened (&w->eo);
   if (!p->has_resume && start && !bson_empty (start)) {
      /* Save where a new stream starts at once (before saying it is
       * open), so that a crash or an error before its first event
       * cannot move it to a later "now" and lose what came between. */
      fw_position_set_token (&p->resume, start);
      p->has_resume = true;
      fw_position_save (&w->ckpt, p, "start");
   }
   if (resuming || !run->at_group) {
      fw_log (FW_LOG_INFO, w->cfg->name, "change stream open%s",
              resuming ? " (resuming)" : " (from now)");
   } else {
      fw_log (FW_LOG_INFO, w->cfg->name,
              "change stream open (at the group's start, Timestamp(%u, %u): what was written "
              "since the group started is this unit's)",
              (unsigned) (run->group_at >> 32), (unsigned) (run->group_at & 0xffffffffu));
   }
   set_state (w, FW_STREAM_RUNNING, NULL);
}

/* One open of the change stream where the position is (once the server is
 * known to take the stream's options), and its read until it ends; the
 * change stream is closed again. */
static fw_read_end_t
open_and_read (fw_stream_worker_t *w, fw_stream_run_t *run, bool *progressed)
{
   fw_position_t *p = run->p;
   mongoc_change_stream_t *cs;
   bson_error_t berr;
   const bson_t *reply;
   fw_read_end_t end;
   char unsupported[800];
   fw_generation_t gen;
   fw_generation_open_t gen_open;
   uint64_t start_at;

   fw_split_buffer_reset (&p->split);
   /* A sequenced DLQ: its open sequences, read again on every (re)open. */
   if (!fw_dispatcher_load_sequences (w->d)) {
      return FW_READ_STOP; /* false only on shutdown */
   }
   /* Checked at every open: a 6.0-only option on an older server is
    * refused every time, so the stream stops instead of re-opening. */
   /* Issue 31: a changed number of partitions switches generations first. */
   fw_generation_init (&gen);
   if ((gen_open = fw_stream_generation_open (w->cfg, w->read_client, &gen, unsupported,
                                              sizeof unsupported)) == FW_GENERATION_LATER) {
      fw_log (FW_LOG_WARN, w->cfg->name, "%s", unsupported);
      snprintf (p->error, sizeof p->error, "%.590s", unsupported);
      return FW_READ_ERROR; /* re-opened after the restart delay */
   }
   if (gen_open == FW_GENERATION_STOP ||
       !fw_stream_server_supports (w->cfg, w->read_client, unsupported, sizeof unsupported) ||
       !fw_stream_exactly_once_supported (&w->eo, unsupported, sizeof unsupported)) {
      fw_generation_cleanup (&gen);
      fw_stream_failed (w, unsupported);
      return FW_READ_FAILED;
   }
   if (p->has_resume && fw_stream_generation_stale (&gen, &p->resume)) {
      fw_log (FW_LOG_INFO, w->cfg->name,
              "its checkpoint is older than the generation switch "
              "(an earlier run with this number of partitions): starting at the switch");
      p->has_resume = false;
   }
   if (!fw_stream_start_point (w->cfg, &w->shared, w->read_client, run, gen.start_at, &start_at)) {
      fw_generation_cleanup (&gen);
      fw_log (FW_LOG_WARN, w->cfg->name, "%s", p->error);
      return FW_READ_ERROR; /* re-opened after the restart delay */
   }
   cs = fw_change_stream_open (w->cfg, w->read_client, p->has_resume ? &p->resume : NULL, start_at,
                               w->cfg->split_large_events && !p->split_rejected && !p->unsplittable,
                               fw_stream_snapshot_opening (w), gen.has_stage ? &gen.stage : NULL);
   fw_generation_cleanup (&gen);
   if (cs && mongoc_change_stream_error_document (cs, &berr, &reply)) {
      end = error_end (w, p, NULL, &berr);
   } else if (!cs) {
      end = FW_READ_ERROR;
      snprintf (p->error, sizeof p->error, "cannot open the change stream");
   } else {
      stream_opened (w, run, cs);
      end = consume (w, cs, p, progressed);
   }
   mongoc_change_stream_destroy (cs);
   return end;
}

typedef struct {
   fw_stream_worker_t *w;
   fw_stream_run_t *run;
} run_args_t;

/* Opens, reads and re-opens until the stream stops. True: a panic did not
 * end it (run under fw_lua_host_guard). */
static bool
run_until_stopped (void *ud)
{
   run_args_t *a = ud;
   fw_stream_worker_t *w = a->w;

   while (!fw_shutdown_requested (w->shutdown)) {
      fw_read_end_t end;
      bool progressed = false;

      if (fw_stream_control_peek (w) == W_CONTROL_PAUSE) {
         if (!paused_while_closed (w, a->run)) {
            break;
         }
         continue;
      }
      end = open_and_read (w, a->run, &progressed);
      if (progressed) {
         a->run->restarts = 0;
      }
      if (!fw_stream_read_ended (w, a->run, end)) {
         break;
      }
   }
   return true;
}

static void *
worker_main (void *arg)
{
   fw_stream_worker_t *w = arg;
   fw_position_t p = {0};
   fw_stream_run_t run = {.p = &p};

   if (!run_setup (w, &run)) {
      goto done;
   }
   {
      run_args_t a = {w, &run};
      if (!fw_lua_host_guard (run_until_stopped, &a)) {
         fw_stream_failed (w,
                           "a Lua panic (an error outside every protected call, logged "
                           "above: a flowwarden bug) stopped the stream; the checkpoint "
                           "stays where it was saved last");
      }
   }

done:
   run_teardown (w, &run);
   __atomic_store_n (&w->thread.finished, true, __ATOMIC_RELEASE);
   return NULL;
}

/* Asked by the dispatcher before a change event's retry: a reload's new
 * program waits (applied by fw_stream_dispatch, stream_reload.c, at the
 * event's boundary). */
static bool
reload_waits (void *ud)
{
   fw_stream_worker_t *w = ud;
   return !w->lane.run && __atomic_load_n (&w->pending.has, __ATOMIC_ACQUIRE);
}

bool
fw_stream_worker_start (fw_stream_worker_t *w, fw_error_t *error)
{
   if (w->thread.started && w->thread.joined) {
      /* Started again after its thread ended on an error. */
      w->thread.started = w->thread.joined = false;
      w->thread.finished = false;
      w->summary.failed = false;
      w->control = W_CONTROL_NONE;
   }
   /* The stream's thread switches to a reloaded program at event
    * boundaries; an event in retries gives way to it (lane programs never
    * do: their stream's thread switches them once they drained). */
   fw_dispatcher_set_reload_waits (w->d, reload_waits, w);
   fw_stream_exactly_once_wire (&w->eo);
   if (pthread_create (&w->thread.id, NULL, worker_main, w) != 0) {
      fw_error_set (error, FW_ERROR_IO, "cannot start thread for stream \"%s\"", w->cfg->name);
      return false;
   }
   w->thread.started = true;
   return true;
}
