/*
 * fuzz_common.h - what the libFuzzer targets of tests/fuzz share: one
 * flowwarden Lua host per process, and a Lua harness per target that runs
 * under a protected call.
 *
 * A target fails only on a real bug: a crash, a sanitizer report, or a
 * broken invariant. Inputs that are merely invalid are expected to be
 * refused with an error; the harnesses catch those errors themselves (pcall
 * in Lua, a false return in C), so any error that reaches fuzz_call is a
 * broken invariant and aborts the run with its message.
 */
#ifndef FLOWWARDEN_FUZZ_COMMON_H
#define FLOWWARDEN_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "runtime/host/lua_host.h"

/* Reports a broken invariant and stops the run: libFuzzer saves the input. */
#define FUZZ_ASSERT(cond, ...)                                                                \
   do {                                                                                       \
      if (!(cond)) {                                                                          \
         fprintf (stderr, "fuzz invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
         fprintf (stderr, "  " __VA_ARGS__);                                                  \
         fprintf (stderr, "\n");                                                              \
         abort ();                                                                            \
      }                                                                                       \
   } while (0)

/* libFuzzer sees the branches of instrumented C only: the Lua library
 * (duration, cron, json) would be a black box to it. A line hook hands it
 * the Lua code's line-to-line edges as extra counters instead. Targets
 * whose code under test is Lua define FUZZ_LUA_COVERAGE; the others skip
 * the hook's cost (it fires on every line of the harness too). */
#ifdef FUZZ_LUA_COVERAGE
__attribute__ ((section ("__libfuzzer_extra_counters"))) static uint8_t fuzz_lua_edges[1 << 16];
static uintptr_t fuzz_lua_prev;

static void
fuzz_line_hook (lua_State *L, lua_Debug *ar)
{
   uintptr_t here;

   lua_getinfo (L, "S", ar);
   here = ((uintptr_t) ar->source * 2654435761u) ^ ((uintptr_t) ar->currentline * 40503u);
   fuzz_lua_edges[(here ^ fuzz_lua_prev) & 0xffff]++;
   fuzz_lua_prev = here >> 1;
}
#endif

/* The process's Lua state: a flowwarden host (the whole library, as scripts
 * see it), made on first use and kept for every input, as a stream keeps
 * its state for every event. */
static lua_State *
fuzz_state (void)
{
   static fw_lua_host_t *host;
   fw_error_t err;

   if (!host) {
      host = fw_lua_host_new (&err);
      FUZZ_ASSERT (host != NULL, "cannot create a Lua host: %s", err.message);
#ifdef FUZZ_LUA_COVERAGE
      lua_sethook (fw_lua_host_state (host), fuzz_line_hook, LUA_MASKLINE, 0);
#endif
   }
   return fw_lua_host_state (host);
}

static int
fuzz_traceback (lua_State *L)
{
   luaL_traceback (L, L, luaL_tolstring (L, 1, NULL), 1);
   return 1;
}

/* Runs body(L) with ud as its only argument (a light userdata) under a
 * protected call with a traceback; any error is a broken invariant. Bodies
 * push their inputs and call their harness (lua_call) from inside, so the
 * state is never touched outside a protected call. */
static void
fuzz_run (lua_State *L, lua_CFunction body, void *ud)
{
   int base = lua_gettop (L);
   int status;

   lua_pushcfunction (L, fuzz_traceback);
   lua_pushcfunction (L, body);
   lua_pushlightuserdata (L, ud);
   status = lua_pcall (L, 1, 0, base + 1);
   FUZZ_ASSERT (status == LUA_OK, "%s",
                lua_tostring (L, -1) ? lua_tostring (L, -1) : "(an error that is not a string)");
   lua_settop (L, base);
}

/* Pushes the harness function compiled from chunk (once per process; the
 * chunk returns the function and runs with `fw` in scope). Call it from a
 * fuzz_run body: it raises if the chunk is broken. */
static void
fuzz_push_harness (lua_State *L, int *ref, const char *name, const char *chunk)
{
   if (*ref == 0) {
      luaL_Buffer b;

      luaL_buffinit (L, &b);
      luaL_addstring (&b, "local fw = require('flowwarden')\n");
      luaL_addstring (&b, chunk);
      luaL_pushresult (&b);
      if (luaL_loadbuffer (L, lua_tostring (L, -1), lua_rawlen (L, -1), name) != LUA_OK) {
         lua_error (L);
      }
      lua_remove (L, -2);
      lua_call (L, 0, 1);
      luaL_checktype (L, -1, LUA_TFUNCTION);
      *ref = luaL_ref (L, LUA_REGISTRYINDEX);
   }
   lua_rawgeti (L, LUA_REGISTRYINDEX, *ref);
}

#endif
