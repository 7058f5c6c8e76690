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
#include "runtime/dispatch/dispatcher-private.h"

void
fw_dispatcher_set_loader (fw_dispatcher_t *d, fw_dispatcher_loader_t load, void *ud)
{
   d->rebuild.load = load;
   d->rebuild.ud = ud;
}

bool
fw_state_over_mark (const fw_dispatcher_t *d)
{
   return fw_state_past_mark (d, fw_lua_host_memory_used (d->prog.host));
}

/* The state filled up again within FW_STATE_REFILL_EVENTS events of its
 * rebuild: says why the stream stops. */
static void
refilled (fw_dispatcher_t *d, uint64_t events)
{
   d->rebuild.refilled = true;
   snprintf (d->out.failure, sizeof d->out.failure,
             "the Lua state of stream \"%s\" filled its memory_limit again (%zu of %zu bytes "
             "after a full collection) within %llu event(s) of being rebuilt (at most %d "
             "allowed): the handler keeps what it is given (a global, a cache without bound) "
             "faster than a rebuild can help; keep less in globals (fw.state is bounded), or "
             "raise memory_limit; the checkpoint stays before this event",
             d->prog.cfg.name, d->rebuild.held, d->prog.cfg.memory_limit,
             (unsigned long long) events, FW_STATE_REFILL_EVENTS);
}

/* flowwarden test's recorder sees the attempt that failed in the full state. */
static void
report_attempt (fw_dispatcher_t *d, int attempt)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   int top = lua_gettop (L);
   const char *msg = NULL;

   if (!d->hooks) {
      return;
   }
   if (lua_istable (L, -1) && lua_getfield (L, -1, "value") == LUA_TSTRING) {
      msg = lua_tostring (L, -1); /* kept alive by the failure table below it */
   }
   d->hooks->attempt_failed (d->hooks->ud, attempt, "MemoryError", msg ? msg : "not enough memory",
                             "", "rebuild");
   lua_settop (L, top);
}

fw_state_check_t
fw_state_check (fw_dispatcher_t *d, bool ok, int attempt)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   uint64_t events;

   /* What the ctx converted for this event is kept for its next attempt;
    * what is left after letting go of it is what the state holds. */
   fw_event_ctx_drop_values (L, &d->dispatch);
   lua_gc (L, LUA_GCCOLLECT);
   if (!fw_state_over_mark (d) || d->rebuild.pending) {
      return FW_STATE_OK;
   }
   d->rebuild.held = fw_lua_host_memory_used (d->prog.host);
   d->rebuild.pending = true;
   events = d->dispatch.generation - d->rebuild.rebuilt_at + 1;
   if (d->rebuild.rebuilt && events <= FW_STATE_REFILL_EVENTS) {
      refilled (d, events);
   }
   if (ok) {
      return FW_STATE_OK; /* the event is done: the next attempt, of another, sees to it */
   }
   /* The attempt failed all the same: counted as a MemoryError. */
   d->stats.handler_errors++;
   if (d->metrics) {
      fw_stream_metrics_handler_error (d->metrics, "MemoryError");
   }
   report_attempt (d, attempt);
   lua_pop (L, 1); /* the failure: the state's, not the event's */
   d->dispatch.dlq_requested = false;
   d->dispatch.dlq_reason[0] = '\0';
   return FW_STATE_RETRY;
}

/* The script loaded afresh into a program of its own (in a dispatcher made
 * for the switch), or NULL with why. */
static fw_dispatcher_t *
load_fresh (fw_dispatcher_t *d, fw_error_t *error)
{
   const char *version = fw_lua_host_version (d->prog.host);
   fw_lua_host_t *host = d->rebuild.load (d->rebuild.ud, error);

   if (host && strcmp (fw_lua_host_version (host), version) != 0) {
      /* A changed script runs only when the operator reloads it. */
      fw_error_set (error, FW_ERROR_INVALID,
                    "the script on disk is version %s now, not %s (reload to run it)",
                    fw_lua_host_version (host), version);
      fw_lua_host_destroy (host);
      return NULL;
   }
   return host ? fw_dispatcher_new (host, d->rebuild.index, NULL, d->shutdown, error) : NULL;
}

bool
fw_state_rebuild (fw_dispatcher_t *d)
{
   fw_dispatcher_t *fresh;
   fw_error_t err;
   size_t held = d->rebuild.held;

   if (d->rebuild.refilled) {
      return false;
   }
   if (!(fresh = load_fresh (d, &err))) {
      snprintf (d->out.failure, sizeof d->out.failure,
                "the Lua state of stream \"%s\" is full (%zu of %zu bytes after a full "
                "collection) and cannot be rebuilt: %.800s",
                d->prog.cfg.name, held, d->prog.cfg.memory_limit, err.message);
      return false;
   }
   fw_dispatcher_take_program (d, fresh); /* fw.state stays d's */
   fw_dispatcher_destroy (fresh);         /* the full state, and all it held, goes */
   d->rebuild.pending = false;
   d->rebuild.rebuilt = true;
   d->rebuild.rebuilt_at = d->dispatch.generation;
   if (d->metrics) {
      fw_stream_metrics_state_rebuilt (d->metrics, FW_METRICS_REBUILD_MEMORY);
      fw_stream_metrics_set_lua_memory (d->metrics, fw_lua_host_memory_used (d->prog.host));
   }
   fw_log (FW_LOG_WARN, d->prog.cfg.name,
           "Lua state rebuilt from script version %s: it held %zu of its %zu bytes "
           "(memory_limit) after a full collection, the new one %zu; globals start afresh, "
           "fw.state is kept",
           fw_lua_host_version (d->prog.host), held, d->prog.cfg.memory_limit,
           fw_lua_host_memory_used (d->prog.host));
   return true;
}
