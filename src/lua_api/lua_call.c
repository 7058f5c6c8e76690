/*
 * lua_call.c - the running call's IO gate and budget, and typed errors
 * raised from C (see lua_call.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "lua_api/lua_call.h"

static const char call_key = 'c';       /* registry key: its address */
static const char io_timeout_key = 't'; /* the error fw_lua_call_io_timed_out announced */

void
fw_lua_call_attach (lua_State *L, fw_lua_call_t *call)
{
   lua_pushlightuserdata (L, call);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &call_key);
}

fw_lua_call_t *
fw_lua_call_get (lua_State *L)
{
   fw_lua_call_t *call;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &call_key);
   call = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return call;
}

int64_t
fw_lua_call_budget_ms (lua_State *L, const char *what)
{
   fw_lua_call_t *call = fw_lua_call_get (L);
   int64_t deadline, left;

   if (!call || !call->in_call) {
      luaL_error (L, "%s is available inside handlers only", what);
   }
   deadline = __atomic_load_n (&call->deadline_ns, __ATOMIC_ACQUIRE);
   if (!deadline) {
      return -1;
   }
   left = deadline - fw_mono_ns ();
   if (left <= 0) {
      return 0;
   }
   return left < 1000000 ? 1 : left / 1000000;
}

int64_t
fw_lua_call_io_margin_ms (int64_t budget_ms)
{
   int64_t quarter = budget_ms / 4;
   return quarter < 10 ? quarter : 10;
}

void
fw_lua_call_io_timed_out (lua_State *L)
{
   fw_lua_call_t *call = fw_lua_call_get (L);

   if (call && call->in_call) {
      call->io_timeout = 1; /* 2 once fw_lua_raise_typed has kept the error */
   }
}

bool
fw_lua_call_push_io_timeout (lua_State *L)
{
   fw_lua_call_t *call = fw_lua_call_get (L);

   if (!call || call->io_timeout != 2 || !lua_checkstack (L, 1)) {
      return false;
   }
   lua_rawgetp (L, LUA_REGISTRYINDEX, &io_timeout_key);
   return true;
}

void
fw_lua_call_clear_io_timeout (lua_State *L)
{
   fw_lua_call_t *call = fw_lua_call_get (L);

   if (call && call->io_timeout) {
      call->io_timeout = 0;
      lua_pushnil (L);
      lua_rawsetp (L, LUA_REGISTRYINDEX, &io_timeout_key);
   }
}

/* Keeps the error on top of the stack when an IO timeout announced it. */
static void
keep_io_timeout (lua_State *L)
{
   fw_lua_call_t *call = fw_lua_call_get (L);

   if (call && call->io_timeout == 1) {
      lua_pushvalue (L, -1);
      lua_rawsetp (L, LUA_REGISTRYINDEX, &io_timeout_key);
      call->io_timeout = 2;
   }
}

int
fw_lua_raise_typed (lua_State *L, const char *type, int fields_idx, const char *fmt, ...)
{
   va_list ap;
   char msg[1024];

   va_start (ap, fmt);
   vsnprintf (msg, sizeof msg, fmt, ap);
   va_end (ap);
   if (fields_idx) {
      fields_idx = lua_absindex (L, fields_idx);
   }
   lua_getfield (L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
   if (lua_getfield (L, -1, "flowwarden.errors") != LUA_TTABLE) {
      lua_pop (L, 2);
      fw_lua_call_clear_io_timeout (L); /* no typed error to keep */
      return luaL_error (L, "%s: %s", type, msg);
   }
   lua_getfield (L, -1, "new");
   lua_pushstring (L, type);
   lua_pushstring (L, msg);
   if (fields_idx) {
      lua_pushvalue (L, fields_idx);
   } else {
      lua_newtable (L);
   }
   lua_call (L, 3, 1);
   /* errors.new took its `where` from this C function, which has none: use
    * the script line that called it. */
   luaL_where (L, 1);
   if (lua_rawlen (L, -1) > 2) {
      lua_pushlstring (L, lua_tostring (L, -1), lua_rawlen (L, -1) - 2); /* drop ": " */
      lua_setfield (L, -3, "where");
   }
   lua_pop (L, 1);
   keep_io_timeout (L);
   return lua_error (L);
}

bool
fw_lua_call_protected (lua_State *L, lua_CFunction fn, void *ud, char *why, size_t len)
{
   int top = lua_gettop (L);
   bool ok;

   lua_pushcfunction (L, fn);
   lua_pushlightuserdata (L, ud);
   ok = lua_pcall (L, 1, 0, 0) == LUA_OK;
   if (!ok) {
      if (lua_istable (L, -1)) {
         lua_getfield (L, -1, "message");
      }
      snprintf (why, len, "%s", lua_isstring (L, -1) ? lua_tostring (L, -1) : "failed");
   }
   lua_settop (L, top);
   return ok;
}

void *
fw_lua_named_userdata (lua_State *L, const void *key, const char *name, size_t size, const char *mt)
{
   void *u;

   if (lua_rawgetp (L, LUA_REGISTRYINDEX, key) != LUA_TTABLE) {
      lua_pop (L, 1);
      lua_newtable (L);
      lua_pushvalue (L, -1);
      lua_rawsetp (L, LUA_REGISTRYINDEX, key);
   }
   if (lua_getfield (L, -1, name) == LUA_TUSERDATA) {
      return lua_touserdata (L, -1);
   }
   lua_pop (L, 1);
   u = lua_newuserdatauv (L, size, 0);
   memset (u, 0, size);
   luaL_setmetatable (L, mt);
   lua_pushvalue (L, -1);
   lua_setfield (L, -3, name);
   return u;
}
