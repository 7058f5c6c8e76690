/*
 * lua_core.c - "flowwarden.core", merged into the flowwarden module by
 * lua/flowwarden/init.lua.
 */
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/bson_lua.h"
#include "flowwarden/bson_view.h"
#include "flowwarden/log.h"
#include "flowwarden/lua_core.h"

#define STREAM_KEY "flowwarden.stream_name"

static int
core_log_sink (lua_State *L)
{
   const char *level = luaL_checkstring (L, 1);
   const char *msg = luaL_checkstring (L, 2);
   const char *stream;
   fw_log_level_t lv;

   if (!fw_log_level_parse (level, &lv)) {
      lv = FW_LOG_INFO;
   }
   lua_getfield (L, LUA_REGISTRYINDEX, STREAM_KEY);
   stream = lua_touserdata (L, -1);
   fw_log (lv, stream, "%s", msg);
   lua_pop (L, 1);
   return 0;
}

int
fw_lua_core_open (lua_State *L)
{
   lua_newtable (L);
   fw_bson_lua_open (L, lua_gettop (L));
   fw_bson_view_open (L, lua_gettop (L));
   lua_pushcfunction (L, core_log_sink);
   lua_setfield (L, -2, "log_sink");
   lua_pushstring (L, fw_log_enabled (FW_LOG_DEBUG)  ? "debug"
                      : fw_log_enabled (FW_LOG_INFO) ? "info"
                      : fw_log_enabled (FW_LOG_WARN) ? "warn"
                                                     : "error");
   lua_setfield (L, -2, "log_level");
   return 1;
}

void
fw_lua_core_set_stream (lua_State *L, const char *stream)
{
   lua_pushlightuserdata (L, (void *) stream);
   lua_setfield (L, LUA_REGISTRYINDEX, STREAM_KEY);
}
