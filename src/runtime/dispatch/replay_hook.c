/*
 * replay_hook.c - what a dead letter's replay keeps of a failed attempt:
 * the error value the enqueue policy saw (replay_hook-private.h).
 */
#include "runtime/dispatch/replay_hook-private.h"
#include <lauxlib.h>

#include "runtime/host/lua_host.h"

void
fw_replay_hook_keep_error (fw_replay_hook_t *hook, lua_State *L, int index)
{
   if (!hook) {
      return;
   }
   if (hook->has_error_ref) {
      luaL_unref (L, LUA_REGISTRYINDEX, hook->error_ref);
      hook->has_error_ref = false;
   }
   if (index != 0) {
      lua_pushvalue (L, index);
      hook->error_ref = luaL_ref (L, LUA_REGISTRYINDEX);
      hook->has_error_ref = hook->error_ref != LUA_REFNIL && hook->error_ref != LUA_NOREF;
   }
}

void
fw_replay_hook_forget_error (fw_dispatcher_t *d, fw_replay_hook_t *hook)
{
   if (hook->has_error_ref) {
      luaL_unref (fw_lua_host_state (fw_dispatcher_host (d)), LUA_REGISTRYINDEX, hook->error_ref);
      hook->has_error_ref = false;
   }
}
