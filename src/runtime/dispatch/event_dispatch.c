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

#include "flowwarden/clock.h"
#include "flowwarden/bson_lua.h"
#include "flowwarden/dlq_entry.h"
#include "flowwarden/log.h"
#include "flowwarden/lua_call.h"
#include "flowwarden/secrets.h"
#include "runtime/stream/stream_worker-private.h"

typedef enum { ACT_RETRY, ACT_DLQ, ACT_SKIP, ACT_DROP } action_t;

typedef struct {
   action_t action;
   char type[128];
   char message[1024];
   char traceback[8192];
} decision_t;

/* The wall clock (ms) at mono_ns (CLOCK_MONOTONIC): handler calls are timed
 * on the monotonic clock the Lua host reads anyway, and converted with an
 * offset read at most once a second. */
static int64_t
wall_ms_at (fw_stream_worker_t *w, int64_t mono_ns)
{
   if (w->clock.is_virtual) {
      return w->clock.now_ms (w->clock.ud);
   }
   if (mono_ns >= w->wall_offset_until_ns) {
      w->wall_offset_ns = fw_now_ms () * 1000000 - fw_mono_ns ();
      w->wall_offset_until_ns = mono_ns + 1000000000;
   }
   return (mono_ns + w->wall_offset_ns) / 1000000;
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
policy_failed (fw_stream_worker_t *w, lua_State *L, decision_t *out)
{
   const char *msg = NULL;
   if (lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING) {
      msg = lua_tostring (L, -1);
   }
   fw_log (FW_LOG_ERROR, w->cfg.name, "error policy failed: %s", msg ? msg : "(no message)");
   snprintf (out->type, sizeof out->type, "RuntimeError");
   snprintf (out->message, sizeof out->message, "handler failed and its error policy failed");
   out->traceback[0] = '\0';
   out->action = w->cfg.dlq.enabled ? ACT_DLQ : ACT_DROP;
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
static void
decide (fw_stream_worker_t *w, int attempt, fw_lua_stop_t stop, decision_t *out)
{
   lua_State *L = fw_lua_host_state (w->host);
   int failure = lua_gettop (L);
   int classified, user_err, value;
   fw_lua_stop_t inner = FW_LUA_STOP_NONE;
   bool has_on_error, on_error_ok = false;

   /* 1. classify: c, err */
   push_dispatch_fn (L, "classify");
   lua_rawgeti (L, LUA_REGISTRYINDEX, w->spec_ref);
   lua_pushvalue (L, failure);
   push_string_or_nil (L, stop_name (stop));
   if (!fw_lua_host_call (w->host, 3, 2, w->cfg.timeout_ms, &inner)) {
      policy_failed (w, L, out);
      lua_settop (L, failure - 1);
      return;
   }
   classified = failure + 1;
   user_err = failure + 2;

   /* 2. on_error(err, ctx): what it returned, or what it raised */
   lua_rawgeti (L, LUA_REGISTRYINDEX, w->spec_ref);
   has_on_error = lua_getfield (L, -1, "on_error") == LUA_TFUNCTION;
   lua_remove (L, -2);
   if (has_on_error) {
      lua_pushvalue (L, user_err);
      on_error_ok = fw_lua_host_call_with (w->host, 1, fw_event_ctx_push, &w->dispatch, 1,
                                           w->cfg.timeout_ms, &inner);
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
   lua_rawgeti (L, LUA_REGISTRYINDEX, w->spec_ref);
   lua_pushvalue (L, classified);
   lua_pushinteger (L, attempt);
   if (has_on_error) {
      lua_pushboolean (L, on_error_ok);
   } else {
      lua_pushnil (L);
   }
   lua_pushvalue (L, value);
   push_string_or_nil (L, has_on_error && !on_error_ok ? stop_name (inner) : NULL);
   if (fw_lua_host_call (w->host, 6, 1, w->cfg.timeout_ms, &inner) && lua_istable (L, -1)) {
      int d = lua_gettop (L);
      char action[16];
      copy_field (L, d, "action", action, sizeof action, false);
      copy_field (L, d, "type", out->type, sizeof out->type, true);
      copy_field (L, d, "message", out->message, sizeof out->message, true);
      copy_field (L, d, "traceback", out->traceback, sizeof out->traceback, true);
      out->action = strcmp (action, "retry") == 0  ? ACT_RETRY
                    : strcmp (action, "dlq") == 0  ? ACT_DLQ
                    : strcmp (action, "skip") == 0 ? ACT_SKIP
                                                   : ACT_DROP;
   } else {
      policy_failed (w, L, out);
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
metadata_to_bson (fw_stream_worker_t *w, bson_t *out)
{
   lua_State *L = fw_lua_host_state (w->host);
   fw_error_t err = {0};
   metadata_args_t a = {out, &err, false};

   bson_init (out);
   lua_pushcfunction (L, pmetadata);
   fw_event_ctx_push_metadata (L, &w->dispatch);
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

/* The event's id for a log line; "(long)" when it does not fit. */
static void
log_id (const fw_event_t *ev, char *id, size_t len)
{
   if (!fw_event_id (ev, id, len)) {
      snprintf (id, len, "(long)");
   }
}

/* The DLQ this stream writes to: its own, or, on a stream without one, the
 * script's default DLQ (seed 000: the store exists when any stream declares a
 * DLQ), which only ctx:send_to_dlq uses. */
static const fw_dlq_config_t *
dlq_config (const fw_stream_worker_t *w)
{
   return w->cfg.dlq.enabled ? &w->cfg.dlq : &w->cfg.dlq_fallback;
}

/* Hands the event to the DLQ and does not return until the store
 * acknowledged it (or a shutdown came first): the checkpoint must never pass
 * an event that is neither handled nor dead-lettered. */
static fw_dispatch_result_t
dead_letter_raw (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempts,
                 int64_t first_ms, int64_t last_ms, const bson_t *raw);

static fw_dispatch_result_t
dead_letter (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempts,
             int64_t first_ms, int64_t last_ms)
{
   return dead_letter_raw (w, ev, d, attempts, first_ms, last_ms, NULL);
}

/* An event dead-lettered without a handler attempt (attempts 0), its error
 * type and message; raw: the event's bytes to keep whole, or NULL. */
static fw_dispatch_result_t
dead_letter_unhandled (fw_stream_worker_t *w, const fw_event_t *ev, const char *type,
                       const char *message, const bson_t *raw)
{
   decision_t d;
   int64_t now = w->clock.now_ms (w->clock.ud);

   memset (&d, 0, sizeof d);
   snprintf (d.type, sizeof d.type, "%s", type);
   snprintf (d.message, sizeof d.message, "%s", message);
   return dead_letter_raw (w, ev, &d, 0, now, now, raw);
}

fw_dispatch_result_t
fw_event_dispatch_unreadable (fw_stream_worker_t *w, fw_event_t *ev, const char *why)
{
   if (!w->dispatch.dlq_enabled) {
      return FW_DISPATCH_NO_DLQ;
   }
   if (!ev->operation_type) {
      ev->operation_type = "unknown";
      ev->op = FW_OP_OTHER;
   }
   return dead_letter_unhandled (w, ev, "MalformedEvent", why, ev->doc);
}

fw_dispatch_result_t
fw_event_dispatch_oversize (fw_stream_worker_t *w, const fw_event_t *ev, int64_t size)
{
   char message[300];

   if (!w->dispatch.dlq_enabled) {
      return FW_DISPATCH_NO_DLQ;
   }
   snprintf (message, sizeof message,
             "change event of %lld bytes is larger than oversize_threshold (%lld bytes): left "
             "out by the server (oversize = \"skip\"); its document is not kept",
             (long long) size, (long long) w->cfg.oversize_threshold);
   return dead_letter_unhandled (w, ev, "OversizeEvent", message, NULL);
}

/* What the DLQ entry records of the failure (f->epoch is set by the caller).
 * metadata: ctx:add_metadata's, converted; the caller owns it. */
static void
failure_of (fw_stream_worker_t *w, const decision_t *d, int attempts, int64_t first_ms,
            int64_t last_ms, const bson_t *raw, const bson_t *metadata, fw_dlq_failure_t *f)
{
   f->stream_name = w->cfg.name;
   f->error_type = d->type[0] ? d->type : NULL; /* NULL: parked behind its sequence */
   f->sequence_id = w->seq_index >= 0 ? w->seq_key : NULL;
   f->sequence_index = w->seq_index;
   f->error_message = d->message;
   f->stack_trace = d->traceback;
   f->attempts = attempts;
   f->first_attempt_ms = first_ms;
   f->last_attempt_ms = last_ms;
   f->created_ms = w->clock.now_ms (w->clock.ud);
   f->metadata = metadata;
   f->script_version = fw_lua_host_version (w->host);
   f->raw_event = raw;
}

/* Builds the DLQ entry into *entry, which the caller then owns (bson_destroy).
 * Building fails only when the system cannot give random bytes for the entry
 * id: wait and try again, holding the event meanwhile. False when a shutdown
 * came first (nothing to destroy then). */
static bool
build_entry (fw_stream_worker_t *w, const fw_event_t *ev, const fw_dlq_config_t *dlq,
             const fw_dlq_failure_t *f, const char *id, bson_t *entry)
{
   fw_error_t err;

   while (!fw_dlq_entry_build (entry, ev, dlq, f, &err)) {
      fw_log (FW_LOG_ERROR, w->cfg.name, "cannot build DLQ entry for event %s: %s", id,
              err.message);
      bson_destroy (entry);
      if (w->clock.wait_ms (w->clock.ud, 1000)) {
         return false;
      }
   }
   return true;
}

/* Saves the entry, trying again with the restart backoff (and opening the
 * store again if it is not open) until the store acknowledges it. False when
 * a shutdown came first. The caller still owns entry. */
static bool
save_entry (fw_stream_worker_t *w, const bson_t *entry, const char *id)
{
   fw_error_t err;

   for (int tries = 1;; tries++) {
      if (w->dlq && w->dlq->save (w->dlq, entry, &err)) {
         return true;
      }
      if (!w->dlq) {
         snprintf (err.message, sizeof err.message, "DLQ store is not open");
      }
      int64_t delay = fw_backoff_delay_ms (&w->cfg.restart, tries, fw_backoff_random (&w->rng));
      fw_log (FW_LOG_ERROR, w->cfg.name,
              "DLQ insert for event %s failed (try %d): %s; the stream holds this event and "
              "tries again in %lld ms",
              id, tries, err.message, (long long) delay);
      if (w->clock.wait_ms (w->clock.ud, delay)) {
         return false;
      }
      if (!w->dlq && !fw_event_dispatch_open_dlq (w)) {
         return false;
      }
   }
}

/* The entry is stored: counts and logs it, as parked behind its sequence or
 * as dead-lettered (and the sequence it opens). */
static fw_dispatch_result_t
dead_lettered (fw_stream_worker_t *w, const fw_dlq_config_t *dlq, const fw_dlq_failure_t *f,
               const decision_t *d, int attempts, const char *id)
{
   if (w->metrics) {
      fw_stream_metrics_dlq_write (w->metrics);
   }
   if (!f->error_type) {
      w->stats.parked++;
      fw_log (FW_LOG_WARN, w->cfg.name,
              "event %s parked in %s behind DLQ sequence %.300s (index %lld): an earlier event "
              "of its key is dead-lettered",
              id, dlq->collection, w->seq_key, (long long) w->seq_index);
      return FW_DISPATCH_DONE;
   }
   w->stats.dead_lettered++;
   fw_log (FW_LOG_WARN, w->cfg.name, "event %s dead-lettered to %s%s after %d attempt(s): %s: %s",
           id, dlq->collection, w->cfg.dlq.enabled ? "" : " (the script's default DLQ)",
           attempts, d->type, d->message);
   if (f->sequence_id) {
      fw_log (FW_LOG_WARN, w->cfg.name,
              "DLQ sequence %.300s is open (index %lld): later events of its key are parked "
              "until a replay resolves it",
              f->sequence_id, (long long) f->sequence_index);
   }
   return FW_DISPATCH_DONE;
}

static fw_dispatch_result_t
dead_letter_raw (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempts,
                 int64_t first_ms, int64_t last_ms, const bson_t *raw)
{
   fw_dlq_failure_t f = {0};
   f.epoch = w->epoch; /* ha.mode = "leader": who wrote it */
   bson_t metadata, entry;
   char id[1024];
   const fw_dlq_config_t *dlq = dlq_config (w);
   bool ok;

   /* A stream using the default DLQ opens it on its first send_to_dlq. */
   if (!w->dlq && !fw_event_dispatch_open_dlq (w)) {
      return FW_DISPATCH_STOPPED;
   }

   metadata_to_bson (w, &metadata);
   failure_of (w, d, attempts, first_ms, last_ms, raw, &metadata, &f);
   log_id (ev, id, sizeof id);
   ok = build_entry (w, ev, dlq, &f, id, &entry);
   bson_destroy (&metadata);
   if (!ok) {
      return FW_DISPATCH_STOPPED;
   }

   ok = save_entry (w, &entry, id);
   bson_destroy (&entry);
   if (!ok) {
      return FW_DISPATCH_STOPPED;
   }
   return dead_lettered (w, dlq, &f, d, attempts, id);
}

/* ctx:send_to_dlq(reason) was called: dead-letter now, no retry. */
static void
dlq_requested (const fw_stream_worker_t *w, decision_t *d)
{
   d->action = ACT_DLQ;
   snprintf (d->type, sizeof d->type, "DlqRequested");
   snprintf (d->message, sizeof d->message, "%s", w->dispatch.dlq_reason);
   d->traceback[0] = '\0';
}

/* A replayed dead letter ends here instead of in a new DLQ entry: its
 * outcome goes back to the replay (dlq_replay.c), which updates the entry. */
static fw_dispatch_result_t
replayed (fw_stream_worker_t *w, fw_replayed_t result, const decision_t *d, int attempts)
{
   fw_replay_hook_t *h = w->replay;

   h->result = result;
   h->attempts = attempts;
   snprintf (h->error_type, sizeof h->error_type, "%s", d ? d->type : "");
   snprintf (h->error_message, sizeof h->error_message, "%s", d ? d->message : "");
   return FW_DISPATCH_DONE;
}

/* The event is finished with: counts its outcome (not for a replayed dead
 * letter, which is no change event). mono_ns: now on CLOCK_MONOTONIC, 0 to
 * read the wall clock instead. */
static fw_dispatch_result_t
finished (fw_stream_worker_t *w, fw_metrics_outcome_t outcome, int64_t mono_ns)
{
   if (w->metrics && !w->replay) {
      w->finished_ms = mono_ns ? wall_ms_at (w, mono_ns) : w->clock.now_ms (w->clock.ud);
      fw_stream_metrics_event_finished (w->metrics, outcome, w->finished_ms);
   }
   return FW_DISPATCH_DONE;
}

/* A sequenced DLQ: the event's sequence is open, so the event is stored
 * behind it (no error, attempts 0) instead of handled. */
static fw_dispatch_result_t
park (fw_stream_worker_t *w, const fw_event_t *ev)
{
   decision_t d;
   int64_t now = w->clock.now_ms (w->clock.ud);

   switch (fw_park_take (w, false)) {
   case FW_PARK_CLOSED:
      return FW_DISPATCH_NO_DLQ; /* not parked: the caller handles it */
   case FW_PARK_OVERFLOW:
      return FW_DISPATCH_FAILED;
   case FW_PARK_STOPPED:
      return FW_DISPATCH_STOPPED;
   default:
      break;
   }
   memset (&d, 0, sizeof d);
   if (dead_letter_raw (w, ev, &d, 0, now, now, NULL) == FW_DISPATCH_STOPPED) {
      return FW_DISPATCH_STOPPED;
   }
   fw_park_settle (w);
   return finished (w, FW_METRICS_OUTCOME_PARKED, 0);
}

/* Dead-letters ev after its attempts; on a sequenced DLQ it opens the
 * event's sequence, whose head the entry becomes. */
static fw_dispatch_result_t
dead_letter_head (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempts,
                  int64_t first_ms, int64_t last_ms)
{
   fw_lua_stop_t stop;
   char id[1024];

   if (fw_park_enabled (w) && w->cfg.dlq.enabled &&
       fw_park_key (w, ev, &stop) == FW_PARK_KEY_FAILED) {
      lua_State *L = fw_lua_host_state (w->host);
      const char *msg = lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING
                           ? lua_tostring (L, -1)
                           : "(no message)";
      log_id (ev, id, sizeof id);
      fw_log (FW_LOG_ERROR, w->cfg.name,
              "event %s: dlq.sequence_key failed (%s): its DLQ entry opens no sequence", id, msg);
      lua_settop (L, 0);
   } else if (fw_park_enabled (w) && w->seq_key) {
      switch (fw_park_take (w, true)) {
      case FW_PARK_OVERFLOW:
         return FW_DISPATCH_FAILED;
      case FW_PARK_STOPPED:
         return FW_DISPATCH_STOPPED;
      default:
         break;
      }
   }
   if (dead_letter (w, ev, d, attempts, first_ms, last_ms) == FW_DISPATCH_STOPPED) {
      return FW_DISPATCH_STOPPED;
   }
   fw_park_settle (w);
   return FW_DISPATCH_DONE;
}

/* The handler's attempts, on CLOCK_MONOTONIC: the first attempt's start, the
 * current one's, and (with metrics) the current one's end. */
typedef struct {
   int64_t first_ns, start_ns, end_ns;
} attempt_times_t;

/* Whether the next attempt may run. False with *r set when the event ends
 * here; *L and *ref follow a reload. */
static bool
attempt_may_start (fw_stream_worker_t *w, const fw_event_t *ev, lua_State **L, int *ref,
                   fw_dispatch_result_t *r)
{
   /* ha.mode = "leader": no handler call past the lease's deadline; the
    * event comes back to the next leader. */
   if (w->lease && !fw_lease_is_leader (w->lease, NULL)) {
      *r = FW_DISPATCH_STOPPED;
      return false;
   }
   /* A reload takes effect here: this attempt runs the new code, and the
    * attempt count carries on. */
   if (w->at_attempt_boundary && w->at_attempt_boundary (w)) {
      *L = fw_lua_host_state (w->host);
      if ((*ref = fw_stream_handler_for (w, ev->op)) == LUA_NOREF) {
         /* the new script has no handler for it */
         *r = finished (w, FW_METRICS_OUTCOME_NONE, 0);
         return false;
      }
   }
   return true;
}

/* A sequenced DLQ with open sequences: the event's key, and the event parked
 * when its sequence is open. A key function that fails fails the attempt,
 * under the policy (*key_failed, *stop), and is asked again on the next one.
 * True with *r set when the event ends here. */
static bool
park_if_open (fw_stream_worker_t *w, const fw_event_t *ev, bool *check_park, bool *key_failed,
              fw_lua_stop_t *stop, fw_dispatch_result_t *r)
{
   fw_park_key_t k = fw_park_key (w, ev, stop);

   *key_failed = k == FW_PARK_KEY_FAILED;
   if (k != FW_PARK_KEY_FAILED) {
      *check_park = false;
   }
   if (k == FW_PARK_KEY_OK && fw_park_is_open (w)) {
      *r = park (w, ev);
      if (*r != FW_DISPATCH_NO_DLQ) {
         return true;
      }
   }
   return false;
}

/* One call of the handler (none when the key function failed: the attempt
 * failed), timed into *t. Returns whether it returned; if not, its failure
 * table is on top of the stack. */
static bool
call_handler (fw_stream_worker_t *w, lua_State *L, int ref, int attempt, bool key_failed,
              fw_lua_stop_t *stop, attempt_times_t *t)
{
   bool ok;

   if (w->metrics) {
      fw_stream_metrics_set_attempt (w->metrics, attempt);
   }
   /* The attempt's start is the clock read the host makes for its
    * deadline (or ours, without one); with metrics, one read after it
    * times the handler. */
   t->start_ns = w->cfg.timeout_ms > 0 ? 0 : fw_mono_ns ();
   if (key_failed) {
      ok = false;
   } else {
      lua_rawgeti (L, LUA_REGISTRYINDEX, ref);
      ok = fw_lua_host_call_with (w->host, 0, fw_event_ctx_push, &w->dispatch, 0,
                                  w->cfg.timeout_ms, stop);
   }
   if (!t->start_ns) {
      t->start_ns = fw_lua_host_call_started_ns (w->host);
   }
   if (attempt == 1) {
      t->first_ns = t->start_ns;
   }
   if (w->metrics) {
      t->end_ns = fw_mono_ns ();
      fw_stream_metrics_handler_call (w->metrics, t->end_ns - t->start_ns);
   }
   /* A cursor a handler left open holds a server cursor and this
    * thread's client: close it now, not when the collector runs. */
   fw_mongo_lua_close_cursors (L);
   return ok;
}

/* The handler returned and asked for nothing else. end_ns: its end on
 * CLOCK_MONOTONIC, 0 without metrics. */
static fw_dispatch_result_t
handled (fw_stream_worker_t *w, int attempt, int64_t end_ns)
{
   w->stats.handled++;
   if (w->replay) {
      return replayed (w, FW_REPLAYED_OK, NULL, attempt);
   }
   return finished (w, FW_METRICS_OUTCOME_OK, end_ns);
}

/* What to do after an attempt that failed (ok false: its failure table is on
 * top of the stack, and taken off) or called ctx:send_to_dlq. */
static void
attempt_decision (fw_stream_worker_t *w, lua_State *L, bool ok, int attempt, fw_lua_stop_t stop,
                  decision_t *d)
{
   if (w->dispatch.dlq_requested) {
      if (!ok) {
         lua_pop (L, 1);
      }
      dlq_requested (w, d);
      return;
   }
   w->stats.handler_errors++;
   decide (w, attempt, stop, d);
   if (w->metrics) {
      fw_stream_metrics_handler_error (w->metrics, d->type);
   }
   if (w->dispatch.dlq_requested) {
      /* on_error called ctx:send_to_dlq: that dead-letters the event
       * now, whatever on_error returned. */
      dlq_requested (w, d);
   }
}

/* flowwarden test's harness sees every failed attempt and its decision. */
static void
report_attempt_failed (fw_stream_worker_t *w, int attempt, const decision_t *d)
{
   if (w->hooks) {
      static const char *const names[] = {"retry", "dlq", "skip", "drop"};
      w->hooks->attempt_failed (w->hooks->ud, attempt, d->type, d->message, d->traceback,
                                (unsigned) d->action < 4 ? names[d->action] : "other");
   }
}

/* A replayed dead letter ends after a decision other than retry, or after
 * its first attempt when the replay allows no retry. True with *r set when
 * it ends here. */
static bool
replay_ends (fw_stream_worker_t *w, const decision_t *d, int attempt, fw_dispatch_result_t *r)
{
   if (w->replay && d->action != ACT_RETRY) {
      *r = replayed (w, d->action == ACT_SKIP ? FW_REPLAYED_SKIPPED : FW_REPLAYED_FAILED, d,
                     attempt);
      return true;
   }
   if (w->replay && w->replay->no_retry) {
      *r = replayed (w, FW_REPLAYED_FAILED, d, attempt);
      return true;
   }
   return false;
}

/* The decision is retry: waits out the backoff. False when a shutdown came
 * first. */
static bool
retry_wait (fw_stream_worker_t *w, int attempt, const decision_t *d, const char *id)
{
   int64_t delay = fw_backoff_delay_ms (&w->cfg.retry, attempt, fw_backoff_random (&w->rng));

   fw_log (FW_LOG_WARN, w->cfg.name, "event %s attempt %d failed: %s: %s; retrying in %lld ms",
           id, attempt, d->type, d->message, (long long) delay);
   w->stats.retries++;
   if (w->metrics) {
      fw_stream_metrics_retry (w->metrics);
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_RETRYING, NULL);
   }
   if (w->clock.wait_ms (w->clock.ud, delay)) {
      return false;
   }
   if (w->metrics) {
      fw_stream_metrics_set_state (w->metrics, FW_STREAM_RUNNING, NULL);
   }
   if (w->replay && w->replay->before_retry) {
      w->replay->before_retry (w->replay);
   }
   return true;
}

/* The decision is dlq: the event goes to the DLQ, or is lost when the stream
 * has none to take it. */
static fw_dispatch_result_t
dead_letter_after (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempt,
                   const attempt_times_t *t, const char *id)
{
   fw_dispatch_result_t r;

   if (!w->cfg.dlq.enabled && !(w->dispatch.dlq_requested && w->cfg.dlq_fallback.enabled)) {
      w->stats.lost++;
      fw_log (FW_LOG_ERROR, w->cfg.name,
              "event %s LOST: on_error asked for the DLQ but the stream has none: %s: %s", id,
              d->type, d->message);
      return finished (w, FW_METRICS_OUTCOME_LOST, 0);
   }
   r = dead_letter_head (w, ev, d, attempt, wall_ms_at (w, t->first_ns),
                         wall_ms_at (w, t->start_ns));
   if (r != FW_DISPATCH_DONE) {
      return r;
   }
   return finished (w, FW_METRICS_OUTCOME_DLQ, 0);
}

/* The event's end under a decision other than retry: dead-lettered, skipped
 * or lost. */
static fw_dispatch_result_t
decided_end (fw_stream_worker_t *w, const fw_event_t *ev, const decision_t *d, int attempt,
             const attempt_times_t *t, const char *id)
{
   switch (d->action) {
   case ACT_DLQ:
      return dead_letter_after (w, ev, d, attempt, t, id);
   case ACT_SKIP:
      w->stats.skipped++;
      fw_log (FW_LOG_INFO, w->cfg.name, "event %s skipped by on_error after attempt %d: %s: %s",
              id, attempt, d->type, d->message);
      return finished (w, FW_METRICS_OUTCOME_SKIPPED, 0);
   case ACT_DROP:
   default:
      w->stats.lost++;
      fw_log (FW_LOG_ERROR, w->cfg.name,
              "event %s LOST after %d attempt(s) (no dead-letter queue): %s: %s", id, attempt,
              d->type, d->message);
      return finished (w, FW_METRICS_OUTCOME_LOST, 0);
   }
}

/* After an attempt that failed or called ctx:send_to_dlq: decides, and ends
 * the event or waits out the retry backoff. True to try again, false with *r
 * set when the event ends here. */
static bool
after_failure (fw_stream_worker_t *w, const fw_event_t *ev, lua_State *L, bool ok, int attempt,
               fw_lua_stop_t stop, const attempt_times_t *t, fw_dispatch_result_t *r)
{
   decision_t d;
   char id[1024];

   attempt_decision (w, L, ok, attempt, stop, &d);
   log_id (ev, id, sizeof id);
   report_attempt_failed (w, attempt, &d);
   if (replay_ends (w, &d, attempt, r)) {
      return false;
   }
   if (d.action != ACT_RETRY) {
      *r = decided_end (w, ev, &d, attempt, t, id);
      return false;
   }
   if (!retry_wait (w, attempt, &d, id)) {
      *r = FW_DISPATCH_STOPPED;
      return false;
   }
   return true;
}

static fw_dispatch_result_t dispatch (fw_stream_worker_t *w, const fw_event_t *ev);

fw_dispatch_result_t
fw_event_dispatch (fw_stream_worker_t *w, const fw_event_t *ev)
{
   fw_dispatch_result_t r = dispatch (w, ev);
   fw_park_end (w);
   return r;
}

static fw_dispatch_result_t
dispatch (fw_stream_worker_t *w, const fw_event_t *ev)
{
   lua_State *L = fw_lua_host_state (w->host);
   int ref;
   attempt_times_t t = {0, 0, 0};
   /* A sequenced DLQ with open sequences: is this event's one of them? */
   bool check_park = fw_park_check_needed (w, ev);

   ref = fw_stream_handler_for (w, ev->op);
   if (ref == LUA_NOREF) {
      return finished (w, FW_METRICS_OUTCOME_NONE, 0); /* no handler for this operation type */
   }
   fw_event_ctx_begin (L, &w->dispatch, ev);

   for (int attempt = 1;; attempt++) {
      fw_lua_stop_t stop;
      bool ok, key_failed = false;
      fw_dispatch_result_t r;

      if (!attempt_may_start (w, ev, &L, &ref, &r)) {
         return r;
      }
      w->dispatch.attempt = attempt;
      if (check_park && park_if_open (w, ev, &check_park, &key_failed, &stop, &r)) {
         return r;
      }
      ok = call_handler (w, L, ref, attempt, key_failed, &stop, &t);
      if (ok && !w->dispatch.dlq_requested) {
         return handled (w, attempt, t.end_ns);
      }
      if (!after_failure (w, ev, L, ok, attempt, stop, &t, &r)) {
         return r;
      }
   }
}

bool
fw_event_dispatch_open_dlq (fw_stream_worker_t *w)
{
   fw_error_t err;
   const fw_dlq_config_t *dlq = dlq_config (w);

   if (dlq->memory) {
      /* Seed 004's in-memory variant: nothing to connect to; a sequenced
       * DLQ's sequences are kept beside its entries. */
      w->dlq = fw_dlq_store_memory_new (&err);
      w->park_ops = &fw_park_memory_ops;
      if (!w->dlq) {
         fw_log (FW_LOG_ERROR, w->cfg.name, "%s", err.message);
      }
      return w->dlq != NULL;
   }
   w->park_ops = &fw_park_mongo_ops;
   for (int tries = 1;; tries++) {
      /* A DLQ on a named connection (seed 002's roadmap: mongoTemplateRef). */
      mongoc_client_t *client = dlq->connection
                                   ? fw_connection_clients_get (w->clients, dlq->connection, &err)
                                   : w->client;
      w->dlq = client ? fw_dlq_store_mongo_new (client,
                                                dlq->database ? dlq->database : w->cfg.database,
                                                dlq->collection, dlq->write_concern_tag,
                                                dlq->write_concern_w, &err)
                      : NULL;
      if (w->dlq) {
         return true;
      }
      int64_t delay = fw_backoff_delay_ms (&w->cfg.restart, tries, fw_backoff_random (&w->rng));
      fw_log (FW_LOG_ERROR, w->cfg.name, "%s; retrying in %lld ms", err.message,
              (long long) delay);
      if (w->clock.wait_ms (w->clock.ud, delay)) {
         return false;
      }
   }
}
