/*
 * state_lua.h - fw.state: the Lua functions over a stream's state store
 * (state_store.h), usable inside handlers only.
 *
 * The store belongs to the runtime, not to the Lua state: the stream worker
 * attaches its store to every state it runs, so a hot reload (a new state)
 * finds the same entries.
 */
#ifndef FLOWWARDEN_STATE_LUA_H
#define FLOWWARDEN_STATE_LUA_H

#include <lua.h>

#include "lua_api/state_store.h"

/* Stores store (borrowed: it must outlive its use by L, or be replaced by
 * another attach first) in L's registry. NULL detaches. Never raises. */
void fw_lua_state_attach (lua_State *L, fw_state_store_t *store);

/* The store attached to L, or NULL. Never raises. */
fw_state_store_t *fw_lua_state_get (lua_State *L);

/* Sets `state` (a table: get, set, incr, delete, stats) in the table at
 * module_idx. May raise (memory). */
void fw_state_lua_open (lua_State *L, int module_idx);

#endif
