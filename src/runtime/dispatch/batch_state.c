/*
 * batch_state.c - a dispatcher's on_batch state (batch-private.h): the ctx
 * items a batch's events use, kept for the dispatcher's life, and on_batch
 * called with a batch of one for the per-event path (event_dispatch.c).
 * batch.c runs whole batches over the same state.
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "lua_api/batch_lua.h"
#include "runtime/dispatch/batch-private.h"

void
fw_batch_state_free (fw_batch_state_t *s)
{
   if (!s) {
      return;
   }
   for (size_t i = 0; i < s->cap; i++) {
      free (s->items[i]);
   }
   free (s->items);
   free (s);
}

/* d's batch state with room for n events; NULL when out of memory. Items
 * are never moved: a stale ctx may still point at one. */
fw_batch_state_t *
fw_batch_state_for (fw_dispatcher_t *d, size_t n)
{
   fw_batch_state_t *s = d->batch;
   fw_dispatch_t **items;

   if (!s) {
      if (!(s = calloc (1, sizeof *s))) {
         return NULL;
      }
      s->view.errors_ref = LUA_NOREF;
      d->batch = s;
   }
   s->d = d;
   if (n <= s->cap) {
      return s;
   }
   if (!(items = realloc (s->items, n * sizeof *items))) {
      return NULL;
   }
   s->items = items;
   for (; s->cap < n; s->cap++) {
      if (!(items[s->cap] = calloc (1, sizeof **items))) {
         return NULL;
      }
      items[s->cap]->cache_ref = LUA_NOREF;
   }
   return s;
}

void
fw_batch_state_forget (fw_batch_state_t *s)
{
   for (size_t i = 0; s && i < s->cap; i++) {
      s->items[i]->cache_ref = LUA_NOREF;
      s->items[i]->cache_slots = 0;
   }
}

/* Protected: the failure table { value = batch:fail's error (view non-NULL)
 * or the message at 2, traceback = "" }. */
static int
pfailure (lua_State *L)
{
   const fw_batch_view_t *view = lua_touserdata (L, 1);
   lua_createtable (L, 0, 2);
   if (view) {
      fw_batch_lua_push_error (L, view, 1);
   } else {
      lua_pushvalue (L, 2);
   }
   lua_setfield (L, -2, "value");
   lua_pushliteral (L, "");
   lua_setfield (L, -2, "traceback");
   return 1;
}

bool
fw_batch_call_one (fw_dispatcher_t *d, fw_lua_stop_t *stop)
{
   lua_State *L = fw_lua_host_state (d->prog.host);
   fw_batch_state_t *s = fw_batch_state_for (d, 0);
   bool ok;

   if (!s) {
      lua_pop (L, 1); /* the handler */
      lua_pushcfunction (L, pfailure);
      lua_pushnil (L);
      lua_pushliteral (L, "not enough memory for the batch");
      lua_pcall (L, 2, 1, 0); /* a memory error's message stands in for the table */
      *stop = FW_LUA_STOP_MEMORY;
      return false;
   }
   s->one = &d->dispatch;
   s->one_marked = false;
   s->view = (fw_batch_view_t){&s->one, 1, &s->one_marked, LUA_NOREF, s->view.generation};
   ok = fw_lua_host_call_with (d->prog.host, 0, fw_batch_lua_push, &s->view, 0,
                               d->prog.cfg.timeout_ms, stop);
   if (ok && s->one_marked) {
      lua_pushcfunction (L, pfailure);
      lua_pushlightuserdata (L, &s->view);
      lua_pcall (L, 1, 1, 0); /* a memory error's message stands in for the table */
      ok = false;
   }
   fw_batch_lua_end (L, &s->view);
   return ok;
}
