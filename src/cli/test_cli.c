/*
 * test_cli.c - `flowwarden test [busted args...]` (busted in-process, with
 * flowwarden's Lua modules and flowwarden.testing) and `flowwarden replay`
 * (recorded events through a script offline); issue 15.
 */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "flowwarden/log.h"
#include "runtime/host/lua_host.h"
#include "runtime/testing/test_app.h"
#include "test_cli.h"

/* A state like a stream's (the embedded modules, flowwarden.core) plus
 * flowwarden.testing's C core, with `arg` set as lua.c sets it. */
static fw_lua_host_t *
testing_host (const char *progname, int argc, char **argv)
{
   fw_error_t err;
   fw_lua_host_t *host = fw_lua_host_new (&err);
   lua_State *L;

   if (!host) {
      fprintf (stderr, "flowwarden: %s\n", err.message);
      return NULL;
   }
   L = fw_lua_host_state (host);
   luaL_getsubtable (L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
   lua_pushcfunction (L, fw_test_app_open);
   lua_setfield (L, -2, "flowwarden.testing.core");
   lua_pop (L, 1);
   lua_createtable (L, argc + 1, 1);
   lua_pushstring (L, progname);
   lua_rawseti (L, -2, 0);
   for (int i = 0; i < argc; i++) {
      lua_pushstring (L, argv[i]);
      lua_rawseti (L, -2, i + 1);
   }
   lua_setglobal (L, "arg");
   /* Every record a delivery makes is kept in its result (r.logs). */
   fw_log_configure (FW_LOG_DEBUG, false);
   return host;
}

static int
run_chunk (fw_lua_host_t *host, const char *code, const char *name)
{
   lua_State *L = fw_lua_host_state (host);
   int rc = 0;

   if (luaL_loadbuffer (L, code, strlen (code), name) != LUA_OK ||
       lua_pcall (L, 0, 1, 0) != LUA_OK) {
      const char *msg = lua_tostring (L, -1);
      fprintf (stderr, "flowwarden: %s\n", msg ? msg : "(error object is not a string)");
      rc = 1;
   } else if (lua_isinteger (L, -1)) {
      rc = (int) lua_tointeger (L, -1);
   }
   lua_settop (L, 0);
   return rc;
}

int
fw_test_cli_main (int argc, char **argv)
{
   fw_lua_host_t *host;
   int rc;

   if (argc >= 2 && (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0)) {
      puts (
         "flowwarden test [busted options] [SPEC...]: run busted specs (default: the spec/\n"
         "directory) with flowwarden's Lua modules and flowwarden.testing available: scripts\n"
         "are loaded offline, with fakes for fw.mongo and fw.http and a virtual clock\n"
         "(docs/testing-scripts.md). Exit code and output formats (-o TAP, -o junit) are\n"
         "busted's; `flowwarden test -- --help` shows busted's options.");
      return 0;
   }
   if (argc >= 2 && strcmp (argv[1], "--") == 0) {
      argv++;
      argc--;
   }
   if (!(host = testing_host ("flowwarden test", argc - 1, argv + 1))) {
      return 1;
   }
   /* This process is the interpreter: a `lua = ...` in a .busted file must
    * not make busted start another one (which would not have flowwarden). */
   {
      lua_State *L = fw_lua_host_state (host);
      lua_getglobal (L, "table");
      lua_getfield (L, -1, "insert");
      lua_getglobal (L, "arg");
      lua_pushinteger (L, 1);
      lua_pushliteral (L, "--ignore-lua");
      lua_call (L, 3, 0);
      lua_pop (L, 1);
   }
   /* busted ends with os.exit(code): its exit code is ours. */
   rc = run_chunk (host,
                   "local ok, runner = pcall(require, 'busted.runner')\n"
                   "if not ok then\n"
                   "  error('flowwarden test needs busted (the Debian package lua-busted): '\n"
                   "    .. tostring(runner), 0)\n"
                   "end\n"
                   "runner({ standalone = false })\n"
                   "return 0\n",
                   "=flowwarden test");
   fw_lua_host_destroy (host);
   return rc;
}

int
fw_replay_cli_main (int argc, char **argv)
{
   fw_lua_host_t *host = testing_host ("flowwarden replay", argc - 1, argv + 1);
   int rc;

   if (!host) {
      return 1;
   }
   rc = run_chunk (host, "return require('flowwarden.testing.replay_cli').main(arg)",
                   "=flowwarden replay");
   fw_lua_host_destroy (host);
   return rc;
}
