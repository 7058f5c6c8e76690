/* Unit tests for the Lua host: script loading errors, budgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <lauxlib.h>

#include "flowwarden/lua_host.h"

static char script_path[64];

static void
write_script (const char *text)
{
   FILE *f;
   snprintf (script_path, sizeof script_path, "/tmp/fw_host_test_%d.lua", (int) getpid ());
   f = fopen (script_path, "w");
   assert_non_null (f);
   fputs (text, f);
   fclose (f);
}

static int
teardown (void **state)
{
   (void) state;
   unlink (script_path);
   return 0;
}

static void
lua_host_syntax_error_names_script_and_line (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   fw_error_t err;
   char expected[128];
   (void) state;

   write_script ("local fw = require('flowwarden')\n\nfw.stream { name = 'x' \n");
   assert_false (fw_lua_host_load_script (host, script_path, NULL, &err));
   snprintf (expected, sizeof expected, "%s:4:", script_path);
   assert_non_null (strstr (err.message, expected));
   fw_lua_host_destroy (host);
}

static void
lua_host_runtime_error_at_load_names_line (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   fw_error_t err;
   char expected[128];
   (void) state;

   write_script ("local fw = require('flowwarden')\nlocal x = nil\nprint(x.y)\n");
   assert_false (fw_lua_host_load_script (host, script_path, NULL, &err));
   snprintf (expected, sizeof expected, "%s:3: attempt to index a nil value", script_path);
   assert_non_null (strstr (err.message, expected));
   fw_lua_host_destroy (host);
}

static void
lua_host_valid_script_declares_streams (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   fw_error_t err;
   lua_State *L;
   (void) state;

   write_script ("local fw = require('flowwarden')\n"
                 "fw.stream { name = 'a', database = 'd', on_change = function() end }\n"
                 "fw.stream { name = 'b', database = 'd', on_insert = function() end }\n");
   assert_true (fw_lua_host_load_script (host, script_path, NULL, &err));
   assert_int_equal (fw_lua_host_stream_count (host), 2);
   L = fw_lua_host_state (host);
   fw_lua_host_push_spec (host, 1);
   lua_getfield (L, -1, "name");
   assert_string_equal (lua_tostring (L, -1), "b");
   lua_pop (L, 2);
   fw_lua_host_destroy (host);
}

/* A handler in an endless loop is stopped by the clock check in the count
 * hook, and the host says why. */
static void
lua_host_timeout_stops_endless_loop (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   (void) state;

   luaL_loadstring (L, "while true do end");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_TIMEOUT);
   assert_true (lua_istable (L, -1));
   lua_pop (L, 1);

   /* pcall inside the handler cannot swallow the timeout */
   luaL_loadstring (L, "while true do pcall(function() while true do end end) end");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_TIMEOUT);
   lua_pop (L, 1);

   /* and the state keeps working afterwards */
   luaL_loadstring (L, "return 1 + 1");
   assert_true (fw_lua_host_call (host, 0, 1, 50, &stop));
   assert_int_equal (lua_tointeger (L, -1), 2);
   lua_pop (L, 1);
   fw_lua_host_destroy (host);
}

static void
lua_host_memory_limit_stops_hungry_handler (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   (void) state;

   fw_lua_host_set_memory_limit (host, fw_lua_host_memory_used (host) + 4 * 1024 * 1024);
   luaL_loadstring (L, "local t = {} for i = 1, 1e8 do t[i] = tostring(i) .. 'xxxxxxxx' end");
   assert_false (fw_lua_host_call (host, 0, 0, 0, &stop));
   assert_int_equal (stop, FW_LUA_STOP_MEMORY);
   lua_getfield (L, -1, "value");
   assert_string_equal (lua_tostring (L, -1), "not enough memory");
   lua_pop (L, 2);

   luaL_loadstring (L, "return #string.rep('a', 1000)");
   assert_true (fw_lua_host_call (host, 0, 1, 0, &stop));
   assert_int_equal (lua_tointeger (L, -1), 1000);
   lua_pop (L, 1);
   fw_lua_host_destroy (host);
}

static void
lua_host_error_keeps_value_and_traceback (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   (void) state;

   luaL_loadstring (L, "local function inner() error({code = 7}) end inner()");
   assert_false (fw_lua_host_call (host, 0, 0, 1000, &stop));
   assert_int_equal (stop, FW_LUA_STOP_NONE);
   lua_getfield (L, -1, "value");
   lua_getfield (L, -1, "code");
   assert_int_equal (lua_tointeger (L, -1), 7);
   lua_pop (L, 2);
   lua_getfield (L, -1, "traceback");
   assert_non_null (strstr (lua_tostring (L, -1), "inner"));
   lua_pop (L, 2);
   fw_lua_host_destroy (host);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown (lua_host_syntax_error_names_script_and_line, teardown),
      cmocka_unit_test_teardown (lua_host_runtime_error_at_load_names_line, teardown),
      cmocka_unit_test_teardown (lua_host_valid_script_declares_streams, teardown),
      cmocka_unit_test (lua_host_timeout_stops_endless_loop),
      cmocka_unit_test (lua_host_memory_limit_stops_hungry_handler),
      cmocka_unit_test (lua_host_error_keeps_value_and_traceback),
   };
   return cmocka_run_group_tests_name ("lua_host", tests, NULL, NULL);
}
