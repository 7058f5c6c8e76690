/*
 * event_dispatch.c - one event through its handler: attempts, retry backoff,
 * on_error, and the durable hand-off to the dead-letter queue.
 *
 * The success path stays in C. Only a failed attempt goes to the Lua side
 * (flowwarden.dispatch): classify, then the script's on_error, then decide,
 * each a call of its own with its own budget.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "flowwarden/check.h"
#include "flowwarden/clock.h"
#include "flowwarden/log.h"
#include "flowwarden/secrets.h"
#include "lua_api/lua_call.h"
#include "runtime/dispatch/batch-private.h"
#include "runtime/dispatch/dispatcher-private.h"
#include "runtime/dispatch/event_dispatch.h"
#include "runtime/dispatch/event_park-private.h"
#include "runtime/dispatch/event_txn.h"
#include "runtime/dispatch/outage-private.h"
#include "runtime/dispatch/replay_hook-private.h"
#include "runtime/dlq/dlq_entry.h"

typedef enum { ACT_RETRY, ACT_DLQ, ACT_SKIP, ACT_DROP } action_t;

typedef struct {
   action_t action;
   char type[128];
   char message[1024];
   char traceback[8192];
   char where[256]; /* the failing line, "file:line" (redacted), or "" */
   int status;      /* err.fields.status of an HTTP error, 0: none (issue 38) */
   char body[600];  /* with it, the reply's first 512 bytes (redacted) */
} decision_t;

/* A change event of the stream's (fw_event_dispatch). */
static const fw_dispatch_run_t LIVE = {0, NULL};

/* The event is finished with (or not): its outcome goes to d's sink, which
 * logs and counts it (not a replayed dead letter's, which is no change
 * event: its client hands it on when it counts, fw_dispatcher_report). */
static inline void
report (fw_dispatcher_t *d, const fw_dispatch_run_t *run, const fw_event_t *ev,
        const fw_outcome_t *o)
{
   if (d->sink.fn && !run->replay) {
      d->sink.fn (d->sink.ud, d->prog.cfg.name, ev, o);
   }
}

/* The stream must stop before the event: d->out.failure says why. */
static fw_outcome_t
outcome_failed (fw_dispatcher_t *d, int attempts)
{
   fw_outcome_t o = fw_outcome_of (FW_OUTCOME_FAILED, attempts);
   o.error = d->out.failure;
   return o;
}

/* An outcome after a failed attempt: dec's error, kept in d->out, and what
 * its log line needs (d->out.detail: the failing line; the rest for the
 * caller to fill). */
static fw_outcome_t
outcome_after (fw_dispatcher_t *d, fw_outcome_kind_t kind, int attempts, const decision_t *dec)
{
   fw_outcome_t o = fw_outcome_of (kind, attempts);
   snprintf (d->out.type, sizeof d->out.type, "%s", dec->type);
   snprintf (d->out.message, sizeof d->out.message, "%s", dec->message);
   snprintf (d->out.where, sizeof d->out.where, "%s", dec->where);
   o.error_type = d->out.type;
   o.error = d->out.message;
   d->out.sequence[0] = '\0';
   d->out.detail = (fw_outcome_detail_t){d->out.where, "", false, d->out.sequence, 0, false};
   o.detail = &d->out.detail;
   return o;
}

/* The wall clock (ms) at mono_ns (CLOCK_MONOTONIC): handler calls are timed
 * on the monotonic clock the Lua host reads anyway, and converted with an
 * offset read at most once a second. */
static int64_t
wall_ms_at (fw_dispatcher_t *d, int64_t mono_ns)
{
   if (d->clock.is_virtual) {
      return d->clock.now_ms (d->clock.ud);
   }
   if (mono_ns >= d->wall.until_ns) {
      d->wall.offset_ns = fw_now_ms () * 1000000 - fw_mono_ns ();
      d->wall.until_ns = mono_ns + 1000000000;
   }
   return (mono_ns + d->wall.offset_ns) / 1000000;
}

/* Copies t[key] (a string, else "") into buf; with redact, the values of
 * fw.env are hidden before the text is cut to len (secrets.h). */
static void
copy_field (lua_State *L, int t, const char *key, char *buf, size_t len, bool redact)
{
   size_t n = 0;
   const char *s = NULL;
   if (lua_getfield (L, t, key) == LUA_TSTRING) {
      s = lua_tolstring (L, -1, &n);
   }
   if (!s) {
      s = "";
      n = 0;
   }
   if (redact) {
      fw_secrets_copy (buf, len, s, n);
   } else {
      n = n >= len ? len - 1 : n;
      memcpy (buf, s, n);
      buf[n] = '\0';
   }
   lua_pop (L, 1);
}

static const char *
stop_name (fw_lua_stop_t stop)
{
   switch (stop) {
   case FW_LUA_STOP_TIMEOUT:
      return "timeout";
   case FW_LUA_STOP_MEMORY:
      return "memory";
   default:
      return NULL;
   }
}

static void
push_string_or_nil (lua_State *L, const char *s)
{
   if (s) {
      lua_pushstring (L, s);
   } else {
      lua_pushnil (L);
   }
}

/* Pushes function name of flowwarden.dispatch (loaded with the stream's
 * spec, so it is in package.loaded), or nil. */
static void
push_dispatch_fn (lua_State *L, const char *name)
{
   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.dispatch") == LUA_TTABLE) {
      lua_getfield (L, -1, name);
   } else {
      lua_pushnil (L);
   }
   lua_replace (L, -3);
   lua_pop (L, 1);
}

/* The error policy itself failed (out of its budget, say): fall back to the
 * safest outcome the declaration allows. The failure table of the failed call
 * is on top of the stack. */
static void
policy_failed (fw_dispatcher_t *d, lua_State *L, decision_t *out)
{
   const char *msg = NULL;
   if (lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING) {
      msg = lua_tostring (L, -1);
   }
   fw_log (FW_LOG_ERROR, d->prog.cfg.name, "error policy failed: %s", msg ? msg : "(no message)");
   snprintf (out->type, sizeof out->type, "RuntimeError");
   snprintf (out->message, sizeof out->message, "handler failed and its error policy failed");
   out->traceback[0] = '\0';
   out->where[0] = '\0';
   out->action = d->prog.cfg.dlq.enabled ? ACT_DLQ : ACT_DROP;
}

/*
 * The failure table {value, traceback} is on top of the stack. Asks the Lua
 * side what to do and copies its answer out, leaving the stack as it was
 * before the failure was pushed.
 *
 * Classification, on_error and the decision are three calls, each with the
 * stream's timeout: an on_error that runs away is stopped, logged and treated
 * as fw.RETHROW, and the standard policy still gets a budget of its own.
 */
static void decide_in (fw_dispatcher_t *d, fw_replay_hook_t *hook, int attempt, fw_lua_stop_t stop,
                       decision_t *out);

/* decide takes the failure table off the stack, whatever path it took. */
static void
decide (fw_dispatcher_t *d, fw_replay_hook_t *hook, int attempt, fw_lua_stop_t stop,
        decision_t *out)
{
#if FW_CHECKING
   lua_State *L = d->prog.L;
   int top = lua_gettop (L);
#endif
   decide_in (d, hook, attempt, stop, out);
   FW_ASSERT (lua_gettop (L) == top - 1);
}

static void
decide_in (fw_dispatcher_t *d, fw_replay_hook_t *hook, int attempt, fw_lua_stop_t stop,
           decision_t *out)
{
   lua_State *L = d->prog.L;
   int failure = lua_gettop (L);
   int classified, user_err, value;
   fw_lua_stop_t inner = FW_LUA_STOP_NONE;
   bool has_on_error, on_error_ok = false;

   /* 1. classify: c, err */
   push_dispatch_fn (L, "classify");
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   lua_pushvalue (L, failure);
   push_string_or_nil (L, stop_name (stop));
   if (!fw_lua_host_call (d->prog.host, 3, 2, d->prog.cfg.timeout_ms, &inner)) {
      policy_failed (d, L, out);
      lua_settop (L, failure - 1);
      return;
   }
   classified = failure + 1;
   user_err = failure + 2;
   fw_replay_hook_keep_error (hook, L, user_err);

   /* 2. on_error(err, ctx): what it returned, or what it raised */
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   has_on_error = lua_getfield (L, -1, "on_error") == LUA_TFUNCTION;
   lua_remove (L, -2);
   if (has_on_error) {
      lua_pushvalue (L, user_err);
      on_error_ok = fw_lua_host_call_with (d->prog.host, 1, fw_event_ctx_push, &d->dispatch, 1,
                                           d->prog.cfg.timeout_ms, &inner);
      fw_mongo_lua_close_cursors (L);
      if (!on_error_ok) {
         lua_getfield (L, -1, "value");
         lua_remove (L, -2);
      }
   } else {
      lua_pop (L, 1);
      lua_pushnil (L);
   }
   value = failure + 3;

   /* 3. decide */
   push_dispatch_fn (L, "decide");
   lua_rawgeti (L, LUA_REGISTRYINDEX, d->prog.spec_ref);
   lua_pushvalue (L, classified);
   lua_pushinteger (L, attempt);
   if (has_on_error) {
      lua_pushboolean (L, on_error_ok);
   } else {
      lua_pushnil (L);
   }
   lua_pushvalue (L, value);
   push_string_or_nil (L, has_on_error && !on_error_ok ? stop_name (inner) : NULL);
   if (fw_lua_host_call (d->prog.host, 6, 1, d->prog.cfg.timeout_ms, &inner) &&
       lua_istable (L, -1)) {
      int answer = lua_gettop (L);
      char action[16];
      copy_field (L, answer, "action", action, sizeof action, false);
      copy_field (L, answer, "type", out->type, sizeof out->type, true);
      copy_field (L, answer, "message", out->message, sizeof out->message, true);
      copy_field (L, answer, "traceback", out->traceback, sizeof out->traceback, true);
      copy_field (L, answer, "where", out->where, sizeof out->where, true);
      copy_field (L, answer, "body", out->body, sizeof out->body, true);
      lua_getfield (L, answer, "status");
      out->status = lua_isinteger (L, -1) ? (int) lua_tointeger (L, -1) : 0;
      lua_pop (L, 1);
      out->action = strcmp (action, "retry") == 0  ? ACT_RETRY
                    : strcmp (action, "dlq") == 0  ? ACT_DLQ
                    : strcmp (action, "skip") == 0 ? ACT_SKIP
                                                   : ACT_DROP;
   } else {
      policy_failed (d, L, out);
   }
   lua_settop (L, failure - 1);
}

typedef struct {
   bson_t *out;
   fw_error_t *error;
   bool ok;
} metadata_args_t;

static int
pmetadata (lua_State *L)
{
   metadata_args_t *a = lua_touserdata (L, 2);
   a->ok = fw_bson_lua_to_bson (L, 1, "metadata", a->out, a->error);
   return 0;
}

/* Converts ctx:add_metadata's table to BSON. A value with no BSON form is
 * reported in the entry rather than losing the event. */
static void
metadata_to_bson (fw_dispatcher_t *d, bson_t *out)
{
   lua_State *L = d->prog.L;
   fw_error_t err = {0};
   metadata_args_t a = {out, &err, false};

   bson_init (out);
   lua_pushcfunction (L, pmetadata);
   fw_event_ctx_push_metadata (L, &d->dispatch);
   if (lua_isnil (L, -1)) {
      lua_pop (L, 2);
      return;
   }
   lua_pushlightuserdata (L, &a);
   if (lua_pcall (L, 2, 0, 0) != LUA_OK) {
      snprintf (err.message, sizeof err.message, "%s", lua_tostring (L, -1));
      lua_pop (L, 1);
   }
   if (!a.ok) {
      bson_reinit (out);
      BSON_APPEND_UTF8 (out, "_conversionError", err.message);
   }
}

/* The attempts of an event going to the DLQ: how many, when the first and
 * the last started (wall clock, ms), and, for a deferred retry, when the
 * next is due (0: a dead letter). */
typedef struct {
   int attempts;
   int64_t first_ms, last_ms;
   int64_t defer_until_ms;
} dlq_attempts_t;

/* Hands the event to the DLQ and does not return until the store
 * acknowledged it (or a shutdown came first): the checkpoint must never pass
 * an event that is neither handled nor dead-lettered. */
static fw_outcome_t dead_letter_raw (fw_dispatcher_t *d, const fw_event_t *ev,
                                     const decision_t *dec, const dlq_attempts_t *a,
                                     const bson_t *raw);

/* An event dead-lettered without a handler attempt (attempts 0), its error
 * type and message; raw: the event's bytes to keep whole, or NULL. */
static fw_outcome_t
dead_letter_unhandled (fw_dispatcher_t *d, const fw_event_t *ev, const char *type,
                       const char *message, const bson_t *raw)
{
   decision_t dec;
   int64_t now = d->clock.now_ms (d->clock.ud);
   dlq_attempts_t a = {0, now, now, 0};

   fw_outcome_t o;

   memset (&dec, 0, sizeof dec);
   snprintf (dec.type, sizeof dec.type, "%s", type);
   snprintf (dec.message, sizeof dec.message, "%s", message);
   o = dead_letter_raw (d, ev, &dec, &a, raw);
   report (d, &LIVE, ev, &o);
   return o;
}

fw_outcome_t
fw_event_dispatch_unreadable (fw_dispatcher_t *d, fw_event_t *ev, const char *why)
{
   if (!d->dispatch.dlq_enabled) {
      return fw_outcome_of (FW_OUTCOME_NO_DLQ, 0);
   }
   if (!ev->operation_type) {
      ev->operation_type = "unknown";
      ev->op = FW_OP_OTHER;
   }
   return dead_letter_unhandled (d, ev, "MalformedEvent", why, ev->doc);
}

fw_outcome_t
fw_event_dispatch_oversize (fw_dispatcher_t *d, const fw_event_t *ev, int64_t size)
{
   char message[300];

   if (!d->dispatch.dlq_enabled) {
      return fw_outcome_of (FW_OUTCOME_NO_DLQ, 0);
   }
   snprintf (message, sizeof message,
             "change event of %lld bytes is larger than oversize_threshold (%lld bytes): left "
             "out by the server (oversize = \"skip\"); its document is not kept",
             (long long) size, (long long) d->prog.cfg.oversize_threshold);
   return dead_letter_unhandled (d, ev, "OversizeEvent", message, NULL);
}

/* What the DLQ entry records of the failure (f->epoch is set by the caller).
 * metadata: ctx:add_metadata's, converted; the caller owns it. */
static void
failure_of (fw_dispatcher_t *d, const decision_t *dec, const dlq_attempts_t *a, const bson_t *raw,
            const bson_t *metadata, fw_dlq_failure_t *f)
{
   f->stream_name = d->prog.cfg.name;
   f->error_type = dec->type[0] ? dec->type : NULL; /* NULL: parked behind its sequence */
   f->sequence_id = d->park.index >= 0 ? d->park.key : NULL;
   f->sequence_index = d->park.index;
   f->error_message = dec->message;
   f->stack_trace = dec->traceback;
   f->error_status = dec->status;
   f->error_body = dec->status > 0 ? dec->body : NULL;
   f->attempts = a->attempts;
   f->first_attempt_ms = a->first_ms;
   f->last_attempt_ms = a->last_ms;
   f->created_ms = d->clock.now_ms (d->clock.ud);
   f->metadata = metadata;
   f->script_version = fw_lua_host_version (d->prog.host);
   f->raw_event = raw;
}

/* Builds the DLQ entry into *entry, which the caller then owns (bson_destroy).
 * Building fails only when the system cannot give random bytes for the entry
 * id: wait and try again, holding the event meanwhile. False when a shutdown
 * came first (nothing to destroy then). */
static bool
build_entry (fw_dispatcher_t *d, const fw_event_t *ev, const fw_dlq_config_t *dlq,
             const fw_dlq_failure_t *f, const char *id, bson_t *entry)
{
   fw_error_t err;

   while (!fw_dlq_entry_build (entry, ev, dlq, f, &err)) {
      fw_log (FW_LOG_ERROR, d->prog.cfg.name, "cannot build DLQ entry for event %s: %s", id,
              err.message);
      bson_destroy (entry);
      if (d->clock.wait_ms (d->clock.ud, 1000)) {
         return false;
      }
   }
   return true;
}

/* Saves the entry, trying again with the restart backoff (and opening the
 * store again if it is not open) until the store acknowledges it. False when
 * a shutdown came first. The caller still owns entry. */
static bool
save_entry (fw_dispatcher_t *d, const bson_t *entry, const char *id)
{
   fw_error_t err;

   for (int tries = 1;; tries++) {
      if (d->dlq && d->dlq->save (d->dlq, entry, &err)) {
         return true;
      }
      if (!d->dlq) {
         snprintf (err.message, sizeof err.message, "DLQ store is not open");
      }
      int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.restart, tries,
                                           fw_backoff_random (&d->rng));
      fw_log (FW_LOG_ERROR, d->prog.cfg.name,
              "DLQ insert for event %s failed (try %d): %s; the stream holds this event and "
              "tries again in %lld ms",
              id, tries, err.message, (long long) delay);
      if (d->clock.wait_ms (d->clock.ud, delay)) {
         return false;
      }
      if (!d->dlq && !fw_dispatcher_open_dlq (d)) {
         return false;
      }
   }
}

/* The stored entry's _id, for the dead-letter log line (`flowwarden dlq
 * show` takes it); "" when it has none of type string. */
static void
entry_id_of (const bson_t *entry, char *buf, size_t len)
{
   bson_iter_t it;

   buf[0] = '\0';
   if (bson_iter_init_find (&it, entry, "_id") && BSON_ITER_HOLDS_UTF8 (&it)) {
      snprintf (buf, len, "%s", bson_iter_utf8 (&it, NULL));
   }
}

/* The entry is stored: parked behind its sequence, a deferred retry or
 * dead-lettered (and the sequence it opens); the stream's settle logs and
 * counts it (runtime/stream/event_settle.h). */
static fw_outcome_t
outcome_dead_lettered (fw_dispatcher_t *d, const fw_dlq_config_t *dlq, const fw_dlq_failure_t *f,
                       const decision_t *dec, const dlq_attempts_t *a)
{
   fw_outcome_t o = outcome_after (d, FW_OUTCOME_DEAD_LETTERED, a->attempts, dec);
   fw_outcome_detail_t *x = &d->out.detail;

   o.entry_id = d->out.entry_id;
   o.finished_ms = f->created_ms;
   x->dlq = dlq->collection;
   x->default_dlq = !d->prog.cfg.dlq.enabled;
   if (!f->error_type) {
      o.summary = FW_SUMMARY_PARKED;
      snprintf (d->out.sequence, sizeof d->out.sequence, "%s", d->park.key ? d->park.key : "");
      x->sequence_index = d->park.index;
      o.kind = FW_OUTCOME_PARKED;
      return o;
   }
   if (a->defer_until_ms) {
      o.kind = FW_OUTCOME_DEFERRED;
      o.until_ms = a->defer_until_ms;
      return o;
   }
   o.summary = FW_SUMMARY_DEAD_LETTERED;
   if (f->sequence_id) {
      snprintf (d->out.sequence, sizeof d->out.sequence, "%s", f->sequence_id);
      x->sequence_index = f->sequence_index;
   }
   return o;
}

static fw_outcome_t
dead_letter_raw (fw_dispatcher_t *d, const fw_event_t *ev, const decision_t *dec,
                 const dlq_attempts_t *a, const bson_t *raw)
{
   fw_dlq_failure_t f = {0};
   f.epoch = d->lead.epoch; /* ha.mode = "leader": who wrote it */
   bson_t metadata, entry;
   char id[1024];
   const fw_dlq_config_t *dlq = fw_dispatcher_dlq_config (d);
   bool ok;

   /* A stream using the default DLQ opens it on its first send_to_dlq. */
   if (!d->dlq && !fw_dispatcher_open_dlq (d)) {
      return fw_outcome_of (FW_OUTCOME_STOPPED, a->attempts);
   }

   metadata_to_bson (d, &metadata);
   failure_of (d, dec, a, raw, &metadata, &f);
   fw_event_log_id (ev, id, sizeof id);
   ok = build_entry (d, ev, dlq, &f, id, &entry);
   bson_destroy (&metadata);
   if (!ok) {
      return fw_outcome_of (FW_OUTCOME_STOPPED, a->attempts);
   }
   while (a->defer_until_ms && !fw_dlq_entry_schedule (&entry, a->defer_until_ms)) {
      if (d->clock.wait_ms (d->clock.ud, 1000)) { /* out of memory: hold the event */
         bson_destroy (&entry);
         return fw_outcome_of (FW_OUTCOME_STOPPED, a->attempts);
      }
   }

   switch (fw_txn_dead_letter (d, ev, &entry, id)) {
   case FW_TXN_DLQ_COMMITTED: /* exactly_once: with the position past ev */
      ok = true;
      break;
   case FW_TXN_DLQ_STOPPED:
      ok = false;
      break;
   default:
      ok = save_entry (d, &entry, id);
      break;
   }
   entry_id_of (&entry, d->out.entry_id, sizeof d->out.entry_id);
   bson_destroy (&entry);
   if (!ok) {
      return fw_outcome_of (FW_OUTCOME_STOPPED, a->attempts);
   }
   return outcome_dead_lettered (d, dlq, &f, dec, a);
}

/* ctx:send_to_dlq(reason) was called: dead-letter now, no retry. */
static void
dlq_requested (const fw_dispatcher_t *d, decision_t *dec)
{
   dec->action = ACT_DLQ;
   snprintf (dec->type, sizeof dec->type, "DlqRequested");
   snprintf (dec->message, sizeof dec->message, "%s", d->dispatch.dlq_reason);
   dec->traceback[0] = '\0';
   dec->where[0] = '\0';
}

/* A replayed dead letter ends here instead of in a new DLQ entry: its
 * fw_outcome_of (HANDLED, SKIPPED, GAVE_UP) goes back to the replay
 * (dlq_replay.c), which updates the entry. */
static fw_outcome_t
replayed (fw_dispatcher_t *d, fw_outcome_kind_t kind, const decision_t *dec, int attempts)
{
   return outcome_after (d, kind, attempts, dec);
}

/* The event is finished with: how the stream counts o, and (with metrics)
 * when it ended, for the lag, unless known (a DLQ entry's createdAt, which
 * a deferred retry's log line counts its delay from). mono_ns: now on
 * CLOCK_MONOTONIC, 0 to read the wall clock instead. */
static void
finished (fw_dispatcher_t *d, fw_outcome_t *o, fw_outcome_count_t count, int64_t mono_ns)
{
   o->count = count;
   if (d->metrics && !o->finished_ms) {
      o->finished_ms = mono_ns ? wall_ms_at (d, mono_ns) : d->clock.now_ms (d->clock.ud);
   }
}

/* A sequenced DLQ: the event's sequence is open, so the event is stored
 * behind it (no error, attempts 0) instead of handled. False when it was
 * not parked (its sequence closed meanwhile): the caller handles it. */
static bool
park_event (fw_dispatcher_t *d, const fw_event_t *ev, fw_outcome_t *o)
{
   decision_t dec;
   int64_t now = d->clock.now_ms (d->clock.ud);
   dlq_attempts_t a = {0, now, now, 0};

   switch (fw_park_take (d, false)) {
   case FW_PARK_CLOSED:
      return false;
   case FW_PARK_OVERFLOW:
      *o = outcome_failed (d, 0);
      return true;
   case FW_PARK_STOPPED:
      *o = fw_outcome_of (FW_OUTCOME_STOPPED, 0);
      return true;
   default:
      break;
   }
   memset (&dec, 0, sizeof dec);
   *o = dead_letter_raw (d, ev, &dec, &a, NULL);
   if (o->kind == FW_OUTCOME_STOPPED) {
      return true;
   }
   fw_park_settle (d);
   finished (d, o, FW_COUNT_PARKED, 0);
   return true;
}

/* Dead-letters ev after its attempts; on a sequenced DLQ it opens the
 * event's sequence, whose head the entry becomes. */
static fw_outcome_t
dead_letter_head (fw_dispatcher_t *d, const fw_event_t *ev, const decision_t *dec,
                  const dlq_attempts_t *a)
{
   fw_lua_stop_t stop;
   char id[1024];
   fw_outcome_t o;
   lua_State *L = d->prog.L;
   int top = lua_gettop (L);

   if (fw_park_enabled (d) && d->prog.cfg.dlq.enabled &&
       fw_park_key (d, ev, &stop) == FW_PARK_KEY_FAILED) {
      const char *msg = lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING
                           ? lua_tostring (L, -1)
                           : "(no message)";
      fw_event_log_id (ev, id, sizeof id);
      fw_log (FW_LOG_ERROR, d->prog.cfg.name,
              "event %s: dlq.sequence_key failed (%s): its DLQ entry opens no sequence", id, msg);
      lua_settop (L, top); /* its failure table and message */
   } else if (fw_park_enabled (d) && d->park.key) {
      switch (fw_park_take (d, true)) {
      case FW_PARK_OVERFLOW:
         return outcome_failed (d, a->attempts);
      case FW_PARK_STOPPED:
         return fw_outcome_of (FW_OUTCOME_STOPPED, a->attempts);
      default:
         break;
      }
   }
   o = dead_letter_raw (d, ev, dec, a, NULL);
   if (o.kind != FW_OUTCOME_STOPPED) {
      fw_park_settle (d);
   }
   return o;
}

/* The handler's attempts, on CLOCK_MONOTONIC: the first attempt's start, the
 * current one's, and (with metrics) the current one's end. */
typedef struct {
   int64_t first_ns, start_ns, end_ns;
} attempt_times_t;

/* Whether the next attempt may run (retry: it is a change event's retry).
 * False with *o set when the event ends here; *L and *ref follow a full
 * state's rebuild. */
static bool
attempt_may_start (fw_dispatcher_t *d, const fw_event_t *ev, int attempt, bool retry, lua_State **L,
                   int *ref, fw_outcome_t *o)
{
   /* ha.mode = "leader": no handler call past the lease's deadline; the
    * event comes back to the next leader. */
   if (d->lead.lease && !fw_lease_is_leader (d->lead.lease, NULL)) {
      *o = fw_outcome_of (FW_OUTCOME_STOPPED, attempt - 1);
      return false;
   }
   /* A reload's new program waits: the event gives way, for its stream to
    * switch at the event's boundary and run it again there, its attempt
    * count carrying on (a reload never swaps the program inside an event),
    * and a breaker it holds still held. */
   if (retry && d->reload_waits.fn && d->reload_waits.fn (d->reload_waits.ud)) {
      *o = fw_outcome_of (FW_OUTCOME_YIELDED, attempt - 1);
      return false;
   }
   /* Issue 29: no attempt while another lane holds the breaker open, nor
    * beyond the rate limit. */
   if (fw_outage_on (d) && !fw_outage_admit (d, ev, attempt)) {
      *o = fw_outcome_of (FW_OUTCOME_STOPPED, attempt - 1);
      return false;
   }
   /* A full state's rebuild takes effect here: this attempt runs on it. */
   bool switched = false;
   if (d->rebuild.pending) {
      if (!fw_state_rebuild (d)) {
         *o = outcome_failed (d, attempt - 1);
         return false;
      }
      switched = true;
   }
   if (switched) {
      *L = d->prog.L;
      if ((*ref = fw_program_handler_for (&d->prog, ev->op)) == LUA_NOREF) {
         /* the rebuilt state has no handler for it */
         *o = fw_outcome_of (FW_OUTCOME_NO_HANDLER, attempt - 1);
         finished (d, o, FW_COUNT_NONE, 0);
         return false;
      }
   }
   return true;
}

/* A sequenced DLQ with open sequences: the event's key, and the event parked
 * when its sequence is open. A key function that fails fails the attempt,
 * under the policy (*key_failed, *stop), and is asked again on the next one.
 * True with *o set when the event ends here. */
static bool
park_if_open (fw_dispatcher_t *d, const fw_event_t *ev, bool *check_park, bool *key_failed,
              fw_lua_stop_t *stop, fw_outcome_t *o)
{
   fw_park_key_t k = fw_park_key (d, ev, stop);

   *key_failed = k == FW_PARK_KEY_FAILED;
   if (k != FW_PARK_KEY_FAILED) {
      *check_park = false;
   }
   return k == FW_PARK_KEY_OK && fw_park_is_open (d) && park_event (d, ev, o);
}

/* One call of the handler (none when the key function failed: the attempt
 * failed), timed into *t. Returns whether it returned; if not, its failure
 * table is on top of the stack. */
static bool
call_handler (fw_dispatcher_t *d, lua_State *L, int ref, int attempt, bool key_failed,
              fw_lua_stop_t *stop, attempt_times_t *t)
{
   bool ok;
   int64_t started_ns = -1; /* the host's start of the handler's call; -1: not called */

   if (d->metrics) {
      fw_stream_metrics_set_attempt (d->metrics, attempt);
   }
   /* The attempt's start is the clock read the host makes for its
    * deadline (or ours, without one); with metrics, one read after it
    * times the handler. */
   t->start_ns = d->prog.cfg.timeout_ms > 0 ? 0 : fw_mono_ns ();
   if (key_failed) {
      ok = false;
   } else {
      lua_rawgeti (L, LUA_REGISTRYINDEX, ref);
      ok = ref == d->prog.handler_ref[H_BATCH] /* on_batch: a batch of one */
              ? fw_batch_call_one (d, stop)
              : fw_lua_host_call_timed (d->prog.host, 0, fw_event_ctx_push, &d->dispatch, 0,
                                        d->prog.cfg.timeout_ms, stop, &started_ns);
   }
   if (!t->start_ns) {
      t->start_ns = started_ns >= 0 ? started_ns : fw_lua_host_call_started_ns (d->prog.host);
   }
   if (!t->first_ns) { /* this call's first attempt */
      t->first_ns = t->start_ns;
   }
   if (d->metrics) {
      t->end_ns = fw_mono_ns ();
      fw_stream_metrics_handler_call (d->metrics, t->end_ns - t->start_ns);
   }
   /* A cursor a handler left open holds a server cursor and this
    * thread's client: close it now, not when the collector runs. */
   fw_mongo_lua_close_cursors (L);
   return ok;
}

/* exactly_once under ha: an attempt that failed after this instance lost
 * its lease (its transaction aborted, most likely killed by the new holder)
 * is not the event's failure: nothing of it was committed and the event is
 * the new holder's, so it ends as fenced, never dead-lettered here. Takes
 * the failure table off the stack when it does. */
static bool
failed_deposed (fw_dispatcher_t *d, lua_State *L, bool *fenced)
{
   if (!d->lead.lease || fw_lease_is_leader (d->lead.lease, NULL)) {
      return false;
   }
   lua_pop (L, 1);
   *fenced = true;
   return true;
}

/* fw_group_dispatch: the handler of each event of the group in turn, each
 * with its own ctx, up to the first that fails or asks for the DLQ: *cur
 * names it (d->dispatch is its ctx, which on_error sees). Returns as
 * call_handler. */
static bool
call_group (fw_dispatcher_t *d, lua_State *L, int attempt, fw_lua_stop_t *stop, attempt_times_t *t,
            const fw_event_t **cur)
{
   int64_t first_ns = 0; /* the attempt's first call: the group's first attempt's start */
   bool ok = true;

   for (size_t k = 0; k < d->group.n && ok; k++) {
      const fw_event_t *ev = d->group.evs[k];
      int ref = fw_program_handler_for (&d->prog, ev->op);
      if (ref == LUA_NOREF) {
         continue; /* a reload took its handler away: nothing to apply */
      }
      fw_event_ctx_begin (L, &d->dispatch, ev);
      d->dispatch.attempt = attempt;
      *cur = ev;
      ok = call_handler (d, L, ref, attempt, false, stop, t);
      first_ns = first_ns ? first_ns : t->first_ns;
      if (ok && d->dispatch.dlq_requested) {
         break;
      }
   }
   if (attempt == 1 && first_ns) {
      t->first_ns = first_ns;
   }
   return ok;
}

/* exactly_once (issue 39): the attempt in a transaction with the stream's
 * position, committed when the handler returned and asked for nothing else,
 * aborted otherwise (live: a change event; a replayed dead letter never runs
 * in one). With a group (fw_group_dispatch), every event's handler in the
 * one transaction, the position past the last; *cur: the event the attempt
 * is about (in: the dispatched one; out: the group's that failed). Returns
 * as call_handler; *fenced when a newer leader holds the checkpoint (nothing
 * committed). */
static bool
call_in_txn (fw_dispatcher_t *d, const fw_event_t **cur, lua_State *L, int ref, int attempt,
             bool key_failed, fw_lua_stop_t *stop, attempt_times_t *t, bool *fenced, bool live)
{
   fw_mongo_txn_t join;
   const fw_event_t *ev = *cur;
   bool ok;

   *fenced = false;
   if (!fw_txn_wanted (d, !live)) {
      return call_handler (d, L, ref, attempt, key_failed, stop, t);
   }
   if (!fw_txn_begin (d, L, &join)) {
      *stop = FW_LUA_STOP_NONE;
      if (!t->first_ns) {
         t->first_ns = t->start_ns = fw_mono_ns ();
      }
      return false;
   }
   if (d->group.n > 0) {
      ok = call_group (d, L, attempt, stop, t, cur);
      ev = d->group.evs[d->group.n - 1];
   } else {
      ok = call_handler (d, L, ref, attempt, key_failed, stop, t);
   }
   fw_mongo_lua_join (L, NULL);
   if (!ok || d->dispatch.dlq_requested) {
      fw_txn_end (d);
      return !ok && failed_deposed (d, L, fenced) ? true : ok;
   }
   switch (fw_txn_commit (d, L, ev)) {
   case FW_TXN_COMMITTED:
      return true;
   case FW_TXN_FENCED:
      *fenced = true;
      return true;
   default:
      /* A commit whose outcome stayed unknown may have committed: the
       * next holder's checkpoint says which. */
      if (failed_deposed (d, L, fenced)) {
         return true;
      }
      *stop = FW_LUA_STOP_NONE;
      return false;
   }
}

/* The handler returned and asked for nothing else. end_ns: its end on
 * CLOCK_MONOTONIC, 0 without metrics. */
static fw_outcome_t
ended_handled (fw_dispatcher_t *d, int attempt, int64_t end_ns)
{
   fw_outcome_t o = fw_outcome_of (FW_OUTCOME_HANDLED, attempt);
   o.summary = FW_SUMMARY_HANDLED;
   if (d->outage.holder) { /* a probe succeeded */
      fw_outage_handled (d);
   }
   finished (d, &o, FW_COUNT_OK, end_ns);
   return o;
}

/* What to do after an attempt that failed (ok false: its failure table is on
 * top of the stack, and taken off) or called ctx:send_to_dlq. */
static void
attempt_decision (fw_dispatcher_t *d, fw_replay_hook_t *hook, lua_State *L, bool ok, int attempt,
                  fw_lua_stop_t stop, decision_t *dec)
{
   fw_replay_hook_keep_error (hook, L, 0);
   dec->status = 0;
   dec->body[0] = '\0';
   if (d->dispatch.dlq_requested) {
      if (!ok) {
         lua_pop (L, 1);
      }
      dlq_requested (d, dec);
      return;
   }
   d->tally.failed++;
   decide (d, hook, attempt, stop, dec);
   if (d->metrics) {
      fw_stream_metrics_handler_error (d->metrics, dec->type);
   }
   if (d->dispatch.dlq_requested) {
      /* on_error called ctx:send_to_dlq: that dead-letters the event
       * now, whatever on_error returned. */
      dlq_requested (d, dec);
   }
}

/* flowwarden test's harness sees every failed attempt and its decision. */
static void
report_attempt_failed (fw_dispatcher_t *d, int attempt, const decision_t *dec)
{
   if (d->hooks) {
      static const char *const names[] = {"retry", "dlq", "skip", "drop"};
      d->hooks->attempt_failed (d->hooks->ud, attempt, dec->type, dec->message, dec->traceback,
                                (unsigned) dec->action < 4 ? names[dec->action] : "other");
   }
}

/* A replayed dead letter ends after a decision other than retry, or after
 * its first attempt when the replay allows no retry. True with *o set when
 * it ends here. */
static bool
replay_ends (fw_dispatcher_t *d, const fw_replay_hook_t *hook, const decision_t *dec, int attempt,
             fw_outcome_t *o)
{
   if (hook && dec->action != ACT_RETRY) {
      *o = replayed (d, dec->action == ACT_SKIP ? FW_OUTCOME_SKIPPED : FW_OUTCOME_GAVE_UP, dec,
                     attempt);
      return true;
   }
   if (hook && hook->no_retry) {
      *o = replayed (d, FW_OUTCOME_GAVE_UP, dec, attempt);
      return true;
   }
   return false;
}

/* The decision is retry: waits out the backoff. False when a shutdown came
 * first. */
static bool
retry_wait (fw_dispatcher_t *d, fw_replay_hook_t *hook, const fw_event_t *ev, int attempt,
            const decision_t *dec)
{
   int64_t delay = fw_backoff_delay_ms (&d->prog.cfg.retry, attempt, fw_backoff_random (&d->rng));
   char more[1600], sid[1024];

   fw_event_short_id (ev, sid, sizeof sid);
   fw_log (FW_LOG_WARN, d->prog.cfg.name,
           "event %s attempt %d failed: %s: %s; retrying in %lld ms%s", sid, attempt, dec->type,
           dec->message, (long long) delay,
           fw_event_failure_context (ev, dec->where, NULL, more, sizeof more));
   d->tally.retries++;
   if (d->metrics) {
      fw_stream_metrics_retry (d->metrics);
      fw_stream_metrics_set_state (d->metrics, FW_STREAM_RETRYING, NULL);
   }
   if (d->clock.wait_ms (d->clock.ud, delay)) {
      return false;
   }
   if (d->metrics) {
      fw_stream_metrics_set_state (d->metrics, FW_STREAM_RUNNING, NULL);
   }
   if (hook && hook->before_retry) {
      hook->before_retry (hook);
   }
   return true;
}

/* The decision is dlq (or a deferred retry due at defer_until_ms): the
 * event goes to the DLQ, or is lost when the stream has none to take it. */
static fw_outcome_t
dead_letter_after (fw_dispatcher_t *d, const fw_event_t *ev, const decision_t *dec, int attempt,
                   const attempt_times_t *t, int64_t defer_until_ms)
{
   fw_outcome_t o;

   if (!d->prog.cfg.dlq.enabled &&
       !(d->dispatch.dlq_requested && d->prog.cfg.dlq_fallback.enabled)) {
      o = outcome_after (d, FW_OUTCOME_LOST, attempt, dec);
      o.summary = FW_SUMMARY_LOST;
      d->out.detail.asked_dlq = true;
      finished (d, &o, FW_COUNT_LOST, 0);
      return o;
   }
   dlq_attempts_t a = {attempt, wall_ms_at (d, t->first_ns), wall_ms_at (d, t->start_ns),
                       defer_until_ms};
   o = dead_letter_head (d, ev, dec, &a);
   if (fw_outcome_finished (o.kind)) {
      finished (d, &o, FW_COUNT_DLQ, 0);
   }
   return o;
}

/* The event's end under a decision other than retry: dead-lettered, skipped
 * or lost. */
static fw_outcome_t
decided_end (fw_dispatcher_t *d, const fw_event_t *ev, const decision_t *dec, int attempt,
             const attempt_times_t *t)
{
   fw_outcome_t o;

   switch (dec->action) {
   case ACT_DLQ:
      return dead_letter_after (d, ev, dec, attempt, t, 0);
   case ACT_SKIP:
      o = outcome_after (d, FW_OUTCOME_SKIPPED, attempt, dec);
      o.summary = FW_SUMMARY_SKIPPED;
      finished (d, &o, FW_COUNT_SKIPPED, 0);
      return o;
   case ACT_DROP:
   default:
      o = outcome_after (d, FW_OUTCOME_LOST, attempt, dec);
      o.summary = FW_SUMMARY_LOST;
      finished (d, &o, FW_COUNT_LOST, 0);
      return o;
   }
}

/* The decision is retry and the stream defers its retries (issue 29): the
 * retry waits in the DLQ and the stream goes on. (A store that says it
 * cannot FW_DLQ_CAN_DEFER retries here; both of flowwarden's stores can,
 * the in-memory one of flowwarden test too.) */
static bool
defers_retry (const fw_dispatcher_t *d, const decision_t *dec)
{
   return dec->action == ACT_RETRY && d->prog.cfg.retry_deferred && d->prog.cfg.dlq.enabled &&
          !d->dispatch.dlq_requested && (!d->dlq || fw_dlq_store_can (d->dlq, FW_DLQ_CAN_DEFER));
}

/* After an attempt that failed or called ctx:send_to_dlq: decides, and ends
 * the event or waits out the retry backoff. True to try again, false with *o
 * set when the event ends here. */
static bool
after_failure (fw_dispatcher_t *d, fw_replay_hook_t *hook, const fw_event_t *ev, lua_State *L,
               bool ok, int attempt, fw_lua_stop_t stop, const attempt_times_t *t, fw_outcome_t *o)
{
   decision_t dec;
   char id[1024];

   attempt_decision (d, hook, L, ok, attempt, stop, &dec);
   fw_event_log_id (ev, id, sizeof id);
   report_attempt_failed (d, attempt, &dec);
   if (!ok && fw_txn_unsupported_stops (d, hook != NULL, dec.type, dec.message)) {
      *o = outcome_failed (d, attempt);
      return false;
   }
   if (hook) {
      hook->retry_asked = dec.action == ACT_RETRY;
   }
   if (replay_ends (d, hook, &dec, attempt, o)) {
      return false;
   }
   if (dec.action == ACT_RETRY && d->outage.holder && !d->dispatch.dlq_requested && !hook) {
      /* Issue 37: the event holds a breaker restored after a restart; its
       * attempts are probes, one per pause, not a round of retries. */
      switch (fw_outage_hold (d, id, attempt, dec.type, dec.message, true)) {
      case FW_HOLD_PROBE:
         return true;
      case FW_HOLD_STOPPED:
         *o = outcome_after (d, FW_OUTCOME_HELD, attempt, &dec);
         return false;
      default:
         break; /* not an outage's error: the breaker closed, retries go on */
      }
   }
   if (defers_retry (d, &dec)) {
      int64_t due = d->clock.now_ms (d->clock.ud) +
                    fw_backoff_delay_ms (&d->prog.cfg.retry, attempt, fw_backoff_random (&d->rng));
      d->tally.retries++;
      if (d->metrics) {
         fw_stream_metrics_retry (d->metrics);
      }
      *o = dead_letter_after (d, ev, &dec, attempt, t, due);
      return false;
   }
   if (dec.action != ACT_RETRY) {
      /* Issue 29: an outage's error holds the event behind the breaker. */
      switch (fw_outage_hold (d, id, attempt, dec.type, dec.message,
                              (dec.action == ACT_DLQ || dec.action == ACT_DROP) &&
                                 !d->dispatch.dlq_requested && !hook)) {
      case FW_HOLD_PROBE:
         return true;
      case FW_HOLD_STOPPED:
         *o = outcome_after (d, FW_OUTCOME_HELD, attempt, &dec);
         return false;
      default:
         break;
      }
      *o = decided_end (d, ev, &dec, attempt, t);
      return false;
   }
   if (!retry_wait (d, hook, ev, attempt, &dec)) {
      *o = outcome_after (d, FW_OUTCOME_STOPPED, attempt, &dec);
      return false;
   }
   return true;
}

static fw_outcome_t run_attempts (fw_dispatcher_t *d, const fw_event_t *ev,
                                  const fw_dispatch_run_t *run);

fw_outcome_t
fw_event_dispatch_run (fw_dispatcher_t *d, const fw_event_t *ev, const fw_dispatch_run_t *run)
{
   if (!run) {
      run = &LIVE; /* fw_event_dispatch: a change event */
   }
#if FW_CHECKING
   fw_lua_host_t *host = d->prog.host;
   int top = lua_gettop (fw_lua_host_state (host));
#endif
   d->tally.failed = 0;
   d->tally.retries = 0;
   fw_outcome_t o = run_attempts (d, ev, run);
   o.failed_attempts = d->tally.failed;
   o.retries = d->tally.retries;
   if (!o.lua_memory && d->metrics) { /* read once: a handled event's was */
      o.lua_memory = fw_lua_host_memory_used (d->prog.host);
   }
   /* In a source transaction's group, an outcome other than HANDLED is the
    * failed event's (fw_group_dispatch reports the others). */
   report (d, run, d->group.n && o.kind != FW_OUTCOME_HANDLED ? d->group.failed : ev, &o);
   if (fw_park_held (d)) {
      fw_park_end (d);
   }
   /* A yielded event comes back at once, holding the breaker. */
   if (o.kind != FW_OUTCOME_YIELDED && d->outage.holder) {
      fw_outage_event_end (d);
   }
   /* The Lua stack is as it was (unless a reload or a rebuild replaced
    * the state), and a DLQ outcome names its entry. */
   FW_ASSERT (d->prog.host != host || lua_gettop (fw_lua_host_state (host)) == top);
   FW_ASSERT ((o.kind != FW_OUTCOME_DEAD_LETTERED && o.kind != FW_OUTCOME_PARKED &&
               o.kind != FW_OUTCOME_DEFERRED) ||
              o.entry_id[0]);
   return o;
}

static fw_outcome_t
run_attempts (fw_dispatcher_t *d, const fw_event_t *ev, const fw_dispatch_run_t *run)
{
   lua_State *L = d->prog.L;
   int ref;
   attempt_times_t t = {0, 0, 0};
   /* A sequenced DLQ with open sequences: is this event's one of them? */
   bool check_park = !run->replay && fw_park_enabled (d) && /* a replay is never parked */
                     fw_park_check_needed (d, ev);

   ref = fw_program_handler_for (&d->prog, ev->op);
   if (ref == LUA_NOREF) {
      fw_outcome_t o = fw_outcome_of (FW_OUTCOME_NO_HANDLER,
                                      0); /* no handler for this operation type */
      finished (d, &o, FW_COUNT_NONE, 0);
      return o;
   }
   fw_event_ctx_begin (L, &d->dispatch, ev);

   for (int attempt = run->attempt_base + 1;; attempt++) {
      fw_lua_stop_t stop;
      bool ok, key_failed = false, fenced;
      fw_outcome_t o;
      const fw_event_t *cur = ev; /* a group's: the event that failed */

      if (!attempt_may_start (d, ev, attempt, attempt > run->attempt_base + 1 && !run->replay, &L,
                              &ref, &o)) {
         return o;
      }
      d->dispatch.attempt = attempt;
      if (check_park && park_if_open (d, ev, &check_park, &key_failed, &stop, &o)) {
         return o;
      }
      ok = call_in_txn (d, &cur, L, ref, attempt, key_failed, &stop, &t, &fenced, !run->replay);
      d->group.failed = cur;
      if (fenced) {
         return fw_outcome_of (FW_OUTCOME_STOPPED, attempt);
      }
      /* The state's memory, read once: for the mark, and for the gauge
       * (nothing of Lua runs between here and a handled event's end). */
      size_t used = fw_lua_host_memory_used (d->prog.host);
      if (fw_state_past_mark (d, used)) {
         if (fw_state_check (d, ok, attempt) == FW_STATE_RETRY) {
            d->tally.failed++;
            continue; /* failed in a full state: tried again on a rebuilt one */
         }
         used = 0; /* it may have collected: read again as the event ends */
      }
      if (ok && !d->dispatch.dlq_requested) {
         o = ended_handled (d, attempt, t.end_ns);
         o.lua_memory = d->metrics ? used : 0;
         return o;
      }
      if (!after_failure (d, run->replay, cur, L, ok, attempt, stop, &t, &o)) {
         return o;
      }
   }
}

/* --- exactly_once: a source transaction's events together (issue 39) --- */

/* Every event of evs[0..n) on its own (no transaction to group them in). */
static fw_outcome_t
group_one_by_one (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                  fw_outcome_kind_t *outcomes)
{
   for (size_t i = 0; i < n; i++) {
      fw_outcome_t o = fw_event_dispatch (d, evs[i]);
      if (outcomes) {
         outcomes[i] = o.kind;
      }
      if (!fw_outcome_finished (o.kind)) {
         return o;
      }
   }
   return fw_outcome_of (FW_OUTCOME_HANDLED, 0);
}

/* left[0..*m) handled together: the others than left[0] counted as handled
 * (ended_handled counted one). */
static void
group_handled (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
               fw_outcome_kind_t *outcomes, const fw_event_t **left, size_t m)
{
   for (size_t j = 0; j < m; j++) {
      for (size_t i = 0; outcomes && i < n; i++) {
         if (evs[i] == left[j]) {
            outcomes[i] = FW_OUTCOME_HANDLED;
         }
      }
      if (j > 0) {
         fw_outcome_t o = fw_outcome_of (FW_OUTCOME_HANDLED, 1);
         o.summary = FW_SUMMARY_HANDLED;
         finished (d, &o, FW_COUNT_OK, 0);
         report (d, &LIVE, left[j], &o);
      }
   }
}

fw_outcome_t
fw_group_dispatch (fw_dispatcher_t *d, const fw_event_t *const *evs, size_t n,
                   fw_outcome_kind_t *outcomes)
{
   const fw_event_t **left;
   size_t m = 0;
   fw_outcome_t o = fw_outcome_of (FW_OUTCOME_HANDLED, 0);

   if (n <= 1 || !fw_txn_wanted (d, false) || fw_park_enabled (d) || d->group.n > 0) {
      return group_one_by_one (d, evs, n, outcomes);
   }
   if (!(left = malloc (n * sizeof *left))) {
      snprintf (d->out.failure, sizeof d->out.failure,
                "out of memory taking a source transaction of %zu events", n);
      return outcome_failed (d, 0);
   }
   for (size_t i = 0; i < n; i++) {
      if (outcomes) {
         outcomes[i] = FW_OUTCOME_STOPPED; /* until it is finished with */
      }
      if (fw_program_handler_for (&d->prog, evs[i]->op) == LUA_NOREF) {
         fw_outcome_t none = fw_outcome_of (FW_OUTCOME_NO_HANDLER, 0);
         finished (d, &none, FW_COUNT_NONE, 0);
         report (d, &LIVE, evs[i], &none);
         if (outcomes) {
            outcomes[i] = FW_OUTCOME_NO_HANDLER;
         }
      } else {
         left[m++] = evs[i];
      }
   }
   while (m > 0) {
      /* One event left: the per-event path as it is. */
      d->group.evs = m > 1 ? left : NULL;
      d->group.n = m > 1 ? m : 0;
      d->group.failed = left[0];
      o = fw_event_dispatch (d, left[0]);
      const fw_event_t *bad = d->group.failed;
      d->group.evs = NULL;
      d->group.n = 0;
      if (o.kind == FW_OUTCOME_HANDLED) {
         group_handled (d, evs, n, outcomes, left, m);
         break;
      }
      if (!fw_outcome_finished (o.kind)) {
         break; /* the group comes back, or the stream stops before it */
      }
      /* The event that failed ended without being applied (dead-lettered,
       * skipped, lost): the others are applied together without it. */
      size_t k = 0;
      while (k < m && left[k] != bad) {
         k++;
      }
      k = k < m ? k : 0;
      for (size_t i = 0; outcomes && i < n; i++) {
         if (evs[i] == left[k]) {
            outcomes[i] = o.kind;
         }
      }
      memmove (&left[k], &left[k + 1], (m - k - 1) * sizeof *left);
      m--;
   }
   free (left);
   return fw_outcome_finished (o.kind) ? fw_outcome_of (FW_OUTCOME_HANDLED, 0) : o;
}
