/*
 * test_bson_lua_errors.c - what conversion refuses and how it says so: bad
 * values and keys with their paths, cycles, depth limits, corrupt BSON,
 * memory exhaustion; and the smaller entry points (append, push_value, array).
 */
#include "bson_lua_test.h"

static void
bad_values_name_their_path (void **state)
{
   lua_State *L = *state;

   assert_to_bson_error (L, "return {items = {{price = 1}, {}, {price = print}}}", "fullDocument",
                         "fullDocument.items[3].price: cannot convert a function to BSON");
   assert_to_bson_error (L, "return {co = coroutine.create(print)}", "doc",
                         "doc.co: cannot convert a thread to BSON");
   assert_to_bson_error (L, "return {a = {b = io.stdout}}", "doc",
                         "doc.a.b: cannot convert a userdata to BSON");
   assert_to_bson_error (L, "return {[1] = {f = function () end}}", NULL,
                         "[1].f: cannot convert a function to BSON");
   assert_to_bson_error (L, "return print", "doc",
                         "doc: expected a table to convert to a BSON document, got function");
   assert_to_bson_error (L, "return {x = print}", "", "x: cannot convert a function to BSON");
   assert_to_bson_error (L, "return 1", NULL,
                         "(root): expected a table to convert to a BSON document, got number");
}

static void
bad_keys_are_rejected (void **state)
{
   lua_State *L = *state;

   assert_to_bson_error (L, "return {a = {[true] = 1}}", "doc",
                         "doc.a: table has a boolean key; BSON keys must be strings, or 1..n "
                         "for an array");
   assert_to_bson_error (L, "return {a = {[1.5] = 1}}", "doc",
                         "doc.a: table has a float key (1.5); BSON keys must be strings, or "
                         "1..n for an array");
   assert_to_bson_error (L, "return {a = {1, 2, x = 3}}", "doc",
                         "doc.a: table mixes string keys and integer keys");
   assert_to_bson_error (L, "return {a = {[1] = 1, [3] = 3}}", "doc",
                         "doc.a: table keys are integers but not a sequence 1..n; arrays "
                         "cannot have holes (use null for a BSON null)");
   assert_to_bson_error (L, "return {a = {[0] = 1}}", "doc",
                         "doc.a: table keys are integers but not a sequence 1..n; arrays "
                         "cannot have holes (use null for a BSON null)");
   assert_to_bson_error (L, "return {['a\\0b'] = 1}", "doc",
                         "doc: a key contains a NUL byte, which BSON keys cannot hold");
   /* Keys met in the hash part after string keys (the walk that sorts out a
    * table also collects up to 8 string keys for sorting, issue 41). */
   assert_to_bson_error (L, "local t = {a = 1, b = 2, c = 3}; t[7] = 4; return {a = t}", "doc",
                         "doc.a: table mixes string keys and integer keys");
   assert_to_bson_error (L,
                         "local t = {}; for i = 1, 10 do t['k' .. i] = i end; t[20] = 1;"
                         " return {a = t}",
                         "doc", "doc.a: table mixes string keys and integer keys");
   assert_to_bson_error (L, "local t = {a = 1, b = 2}; t[2.5] = 1; return {a = t}", "doc",
                         "doc.a: table has a float key (2.5); BSON keys must be strings, or "
                         "1..n for an array");
   assert_to_bson_error (L, "return {a = {x = 1, ['y\\0'] = 2}}", "doc",
                         "doc.a: a key contains a NUL byte, which BSON keys cannot hold");
}

static void
array_marked_tables_reject_holes_and_keys (void **state)
{
   lua_State *L = *state;

   assert_to_bson_error (L, "local a = fw.array({1, 2, 3}); a[2] = nil; return {list = a}", "doc",
                         "doc.list[2]: array element is nil; arrays cannot have holes (use "
                         "null for a BSON null)");
   assert_to_bson_error (L, "local a = fw.array({1}); a.x = 1; return {list = a}", "doc",
                         "doc.list: array has a key outside 1..1: \"x\"");
}

static void
fields_added_to_documents_are_checked (void **state)
{
   lua_State *L = *state;

   push_json (L, "{\"a\": {\"b\": 1}}");
   lua_setglobal (L, "doc");
   assert_to_bson_error (L, "doc.a[1] = 2; return doc", "updateDescription",
                         "updateDescription.a: table mixes string keys and integer keys");
   assert_to_bson_error (L, "doc.a[1] = nil; doc.a.f = print; return doc", "doc",
                         "doc.a.f: cannot convert a function to BSON");
}

static void
cycles_are_rejected (void **state)
{
   lua_State *L = *state;

   assert_to_bson_error (L, "local t = {a = {}}; t.a.back = t; return t", "doc",
                         "doc.a.back: table contains itself (a cycle)");
   assert_to_bson_error (L, "local t = fw.array(); t[1] = t; return {t}", "doc",
                         "doc[1][1]: table contains itself (a cycle)");
}

static void
shared_tables_are_not_cycles (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "local s = {x = 1}; return {a = s, b = s, c = {s, s}}");
   out = pop_to_bson (L);
   assert_json (out, "{\"a\": {\"x\": 1}, \"b\": {\"x\": 1}, \"c\": [{\"x\": 1}, {\"x\": 1}]}");
   bson_destroy (out);
}

static void
depth_limit_to_bson (void **state)
{
   lua_State *L = *state;
   char expected[FW_ERROR_MESSAGE_MAX];
   size_t at;
   int i;

   /* FW_BSON_LUA_MAX_DEPTH levels convert; one more does not. */
   eval (L, "local t = {} for i = 2, 128 do t = {a = t} end return t");
   bson_destroy (pop_to_bson (L));

   at = (size_t) snprintf (expected, sizeof expected, "doc");
   for (i = 0; i < FW_BSON_LUA_MAX_DEPTH; i++) {
      at += (size_t) snprintf (expected + at, sizeof expected - at, ".a");
   }
   snprintf (expected + at, sizeof expected - at, ": nesting deeper than 128 levels");
   assert_to_bson_error (L, "local t = {} for i = 1, 128 do t = {a = t} end return t", "doc",
                         expected);
}

static void
depth_limit_from_bson (void **state)
{
   lua_State *L = *state;
   bson_t *doc = bson_new ();
   fw_error_t err;
   int i;

   /* Build {a: {a: ... {}}} with 129 levels from the inside out. */
   for (i = 0; i < FW_BSON_LUA_MAX_DEPTH; i++) {
      bson_t *outer = bson_new ();
      BSON_APPEND_DOCUMENT (outer, "a", doc);
      bson_destroy (doc);
      doc = outer;
   }
   assert_false (fw_bson_lua_push_document (L, doc, "fullDocument", &err));
   assert_int_equal (lua_gettop (L), 0);
   assert_non_null (strstr (err.message, ".a.a: nesting deeper than 128 levels"));
   assert_memory_equal (err.message, "fullDocument.a.a.a", 18);
   bson_destroy (doc);
}

static void
long_paths_are_shortened (void **state)
{
   lua_State *L = *state;
   bson_t out = BSON_INITIALIZER;
   fw_error_t err;

   eval (L, "local t = {bad = print} for i = 1, 60 do t = {level_name_x = t} end return t");
   assert_false (fw_bson_lua_to_bson (L, -1, "doc", &out, &err));
   assert_true (strlen (err.message) < 400);
   assert_memory_equal (err.message, "doc.level_name_x.level_name_x", 29);
   assert_non_null (strstr (err.message, "..."));
   assert_non_null (strstr (err.message, ".level_name_x.bad: cannot convert a function to BSON"));
   lua_settop (L, 0);
   bson_reinit (&out);

   eval (L, "return {[string.rep('k', 100)] = {f = print}}");
   assert_false (fw_bson_lua_to_bson (L, -1, "doc", &out, &err));
   assert_string_equal (err.message,
                        "doc.kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk..."
                        ".f: cannot convert a function to BSON");
   lua_settop (L, 0);
   bson_destroy (&out);
}

/* An allocator that fails once `budget` bytes of new memory have been used. */
typedef struct {
   lua_Alloc real;
   void *real_ud;
   size_t budget;
} tight_alloc_t;

static void *
tight_alloc (void *ud, void *ptr, size_t osize, size_t nsize)
{
   tight_alloc_t *t = ud;

   if (ptr == NULL) {
      osize = 0;
   }
   if (nsize > osize) {
      if (nsize - osize > t->budget) {
         return NULL;
      }
      t->budget -= nsize - osize;
   }
   return t->real (t->real_ud, ptr, osize, nsize);
}

static int
push_protected (lua_State *L)
{
   fw_error_t err;
   fw_bson_lua_push_document (L, lua_touserdata (L, 1), "doc", &err);
   return 1;
}

static void
memory_errors_are_contained (void **state)
{
   lua_State *L = *state;
   bson_t *doc = from_json (EVERY_TYPE_JSON);
   bson_t out = BSON_INITIALIZER;
   tight_alloc_t t;
   fw_error_t err;

   eval (L, "local t = {} for i = 1, 200 do t['key' .. i] = {i} end return t");
   lua_gc (L, LUA_GCCOLLECT);
   lua_gc (L, LUA_GCSTOP);
   t.real = lua_getallocf (L, &t.real_ud);
   t.budget = 64;
   lua_setallocf (L, tight_alloc, &t);

   assert_false (fw_bson_lua_to_bson (L, -1, "doc", &out, &err));
   assert_int_equal (err.domain, FW_ERROR_NOMEM);
   assert_string_equal (err.message, "doc: not enough memory");
   assert_int_equal (lua_gettop (L), 1);

   t.budget = 2000; /* the event needs far more */
   lua_pushcfunction (L, push_protected);
   lua_pushlightuserdata (L, doc);
   assert_int_equal (lua_pcall (L, 1, 1, 0), LUA_ERRMEM);

   lua_setallocf (L, t.real, t.real_ud);
   lua_gc (L, LUA_GCRESTART);
   lua_settop (L, 0);
   bson_destroy (&out);
   bson_destroy (doc);
}

static void
corrupt_bson_is_reported (void **state)
{
   lua_State *L = *state;
   bson_t *doc = from_json ("{\"a\": {\"b\": \"xyz\"}}");
   uint8_t bytes[64];
   bson_t bad;
   fw_error_t err;

   memcpy (bytes, bson_get_data (doc), doc->len);
   bytes[17] = 0x7f; /* the inner string's length now runs past the end */
   assert_true (bson_init_static (&bad, bytes, doc->len));
   assert_false (fw_bson_lua_push_document (L, &bad, "doc", &err));
   assert_string_equal (err.message, "doc.a: corrupt BSON document");
   assert_int_equal (lua_gettop (L), 0);
   bson_destroy (doc);
}

/* A CodeWScope whose scope lacks its trailing NUL passed libbson's iterator
 * and became a value that could not be written back ("would exceed its
 * maximum size"). Found by fuzz_bson_to_lua. */
static void
corrupt_code_w_scope_is_reported (void **state)
{
   lua_State *L = *state;
   bson_t *doc = from_json ("{\"cws\": {\"$code\": \"x\", \"$scope\": {\"y\": 1}}}");
   uint8_t bytes[64];
   bson_t bad;
   fw_error_t err;

   memcpy (bytes, bson_get_data (doc), doc->len);
   assert_int_equal (bytes[doc->len - 2], 0); /* the scope's trailing NUL */
   bytes[doc->len - 2] = 0x7f;
   assert_true (bson_init_static (&bad, bytes, doc->len));
   assert_false (fw_bson_lua_push_document (L, &bad, "doc", &err));
   assert_string_equal (err.message,
                        "doc.cws: corrupt BSON code_w_scope (its scope is not a document)");
   assert_int_equal (lua_gettop (L), 0);
   bson_destroy (doc);
}

static void
append_single_values_atomically (void **state)
{
   lua_State *L = *state;
   bson_t out = BSON_INITIALIZER;
   fw_error_t err;

   lua_pushinteger (L, 42);
   assert_true (fw_bson_lua_append (L, -1, &out, "answer", -1, NULL, &err));
   eval (L, "return {x = fw.int64(1)}");
   assert_true (fw_bson_lua_append (L, -1, &out, "meta", 4, NULL, &err));
   lua_pushnil (L);
   assert_false (fw_bson_lua_append (L, -1, &out, "gone", -1, NULL, &err));
   assert_string_equal (err.message, "gone: cannot convert nil to BSON (use null for a BSON null)");
   eval (L, "return {f = print}");
   assert_false (fw_bson_lua_append (L, -1, &out, "m", -1, "metadata.m", &err));
   assert_string_equal (err.message, "metadata.m.f: cannot convert a function to BSON");
   assert_int_equal (lua_gettop (L), 4);
   lua_settop (L, 0);
   /* Failed appends leave nothing behind, not even a half-written "m". */
   assert_json (&out, "{\"answer\": 42, \"meta\": {\"x\": {\"$numberLong\": \"1\"}}}");
   bson_destroy (&out);
}

static void
push_value_and_push_array (void **state)
{
   lua_State *L = *state;
   bson_t *doc = from_json ("{\"n\": {\"$numberLong\": \"7\"}, \"list\": [1, [2]]}");
   bson_t *arr = from_json ("{\"0\": \"a\", \"1\": \"b\"}");
   bson_iter_t it;
   fw_error_t err;

   assert_true (bson_iter_init_find (&it, doc, "n"));
   assert_true (fw_bson_lua_push_value (L, &it, "n", &err));
   assert_true (lua_isinteger (L, -1) && lua_tointeger (L, -1) == 7);
   assert_true (bson_iter_init_find (&it, doc, "list"));
   assert_true (fw_bson_lua_push_value (L, &it, "list", &err));
   lua_setglobal (L, "list");
   check (L, "return getmetatable(list) == 'flowwarden.array' and list[2][1] == 2");
   assert_true (fw_bson_lua_push_array (L, arr, "arr", &err));
   lua_setglobal (L, "arr");
   check (L, "return getmetatable(arr) == 'flowwarden.array' and arr[2] == 'b'");
   assert_int_equal (lua_gettop (L), 1);
   lua_settop (L, 0);
   bson_destroy (doc);
   bson_destroy (arr);
}

static void
array_function_marks_tables (void **state)
{
   lua_State *L = *state;

   check (L, "local t = {}; return fw.array(t) == t and getmetatable(t) == 'flowwarden.array'");
   assert_string_equal (eval_error (L, "fw.array(setmetatable({}, {}))"),
                        "test:1: array: the table already has a metatable");
   assert_string_equal (eval_error (L, "fw.array(1)"),
                        "test:1: array: expected a table, got number");
   lua_settop (L, 0);
}

static void
shape_metatables_are_protected (void **state)
{
   lua_State *L = *state;

   push_json (L, "{\"a\": [1]}");
   lua_setglobal (L, "doc");
   assert_non_null (
      strstr (eval_error (L, "setmetatable(doc, nil)"), "cannot change a protected metatable"));
   lua_settop (L, 0);
}

int
main (void)
{
#define T(name) cmocka_unit_test_setup_teardown (name, setup, teardown)
   const struct CMUnitTest tests[] = {
      T (bad_values_name_their_path),
      T (bad_keys_are_rejected),
      T (array_marked_tables_reject_holes_and_keys),
      T (fields_added_to_documents_are_checked),
      T (cycles_are_rejected),
      T (shared_tables_are_not_cycles),
      T (depth_limit_to_bson),
      T (depth_limit_from_bson),
      T (long_paths_are_shortened),
      T (memory_errors_are_contained),
      T (corrupt_bson_is_reported),
      T (corrupt_code_w_scope_is_reported),
      T (append_single_values_atomically),
      T (push_value_and_push_array),
      T (array_function_marks_tables),
      T (shape_metatables_are_protected),
   };
#undef T

   return cmocka_run_group_tests_name ("bson_lua_errors", tests, NULL, NULL);
}
