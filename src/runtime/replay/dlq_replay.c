/*
 * dlq_replay.c - one dead letter at a time: claim it, rebuild its change
 * event, hand it to the stream's current handler through fw_event_dispatch,
 * and record what happened (see dlq_replay.h). Also run's automatic rounds.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "bson/bson_redact.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "lua_api/mongo_lua.h"
#include "runtime/dispatch/dispatcher_access-private.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/replay_hook-private.h"
#include "runtime/dlq/dlq_entry.h"
#include "runtime/replay/dlq_claim_keeper.h"
#include "runtime/replay/dlq_replay.h"
#include "runtime/replay/dlq_replay_txn.h"

const char *
fw_dlq_replay_status_name (fw_replay_status_t status)
{
   static const char *const names[] = {"resolved", "skipped", "requeued",  "evicted", "no handler",
                                       "invalid",  "busy",    "would run", "stopped", "error"};
   return (unsigned) status < sizeof names / sizeof *names ? names[status] : "?";
}

/* --- reading an entry ------------------------------------------------------ */

static const char *
entry_string (const bson_t *entry, const char *dotted)
{
   bson_iter_t it, child;
   if (bson_iter_init (&it, entry) && bson_iter_find_descendant (&it, dotted, &child) &&
       BSON_ITER_HOLDS_UTF8 (&child)) {
      return bson_iter_utf8 (&child, NULL);
   }
   return NULL;
}

static bool
entry_field (const bson_t *entry, const char *key, bson_iter_t *it)
{
   return bson_iter_init_find (it, entry, key);
}

/* MongoDB's spelling of an entry's operationType ("DROP_DATABASE" ->
 * "dropDatabase"), or NULL when it is not a change event type. */
static const char *
event_operation (const char *upper)
{
   static const char *const ops[] = {"insert", "update",       "replace",    "delete",  "drop",
                                     "rename", "dropDatabase", "invalidate", "snapshot"};
   char buf[64];
   if (!upper) {
      return NULL;
   }
   for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
      fw_dlq_operation_type (ops[i], buf, sizeof buf);
      if (strcmp (buf, upper) == 0) {
         return ops[i];
      }
   }
   return NULL;
}

/* True (why filled) for an entry of an event flowwarden could not read
 * whose fields were not all stored (include_original_document = false, or
 * truncated): the rebuilt event would lack the very fields that were wrong,
 * and a handler would run on an event that never came. */
static bool
malformed_and_cut (const bson_t *entry, char *why, size_t len)
{
   const char *type = entry_string (entry, "error.type");
   bson_iter_t it, child;
   size_t o;

   if (!type || strcmp (type, "MalformedEvent") != 0 || !entry_field (entry, "omitted", &it) ||
       !BSON_ITER_HOLDS_ARRAY (&it) || !bson_iter_recurse (&it, &child)) {
      return false;
   }
   o = (size_t) snprintf (why, len,
                          "the event was unreadable (MalformedEvent) and the entry "
                          "does not hold it whole (omitted:");
   while (bson_iter_next (&child) && o < len) {
      if (BSON_ITER_HOLDS_UTF8 (&child)) {
         o += (size_t) snprintf (why + o, len - o, " %s", bson_iter_utf8 (&child, NULL));
      }
   }
   if (o < len) {
      snprintf (why + o, len - o,
                "); resolve it, or put the fields back by hand and remove omitted");
   }
   return true;
}

/* Rebuilds the change event the entry was made from into event (initialised
 * here, owned by the caller) and parses it into ev. False with why filled
 * when the entry cannot be one (edited by hand, say). */
static bool
build_event (const bson_t *entry, bson_t *event, fw_event_t *ev, char *why, size_t len)
{
   static const char *const copied[] = {
      "clusterTime",       "wallTime",     "ns",
      "documentKey",       "fullDocument", "fullDocumentBeforeChange",
      "updateDescription", "txnNumber",    "lsid"};
   const char *upper = entry_string (entry, "operationType");
   const char *op = event_operation (upper);
   bson_iter_t it;
   fw_error_t err;

   bson_init (event);
   if (malformed_and_cut (entry, why, len)) {
      return false;
   }
   if (!entry_field (entry, "resumeToken", &it) || !BSON_ITER_HOLDS_DOCUMENT (&it)) {
      snprintf (why, len, "resumeToken is missing or not a document");
      return false;
   }
   if (!op) {
      if (upper) {
         snprintf (why, len, "operationType \"%s\" is not a change event type", upper);
      } else {
         snprintf (why, len, "operationType is missing or not a string");
      }
      return false;
   }
   bson_append_iter (event, "_id", 3, &it);
   BSON_APPEND_UTF8 (event, "operationType", op);
   for (size_t i = 0; i < sizeof copied / sizeof *copied; i++) {
      if (entry_field (entry, copied[i], &it)) {
         bson_append_iter (event, copied[i], -1, &it);
      }
   }
   if (!fw_event_parse (event, ev, &err)) {
      snprintf (why, len, "%.400s", err.message);
      return false;
   }
   return true;
}

bool
fw_dlq_replay_build_event (const bson_t *entry, bson_t *event, fw_event_t *ev, char *why,
                           size_t len)
{
   return build_event (entry, event, ev, why, len);
}

/* What the entry did not keep of its event: its omitted list, and a
 * fullDocument that is null or absent where the operation has one. */
static void
entry_notes (const bson_t *entry, char *buf, size_t len)
{
   bson_iter_t it, child;
   const char *op = entry_string (entry, "operationType");
   size_t o = 0;

   buf[0] = '\0';
   if (entry_field (entry, "omitted", &it) && BSON_ITER_HOLDS_ARRAY (&it) &&
       bson_iter_recurse (&it, &child)) {
      while (bson_iter_next (&child)) {
         if (BSON_ITER_HOLDS_UTF8 (&child) && o < len) {
            o += (size_t) snprintf (buf + o, len - o, "%s%s not stored", o ? "; " : "",
                                    bson_iter_utf8 (&child, NULL));
         }
      }
   }
   if (op && strcmp (op, "DELETE") != 0 && !strstr (buf, "fullDocument not stored") && o < len &&
       (!entry_field (entry, "fullDocument", &it) || BSON_ITER_HOLDS_NULL (&it))) {
      snprintf (buf + o, len - o,
                "%sfullDocument not stored (the handler can read the current "
                "document with fw.mongo)",
                o ? "; " : "");
   }
}

/* The letter ctx:dead_letter() and the enqueue policy see. */
static void
build_letter (const bson_t *entry, const bson_t *before_claim, bson_t *letter)
{
   bson_iter_t it;
   bson_t cause;

   bson_init (letter);
   if (entry_field (entry, "_id", &it)) {
      bson_append_iter (letter, "id", 2, &it);
   }
   BSON_APPEND_DOCUMENT_BEGIN (letter, "cause", &cause);
   BSON_APPEND_UTF8 (&cause, "type",
                     entry_string (entry, "error.type") ? entry_string (entry, "error.type") : "");
   BSON_APPEND_UTF8 (&cause, "message",
                     entry_string (entry, "error.message") ? entry_string (entry, "error.message")
                                                           : "");
   bson_append_document_end (letter, &cause);
   if (entry_field (entry, "diagnostics", &it) && BSON_ITER_HOLDS_DOCUMENT (&it)) {
      bson_append_iter (letter, "diagnostics", -1, &it);
   } else {
      bson_t empty = BSON_INITIALIZER;
      BSON_APPEND_DOCUMENT (letter, "diagnostics", &empty);
   }
   if (entry_field (entry, "createdAt", &it)) {
      bson_append_iter (letter, "enqueued_at", -1, &it);
   }
   if (entry_field (before_claim, "lastTouched", &it) ||
       entry_field (before_claim, "createdAt", &it)) {
      bson_append_iter (letter, "last_touched", -1, &it);
   }
   BSON_APPEND_INT64 (letter, "reprocess_attempts",
                      entry_field (entry, "reprocessAttempts", &it) && BSON_ITER_HOLDS_NUMBER (&it)
                         ? bson_iter_as_int64 (&it)
                         : 0);
   /* A sequenced DLQ: where the letter stands in its sequence. */
   if (entry_field (entry, "sequenceId", &it) && BSON_ITER_HOLDS_UTF8 (&it)) {
      bson_append_iter (letter, "sequence_id", -1, &it);
      if (entry_field (entry, "sequenceIndex", &it) && BSON_ITER_HOLDS_NUMBER (&it)) {
         BSON_APPEND_INT64 (letter, "sequence_index", bson_iter_as_int64 (&it));
      }
   }
}

/* --- writing the outcome ---------------------------------------------------- */

typedef struct {
   fw_dispatcher_t *d;
   fw_dlq_store_t *store;
   bson_value_t id;
   const fw_replay_options_t *opts;
} claim_t;

/* Claims the entry: PENDING, or REPROCESSING with an expired claim. out
 * holds the claimed entry (caller destroys, also on failure); *got says
 * whether it was claimable. */
static bool
claim (const claim_t *c, bson_t *out, bool *got, fw_error_t *error)
{
   int64_t now = fw_now_ms ();
   return c->store->claim (c->store, fw_dispatcher_config (c->d)->name, &c->id, c->opts->actor, now,
                           now + c->opts->claim_ttl_ms, out, got, error);
}

/* Pushes the claim forward while a handler works on the entry. */
static void
extend_claim (fw_replay_hook_t *hook)
{
   const claim_t *c = hook->ud;
   fw_error_t err;
   bool held;

   if (!c->store->extend (c->store, &c->id, c->opts->actor, fw_now_ms () + c->opts->claim_ttl_ms,
                          &held, &err)) {
      fw_log (FW_LOG_WARN, fw_dispatcher_config (c->d)->name, "%s", err.message);
   }
}

/* A thread extending the claim while the handler runs (one attempt may
 * outlast the TTL), on a client of its own from the DLQ connection's pool;
 * NULL (the claim is then extended before each attempt only) when the
 * dispatcher has no connection registry or the thread cannot start. */
static fw_claim_keeper_t *
start_keeper (const claim_t *c)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (c->d);
   const fw_dlq_config_t *dlq = cfg->dlq.enabled ? &cfg->dlq : &cfg->dlq_fallback;
   fw_claim_keeper_opts_t o = {
      .conns = fw_connection_clients_registry (fw_dispatcher_clients (c->d)),
      .connection = dlq->connection,
      .database = dlq->database ? dlq->database : cfg->database,
      .collection = dlq->collection,
      .stream = cfg->name,
      .id = &c->id,
      .actor = c->opts->actor,
      .claim_ttl_ms = c->opts->claim_ttl_ms,
   };
   fw_claim_keeper_t *k;
   fw_error_t err;

   if (!o.conns) {
      return NULL;
   }
   if (!(k = fw_claim_keeper_start (&o, &err))) {
      fw_log (FW_LOG_WARN, cfg->name, "%s: the claim is extended before each attempt only",
              err.message);
   }
   return k;
}

/* Applies outcome while this process still holds the claim, and gives the
 * claim up. */
static bool
settle (const claim_t *c, const fw_dlq_outcome_t *outcome, bool *held, fw_error_t *error)
{
   return c->store->settle (c->store, &c->id, c->opts->actor, outcome, held, error);
}

/* Gives the claim up, leaving the entry PENDING as it was. */
static void
release (const claim_t *c)
{
   fw_dlq_outcome_t outcome = {.kind = FW_DLQ_RELEASE, .now_ms = fw_now_ms ()};
   fw_error_t err;
   bool held;

   if (!settle (c, &outcome, &held, &err)) {
      fw_log (FW_LOG_WARN, fw_dispatcher_config (c->d)->name, "%s", err.message);
   }
}

/* A claim a killed replay left behind, on an entry this script cannot run:
 * back to PENDING so it shows as waiting for a fix. */
static void
release_stale (const claim_t *c)
{
   fw_error_t err;

   if (!c->store->release_stale (c->store, &c->id, fw_now_ms (), &err)) {
      fw_log (FW_LOG_WARN, fw_dispatcher_config (c->d)->name, "%s", err.message);
   }
}

/* --- the enqueue policy ----------------------------------------------------- */

typedef struct {
   fw_dispatcher_t *d;
   const fw_replay_hook_t *hook;
   const fw_outcome_t *outcome;
   char action[16];
   bson_t *diagnostics;
   fw_error_t err;
   bool diag_ok;
} policy_args_t;

/* The policy's err, as on_error's: type and message (the decided ones),
 * where, fields ({} when none) and traceback ("" when none) of the last
 * failed attempt. A fresh table: what on_error did to its own is not seen. */
static void
push_policy_error (lua_State *L, const fw_replay_hook_t *hook, const fw_outcome_t *o)
{
   int err, kept = 0;

   lua_createtable (L, 0, 5);
   err = lua_gettop (L);
   lua_pushstring (L, o->error_type);
   lua_setfield (L, err, "type");
   lua_pushstring (L, o->error);
   lua_setfield (L, err, "message");
   if (hook->has_error_ref && lua_rawgeti (L, LUA_REGISTRYINDEX, hook->error_ref) == LUA_TTABLE) {
      kept = lua_gettop (L);
      lua_getfield (L, kept, "where");
      lua_setfield (L, err, "where");
   }
   if (!kept || lua_getfield (L, kept, "fields") != LUA_TTABLE) {
      if (kept) {
         lua_pop (L, 1);
      }
      lua_newtable (L);
   }
   lua_setfield (L, err, "fields");
   if (!kept || lua_getfield (L, kept, "traceback") != LUA_TSTRING) {
      if (kept) {
         lua_pop (L, 1);
      }
      lua_pushliteral (L, "");
   }
   lua_setfield (L, err, "traceback");
   lua_settop (L, err);
}

/* Protected: flowwarden.dlq.decide(spec, letter, err). */
static int
ppolicy (lua_State *L)
{
   policy_args_t *a = lua_touserdata (L, 1);
   const char *action;

   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.dlq");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "decide");
   lua_rawgeti (L, LUA_REGISTRYINDEX, fw_dispatcher_spec_ref (a->d));
   fw_event_ctx_push_dead_letter (L, fw_dispatcher_view (a->d));
   push_policy_error (L, a->hook, a->outcome);
   lua_call (L, 3, 2);
   action = lua_tostring (L, -2);
   snprintf (a->action, sizeof a->action, "%s", action ? action : "requeue");
   a->diag_ok = true;
   if (lua_istable (L, -1)) {
      a->diag_ok = fw_bson_lua_to_bson (L, lua_gettop (L), "diagnostics", a->diagnostics, &a->err);
      /* stored in the entry: the values of fw.env hidden, as in the log */
      if (a->diag_ok && !fw_bson_redact (a->diagnostics)) {
         a->diag_ok = false;
         fw_error_set (&a->err, FW_ERROR_NOMEM, "out of memory hiding secrets in them");
      }
   }
   return 0;
}

bool
fw_dlq_replay_policy (fw_dispatcher_t *d, const fw_replay_hook_t *hook, const fw_outcome_t *o,
                      bson_t *diagnostics)
{
   lua_State *L = fw_lua_host_state (fw_dispatcher_host (d));
   int top = lua_gettop (L);
   policy_args_t a = {d, hook, o, "requeue", diagnostics, {0}, true};
   fw_lua_stop_t stop;

   lua_pushcfunction (L, ppolicy);
   lua_pushlightuserdata (L, &a);
   if (!fw_lua_host_call (fw_dispatcher_host (d), 1, 0, fw_dispatcher_config (d)->timeout_ms,
                          &stop)) {
      const char *msg = NULL;
      if (lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING) {
         msg = lua_tostring (L, -1);
      }
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "dlq.enqueue_policy failed (%s); the entry is requeued",
              stop == FW_LUA_STOP_TIMEOUT ? "it exceeded the stream's timeout"
              : msg                       ? msg
                                          : "no message");
      lua_settop (L, top);
      bson_reinit (diagnostics);
      return false;
   }
   lua_settop (L, top);
   if (!a.diag_ok) {
      fw_log (FW_LOG_ERROR, fw_dispatcher_config (d)->name,
              "dlq.enqueue_policy: diagnostics cannot be stored (%s); they are left as they were",
              a.err.message);
      bson_reinit (diagnostics);
   }
   return strcmp (a.action, "evict") == 0;
}

/* --- one entry -------------------------------------------------------------- */

static void set_result (fw_replay_result_t *out, fw_replay_status_t status, const char *fmt, ...)
   __attribute__ ((format (printf, 3, 4)));

static void
set_result (fw_replay_result_t *out, fw_replay_status_t status, const char *fmt, ...)
{
   va_list ap;
   out->status = status;
   va_start (ap, fmt);
   vsnprintf (out->what, sizeof out->what, fmt, ap);
   va_end (ap);
}

/* committed: exactly_once resolved the entry in the handler's transaction
 * (dlq_replay_txn.c), so there is nothing left to settle. */
static void
record_success (const claim_t *c, bool skipped, int attempts, bool committed,
                fw_replay_result_t *out)
{
   fw_dlq_outcome_t outcome = {.kind = FW_DLQ_RESOLVE, .now_ms = fw_now_ms (), .skipped = skipped};
   fw_error_t err;
   bool held;

   if (committed) {
      set_result (out, FW_REPLAY_RESOLVED,
                  "resolved after %d attempt(s), in the transaction of "
                  "its writes",
                  attempts);
   } else if (!settle (c, &outcome, &held, &err)) {
      set_result (out, FW_REPLAY_ERROR, "handled, but %s", err.message);
   } else if (!held) {
      set_result (out, FW_REPLAY_ERROR,
                  "handled, but its claim expired and another process took it (raise "
                  "--claim-ttl)");
   } else if (skipped) {
      set_result (out, FW_REPLAY_SKIPPED, "skipped by on_error: resolved (SKIPPED)");
   } else {
      set_result (out, FW_REPLAY_RESOLVED, "resolved after %d attempt(s)", attempts);
   }
}

static void
record_failure (const claim_t *c, const fw_replay_hook_t *hook, const fw_outcome_t *o,
                fw_replay_result_t *out)
{
   bson_t diagnostics = BSON_INITIALIZER;
   bool evict = fw_dlq_replay_policy (c->d, hook, o, &diagnostics);
   fw_dlq_outcome_t outcome = {.kind = evict ? FW_DLQ_EVICT : FW_DLQ_REQUEUE,
                               .now_ms = fw_now_ms (),
                               .error_type = o->error_type,
                               .error_message = o->error,
                               .diagnostics = &diagnostics};
   char result[1200];
   fw_error_t err;
   bool held;

   snprintf (result, sizeof result, "%s: %s", o->error_type, o->error);
   if (!settle (c, &outcome, &held, &err)) {
      set_result (out, FW_REPLAY_ERROR, "failed again (%s), and %s", result, err.message);
   } else if (!held) {
      set_result (out, FW_REPLAY_ERROR,
                  "failed again (%s), and its claim expired and another process took it", result);
   } else {
      set_result (out, evict ? FW_REPLAY_EVICTED : FW_REPLAY_REQUEUED, "%s after %d attempt(s): %s",
                  evict ? "evicted by the enqueue policy" : "failed again, requeued", o->attempts,
                  result);
   }
   bson_destroy (&diagnostics);
}

static void
run_claimed (const claim_t *c, const bson_t *claimed, const bson_t *before, fw_replay_result_t *out)
{
   fw_dispatcher_t *d = c->d;
   fw_replay_hook_t hook = {0};
   bson_t event, letter;
   fw_event_t ev;
   char why[512];
   fw_outcome_t o;
   fw_claim_keeper_t *keeper;
   fw_replay_txn_t txn;
   bool in_txn;

   if (!build_event (claimed, &event, &ev, why, sizeof why)) {
      release (c);
      set_result (out, FW_REPLAY_INVALID, "cannot be replayed: %s; left as it is", why);
      bson_destroy (&event);
      return;
   }
   build_letter (claimed, before, &letter);
   hook.no_retry = c->opts->no_retry;
   hook.before_retry = extend_claim;
   hook.ud = (void *) c;
   fw_dispatch_run_t run = {0, &hook};
   fw_dispatcher_view (d)->dead_letter = &letter;
   keeper = start_keeper (c);
   in_txn = fw_replay_txn_start (d, &c->id, c->opts->actor, &txn);
   o = fw_event_dispatch_run (d, &ev, &run);
   if (in_txn) {
      fw_replay_txn_stop (d, &txn);
   }
   if (c->opts->counted) {
      fw_dispatcher_report (d, NULL, &o);
   }
   fw_claim_keeper_stop (keeper); /* before the outcome is settled */
   if (fw_outcome_comes_back (o.kind)) {
      release (c);
      set_result (out, FW_REPLAY_STOPPED, "stopped before it was handled; left PENDING");
   } else if (o.kind == FW_OUTCOME_FAILED) {
      /* The dispatcher cannot go on (its Lua state filled up again at once,
       * a sequenced DLQ overflowed): the entry is untouched. */
      release (c);
      set_result (out, FW_REPLAY_ERROR, "%.900s; left PENDING", o.error);
   } else if (o.kind == FW_OUTCOME_NO_HANDLER) {
      release (c);
      set_result (out, FW_REPLAY_UNHANDLED,
                  "the current script has no handler for %s; left PENDING", ev.operation_type);
   } else if (o.kind == FW_OUTCOME_GAVE_UP) {
      record_failure (c, &hook, &o, out); /* the policy sees ctx:dead_letter()'s table */
   } else {
      record_success (c, o.kind == FW_OUTCOME_SKIPPED, o.attempts,
                      in_txn && txn.resolved && o.kind == FW_OUTCOME_HANDLED, out);
   }
   fw_replay_hook_forget_error (d, &hook);
   fw_dispatcher_view (d)->dead_letter = NULL;
   bson_destroy (&letter);
   bson_destroy (&event);
}

void
fw_dlq_replay_entry (fw_dispatcher_t *d, fw_dlq_store_t *store, const bson_t *entry,
                     const fw_replay_options_t *opts, fw_replay_result_t *out)
{
   claim_t c = {d, store, {0}, opts};
   bson_t event, claimed;
   fw_event_t ev;
   bson_iter_t it;
   fw_error_t err;
   char why[512];
   bool got;

   memset (out, 0, sizeof *out);
   entry_notes (entry, out->notes, sizeof out->notes);
   if (!entry_field (entry, "_id", &it)) {
      set_result (out, FW_REPLAY_INVALID, "cannot be replayed: it has no _id");
      return;
   }
   bson_value_copy (bson_iter_value (&it), &c.id);
   if (!build_event (entry, &event, &ev, why, sizeof why)) {
      set_result (out, FW_REPLAY_INVALID, "cannot be replayed: %s; left as it is", why);
   } else if (!fw_dispatcher_handles (d, ev.op)) {
      if (!opts->dry_run) {
         release_stale (&c);
      }
      set_result (out, FW_REPLAY_UNHANDLED,
                  "the current script has no handler for %s; left PENDING", ev.operation_type);
   } else if (opts->dry_run) {
      set_result (out, FW_REPLAY_WOULD_RUN, "would run the %s handler", ev.operation_type);
   } else if (!claim (&c, &claimed, &got, &err)) {
      set_result (out, FW_REPLAY_ERROR, "%s", err.message);
      bson_destroy (&claimed);
   } else if (!got) {
      set_result (out, FW_REPLAY_BUSY,
                  "claimed by another process (or no longer waiting): "
                  "not touched");
      bson_destroy (&claimed);
   } else {
      run_claimed (&c, &claimed, entry, out);
      bson_destroy (&claimed);
   }
   bson_destroy (&event);
   bson_value_destroy (&c.id);
}
