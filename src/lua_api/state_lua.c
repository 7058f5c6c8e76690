/*
 * state_lua.c - fw.state.get/set/incr/delete/stats over the store the
 * stream worker attached (see state_lua.h).
 */
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "lua_api/lua_call.h"
#include "lua_api/state_lua.h"

static const char store_key = 's'; /* registry key: its address */

void
fw_lua_state_attach (lua_State *L, fw_state_store_t *store)
{
   lua_pushlightuserdata (L, store);
   lua_rawsetp (L, LUA_REGISTRYINDEX, &store_key);
}

fw_state_store_t *
fw_lua_state_get (lua_State *L)
{
   fw_state_store_t *store;
   lua_rawgetp (L, LUA_REGISTRYINDEX, &store_key);
   store = lua_touserdata (L, -1);
   lua_pop (L, 1);
   return store;
}

/* The gate every function passes: inside a handler, with a store. */
static fw_state_store_t *
check_store (lua_State *L)
{
   fw_state_store_t *store;

   (void) fw_lua_call_budget_ms (L, "fw.state");
   store = fw_lua_state_get (L);
   if (!store) {
      luaL_error (L, "fw.state: this Lua state has no state store (a host bug)");
   }
   return store;
}

static const char *
check_key (lua_State *L, const char *fn, size_t *len)
{
   if (lua_type (L, 1) != LUA_TSTRING) {
      luaL_error (L, "fw.state.%s: key must be a string, got %s", fn, luaL_typename (L, 1));
   }
   return lua_tolstring (L, 1, len);
}

/* Reads { ttl = "10m" } at idx (nil: none) as milliseconds; 0 = no ttl. */
static int64_t
check_ttl (lua_State *L, const char *fn, int idx)
{
   int64_t ms;

   if (lua_isnoneornil (L, idx)) {
      return 0;
   }
   if (!lua_istable (L, idx)) {
      luaL_error (L, "fw.state.%s: options must be a table such as { ttl = \"10m\" }, got %s", fn,
                  luaL_typename (L, idx));
   }
   lua_pushnil (L);
   while (lua_next (L, idx)) {
      lua_pop (L, 1);
      if (lua_type (L, -1) != LUA_TSTRING || strcmp (lua_tostring (L, -1), "ttl") != 0) {
         luaL_error (L, "fw.state.%s: unknown option %s (the only option is ttl)", fn,
                     lua_type (L, -1) == LUA_TSTRING ? lua_tostring (L, -1) : "(not a string)");
      }
   }
   if (lua_getfield (L, idx, "ttl") == LUA_TNIL) {
      lua_pop (L, 1);
      return 0;
   }
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden.duration");
   lua_call (L, 1, 1);
   lua_getfield (L, -1, "parse");
   lua_pushvalue (L, -3);
   lua_call (L, 1, 2);
   if (lua_isnil (L, -2)) {
      luaL_error (L, "fw.state.%s: ttl: %s", fn, lua_tostring (L, -1));
   }
   ms = lua_tointeger (L, -2);
   if (ms <= 0) {
      luaL_error (L, "fw.state.%s: ttl must be longer than 0s", fn);
   }
   lua_pop (L, 4);
   return ms;
}

static int
push_owned_string_p (lua_State *L)
{
   lua_pushlstring (L, lua_touserdata (L, 1), (size_t) lua_tointeger (L, 2));
   return 1;
}

/* Pushes s (malloc'd) and frees it, even if pushing fails. */
static void
push_owned_string (lua_State *L, char *s, size_t len)
{
   int status;

   lua_pushcfunction (L, push_owned_string_p);
   lua_pushlightuserdata (L, s);
   lua_pushinteger (L, (lua_Integer) len);
   status = lua_pcall (L, 2, 1, 0);
   free (s);
   if (status != LUA_OK) {
      lua_error (L);
   }
}

static int
state_get (lua_State *L)
{
   fw_state_store_t *store = check_store (L);
   size_t len;
   const char *key = check_key (L, "get", &len);
   fw_state_value_t v;
   fw_error_t err;

   luaL_checkstack (L, 4, "fw.state.get");
   if (!fw_state_store_get (store, key, len, &v, &err)) {
      return luaL_error (L, "%s", err.message);
   }
   switch (v.type) {
   case FW_STATE_BOOL:
      lua_pushboolean (L, v.b);
      break;
   case FW_STATE_INT:
      lua_pushinteger (L, v.i);
      break;
   case FW_STATE_DOUBLE:
      lua_pushnumber (L, v.d);
      break;
   case FW_STATE_STRING:
      push_owned_string (L, (char *) v.s, v.len);
      break;
   default:
      lua_pushnil (L);
   }
   return 1;
}

static int
state_set (lua_State *L)
{
   fw_state_store_t *store = check_store (L);
   size_t len;
   const char *key = check_key (L, "set", &len);
   fw_state_value_t v = {0};
   int64_t ttl = check_ttl (L, "set", 3);
   fw_error_t err;

   switch (lua_type (L, 2)) {
   case LUA_TNONE:
   case LUA_TNIL:
      v.type = FW_STATE_NONE;
      break;
   case LUA_TBOOLEAN:
      v.type = FW_STATE_BOOL;
      v.b = lua_toboolean (L, 2);
      break;
   case LUA_TNUMBER:
      if (lua_isinteger (L, 2)) {
         v.type = FW_STATE_INT;
         v.i = lua_tointeger (L, 2);
      } else {
         v.type = FW_STATE_DOUBLE;
         v.d = lua_tonumber (L, 2);
      }
      break;
   case LUA_TSTRING:
      v.type = FW_STATE_STRING;
      v.s = lua_tolstring (L, 2, &v.len);
      break;
   default:
      return luaL_error (L,
                         "fw.state.set: cannot store a %s (values are nil, booleans, numbers and "
                         "strings; store a table as text with fw.json.encode and read it back "
                         "with fw.json.decode)",
                         luaL_typename (L, 2));
   }
   if (!fw_state_store_set (store, key, len, &v, ttl, &err)) {
      return luaL_error (L, "%s", err.message);
   }
   return 0;
}

static int
state_incr (lua_State *L)
{
   fw_state_store_t *store = check_store (L);
   size_t len;
   const char *key = check_key (L, "incr", &len);
   lua_Integer by = 1;
   int64_t ttl, result = 0;
   fw_error_t err;

   if (!lua_isnoneornil (L, 2)) {
      if (!lua_isinteger (L, 2)) {
         return luaL_error (L, "fw.state.incr: by must be an integer, got %s",
                            lua_type (L, 2) == LUA_TNUMBER ? "a float" : luaL_typename (L, 2));
      }
      by = lua_tointeger (L, 2);
   }
   ttl = check_ttl (L, "incr", 3);
   if (!fw_state_store_incr (store, key, len, by, ttl, &result, &err)) {
      return luaL_error (L, "%s", err.message);
   }
   lua_pushinteger (L, result);
   return 1;
}

static int
state_delete (lua_State *L)
{
   fw_state_store_t *store = check_store (L);
   size_t len;
   const char *key = check_key (L, "delete", &len);

   lua_pushboolean (L, fw_state_store_delete (store, key, len));
   return 1;
}

static int
state_stats (lua_State *L)
{
   fw_state_store_t *store = check_store (L);
   fw_state_stats_t st;

   fw_state_store_stats (store, &st);
   lua_createtable (L, 0, 7);
#define FIELD(name)                            \
   lua_pushinteger (L, (lua_Integer) st.name); \
   lua_setfield (L, -2, #name)
   FIELD (entries);
   FIELD (bytes);
   FIELD (max_bytes);
   FIELD (hits);
   FIELD (misses);
   FIELD (evictions);
   FIELD (expired);
#undef FIELD
   return 1;
}

static const luaL_Reg state_funcs[] = {{"get", state_get},     {"set", state_set},
                                       {"incr", state_incr},   {"delete", state_delete},
                                       {"stats", state_stats}, {NULL, NULL}};

void
fw_state_lua_open (lua_State *L, int module_idx)
{
   module_idx = lua_absindex (L, module_idx);
   luaL_newlib (L, state_funcs);
   lua_setfield (L, module_idx, "state");
}
