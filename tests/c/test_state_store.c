/* fw.state: the C store (TTL with an injected clock, LRU eviction, stats)
 * and its Lua functions in a real host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>

#include "lua_api/state_lua.h"
#include "lua_api/state_store.h"
#include "runtime/host/lua_host.h"

static int64_t fake_now = 1000;

static int64_t
fake_clock (void *ud)
{
   (void) ud;
   return fake_now;
}

static fw_state_value_t
int_value (int64_t i)
{
   fw_state_value_t v = {.type = FW_STATE_INT, .i = i};
   return v;
}

static void
set_int (fw_state_store_t *s, const char *key, int64_t i, int64_t ttl)
{
   fw_state_value_t v = int_value (i);
   fw_error_t err;
   assert_true (fw_state_store_set (s, key, strlen (key), &v, ttl, &err));
}

static fw_state_type_t
get_type (fw_state_store_t *s, const char *key)
{
   fw_state_value_t v;
   fw_error_t err;
   assert_true (fw_state_store_get (s, key, strlen (key), &v, &err));
   if (v.type == FW_STATE_STRING) {
      free ((void *) v.s);
   }
   return v.type;
}

static void
state_store_ttl_expires_on_access_with_injected_clock (void **state)
{
   fw_state_store_t *s = fw_state_store_new (1 << 20);
   fw_state_stats_t st;
   (void) state;

   fw_state_store_set_clock (s, fake_clock, NULL);
   fake_now = 1000;
   set_int (s, "short", 1, 500);
   set_int (s, "forever", 2, 0);
   fake_now = 1499;
   assert_int_equal (get_type (s, "short"), FW_STATE_INT);
   fake_now = 1500;
   assert_int_equal (get_type (s, "short"), FW_STATE_NONE);
   assert_int_equal (get_type (s, "forever"), FW_STATE_INT);
   fw_state_store_stats (s, &st);
   assert_int_equal (st.entries, 1);
   assert_int_equal (st.expired, 1);
   assert_int_equal (st.hits, 2);
   assert_int_equal (st.misses, 1);
   fw_state_store_destroy (s);
}

static void
state_store_sweep_removes_expired_entries_nobody_reads (void **state)
{
   fw_state_store_t *s = fw_state_store_new (1 << 20);
   fw_state_stats_t st;
   char key[32];
   (void) state;

   fw_state_store_set_clock (s, fake_clock, NULL);
   fake_now = 0;
   for (int i = 0; i < 40; i++) {
      snprintf (key, sizeof key, "k%d", i);
      set_int (s, key, i, 10);
   }
   fake_now = 100;
   for (int i = 0; i < 64; i++) { /* bounded sweeping: a few buckets per operation */
      get_type (s, "other");
   }
   fw_state_store_stats (s, &st);
   assert_int_equal (st.entries, 0);
   assert_int_equal (st.expired, 40);
   fw_state_store_destroy (s);
}

static void
state_store_evicts_least_recently_used_beyond_max_bytes (void **state)
{
   /* Each entry: 64 bytes of overhead + a 2-byte key. Room for 3. */
   fw_state_store_t *s = fw_state_store_new (3 * (FW_STATE_ENTRY_OVERHEAD + 2));
   fw_state_stats_t st;
   (void) state;

   set_int (s, "k1", 1, 0);
   set_int (s, "k2", 2, 0);
   set_int (s, "k3", 3, 0);
   assert_int_equal (get_type (s, "k1"), FW_STATE_INT); /* k1 is now the most recent */
   set_int (s, "k4", 4, 0);                             /* evicts k2 */
   assert_int_equal (get_type (s, "k2"), FW_STATE_NONE);
   assert_int_equal (get_type (s, "k1"), FW_STATE_INT);
   assert_int_equal (get_type (s, "k3"), FW_STATE_INT);
   assert_int_equal (get_type (s, "k4"), FW_STATE_INT);
   fw_state_store_stats (s, &st);
   assert_int_equal (st.entries, 3);
   assert_int_equal (st.evictions, 1);
   assert_int_equal (st.bytes, 3 * (FW_STATE_ENTRY_OVERHEAD + 2));
   /* Lowering the bound evicts at once. */
   fw_state_store_set_max_bytes (s, FW_STATE_ENTRY_OVERHEAD + 2);
   fw_state_store_stats (s, &st);
   assert_int_equal (st.entries, 1);
   assert_int_equal (st.evictions, 3);
   assert_int_equal (get_type (s, "k4"), FW_STATE_INT);
   fw_state_store_destroy (s);
}

static void
state_store_refuses_an_entry_larger_than_the_bound (void **state)
{
   fw_state_store_t *s = fw_state_store_new (100);
   fw_state_value_t v = {
      .type = FW_STATE_STRING, .s = "0123456789012345678901234567890123456789", .len = 40};
   fw_error_t err;
   (void) state;

   set_int (s, "k", 1, 0);
   assert_false (fw_state_store_set (s, "k", 1, &v, 0, &err));
   assert_string_equal (
      err.message, "fw.state.set: an entry of 105 bytes does not fit in state.max_bytes = 100");
   assert_int_equal (get_type (s, "k"), FW_STATE_INT); /* unchanged */
   fw_state_store_destroy (s);
}

static void
state_store_incr_counts_and_refuses_non_integers (void **state)
{
   fw_state_store_t *s = fw_state_store_new (1 << 20);
   fw_state_value_t str = {.type = FW_STATE_STRING, .s = "x", .len = 1};
   fw_error_t err;
   int64_t r = 0;
   (void) state;

   fw_state_store_set_clock (s, fake_clock, NULL);
   fake_now = 0;
   assert_true (fw_state_store_incr (s, "n", 1, 1, 1000, &r, &err));
   assert_int_equal (r, 1);
   fake_now = 900;
   assert_true (fw_state_store_incr (s, "n", 1, 5, 1000, &r, &err)); /* keeps its expiry */
   assert_int_equal (r, 6);
   fake_now = 1000;
   assert_true (fw_state_store_incr (s, "n", 1, 1, 0, &r, &err)); /* expired: starts over */
   assert_int_equal (r, 1);
   assert_true (fw_state_store_set (s, "s", 1, &str, 0, &err));
   assert_false (fw_state_store_incr (s, "s", 1, 1, 0, &r, &err));
   assert_string_equal (err.message,
                        "fw.state.incr: the value of key \"s\" is a string, not an integer");
   set_int (s, "max", INT64_MAX, 0);
   assert_false (fw_state_store_incr (s, "max", 3, 1, 0, &r, &err));
   assert_string_equal (err.message, "fw.state.incr: integer overflow adding 1 to key \"max\"");
   fw_state_store_destroy (s);
}

static void
state_store_many_keys_grow_the_table (void **state)
{
   fw_state_store_t *s = fw_state_store_new (64 << 20);
   fw_state_value_t v;
   fw_error_t err;
   char key[32];
   (void) state;

   for (int i = 0; i < 100000; i++) {
      snprintf (key, sizeof key, "key-%d", i);
      set_int (s, key, i, 0);
   }
   for (int i = 0; i < 100000; i += 997) {
      snprintf (key, sizeof key, "key-%d", i);
      assert_true (fw_state_store_get (s, key, strlen (key), &v, &err));
      assert_int_equal (v.i, i);
   }
   assert_true (fw_state_store_delete (s, "key-5", 5));
   assert_false (fw_state_store_delete (s, "key-5", 5));
   fw_state_store_destroy (s);
   fw_state_store_destroy (NULL);
}

/* --- the Lua functions ---------------------------------------------------- */

static char result[2048];

static bool
run (fw_lua_host_t *host, const char *code)
{
   lua_State *L = fw_lua_host_state (host);
   char chunk[4096];
   fw_lua_stop_t stop;
   bool ok;

   snprintf (chunk, sizeof chunk, "local fw = require('flowwarden')\n%s", code);
   assert_int_equal (luaL_loadstring (L, chunk), LUA_OK);
   ok = fw_lua_host_call (host, 0, 1, 5000, &stop);
   if (!ok) {
      lua_getfield (L, -1, "value");
      lua_replace (L, -2);
   }
   snprintf (result, sizeof result, "%s", luaL_tolstring (L, -1, NULL));
   lua_pop (L, 2);
   return ok;
}

static void
state_lua_values_keep_their_types_and_survive_a_new_state (void **state)
{
   fw_state_store_t *s = fw_state_store_new (1 << 20);
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   (void) state;

   fw_lua_state_attach (fw_lua_host_state (host), s);
   assert_true (
      run (host,
           "fw.state.set('i', 3) fw.state.set('f', 3.0) fw.state.set('s', 'a\\0b')\n"
           "fw.state.set('b', false) fw.state.set('gone', 1) fw.state.set('gone', nil)\n"
           "return math.type(fw.state.get('i')) .. math.type(fw.state.get('f')) .. "
           "#fw.state.get('s') .. tostring(fw.state.get('b')) .. "
           "tostring(fw.state.get('gone')) .. fw.state.incr('i') .. fw.state.incr('i', -10)"));
   assert_string_equal (result, "integerfloat3falsenil4-6");
   /* A reload builds a new state; the store is the runtime's. */
   fw_lua_host_destroy (host);
   host = fw_lua_host_new (NULL);
   fw_lua_state_attach (fw_lua_host_state (host), s);
   assert_true (run (host,
                     "local st = fw.state.stats()\n"
                     "return fw.state.get('i') .. ' ' .. st.entries .. ' ' .. st.max_bytes"));
   assert_string_equal (result, "-6 4 1048576");
   fw_lua_host_destroy (host);
   fw_state_store_destroy (s);
}

static void
state_lua_errors_are_clear (void **state)
{
   fw_state_store_t *s = fw_state_store_new (1 << 20);
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   lua_State *L = fw_lua_host_state (host);
   (void) state;

   fw_lua_state_attach (L, s);
   assert_false (run (host, "fw.state.set('t', {})"));
   assert_non_null (strstr (result,
                            "fw.state.set: cannot store a table (values are nil, booleans, "
                            "numbers and strings; store a table as text with fw.json.encode"));
   assert_false (run (host, "fw.state.get(1)"));
   assert_non_null (strstr (result, "fw.state.get: key must be a string, got number"));
   assert_false (run (host, "fw.state.set('x', 1, { ttl = '1y' })"));
   assert_non_null (strstr (result, "fw.state.set: ttl: invalid duration \"1y\""));
   assert_false (run (host, "fw.state.set('x', 1, { tll = '1s' })"));
   assert_non_null (strstr (result, "fw.state.set: unknown option tll (the only option is ttl)"));
   assert_false (run (host, "fw.state.set('x', 'a') return fw.state.incr('x')"));
   assert_non_null (
      strstr (result, "fw.state.incr: the value of key \"x\" is a string, not an integer"));
   assert_false (run (host, "return fw.state.incr('n', 1.5)"));
   assert_non_null (strstr (result, "fw.state.incr: by must be an integer, got a float"));
   /* Outside a handler (script top level): the gate of every IO function. */
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden");
   assert_int_equal (lua_pcall (L, 1, 1, 0), LUA_OK);
   lua_getfield (L, -1, "state");
   lua_getfield (L, -1, "get");
   lua_pushliteral (L, "k");
   assert_int_not_equal (lua_pcall (L, 1, 1, 0), LUA_OK);
   assert_non_null (strstr (lua_tostring (L, -1), "fw.state is available inside handlers only"));
   lua_pop (L, 3);
   fw_lua_host_destroy (host);
   fw_state_store_destroy (s);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (state_store_ttl_expires_on_access_with_injected_clock),
      cmocka_unit_test (state_store_sweep_removes_expired_entries_nobody_reads),
      cmocka_unit_test (state_store_evicts_least_recently_used_beyond_max_bytes),
      cmocka_unit_test (state_store_refuses_an_entry_larger_than_the_bound),
      cmocka_unit_test (state_store_incr_counts_and_refuses_non_integers),
      cmocka_unit_test (state_store_many_keys_grow_the_table),
      cmocka_unit_test (state_lua_values_keep_their_types_and_survive_a_new_state),
      cmocka_unit_test (state_lua_errors_are_clear),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
