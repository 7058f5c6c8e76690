/*
 * state_rebuild.c - a Lua state that stays full is built afresh (issue 25).
 *
 * A handler that keeps something in a global on every event fills its state
 * up to memory_limit; from then on every event fails before its handler can
 * do anything. So after a handler call that leaves the state over 90% of its
 * limit (one comparison per call), the event's converted values are let go
 * and the collector runs; a state still over the mark is rebuilt before the
 * next attempt: the script loaded again through the stream's loader (the
 * same version), the program switched as a reload switches it, fw.state
 * kept. A call that failed in the full state is tried again on the new one
 * (the attempt count carries on). A state that fills up again within
 * FW_STATE_REFILL_EVENTS events of its rebuild stops the stream rather than
 * rebuild in a loop.
 */
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/log.h"
#include "runtime/dispatch/state_rebuild.h"

void
fw_dispatcher_set_loader (fw_dispatcher_t *d, fw_dispatcher_loader_t load, void *ud)
{
   fw_dispatcher_rebuild (d)->load = load;
   fw_dispatcher_rebuild (d)->ud = ud;
}

/* The state filled up again within FW_STATE_REFILL_EVENTS events of its
 * rebuild: says why the stream stops. */
static void
refilled (fw_dispatcher_t *d, uint64_t events)
{
   fw_state_rebuild_t *r = fw_dispatcher_rebuild (d);

   r->refilled = true;
   fw_dispatcher_set_failure (
      d,
      "the Lua state of stream \"%s\" filled its memory_limit again (%zu of %zu bytes "
      "after a full collection) within %llu event(s) of being rebuilt (at most %d "
      "allowed): the handler keeps what it is given (a global, a cache without bound) "
      "faster than a rebuild can help; keep less in globals (fw.state is bounded), or "
      "raise memory_limit; the checkpoint stays before this event",
      fw_dispatcher_config (d)->name, r->held, fw_dispatcher_config (d)->memory_limit,
      (unsigned long long) events, FW_STATE_REFILL_EVENTS);
}

/* flowwarden test's recorder sees the attempt that failed in the full state. */
static void
report_attempt (fw_dispatcher_t *d, int attempt)
{
   lua_State *L = fw_lua_host_state (fw_dispatcher_host (d));
   int top = lua_gettop (L);
   const char *msg = NULL;

   if (!fw_dispatcher_recording (d)) {
      return;
   }
   if (lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING) {
      msg = lua_tostring (L, -1); /* kept alive by the failure table below it */
   }
   fw_dispatcher_attempt_failed (d, attempt, "MemoryError", msg ? msg : "not enough memory", "",
                                 "rebuild");
   lua_settop (L, top);
}

fw_state_check_t
fw_state_check (fw_dispatcher_t *d, bool ok, int attempt)
{
   lua_State *L = fw_lua_host_state (fw_dispatcher_host (d));
   fw_state_rebuild_t *r = fw_dispatcher_rebuild (d);
   fw_dispatch_t *view = fw_dispatcher_view (d);
   uint64_t events;

   /* What the ctx converted for this event is kept for its next attempt;
    * what is left after letting go of it is what the state holds. */
   fw_event_ctx_drop_values (L, view);
   lua_gc (L, LUA_GCCOLLECT);
   if (!fw_state_over_mark (d) || r->pending) {
      return FW_STATE_OK;
   }
   r->held = fw_lua_host_memory_used (fw_dispatcher_host (d));
   r->pending = true;
   events = view->generation - r->rebuilt_at + 1;
   if (r->rebuilt && events <= FW_STATE_REFILL_EVENTS) {
      refilled (d, events);
   }
   if (ok) {
      return FW_STATE_OK; /* the event is done: the next attempt, of another, sees to it */
   }
   /* The attempt failed all the same: counted as a MemoryError. */
   fw_dispatcher_count_handler_error (d, "MemoryError");
   report_attempt (d, attempt);
   lua_pop (L, 1); /* the failure: the state's, not the event's */
   view->dlq_requested = false;
   view->dlq_reason[0] = '\0';
   return FW_STATE_RETRY;
}

/* The script loaded afresh into a program of its own (in a dispatcher made
 * for the switch), or NULL with why. */
static fw_dispatcher_t *
load_fresh (fw_dispatcher_t *d, fw_error_t *error)
{
   const fw_state_rebuild_t *r = fw_dispatcher_rebuild (d);
   const char *version = fw_lua_host_version (fw_dispatcher_host (d));
   fw_lua_host_t *host = r->load (r->ud, error);

   if (host && strcmp (fw_lua_host_version (host), version) != 0) {
      /* A changed script runs only when the operator reloads it. */
      fw_error_set (error, FW_ERROR_INVALID,
                    "the script on disk is version %s now, not %s (reload to run it)",
                    fw_lua_host_version (host), version);
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host ? fw_dispatcher_new (host, r->index, NULL, fw_dispatcher_shutdown (d), error) : NULL;
}

bool
fw_state_rebuild (fw_dispatcher_t *d)
{
   const fw_stream_config_t *cfg = fw_dispatcher_config (d);
   fw_state_rebuild_t *r = fw_dispatcher_rebuild (d);
   fw_stream_metrics_t *metrics;
   fw_dispatcher_t *fresh;
   fw_error_t err;
   size_t held = r->held;

   if (r->refilled) {
      return false;
   }
   if (!(fresh = load_fresh (d, &err))) {
      fw_dispatcher_set_failure (
         d,
         "the Lua state of stream \"%s\" is full (%zu of %zu bytes after a full "
         "collection) and cannot be rebuilt: %.800s",
         cfg->name, held, cfg->memory_limit, err.message);
      return false;
   }
   fw_dispatcher_take_program (d, fresh); /* fw.state stays d's */
   fw_dispatcher_destroy (fresh);         /* the full state, and all it held, goes */
   r->pending = false;
   r->rebuilt = true;
   r->rebuilt_at = fw_dispatcher_view (d)->generation;
   if ((metrics = fw_dispatcher_metrics (d))) {
      fw_stream_metrics_state_rebuilt (metrics, FW_METRICS_REBUILD_MEMORY);
      fw_stream_metrics_set_lua_memory (metrics, fw_lua_host_memory_used (fw_dispatcher_host (d)));
   }
   fw_log (FW_LOG_WARN, cfg->name,
           "Lua state rebuilt from script version %s: it held %zu of its %zu bytes "
           "(memory_limit) after a full collection, the new one %zu; globals start afresh, "
           "fw.state is kept",
           fw_lua_host_version (fw_dispatcher_host (d)), held, cfg->memory_limit,
           fw_lua_host_memory_used (fw_dispatcher_host (d)));
   return true;
}
