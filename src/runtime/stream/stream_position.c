/*
 * stream_position.c - where a stream has read to and what it has handled,
 * and the checkpoint that keeps both: written on the stream's thread
 * (checkpoint.mode = "sync", and the final save) or handed to the stream's
 * checkpoint writer (mode = "async", issue 16).
 */
#include <string.h>

#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "runtime/checkpoint/checkpoint_store.h"
#include "runtime/checkpoint/checkpoint_writer.h"
#include "runtime/stream/stream_checkpoint-private.h"
#include "runtime/stream/stream_position-private.h"

/* checkpoint.mode = "async": saves that may wait to be written while the
 * handler goes on. The handler waits only once this many saves are past the
 * newest one whose write ended and that one was handed over
 * checkpoint.max_unsaved or longer ago, so a crash repeats at most
 * (this + 1) x save_every events, or the events passed within max_unsaved
 * plus save_every (docs/reliability.md). Alone (max_unsaved = 0) the count
 * capped a stream near this / 1.25 x save_every events per checkpoint round
 * trip (up to four writes in flight: ~238k events/s at save_every = 100 and
 * ~3k at save_every = 1 over 5 ms; docs/performance.md, "Networks with
 * latency" and issue 41's rounds); the time allowance lifts that cap while
 * writes are faster than max_unsaved. */
#define FW_CHECKPOINT_MAX_BEHIND 19

/* A copy of the bytes, not bson_concat's append of src's elements (it was
 * half of what the position cost an event: two copies an event, issue 41);
 * bson_concat only when the buffer could not grow. */
void
fw_position_set_token (bson_t *dst, const bson_t *src)
{
   uint8_t *buf;

   bson_reinit (dst);
   if (src->len > 5 && (buf = bson_reserve_buffer (dst, src->len))) {
      memcpy (buf, bson_get_data (src), src->len);
      return;
   }
   bson_concat (dst, src);
}

bool
fw_position_set_event_token (bson_t *dst, const fw_event_t *ev)
{
   const uint8_t *data;
   uint32_t len;
   bson_t view;

   if (!fw_event_field_document (ev, FW_EV_ID, &data, &len) ||
       !bson_init_static (&view, data, len)) {
      return false;
   }
   fw_position_set_token (dst, &view);
   return true;
}

void
fw_position_from_stored (fw_position_t *p, const fw_checkpoint_t *cp, int *candidate,
                         bool *from_checkpoint)
{
   if (cp->has_processed) {
      fw_position_set_token (&p->processed, &cp->processed);
      p->has_processed = true;
      fw_position_set_token (&p->resume, &cp->processed);
      p->has_resume = true;
      *from_checkpoint = true;
   } else if (cp->has_seen) {
      fw_position_set_token (&p->resume, &cp->seen);
      p->has_resume = true;
      *candidate = 1;
      *from_checkpoint = true;
   }
}

void
fw_position_replace_stored (fw_position_t *p, const fw_checkpoint_t *cp, int *candidate,
                            bool *from_checkpoint)
{
   p->has_processed = p->has_resume = false;
   *candidate = 0;
   fw_position_from_stored (p, cp, candidate, from_checkpoint);
}

const char *
fw_position_refused (fw_stream_ckpt_t *c)
{
   if (!c->refused && c->writer && fw_checkpoint_writer_refused (c->writer, &c->refusal)) {
      c->refused = true;
   }
   return c->refused ? c->refusal.message : NULL;
}

/* Counts the checkpoint writer's outcomes in the stream's metrics. */
void
fw_position_writer_results (fw_stream_ckpt_t *c)
{
   int ok, failed;
   int64_t at;
   if (!c->writer) {
      return;
   }
   fw_checkpoint_writer_take_results (c->writer, &ok, &failed, &at);
   for (int i = 0; *c->metrics && i < failed + ok; i++) {
      fw_stream_metrics_checkpoint (*c->metrics, i >= failed, at);
   }
}

bool
fw_position_claim (fw_stream_ckpt_t *c, mongoc_client_t *client, int64_t *gen, fw_error_t *err)
{
   int64_t claimed;
   bool ok = true;

   *gen = 0;
   if (*c->lease) {
      return true; /* under ha the fence orders the runs */
   }
   pthread_mutex_lock (&c->gen_mu);
   if (c->gen <= 0 && (ok = fw_checkpoint_claim_generation (client, c->cfg->database, c->cfg->name,
                                                            &claimed, err))) {
      c->gen = claimed;
   }
   *gen = c->gen;
   pthread_mutex_unlock (&c->gen_mu);
   return ok;
}

/* The synchronous write of p (and also), with the run's writer generation
 * (none under ha). With a checkpoint writer (quiesced
 * by the caller) it carries the writer's stamp past every hand-over, so that
 * none of the writer's writes that the server applies late (one that timed
 * out on the client's side) replaces it. */
static fw_position_saved_t
store_position (fw_stream_ckpt_t *c, const fw_position_t *p, const bson_t *also, fw_error_t *err)
{
   const bson_t *processed = p->has_processed ? &p->processed : NULL;
   const bson_t *seen = p->has_resume ? &p->resume : NULL;
   int64_t epoch = *c->lease ? *c->lead_epoch : 0;
   int64_t gen; /* 0 under ha: the fence orders the runs */
   bson_oid_t writer;
   int64_t seq;

   fw_checkpoint_saved_t saved;

   /* Read after the claim: the run's first save carries it too. */
   if (!fw_position_claim (c, *c->client, &gen, err)) {
      return FW_POSITION_FAILED;
   }
   if (c->writer && fw_checkpoint_writer_stamp (c->writer, &writer, &seq)) {
      /* Superseded cannot happen (the seq is past every write of the
       * writer); it would mean a later position is stored. */
      saved = fw_checkpoint_save_ordered_with (*c->client, c->cfg->database, c->cfg->name,
                                               processed, seen, c->version, also, epoch, gen,
                                               &writer, seq, err);
      if (saved == FW_CHECKPOINT_SUPERSEDED) {
         saved = FW_CHECKPOINT_SAVED;
      }
   } else if (gen > 0) {
      /* a write of an earlier run that lands late never replaces it */
      saved = fw_checkpoint_save_ordered_with (*c->client, c->cfg->database, c->cfg->name,
                                               processed, seen, c->version, also, 0, gen, NULL, 0,
                                               err);
   } else {
      saved = fw_checkpoint_save_with (*c->client, c->cfg->database, c->cfg->name, processed, seen,
                                       c->version, also, epoch, err)
                 ? FW_CHECKPOINT_SAVED
                 : FW_CHECKPOINT_NOT_SAVED;
   }
   switch (saved) {
   case FW_CHECKPOINT_SAVED:
      return FW_POSITION_SAVED;
   case FW_CHECKPOINT_REFUSED:
      return FW_POSITION_REFUSED;
   default:
      return FW_POSITION_FAILED;
   }
}

/* Writes the checkpoint on the stream's thread: mode = "sync", and with
 * "async" the final one (shutdown, pause, restart) and the rare ones (start,
 * invalidate), after the writer's write in flight. */
void
fw_position_save (fw_stream_ckpt_t *c, fw_position_t *p, const char *why)
{
   (void) fw_position_save_with (c, p, why, NULL);
}

fw_position_saved_t
fw_position_save_with (fw_stream_ckpt_t *c, fw_position_t *p, const char *why, const bson_t *also)
{
   fw_error_t err;
   fw_position_saved_t saved;
   if (c->writer) {
      fw_checkpoint_writer_quiesce (c->writer); /* nothing older can land after this */
      fw_position_writer_results (c);
   }
   if (fw_position_refused (c)) {
      return FW_POSITION_REFUSED; /* a newer run's: said once, as the stream stops */
   }
   if (!p->has_processed && !p->has_resume) {
      return FW_POSITION_NONE;
   }
   if (*c->lease && *c->lead_epoch <= 0) {
      return FW_POSITION_NONE; /* a standby has nothing to save: the leader's checkpoint stands */
   }
   if (*c->advance) {
      /* exactly once into a sink: PostgreSQL, another deployment */
      (*c->advance) (c->eo, p->has_processed ? &p->processed : NULL,
                     p->has_resume ? &p->resume : NULL);
   }
   if ((saved = store_position (c, p, also, &err)) != FW_POSITION_SAVED) {
      if (saved == FW_POSITION_REFUSED) {
         c->refused = true;
         c->refusal = err;
      } else {
         fw_log (FW_LOG_ERROR, c->cfg->name, "%s (%s); will try again", err.message, why);
      }
      if (*c->metrics) {
         fw_stream_metrics_checkpoint (*c->metrics, false, 0);
      }
      return saved;
   }
   p->since_save = 0;
   p->dirty = false;
   p->last_save_ms = fw_now_ms ();
   c->origin_ns = fw_mono_ns ();
   if (*c->metrics) {
      fw_stream_metrics_checkpoint (*c->metrics, true, p->last_save_ms);
   }
   return FW_POSITION_SAVED;
}

/* exactly_once: whether p's handled and seen positions are the one the last
 * transaction committed (*c->committed), so a save of p would write again
 * what is stored. */
static bool
committed_already (const fw_stream_ckpt_t *c, const fw_position_t *p)
{
   return c->cfg->exactly_once && fw_position_is (p, *c->committed);
}

/* checkpoint.mode = "async": hands the position to the stream's checkpoint
 * writer and goes on; it waits only while FW_CHECKPOINT_MAX_BEHIND earlier
 * saves are not yet written and the newest written was handed over
 * checkpoint.max_unsaved or longer ago (see FW_CHECKPOINT_MAX_BEHIND). */
fw_position_saved_t
fw_position_save_async (fw_stream_ckpt_t *c, fw_position_t *p, const char *why)
{
   fw_error_t err;
   if (fw_position_refused (c)) {
      return FW_POSITION_REFUSED;
   }
   if (committed_already (c, p)) {
      /* exactly_once: the transaction of the event handled last wrote this
       * position (seen and handled) and committed; writing it again would
       * be a second round trip per save_every events. */
      p->since_save = 0;
      p->dirty = false;
      p->last_save_ms = fw_now_ms ();
      if (*c->metrics) {
         fw_stream_metrics_checkpoint (*c->metrics, true, p->last_save_ms);
      }
      return FW_POSITION_SAVED;
   }
   /* exactly_once: each handled event's transaction writes the checkpoint;
    * an async write landing after a later commit would move it back. Into
    * PostgreSQL the position that counts is in flowwarden_checkpoints there
    * (it wins at a start): _fw_checkpoints may be written behind, as with
    * at least once, off the stream's thread. */
   if (c->cfg->checkpoint_sync || c->unavailable ||
       (c->cfg->exactly_once && !c->cfg->exactly_once_pg)) {
      return fw_position_save_with (c, p, why, NULL);
   }
   if (!p->has_processed && !p->has_resume) {
      return FW_POSITION_NONE;
   }
   if (*c->lease && *c->lead_epoch <= 0) {
      return FW_POSITION_NONE;
   }
   if (*c->advance) {
      /* exactly once into a sink: PostgreSQL, another deployment */
      (*c->advance) (c->eo, p->has_processed ? &p->processed : NULL,
                     p->has_resume ? &p->resume : NULL);
   }
   int64_t gen = 0;
   if (!c->writer && !fw_position_claim (c, *c->client, &gen, &err)) {
      fw_log (FW_LOG_ERROR, c->cfg->name, "%s (%s); will try again", err.message, why);
      if (*c->metrics) {
         fw_stream_metrics_checkpoint (*c->metrics, false, 0);
      }
      return FW_POSITION_FAILED;
   }
   if (!c->writer) {
      if (!(c->writer = fw_checkpoint_writer_new (c->pool, c->cfg->database, c->cfg->name, gen,
                                                  &err))) {
         fw_log (FW_LOG_WARN, c->cfg->name, "%s; checkpoints are written as with mode = \"sync\"",
                 err.message);
         c->unavailable = true;
         return fw_position_save_with (c, p, why, NULL);
      }
      if (c->origin_ns > 0) {
         fw_checkpoint_writer_set_origin (c->writer, c->origin_ns);
      }
   }
   if (*c->lease && c->epoch != *c->lead_epoch) {
      /* A new leadership: nothing of the old one is in flight (the fence
       * made its writes fail anyway). */
      fw_checkpoint_writer_quiesce (c->writer);
      fw_checkpoint_writer_set_epoch (c->writer, *c->lead_epoch);
      c->epoch = *c->lead_epoch;
   }
   fw_checkpoint_writer_submit (c->writer, p->has_processed ? &p->processed : NULL,
                                p->has_resume ? &p->resume : NULL, c->version,
                                FW_CHECKPOINT_MAX_BEHIND, c->cfg->max_unsaved_ms);
   fw_position_writer_results (c);
   p->since_save = 0;
   p->dirty = false;
   p->last_save_ms = fw_now_ms ();
   return fw_position_refused (c) ? FW_POSITION_REFUSED : FW_POSITION_SAVED;
}

void
fw_position_passed (fw_stream_ckpt_t *c, fw_position_t *p, const fw_event_t *ev,
                    const bson_t *token)
{
   if (fw_position_set_event_token (&p->processed, ev)) {
      p->has_processed = true;
   }
   fw_position_set_token (&p->resume, token);
   p->has_resume = true;
   p->dirty = true;
   if (++p->since_save >= c->cfg->save_every) {
      fw_position_save_async (c, p, "save_every");
   }
}
