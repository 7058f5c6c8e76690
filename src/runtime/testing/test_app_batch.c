/*
 * test_app_batch.c - flowwarden.testing's app:deliver_batch(stream, events)
 * (issue 30): the events through the stream's dispatcher as one batch, with
 * on_batch's retries and bisection, on the virtual clock, and each event's
 * outcome.
 */
#include <lauxlib.h>

#include "runtime/dispatch/batch_dispatch.h"
#include "runtime/testing/test_app-private.h"

/* A batch's event by its outcome: "none" when not finished with or no
 * handler. */
static const char *
batch_outcome_name (fw_outcome_kind_t kind)
{
   switch (kind) {
   case FW_OUTCOME_HANDLED:
   case FW_OUTCOME_DEAD_LETTERED:
   case FW_OUTCOME_SKIPPED:
   case FW_OUTCOME_LOST:
   case FW_OUTCOME_PARKED:
      return fw_outcome_name (kind);
   default:
      return "none";
   }
}

/* The events of the array at idx, each as a capture userdata left on the
 * stack (it owns the BSON), parsed into evs (n entries). */
static void
events_arg (lua_State *L, int idx, size_t n, fw_event_t *evs, const fw_event_t **ptrs)
{
   fw_error_t err;

   luaL_checkstack (L, (int) n + 4, "deliver_batch: too many events");
   for (size_t i = 0; i < n; i++) {
      fw_test_capture_ud_t *e = fw_test__push_capture (L);
      lua_rawgeti (L, idx, (lua_Integer) i + 1);
      fw_test__event_arg (L, lua_gettop (L), "deliver_batch", &e->event);
      lua_pop (L, 1);
      if (!fw_event_parse (e->event, &evs[i], &err)) {
         luaL_error (L, "deliver_batch: events[%d] is not a change event: %s", (int) i + 1,
                     err.message);
      }
      ptrs[i] = &evs[i];
   }
}

/* core.deliver_batch(app, stream, events) -> { outcomes = { ... }, result,
 * errors, logs, delays } */
int
fw_test__deliver_batch (lua_State *L)
{
   fw_test_app_t *app = fw_test__check_app (L, 1);
   fw_dispatcher_t *d = fw_test__find_worker (L, app, "deliver_batch", luaL_checkstring (L, 2));
   size_t n;
   fw_test_capture_ud_t *u;
   fw_event_t *evs;
   const fw_event_t **ptrs;
   fw_outcome_kind_t *outcomes;
   fw_outcome_t r;

   luaL_checktype (L, 3, LUA_TTABLE);
   if ((n = lua_rawlen (L, 3)) == 0) {
      return luaL_error (L, "deliver_batch: events must be a non-empty array of events");
   }
   /* Owned by Lua: nothing leaks when a conversion raises. */
   evs = lua_newuserdatauv (L, n * sizeof *evs, 0);
   ptrs = lua_newuserdatauv (L, n * sizeof *ptrs, 0);
   outcomes = lua_newuserdatauv (L, n * sizeof *outcomes, 0);
   events_arg (L, 3, n, evs, ptrs);
   u = fw_test__push_capture (L);
   fw_dispatcher_view (d)->attempt = 0;
   fw_test__begin_capture (app, u);
   r = fw_batch_dispatch (d, ptrs, n, outcomes);
   fw_test__end_capture (app);

   lua_createtable (L, 0, 6);
   lua_createtable (L, (int) n, 0);
   for (size_t i = 0; i < n; i++) {
      lua_pushstring (L, batch_outcome_name (outcomes[i]));
      lua_rawseti (L, -2, (lua_Integer) i + 1);
   }
   lua_setfield (L, -2, "outcomes");
   lua_pushstring (L, fw_outcome_finished (r.kind) ? "done" : "stopped");
   lua_setfield (L, -2, "result");
   fw_test__push_capture_fields (L, lua_gettop (L), &u->c);
   return 1;
}
