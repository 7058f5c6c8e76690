/*
 * lua_core.h - the C half of the `flowwarden` Lua module ("flowwarden.core"):
 * BSON value constructors, fw.null, and the log sink that routes fw.log
 * through the runtime's log with the stream's name.
 */
#ifndef FLOWWARDEN_LUA_CORE_H
#define FLOWWARDEN_LUA_CORE_H

#include <lua.h>

/* lua_CFunction for package.preload["flowwarden.core"]: returns the table. */
int fw_lua_core_open (lua_State *L);

/* Names the stream whose handlers run in L, for fw.log records. The string
 * must outlive the state. */
void fw_lua_core_set_stream (lua_State *L, const char *stream);

#endif
