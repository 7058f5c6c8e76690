/* Unit tests for the Lua host: script loading errors, budgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <lauxlib.h>

#include "flowwarden/clock.h"
#include "lua_api/lua_call.h"
#include "runtime/host/lua_host.h"

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

   write_script (
      "local fw = require('flowwarden')\n"
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

/* The version of the script at path (a fresh host each time); NULL when it
 * does not load. */
static const char *
version_of (const char *path, char *out, size_t size)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   fw_error_t err;
   bool ok;

   assert_non_null (host);
   ok = fw_lua_host_load_script (host, path, NULL, &err);
   if (ok) {
      snprintf (out, size, "%s", fw_lua_host_version (host));
   }
   fw_lua_host_destroy (host);
   return ok ? out : NULL;
}

/* The version hashes the contents, never the path: spellings of one path and
 * a copy under another name are one version, and the value is fixed for
 * given bytes (so it is the same on every machine); other bytes, another. */
static void
lua_host_version_hashes_contents_not_paths (void **state)
{
   const char *text =
      "local fw = require('flowwarden')\n"
      "fw.stream { name = 'a', database = 'd', on_change = function() end }\n";
   char a[32], b[32], c[32], copy[96], dotted[96];
   FILE *f;
   (void) state;

   write_script (text);
   assert_non_null (version_of (script_path, a, sizeof a));
   assert_int_equal (strlen (a), 12);
   snprintf (dotted, sizeof dotted, "/tmp/./%s", script_path + strlen ("/tmp/"));
   assert_non_null (version_of (dotted, b, sizeof b));
   assert_string_equal (a, b);
   snprintf (copy, sizeof copy, "%s.copy.lua", script_path);
   f = fopen (copy, "w");
   assert_non_null (f);
   fputs (text, f);
   fclose (f);
   assert_non_null (version_of (copy, c, sizeof c));
   unlink (copy);
   assert_string_equal (a, c);
   assert_string_equal (a, "e6c77ef076bf");
   write_script (
      "-- edited\nlocal fw = require('flowwarden')\n"
      "fw.stream { name = 'a', database = 'd', on_change = function() end }\n");
   assert_non_null (version_of (script_path, b, sizeof b));
   assert_string_not_equal (a, b);
}

/* A deadline on the state's call that fw_lua_host_call did not set (fw.mongo's
 * own tests set one to give its calls a budget) has no thread for the
 * watchdog to signal: it leaves it alone. It signalled thread 0 (SIGSEGV in
 * c/test_mongo_lua under load, when a call outlived such a deadline). */
static void
lua_host_a_deadline_set_outside_a_call_is_not_signalled (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_call_t *call = fw_lua_call_get (L);
   (void) state;

   luaL_loadstring (L, "local t = os.clock() + 0.05 while os.clock() < t do end return 1");
   __atomic_store_n (&call->deadline_ns, fw_mono_ns () - 1, __ATOMIC_RELEASE);
   assert_int_equal (lua_pcall (L, 0, 1, 0), LUA_OK); /* > 5 watchdog ticks past it */
   __atomic_store_n (&call->deadline_ns, 0, __ATOMIC_RELEASE);
   assert_int_equal (lua_tointeger (L, -1), 1);
   lua_pop (L, 1);
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

   /* nor a loop inside a coroutine, which is a thread of its own */
   luaL_loadstring (L, "coroutine.wrap(function() while true do end end)()");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_TIMEOUT);
   lua_pop (L, 1);
   luaL_loadstring (L,
                    "local co = coroutine.create(function() while true do end end)\n"
                    "while true do coroutine.resume(co) end");
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

/* An IO function waiting past the handler's deadline (its wait ran out late,
 * say on a loaded machine): sleeps arg ms, long enough for the watchdog to
 * arm the timeout hook, then raises its own typed timeout as fw.http does. */
static int
late_io_timeout (lua_State *L)
{
   struct timespec ts = {0, (long) luaL_checkinteger (L, 1) * 1000000L};
   nanosleep (&ts, NULL);
   fw_lua_call_io_timed_out (L);
   return fw_lua_raise_typed (L, "Http.Timeout", 0, "fw.http: GET /hang: no complete response");
}

/* The same wait ending with a response. */
static int
late_io_success (lua_State *L)
{
   struct timespec ts = {0, (long) luaL_checkinteger (L, 1) * 1000000L};
   nanosleep (&ts, NULL);
   return 0;
}

static void
assert_failure_type (lua_State *L, const char *type)
{
   assert_true (lua_istable (L, -1));
   lua_getfield (L, -1, "value");
   assert_true (lua_istable (L, -1));
   lua_getfield (L, -1, "type");
   assert_string_equal (lua_tostring (L, -1), type);
   lua_pop (L, 3);
}

/* Issue 41: a call that leaves a large event's worth of garbage (a copy of
 * the document and a string of it) has it collected before the next call,
 * so the state holds one large event's copies at a time, not several. */
static void
lua_host_large_garbage_is_collected_before_the_next_call (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   (void) state;

   assert_int_equal (luaL_dostring (L,
                                    "function big () "
                                    "local before = collectgarbage('count') "
                                    "local s = string.rep('x', 8 * 1024 * 1024) "
                                    "return before, #s end"),
                     LUA_OK);
   for (int i = 0; i < 4; i++) {
      lua_getglobal (L, "big");
      assert_true (fw_lua_host_call (host, 0, 2, 0, &stop));
      assert_int_equal (lua_tointeger (L, -1), 8 * 1024 * 1024);
      /* KB held when the call began: not the last call's 8 MiB string. */
      assert_true (lua_tonumber (L, -2) < 4096);
      lua_pop (L, 2);
   }
   fw_lua_host_destroy (host);
}

/* Issue 25: the IO's deadline ending at or after the handler's (what load
 * does to the 10 ms margin) still gives the IO's timeout type, whether the
 * handler lets it through or tries to swallow it; the handler's own
 * overrun after a successful wait is still the generic timeout. */
static void
lua_host_io_timeout_keeps_its_type_past_the_deadline (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   (void) state;

   lua_register (L, "late_io_timeout", late_io_timeout);
   lua_register (L, "late_io_success", late_io_success);
   luaL_loadstring (L, "require('flowwarden.errors') late_io_timeout(150)");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_NONE);
   assert_failure_type (L, "Http.Timeout");

   luaL_loadstring (L, "while true do pcall(late_io_timeout, 150) end");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_NONE);
   assert_failure_type (L, "Http.Timeout");

   luaL_loadstring (L, "late_io_success(150) while true do end");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_TIMEOUT);
   lua_pop (L, 1);

   /* The mark does not outlive its call. */
   luaL_loadstring (L, "while true do end");
   assert_false (fw_lua_host_call (host, 0, 0, 50, &stop));
   assert_int_equal (stop, FW_LUA_STOP_TIMEOUT);
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

/* Fills the state's memory to its limit with live objects (global "kept"),
 * then collects, so nothing is left to reclaim. */
static void
fill_to_limit (fw_lua_host_t *host)
{
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;

   luaL_loadstring (L,
                    "kept = {} local more = {} kept.more = more local n = 0 "
                    "local f1 = function() while true do n = n + 1 kept[n] = {} end end "
                    "local f2 = function() while true do more[1] = {} more = more[1] end end "
                    "pcall(f1) pcall(f2)");
   assert_true (fw_lua_host_call (host, 0, 0, 0, &stop));
   lua_gc (L, LUA_GCCOLLECT);
}

static int
push_big_userdata (lua_State *L, void *ud)
{
   (void) ud;
   lua_newuserdatauv (L, 64 * 1024, 0);
   lua_pushinteger (L, 7);
   return 2;
}

/* What is built for a call (a handler's ctx) when the state is full fails
 * as that call, not outside every protected call. */
static void
lua_host_call_with_fails_the_call_when_its_arguments_cannot_be_built (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   fw_lua_stop_t stop;
   int top;
   (void) state;

   fw_lua_host_set_memory_limit (host, fw_lua_host_memory_used (host) + 2 * 1024 * 1024);
   fill_to_limit (host);
   top = lua_gettop (L);
   luaL_loadstring (L, "return select('#', ...)");
   lua_pushinteger (L, 1);
   assert_false (fw_lua_host_call_with (host, 1, push_big_userdata, NULL, 1, 0, &stop));
   assert_int_equal (stop, FW_LUA_STOP_MEMORY);
   assert_int_equal (lua_gettop (L), top + 1);
   lua_getfield (L, -1, "value");
   assert_string_equal (lua_tostring (L, -1), "not enough memory");
   lua_pop (L, 2);

   /* With room again, the same call runs with all three arguments. */
   luaL_loadstring (L, "kept = nil");
   assert_true (fw_lua_host_call (host, 0, 0, 0, &stop));
   lua_gc (L, LUA_GCCOLLECT);
   luaL_loadstring (L, "return select('#', ...)");
   lua_pushinteger (L, 1);
   assert_true (fw_lua_host_call_with (host, 1, push_big_userdata, NULL, 1, 0, &stop));
   assert_int_equal (lua_tointeger (L, -1), 3);
   lua_pop (L, 1);
   assert_int_equal (lua_gettop (L), top);
   fw_lua_host_destroy (host);
}

static bool
table_outside_protection (void *ud)
{
   lua_State *L = ud;
   lua_createtable (L, 1024 * 1024, 0); /* raises: no protected call */
   return true;
}

static bool
returns_true (void *ud)
{
   (void) ud;
   return true;
}

/* An error outside every protected call (a bug) stops what used the state
 * instead of aborting the process. */
static void
lua_host_guard_turns_a_panic_into_false (void **state)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   (void) state;

   assert_true (fw_lua_host_guard (returns_true, NULL));
   assert_false (fw_lua_host_panicked (host));
   fw_lua_host_set_memory_limit (host, fw_lua_host_memory_used (host) + 64 * 1024);
   assert_false (fw_lua_host_guard (table_outside_protection, L));
   assert_true (fw_lua_host_panicked (host));
   fw_lua_host_destroy (host);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown (lua_host_syntax_error_names_script_and_line, teardown),
      cmocka_unit_test_teardown (lua_host_runtime_error_at_load_names_line, teardown),
      cmocka_unit_test_teardown (lua_host_valid_script_declares_streams, teardown),
      cmocka_unit_test_teardown (lua_host_version_hashes_contents_not_paths, teardown),
      cmocka_unit_test (lua_host_timeout_stops_endless_loop),
      cmocka_unit_test (lua_host_a_deadline_set_outside_a_call_is_not_signalled),
      cmocka_unit_test (lua_host_io_timeout_keeps_its_type_past_the_deadline),
      cmocka_unit_test (lua_host_memory_limit_stops_hungry_handler),
      cmocka_unit_test (lua_host_large_garbage_is_collected_before_the_next_call),
      cmocka_unit_test (lua_host_error_keeps_value_and_traceback),
      cmocka_unit_test (lua_host_call_with_fails_the_call_when_its_arguments_cannot_be_built),
      cmocka_unit_test (lua_host_guard_turns_a_panic_into_false),
   };
   return cmocka_run_group_tests_name ("lua_host", tests, NULL, NULL);
}
