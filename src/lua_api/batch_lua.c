/*
 * batch_lua.c - the batch object of on_batch (batch_lua.h).
 */
#include <lauxlib.h>

#include "lua_api/batch_lua.h"

/* The batch metatable, kept under this address in the registry. */
static const char batch_mt_key = 0;

typedef struct {
   fw_batch_view_t *view;
   uint64_t generation;
} batch_ud_t;

static fw_batch_view_t *
check_batch (lua_State *L)
{
   batch_ud_t *b = lua_touserdata (L, 1);
   bool ok = false;

   if (b && lua_getmetatable (L, 1)) {
      lua_rawgetp (L, LUA_REGISTRYINDEX, &batch_mt_key);
      ok = lua_rawequal (L, -1, -2);
      lua_pop (L, 2);
   }
   if (!ok) {
      luaL_typeerror (L, 1, "batch");
   }
   if (b->generation != b->view->generation) {
      luaL_error (L,
                  "batch used after its call returned (keep the values you need, not the "
                  "batch)");
   }
   return b->view;
}

/* Argument arg as an item number of view (1..#batch). */
static size_t
check_index (lua_State *L, const fw_batch_view_t *view, int arg, const char *fn)
{
   lua_Integer i = luaL_checkinteger (L, arg);
   if (i < 1 || (size_t) i > view->n) {
      luaL_error (L, "batch:%s: index %d is out of range (the batch has %d event%s)", fn, (int) i,
                  (int) view->n, view->n == 1 ? "" : "s");
   }
   return (size_t) i;
}

static int
batch_len (lua_State *L)
{
   lua_pushinteger (L, (lua_Integer) check_batch (L)->n);
   return 1;
}

static int
batch_get (lua_State *L)
{
   fw_batch_view_t *view = check_batch (L);
   size_t i = check_index (L, view, 2, "get");
   return fw_event_ctx_push (L, view->items[i - 1]);
}

/* The iterator of batch:events(): (batch, i) -> i + 1, ctx, until the end. */
static int
batch_next (lua_State *L)
{
   fw_batch_view_t *view = check_batch (L);
   lua_Integer i = luaL_checkinteger (L, 2) + 1;
   if (i < 1 || (size_t) i > view->n) {
      return 0;
   }
   lua_pushinteger (L, i);
   fw_event_ctx_push (L, view->items[i - 1]);
   return 2;
}

static int
batch_events (lua_State *L)
{
   check_batch (L);
   lua_pushcfunction (L, batch_next);
   lua_pushvalue (L, 1);
   lua_pushinteger (L, 0);
   return 3;
}

/* batch:fail(i, err): event i failed with err (a string, an fw.error, a
 * bulk write's error; nil: a default message); the others of the call
 * succeed when the handler returns. */
static int
batch_fail (lua_State *L)
{
   fw_batch_view_t *view = check_batch (L);
   size_t i = check_index (L, view, 2, "fail");

   lua_settop (L, 3);
   if (lua_isnil (L, 3)) {
      lua_pushliteral (L, "marked failed by batch:fail");
      lua_replace (L, 3);
   }
   if (view->errors_ref == LUA_NOREF) {
      lua_newtable (L);
      view->errors_ref = luaL_ref (L, LUA_REGISTRYINDEX);
   }
   lua_rawgeti (L, LUA_REGISTRYINDEX, view->errors_ref);
   lua_pushvalue (L, 3);
   lua_rawseti (L, -2, (lua_Integer) i);
   view->marked[i - 1] = true;
   return 0;
}

static int
batch_tostring (lua_State *L)
{
   batch_ud_t *b = lua_touserdata (L, 1);
   lua_pushfstring (L, "batch(%d events)",
                    b && b->generation == b->view->generation ? (int) b->view->n : 0);
   return 1;
}

static const luaL_Reg batch_methods[] = {{"events", batch_events},
                                         {"get", batch_get},
                                         {"fail", batch_fail},
                                         {NULL, NULL}};

void
fw_batch_lua_open (lua_State *L)
{
   lua_createtable (L, 0, 4);
   luaL_newlib (L, batch_methods);
   lua_setfield (L, -2, "__index");
   lua_pushcfunction (L, batch_len);
   lua_setfield (L, -2, "__len");
   lua_pushcfunction (L, batch_tostring);
   lua_setfield (L, -2, "__tostring");
   lua_pushliteral (L, "flowwarden.batch");
   lua_setfield (L, -2, "__metatable");
   lua_rawsetp (L, LUA_REGISTRYINDEX, &batch_mt_key);
}

int
fw_batch_lua_push (lua_State *L, void *view)
{
   fw_batch_view_t *v = view;
   batch_ud_t *b = lua_newuserdatauv (L, sizeof *b, 0);

   b->view = v;
   b->generation = v->generation;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &batch_mt_key);
   lua_setmetatable (L, -2);
   return 1;
}

void
fw_batch_lua_push_error (lua_State *L, const fw_batch_view_t *view, size_t i)
{
   if (view->errors_ref == LUA_NOREF) {
      lua_pushnil (L);
      return;
   }
   lua_rawgeti (L, LUA_REGISTRYINDEX, view->errors_ref);
   lua_rawgeti (L, -1, (lua_Integer) i);
   lua_remove (L, -2);
}

void
fw_batch_lua_end (lua_State *L, fw_batch_view_t *view)
{
   view->generation++;
   if (view->errors_ref != LUA_NOREF) {
      luaL_unref (L, LUA_REGISTRYINDEX, view->errors_ref);
      view->errors_ref = LUA_NOREF;
   }
}
