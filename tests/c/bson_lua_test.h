/*
 * bson_lua_test.h - fixture and helpers shared by the BSON <-> Lua test files.
 *
 * Included by test_bson_lua.c, test_bson_lua_errors.c and test_bson_values.c
 * only; the functions are static inline so each file uses what it needs.
 */
#ifndef FLOWWARDEN_BSON_LUA_TEST_H
#define FLOWWARDEN_BSON_LUA_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <lauxlib.h>
#include <lualib.h>

#include "bson/bson_lua.h"
#include "bson/bson_values.h"

/* Every BSON type, nested documents and arrays, empties, keys out of order. */
#define EVERY_TYPE_JSON                                                                             \
   "{\"zeta\": \"first key on purpose\","                                                           \
   " \"_id\": {\"$oid\": \"5f1e2d3c4b5a69788796a5b4\"},"                                            \
   " \"double\": {\"$numberDouble\": \"1.5\"},"                                                     \
   " \"integral_double\": {\"$numberDouble\": \"2.0\"},"                                            \
   " \"string\": \"h\\u00e9llo\","                                                                  \
   " \"doc\": {\"b\": {\"$numberInt\": \"1\"}, \"a\": {\"c\": [], \"d\": {}}},"                     \
   " \"array\": [{\"$numberInt\": \"1\"}, \"two\", {\"x\": {}}, [], [[]]],"                         \
   " \"binary\": {\"$binary\": {\"base64\": \"AQID\", \"subType\": \"80\"}},"                       \
   " \"uuid\": {\"$binary\": {\"base64\": \"c//SZESzTGmQ6OfR38A11A==\", \"subType\": \"04\"}},"     \
   " \"undefined\": {\"$undefined\": true},"                                                        \
   " \"oid\": {\"$oid\": \"000000000000000000000001\"},"                                            \
   " \"true\": true, \"false\": false,"                                                             \
   " \"date\": {\"$date\": {\"$numberLong\": \"1700000000123\"}},"                                  \
   " \"null\": null,"                                                                               \
   " \"regex\": {\"$regularExpression\": {\"pattern\": \"^a.c$\", \"options\": \"im\"}},"           \
   " \"db_pointer\": {\"$dbPointer\": {\"$ref\": \"coll\","                                         \
   "                 \"$id\": {\"$oid\": \"5f1e2d3c4b5a69788796a5b4\"}}},"                          \
   " \"code\": {\"$code\": \"function () { return 1 }\"},"                                          \
   " \"symbol\": {\"$symbol\": \"sym\"},"                                                           \
   " \"code_w_scope\": {\"$code\": \"x + 1\", \"$scope\": {\"x\": {\"$numberInt\": \"1\"}}},"       \
   " \"int32\": {\"$numberInt\": \"-7\"},"                                                          \
   " \"timestamp\": {\"$timestamp\": {\"t\": 1700000000, \"i\": 7}},"                               \
   " \"int64\": {\"$numberLong\": \"9000000000\"},"                                                 \
   " \"small_int64\": {\"$numberLong\": \"5\"},"                                                    \
   " \"decimal\": {\"$numberDecimal\": \"123.456\"},"                                               \
   " \"min_key\": {\"$minKey\": 1},"                                                                \
   " \"max_key\": {\"$maxKey\": 1},"                                                                \
   " \"empty_doc\": {}, \"empty_array\": [],"                                                       \
   " \"mixed_ints\": [{\"$numberInt\": \"1\"}, {\"$numberLong\": \"2\"}, {\"$numberInt\": \"3\"}]," \
   " \"long_array\": [{\"$numberLong\": \"1\"}, {\"$numberLong\": \"2\"}],"                         \
   " \"after\": \"last\"}"

/* ---- fixture and helpers ----------------------------------------------- */

static inline int
setup (void **state)
{
   lua_State *L = luaL_newstate ();

   luaL_openlibs (L);
   lua_newtable (L);
   fw_bson_lua_open (L, -1);
   lua_setglobal (L, "fw");
   *state = L;
   return 0;
}

static inline int
teardown (void **state)
{
   lua_close (*state);
   return 0;
}

static inline bson_t *
from_json (const char *json)
{
   bson_error_t err;
   bson_t *b = bson_new_from_json ((const uint8_t *) json, -1, &err);

   if (!b) {
      fail_msg ("bad test JSON: %s", err.message);
   }
   return b;
}

/* Runs chunk (which returns one value) and leaves that value on the stack. */
static inline void
eval (lua_State *L, const char *chunk)
{
   if (luaL_loadstring (L, chunk) != LUA_OK || lua_pcall (L, 0, 1, 0) != LUA_OK) {
      fail_msg ("Lua failed: %s", lua_tostring (L, -1));
   }
}

/* Runs chunk (named "test") expecting it to raise; returns the message, which
 * carries the script position (valid until popped). */
static inline const char *
eval_error (lua_State *L, const char *chunk)
{
   if (luaL_loadbuffer (L, chunk, strlen (chunk), "=test") != LUA_OK) {
      fail_msg ("Lua syntax: %s", lua_tostring (L, -1));
   }
   if (lua_pcall (L, 0, 0, 0) == LUA_OK) {
      fail_msg ("expected an error from: %s", chunk);
   }
   return lua_tostring (L, -1);
}

/* Asserts that chunk returns true; the chunk is the test's Lua-side check. */
static inline void
check (lua_State *L, const char *chunk)
{
   int top = lua_gettop (L);

   eval (L, chunk);
   if (!lua_toboolean (L, -1)) {
      fail_msg ("Lua check failed: %s", chunk);
   }
   lua_settop (L, top);
}

static inline void
push_json (lua_State *L, const char *json)
{
   bson_t *b = from_json (json);
   fw_error_t err;

   assert_true (fw_bson_lua_push_document (L, b, "doc", &err));
   bson_destroy (b);
}

/* Converts the value on top of the stack, pops it, returns the document. */
static inline bson_t *
pop_to_bson (lua_State *L)
{
   bson_t *out = bson_new ();
   fw_error_t err;
   int top = lua_gettop (L);

   if (!fw_bson_lua_to_bson (L, -1, "doc", out, &err)) {
      fail_msg ("to_bson failed: %s", err.message);
   }
   assert_int_equal (lua_gettop (L), top);
   lua_pop (L, 1);
   return out;
}

static inline void
assert_json (const bson_t *b, const char *expected_json)
{
   bson_t *want = from_json (expected_json);
   char *got = bson_as_canonical_extended_json (b, NULL);
   char *exp = bson_as_canonical_extended_json (want, NULL);

   assert_string_equal (got, exp);
   bson_free (got);
   bson_free (exp);
   bson_destroy (want);
}

static inline void
assert_same_bytes (const bson_t *a, const bson_t *b)
{
   if (a->len != b->len || memcmp (bson_get_data (a), bson_get_data (b), a->len) != 0) {
      char *x = bson_as_canonical_extended_json (a, NULL);
      char *y = bson_as_canonical_extended_json (b, NULL);
      fail_msg ("not byte-identical:\n  %s\n  %s", x, y);
   }
}

/* Converts the Lua value `chunk` returns and expects failure with message. */
static inline void
assert_to_bson_error (lua_State *L, const char *chunk, const char *root, const char *message)
{
   bson_t out = BSON_INITIALIZER;
   fw_error_t err;
   int top = lua_gettop (L);

   eval (L, chunk);
   assert_false (fw_bson_lua_to_bson (L, -1, root, &out, &err));
   assert_int_equal (err.domain, FW_ERROR_INVALID);
   assert_string_equal (err.message, message);
   assert_int_equal (lua_gettop (L), top + 1);
   lua_settop (L, top);
   bson_destroy (&out);
}

/* Round-trips json through Lua (set as global `doc`), running edit between. */
static inline bson_t *
through_lua (lua_State *L, const char *json, const char *edit)
{
   push_json (L, json);
   lua_setglobal (L, "doc");
   if (edit && luaL_dostring (L, edit) != LUA_OK) {
      fail_msg ("edit failed: %s", lua_tostring (L, -1));
   }
   lua_getglobal (L, "doc");
   return pop_to_bson (L);
}

#endif
