/*
 * deferred_retry.c - retry.mode = "deferred" (issue 29): a failed event
 * waits in the stream's DLQ as a SCHEDULED entry with nextAttemptAt while the
 * stream goes on; the stream's thread runs it again once it is due (see
 * dlq_replay.h, fw_deferred_tick, and docs/retry-and-dlq.md).
 */
#include <stdio.h>
#include <string.h>

#include "flowwarden/check.h"
#include "flowwarden/log.h"
#include "runtime/dispatch/dispatcher_access-private.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/replay_hook-private.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/replay/dlq_replay_txn.h"

/* How often an idle stream looks for due retries at most; and how many it
 * runs in one go before handing back to live events. */
#define DEFERRED_CHECK_EVERY_MS 1000
#define DEFERRED_PER_TICK 16

static int64_t
int_at (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_NUMBER (&it)
             ? bson_iter_as_int64 (&it)
             : 0;
}

static const char *
string_at (const bson_t *doc, const char *key)
{
   bson_iter_t it;
   return bson_iter_init_find (&it, doc, key) && BSON_ITER_HOLDS_UTF8 (&it)
             ? bson_iter_utf8 (&it, NULL)
             : NULL;
}

/* Runs the claimed entry's event once (attempt n), as a replay. An entry
 * that is no event to run comes back as NO_HANDLER with error
 * type InvalidEntry, its message in why (len bytes, the caller's). */
static fw_outcome_t
attempt (fw_dispatcher_t *d, const bson_t *entry, int64_t n, fw_replay_hook_t *hook, char *why,
         size_t len)
{
   bson_t event;
   fw_event_t ev;
   fw_outcome_t o = fw_outcome_of (FW_OUTCOME_NO_HANDLER, 0);

   o.error_type = "InvalidEntry";
   o.error = why; /* filled when the entry cannot be read as an event */
   if (fw_dlq_replay_build_event (entry, &event, &ev, why, len)) {
      /* ctx:attempt_number() counts them all */
      fw_dispatch_run_t run = {(int) (n - 1), hook};
      hook->no_retry = true;
      o = fw_event_dispatch_run (d, &ev, &run);
      fw_replay_hook_forget_error (d, hook);
   }
   bson_destroy (&event);
   return o;
}

/* The outcome of attempt n (1-based, all attempts counted) of entry. */
static void
outcome_of (fw_dispatcher_t *d, const fw_outcome_t *r, const fw_replay_hook_t *hook, int64_t n,
            int64_t due_ms, fw_dlq_outcome_t *o)
{
   const fw_backoff_t *b = &fw_dispatcher_config (d)->retry;
   int64_t now = fw_dispatcher_now_ms (d);

   memset (o, 0, sizeof *o);
   o->now_ms = now;
   o->kind = FW_DLQ_RESCHEDULE;
   if (r->kind == FW_OUTCOME_HANDLED || r->kind == FW_OUTCOME_SKIPPED) {
      o->kind = FW_DLQ_RESOLVE;
      o->skipped = r->kind == FW_OUTCOME_SKIPPED;
   } else if (r->kind == FW_OUTCOME_GAVE_UP) {
      /* r->attempts counts them all: this run's are those past n - 1 */
      o->attempts_added = r->attempts > n - 1 ? (int) (r->attempts - (n - 1)) : 1;
      o->error_type = r->error_type;
      o->error_message = r->error;
      if (hook->retry_asked && n < b->max_attempts) {
         o->next_attempt_ms = now + fw_backoff_delay_ms (b, (int) n, fw_dispatcher_random (d));
      }
   } else if (fw_outcome_comes_back (r->kind)) {
      o->next_attempt_ms = due_ms > 0 ? due_ms : now; /* not run: as it was */
   } else {
      /* No handler for it, an entry edited into something else, or a
       * dispatcher that cannot go on: an ordinary dead letter to look at. */
      o->error_type = r->error_type[0] ? r->error_type : "DeferredRetry";
      o->error_message = r->error[0] ? r->error : "the current script has no handler for it";
      o->attempts_added = 0;
   }
}

/* Logs what became of a parked follower. */
static void
report_follower (void *ud, const bson_t *entry, const fw_replay_result_t *r)
{
   fw_dispatcher_t *d = ud;
   const char *id = string_at (entry, "_id");

   fw_log (r->status == FW_REPLAY_RESOLVED || r->status == FW_REPLAY_SKIPPED ? FW_LOG_INFO
                                                                             : FW_LOG_WARN,
           fw_dispatcher_config (d)->name, "parked entry %s behind a deferred retry: %s",
           id ? id : "?", r->what);
}

/* A resolved head of a sequence: its parked followers go as a replay of the
 * sequence would take them. */
static void
release_followers (fw_dispatcher_t *d, const char *seq, const char *actor)
{
   fw_replay_options_t opts = {actor, FW_DLQ_CLAIM_TTL_MS, false, false, true};
   fw_error_t err;

   if (fw_dlq_replay_sequence (d, fw_dispatcher_dlq_store (d), seq, &opts, report_follower, d,
                               &err) == FW_SEQ_REPLAY_ERROR) {
      fw_log (FW_LOG_WARN, fw_dispatcher_config (d)->name,
              "deferred retry of sequence %.300s resolved, but replaying its parked events "
              "failed: %s (flowwarden dlq replay --sequence takes them)",
              seq, err.message);
   }
}

static void
log_outcome (fw_dispatcher_t *d, const char *id, const fw_dlq_outcome_t *o, int64_t n)
{
   const char *name = fw_dispatcher_config (d)->name;

   if (o->kind == FW_DLQ_RESOLVE) {
      fw_log (FW_LOG_INFO, name, "deferred retry of entry %s: handled on attempt %lld%s", id,
              (long long) n, o->skipped ? " (skipped by on_error)" : "");
   } else if (o->next_attempt_ms && o->attempts_added) {
      fw_log (FW_LOG_WARN, name,
              "deferred retry of entry %s: attempt %lld failed: %s: %s; next attempt in %lld ms",
              id, (long long) n, o->error_type, o->error_message,
              (long long) (o->next_attempt_ms - o->now_ms));
   } else if (o->attempts_added) {
      fw_log (FW_LOG_WARN, name,
              "deferred retry of entry %s: attempt %lld failed: %s: %s; no attempt left: "
              "dead-lettered (PENDING)",
              id, (long long) n, o->error_type, o->error_message);
   } else if (!o->next_attempt_ms) {
      fw_log (FW_LOG_WARN, name, "deferred retry of entry %s not run: %s: %s; left PENDING", id,
              o->error_type, o->error_message);
   }
}

/* Runs one claimed entry and settles it. */
static void
run_one (fw_dispatcher_t *d, const bson_t *entry, const char *actor)
{
   fw_replay_hook_t hook = {0};
   fw_dlq_outcome_t o;
   bson_iter_t it;
   fw_error_t err;
   bool held;
   const char *id = string_at (entry, "_id");
   const char *seq = string_at (entry, "sequenceId");
   int64_t n = int_at (entry, "attempts") + 1;
   char seq_copy[1024], why[512];
   fw_outcome_t r;
   fw_replay_txn_t txn;
   fw_dlq_store_t *dlq;
   bool in_txn;

   if (!bson_iter_init_find (&it, entry, "_id")) {
      return;
   }
   snprintf (seq_copy, sizeof seq_copy, "%s", seq ? seq : "");
   /* exactly_once: a success resolves the entry in its writes' transaction. */
   in_txn = fw_replay_txn_start (d, bson_iter_value (&it), actor, &txn);
   r = attempt (d, entry, n, &hook, why, sizeof why);
   if (in_txn) {
      fw_replay_txn_stop (d, &txn);
   }
   outcome_of (d, &r, &hook, n, 0, &o);
   dlq = fw_dispatcher_dlq_store (d);
   if (in_txn && txn.resolved && r.kind == FW_OUTCOME_HANDLED) {
      held = true; /* committed with the handler's writes */
   } else if (!dlq->settle (dlq, bson_iter_value (&it), actor, &o, &held, &err)) {
      fw_dispatcher_report (d, NULL, &r); /* its attempt counts all the same */
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "deferred retry of entry %s: %s (its claim expires and it is run again)",
              id ? id : "?", err.message);
      return;
   }
   log_outcome (d, id ? id : "?", &o, n);
   if (o.kind == FW_DLQ_RESCHEDULE && o.attempts_added && o.next_attempt_ms) {
      r.retries++; /* one more retry to come, as a blocking retry counts it */
      if (fw_dispatcher_metrics (d)) {
         fw_stream_metrics_retry (fw_dispatcher_metrics (d));
      }
   }
   fw_dispatcher_report (d, NULL, &r); /* the stream's summary counts it as a blocking retry */
   if (held && o.kind == FW_DLQ_RESOLVE && seq_copy[0] && fw_dispatcher_sequences_loaded (d)) {
      release_followers (d, seq_copy, actor);
   }
}

/* Counts the scheduled retries into the metrics; *next_ms: the earliest due. */
static void
count_scheduled (fw_dispatcher_t *d, int64_t now, int64_t *next_ms)
{
   fw_dlq_store_t *dlq = fw_dispatcher_dlq_store (d);
   fw_stream_metrics_t *metrics = fw_dispatcher_metrics (d);
   int64_t count, oldest_ms;
   fw_error_t err;

   *next_ms = 0;
   if (!dlq->scheduled (dlq, fw_dispatcher_config (d)->name, &count, &oldest_ms, next_ms, &err)) {
      fw_log (FW_LOG_DEBUG, fw_dispatcher_config (d)->name,
              "cannot count the scheduled retries: %s", err.message);
      return;
   }
   if (metrics) {
      fw_stream_metrics_set_retries_scheduled (
         metrics, count, oldest_ms && now > oldest_ms ? (double) (now - oldest_ms) / 1000.0 : 0);
   }
}

void
fw_deferred_tick (fw_dispatcher_t *d)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);
   fw_shutdown_t *shutdown = fw_dispatcher_shutdown (d);
   fw_dlq_store_t *dlq;
   int64_t now, next_ms;
   char actor[300];

   /* Called between every two events: a stream without deferred retries
    * pays one test, not a clock read. */
   if (!cfg->retry_deferred || !cfg->dlq.enabled) {
      return;
   }
   now = fw_dispatcher_now_ms (d);
   if (now < fw_dispatcher_deferred_check_at (d)) {
      return;
   }
   if (!fw_dispatcher_dlq_store (d) && !fw_dispatcher_open_dlq (d)) {
      return;
   }
   dlq = fw_dispatcher_dlq_store (d);
   if (!fw_dlq_store_can (dlq, FW_DLQ_CAN_DEFER)) {
      return;
   }
   FW_ASSERT (dlq->claim_due && dlq->scheduled);
   fw_dlq_actor (actor, sizeof actor);
   for (int i = 0; i < DEFERRED_PER_TICK && !(shutdown && fw_shutdown_requested (shutdown)); i++) {
      bson_t entry;
      fw_error_t err;
      bool got;

      now = fw_dispatcher_now_ms (d);
      dlq = fw_dispatcher_dlq_store (d); /* as the last entry's run left it */
      if (!dlq->claim_due (dlq, cfg->name, actor, now, now + FW_DLQ_CLAIM_TTL_MS, &entry, &got,
                           &err)) {
         fw_log (FW_LOG_WARN, cfg->name, "%s", err.message);
         bson_destroy (&entry);
         break;
      }
      if (got) {
         run_one (d, &entry, actor);
      }
      bson_destroy (&entry);
      if (!got) {
         break;
      }
   }
   now = fw_dispatcher_now_ms (d);
   count_scheduled (d, now, &next_ms);
   fw_dispatcher_set_deferred_check_at (d, now + DEFERRED_CHECK_EVERY_MS);
   if (next_ms > 0 && next_ms < fw_dispatcher_deferred_check_at (d)) {
      fw_dispatcher_set_deferred_check_at (d, next_ms > now ? next_ms : now);
   }
}
