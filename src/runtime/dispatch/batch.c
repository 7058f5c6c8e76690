/*
 * batch.c - on_batch through a dispatcher (batch_dispatch.h): one call of
 * the handler over a set of the batch's events, the retry wait between a
 * batch's attempts, and the per-event path for the events bisection leaves
 * alone (batch_run.c decides which call comes next).
 *
 * Each event of a call gets a ctx over an fw_dispatch_t of its own; the
 * dispatcher keeps them (and the batch object's view) for its life, so a
 * ctx or batch kept past its call raises instead of reading freed memory.
 * The stream's `timeout` is the budget of one call of on_batch, whatever
 * the number of events in it.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/check.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/batch_lua.h"
#include "runtime/dispatch/batch-private.h"
#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/event_park-private.h"
#include "runtime/dispatch/event_txn.h"
#include "runtime/dispatch/outage-private.h"

bool
fw_dispatcher_batching (const fw_dispatcher_t *d, int *max_events, int64_t *max_wait_ms)
{
   if (d->prog.handler_ref[H_BATCH] == LUA_NOREF || d->prog.cfg.batch_max_events < 1) {
      return false;
   }
   if (max_events) {
      /* A sequenced DLQ: batches of one. In a larger batch, an event could be
       * applied while an earlier event of its key is being dead-lettered,
       * which the sequence exists to prevent. */
      *max_events = fw_park_enabled (d) ? 1 : d->prog.cfg.batch_max_events;
   }
   if (max_wait_ms) {
      *max_wait_ms = d->prog.cfg.batch_max_wait_ms;
   }
   return true;
}

/* Copies what the failed call raised (the failure table on top of L) into
 * s->last_error: an fw.error's type and message, or the value as text. */
static void
note_error (fw_batch_state_t *s, lua_State *L)
{
   const char *type = NULL, *msg = NULL;
   int top = lua_gettop (L);

   if (lua_istable (L, -1)) {
      lua_getfield (L, top, "value");
      if (lua_istable (L, -1)) {
         lua_getfield (L, top + 1, "type");
         lua_getfield (L, top + 1, "message");
         type = lua_tostring (L, -2);
         msg = lua_tostring (L, -1);
      } else {
         msg = lua_tostring (L, -1);
      }
   }
   snprintf (s->last_error, sizeof s->last_error, "%s%s%s", type ? type : "", type ? ": " : "",
             msg ? msg : "(an error without a message)");
   lua_settop (L, top);
}

/* Whether the stream retries the error of a failed call (the failure table
 * on top of L, left there): classified as an event's error is
 * (flowwarden.dispatch.batch_retries: retry_on, no_retry_on). A policy that
 * cannot answer says retry, as before it was asked. */
static bool
retried (fw_dispatcher_t *d, lua_State *L, fw_lua_stop_t stop)
{
   int top = lua_gettop (L);
   fw_lua_stop_t inner;
   bool yes = true;

   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.dispatch") == LUA_TTABLE &&
       lua_getfield (L, -1, "batch_retries") == LUA_TFUNCTION) {
      lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
      lua_pushvalue (L, top);
      if (stop == FW_LUA_STOP_TIMEOUT || stop == FW_LUA_STOP_MEMORY) {
         lua_pushstring (L, stop == FW_LUA_STOP_TIMEOUT ? "timeout" : "memory");
      } else {
         lua_pushnil (L);
      }
      if (fw_lua_host_call (d->prog.host, 3, 1, d->prog.cfg.timeout_ms, &inner)) {
         yes = lua_toboolean (L, -1);
      }
   }
   lua_settop (L, top);
   return yes;
}

/* The call is over: the ctx of its events and the batch object refuse use,
 * their cached values are let go (each item's cache table stays, for the
 * next batch, as the per-event path keeps its one). Cannot raise. */
static void
end_call (lua_State *L, fw_batch_state_t *s, size_t n)
{
   fw_batch_lua_end (L, &s->view);
   for (size_t k = 0; k < n; k++) {
      fw_dispatch_t *item = s->view.items[k];
      if (item == s->one) {
         continue; /* d->dispatch: the per-event path owns its cache */
      }
      fw_event_ctx_drop_values (L, item);
      item->generation++;
      item->event = NULL;
   }
}

static fw_outcome_t
stopped (void)
{
   return (fw_outcome_t){FW_OUTCOME_STOPPED, 0, 0, "", "", "", 0, FW_COUNT_NOTHING, NULL, 0};
}

/* A call failed (its failure table on top of L, taken off): whether the
 * stream retries its error. */
static fw_batch_call_t
call_failed (fw_batch_state_t *s, lua_State *L, fw_lua_stop_t stop)
{
   bool again;

   note_error (s, L);
   again = retried (s->d, L, stop);
   lua_pop (L, 1);
   s->d->stats.handler_errors++;
   return again ? FW_BATCH_CALL_FAILED : FW_BATCH_CALL_FAILED_FINAL;
}

/* exactly_once: how a call's transaction ended (txn_finish). */
typedef enum { CALL_TXN_COMMITTED, CALL_TXN_FAILED, CALL_TXN_MARKED, CALL_TXN_FENCED } call_txn_t;

/* exactly_once (issue 39): the call over idx[0..n) ends its transaction.
 * A call that returned and marked no event commits, with the position past
 * its last event: bisection settles a batch's sets in stream order and the
 * sets of one call never leave an event out (see below), so every event
 * before it is finished with. A call that raised, or failed in the commit
 * (CALL_TXN_FAILED: a failure table on top of L), or marked events
 * (CALL_TXN_MARKED), is aborted: nothing of it is applied and its events
 * are tried again together (then bisected), since the writes of the events
 * it did not mark cannot commit without the position past them, which must
 * not pass the marked ones. (Inside a transaction a write command stops at
 * its first write error even when unordered: MongoDB's
 * jstests/core/txns/transactions_write_errors.js.) */
static call_txn_t
txn_finish (fw_batch_state_t *s, lua_State *L, const size_t *idx, size_t n, bool ok,
            const bool *marked)
{
   fw_dispatcher_t *d = s->d;
   size_t last = 0, nmarked = 0;

   fw_mongo_lua_join (L, NULL);
   if (!ok) {
      fw_txn_end (d);
      return CALL_TXN_FAILED;
   }
   for (size_t k = 0; k < n; k++) {
      nmarked += marked[k];
      last = idx[k] > last ? idx[k] : last;
   }
   if (nmarked) {
      fw_txn_end (d);
      snprintf (s->last_error, sizeof s->last_error,
                "%zu of its %zu event(s) marked failed; with exactly_once the call's "
                "transaction is aborted and its events are tried again together",
                nmarked, n);
      return CALL_TXN_MARKED;
   }
   switch (fw_txn_commit (d, L, s->evs[last])) {
   case FW_TXN_COMMITTED:
      return CALL_TXN_COMMITTED;
   case FW_TXN_FENCED:
      return CALL_TXN_FENCED;
   default:
      return CALL_TXN_FAILED;
   }
}

/* A full Lua state (state_rebuild.c), as the per-event path sees to it:
 * before a call, a rebuild that is due (false with s->result set when the
 * stream must stop instead); after one (ok: it returned; when not, its
 * failure table on top of L), whether it failed in the full state, to be
 * made again at once on the rebuilt one (the failure taken off). */
static bool
rebuild_if_due (fw_batch_state_t *s, fw_dispatcher_t *d)
{
   if (d->rebuild.pending && !fw_state_rebuild (d)) {
      s->result = (fw_outcome_t){FW_OUTCOME_FAILED, 0,    0, "", "", d->out.failure, 0,
                                 FW_COUNT_NOTHING,  NULL, 0};
      return false;
   }
   return true;
}

static bool
failed_in_full_state (fw_dispatcher_t *d, bool ok, int attempt)
{
   return fw_state_past_mark (d, fw_lua_host_memory_used (d->prog.host)) &&
          fw_state_check (d, ok, attempt) == FW_STATE_RETRY;
}

static fw_batch_call_t
op_call (void *ud, const size_t *idx, size_t n, int attempt, bool *marked)
{
   fw_batch_state_t *s = ud;
   fw_dispatcher_t *d = s->d;
   lua_State *L;
   fw_lua_stop_t stop = FW_LUA_STOP_NONE;
   int64_t start = fw_mono_ns ();
   fw_mongo_txn_t join;
   fw_batch_call_t c = FW_BATCH_CALL_OK;
   bool ok, txn = fw_txn_wanted (d, false);

   if (d->lead.lease && !fw_lease_is_leader (d->lead.lease, NULL)) {
      s->result = stopped (); /* ha: the batch comes back to the next leader */
      return FW_BATCH_CALL_STOPPED;
   }
   /* Issue 29: no call while the stream's breaker is open (another lane's
    * event holds it), and one rate-limit token per call, as per attempt. */
   if (!fw_outage_admit (d, NULL, 1)) {
      s->result = stopped ();
      return FW_BATCH_CALL_STOPPED;
   }
   if (!rebuild_if_due (s, d)) {
      return FW_BATCH_CALL_STOPPED;
   }
   L = fw_lua_host_state (d->prog.host); /* a rebuild's, if any */
   if (txn && !fw_txn_begin (d, L, &join)) {
      return call_failed (s, L, stop);
   }
   for (size_t k = 0; k < n; k++) {
      fw_dispatch_t *item = s->items[k];
      fw_event_ctx_begin (L, item, s->evs[idx[k]]);
      item->attempt = attempt;
      item->stream_name = d->dispatch.stream_name;
      item->dlq_enabled = d->dispatch.dlq_enabled;
   }
   s->view = (fw_batch_view_t){s->items, n, marked, LUA_NOREF, s->view.generation};
   if (d->metrics) {
      fw_stream_metrics_set_attempt (d->metrics, attempt);
   }
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.handler_ref[H_BATCH]);
   ok = fw_lua_host_call_with (d->prog.host, 0, fw_batch_lua_push, &s->view, 0,
                               d->prog.cfg.timeout_ms, &stop);
   if (d->metrics) {
      fw_stream_metrics_handler_call (d->metrics, fw_mono_ns () - start);
   }
   fw_mongo_lua_close_cursors (L);
   if (ok) {
      for (size_t k = 0; k < n; k++) {
         marked[k] = marked[k] || s->items[k]->dlq_requested; /* settled on its own path */
      }
   }
   switch (txn ? txn_finish (s, L, idx, n, ok, marked) : CALL_TXN_COMMITTED) {
   case CALL_TXN_FENCED:
      s->result = stopped (); /* a newer leader holds the checkpoint: nothing committed */
      c = FW_BATCH_CALL_STOPPED;
      break;
   case CALL_TXN_MARKED:
      c = FW_BATCH_CALL_FAILED;
      break;
   case CALL_TXN_FAILED:
      ok = false;
      /* fall through */
   default:
      c = ok ? FW_BATCH_CALL_OK : FW_BATCH_CALL_FAILED; /* a failure: classified below */
      break;
   }
   end_call (L, s, n); /* the events' values let go: what is left is the state's */
   if (c != FW_BATCH_CALL_STOPPED && failed_in_full_state (d, ok, attempt)) {
      return FW_BATCH_CALL_AGAIN;
   }
   return ok ? c : call_failed (s, L, stop);
}

static bool
op_retry_wait (void *ud, int attempt, size_t n)
{
   fw_batch_state_t *s = ud;
   fw_dispatcher_t *d = s->d;
   int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.retry, attempt, fw_backoff_random (&d->rng));
   char id[1024];

   fw_event_short_id (s->evs[0], id, sizeof id);
   fw_log (FW_LOG_WARN, d->prog.cfg.name,
           "batch of %zu event(s) from %s: attempt %d failed%s%s; retrying %s in %lld ms", s->n, id,
           attempt, s->last_error[0] ? ": " : "", s->last_error,
           n == s->n ? "the whole batch" : "the events it failed", (long long) delay);
   s->last_error[0] = '\0';
   d->stats.retries++;
   if (d->metrics) {
      fw_stream_metrics_retry (d->metrics);
      fw_stream_metrics_set_state (d->metrics, FW_STREAM_RETRYING, NULL);
   }
   if (d->clock.wait_ms (d->clock.ud, delay)) {
      s->result = stopped ();
      return false;
   }
   if (d->metrics) {
      fw_stream_metrics_set_state (d->metrics, FW_STREAM_RUNNING, NULL);
   }
   return true;
}

static void
op_succeeded (void *ud, size_t i)
{
   fw_batch_state_t *s = ud;
   fw_dispatcher_t *d = s->d;

   if (s->outcomes) {
      s->outcomes[i] = FW_OUTCOME_HANDLED;
   }
   d->stats.handled++;
   if (d->sink.fn) { /* the stream's settle counts it (a batch is never a replay's) */
      fw_outcome_t o = {FW_OUTCOME_HANDLED, 1, 0, "", "", "", 0, FW_COUNT_OK, NULL, 0};
      o.finished_ms = d->metrics ? d->clock.now_ms (d->clock.ud) : 0;
      d->sink.fn (d->sink.ud, d->prog.cfg.name, s->evs[i], &o);
   }
}

/* ev on the per-event path; *out (may be NULL) gets its outcome's kind. */
static fw_outcome_t
dispatch_one (fw_dispatcher_t *d, const fw_event_t *ev, fw_outcome_kind_t *out)
{
   fw_outcome_t o = fw_event_dispatch (d, ev);

   if (out) {
      *out = o.kind;
   }
   return o;
}

static bool
op_single (void *ud, size_t i)
{
   fw_batch_state_t *s = ud;
   fw_outcome_t o = dispatch_one (s->d, s->evs[i], s->outcomes ? &s->outcomes[i] : NULL);

   if (!fw_outcome_finished (o.kind)) {
      s->result = o;
      return false;
   }
   return true;
}

/* exactly_once: events a and b of the batch are of one source transaction
 * (the same lsid and txnNumber). */
static bool
op_joined (void *ud, size_t a, size_t b)
{
   fw_batch_state_t *s = ud;

   return fw_event_same_txn (s->evs[a], s->evs[b]);
}

/* exactly_once: the n events idx[0..n) of one source transaction, alone
 * after bisection: the per-event path for each, in one transaction. */
static bool
op_group (void *ud, const size_t *idx, size_t n)
{
   fw_batch_state_t *s = ud;
   const fw_event_t **evs = calloc (n, sizeof *evs);
   fw_outcome_kind_t *kinds = malloc (n * sizeof *kinds);
   fw_outcome_t o;

   if (!evs || !kinds) {
      free (evs);
      free (kinds);
      snprintf (s->d->out.failure, sizeof s->d->out.failure,
                "out of memory taking a source transaction of %zu events", n);
      s->result = (fw_outcome_t){
         .kind = FW_OUTCOME_FAILED, .entry_id = "", .error_type = "", .error = s->d->out.failure};
      return false;
   }
   for (size_t k = 0; k < n; k++) {
      evs[k] = s->evs[idx[k]];
   }
   o = fw_group_dispatch (s->d, evs, n, kinds);
   for (size_t k = 0; s->outcomes && k < n; k++) {
      s->outcomes[idx[k]] = kinds[k];
   }
   free (evs);
   free (kinds);
   if (!fw_outcome_finished (o.kind)) {
      s->result = o;
      return false;
   }
   return true;
}

/* The batch's outcome: HANDLED once every event is finished with. */
static fw_outcome_t
all_finished (void)
{
   return (fw_outcome_t){FW_OUTCOME_HANDLED, 0, 0, "", "", "", 0, FW_COUNT_NOTHING, NULL, 0};
}

/* Without on_batch (a reload took it away) or its state: one by one. */
static fw_outcome_t
one_by_one (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n, fw_outcome_kind_t *outcomes)
{
   for (size_t i = 0; i < n; i++) {
      fw_outcome_t o = dispatch_one (d, evs[i], outcomes ? &outcomes[i] : NULL);
      if (!fw_outcome_finished (o.kind)) {
         return o;
      }
   }
   return all_finished ();
}

static fw_outcome_t batch_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                                    fw_outcome_kind_t *outcomes);
static fw_outcome_t dispatch_whole (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                                    fw_outcome_kind_t *outcomes);

fw_outcome_t
fw_batch_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                   fw_outcome_kind_t *outcomes)
{
#if FW_CHECKING
   fw_lua_host_t *host = d->prog.host;
   int top = lua_gettop (fw_lua_host_state (host));
#endif
   fw_outcome_t o = batch_dispatch (d, evs, n, outcomes);
   /* The Lua stack is as it was, unless the program changed meanwhile. */
   FW_ASSERT (d->prog.host != host || lua_gettop (fw_lua_host_state (host)) == top);
   return o;
}

static fw_outcome_t
batch_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                fw_outcome_kind_t *outcomes)
{
   bool (*waits) (void *ud) = d->reload_waits.fn;
   fw_outcome_t o;

   /* A reload takes effect between batches (its stream's event boundary),
    * never inside one: no event of it yields. */
   d->reload_waits.fn = NULL;
   o = dispatch_whole (d, evs, n, outcomes);
   d->reload_waits.fn = waits;
   return o;
}

static fw_outcome_t
dispatch_whole (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                fw_outcome_kind_t *outcomes)
{
   fw_batch_state_t *s;
   bool ok;

   for (size_t i = 0; outcomes && i < n; i++) {
      outcomes[i] = FW_OUTCOME_STOPPED; /* until it is finished with */
   }
   if (!fw_dispatcher_batching (d, NULL, NULL) || fw_park_enabled (d) ||
       !(s = fw_batch_state_for (d, n))) {
      return one_by_one (d, evs, n, outcomes); /* a sequenced DLQ: see fw_dispatcher_batching */
   }
   if (n == 1) { /* a quiet stream's batch: the per-event path at once */
      if (d->metrics) {
         fw_stream_metrics_batch (d->metrics, 1, 0);
      }
      fw_outcome_t o = dispatch_one (d, evs[0], outcomes);
      return fw_outcome_finished (o.kind) ? all_finished () : o;
   }
   fw_batch_ops_t ops = {op_call,
                         op_retry_wait,
                         op_succeeded,
                         op_single,
                         s,
                         d->prog.cfg.retry.max_attempts > 0 ? d->prog.cfg.retry.max_attempts : 1,
                         NULL,
                         NULL};
   if (fw_txn_wanted (d, false)) { /* a source transaction's events never split */
      ops.joined = op_joined;
      ops.group = op_group;
   }
   s->evs = evs;
   s->n = n;
   s->outcomes = outcomes;
   s->result = all_finished ();
   s->last_error[0] = '\0';
   int64_t splits = s->stats.splits;
   ok = fw_batch_run (&ops, n, &s->stats);
   if (d->metrics) {
      fw_stream_metrics_batch (d->metrics, n, (uint64_t) (s->stats.splits - splits));
   }
   s->evs = NULL;
   s->outcomes = NULL;
   if (!ok && fw_outcome_finished (s->result.kind)) {
      snprintf (d->out.failure, sizeof d->out.failure, "out of memory taking a batch of %zu events",
                n);
      s->result = (fw_outcome_t){FW_OUTCOME_FAILED, 0,    0, "", "", d->out.failure, 0,
                                 FW_COUNT_NOTHING,  NULL, 0};
   }
   return s->result;
}
