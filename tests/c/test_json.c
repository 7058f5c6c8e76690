/* fw.json in a real host: every BSON type to Extended JSON and back, views,
 * the null sentinel, limits and error texts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <lauxlib.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "runtime/host/lua_host.h"

static char result[8192];

/* Runs code (a chunk with `fw` in scope) as a handler would run; returns
 * true and its string result, or false and the error message. */
static bool
run (fw_lua_host_t *host, const char *code)
{
   lua_State *L = fw_lua_host_state (host);
   char chunk[8192];
   fw_lua_stop_t stop;
   bool ok;

   snprintf (chunk, sizeof chunk, "local fw = require('flowwarden')\n%s", code);
   assert_int_equal (luaL_loadstring (L, chunk), LUA_OK);
   ok = fw_lua_host_call (host, 0, 1, 5000, &stop);
   if (getenv ("FW_TEST_VERBOSE") && !ok) {
      lua_getfield (L, -1, "value");
      fprintf (stderr, "error: %s\n", luaL_tolstring (L, -1, NULL));
      lua_pop (L, 2);
   }
   if (ok) {
      snprintf (result, sizeof result, "%s", lua_tostring (L, -1) ? lua_tostring (L, -1) : "(nil)");
   } else {
      lua_getfield (L, -1, "value");
      snprintf (result, sizeof result, "%s", luaL_tolstring (L, -1, NULL));
      lua_pop (L, 2);
   }
   lua_pop (L, 1);
   return ok;
}

static fw_lua_host_t *
new_host (void)
{
   fw_lua_host_t *host = fw_lua_host_new (NULL);
   assert_non_null (host);
   return host;
}

/* Every BSON type, as a document built by libbson. */
static void
build_all_types (bson_t *doc)
{
   bson_oid_t oid;
   bson_decimal128_t dec;
   bson_t scope, arr, sub;
   const uint8_t bin[] = {1, 2, 3, 255};

   bson_oid_init_from_string (&oid, "64f1a2b3c4d5e6f7a8b9c0d1");
   bson_decimal128_from_string ("19.99", &dec);
   bson_init (doc);
   BSON_APPEND_OID (doc, "_id", &oid);
   BSON_APPEND_DOUBLE (doc, "dbl", 2.0);
   BSON_APPEND_UTF8 (doc, "str", "a\"b/\xc3\xa9");
   BSON_APPEND_DOCUMENT_BEGIN (doc, "sub", &sub);
   BSON_APPEND_INT32 (&sub, "z", 1);
   BSON_APPEND_INT32 (&sub, "a", 2);
   bson_append_document_end (doc, &sub);
   BSON_APPEND_ARRAY_BEGIN (doc, "arr", &arr);
   BSON_APPEND_INT32 (&arr, "0", 1);
   BSON_APPEND_UTF8 (&arr, "1", "x");
   bson_append_array_end (doc, &arr);
   BSON_APPEND_ARRAY_BEGIN (doc, "empty", &arr);
   bson_append_array_end (doc, &arr);
   BSON_APPEND_BINARY (doc, "bin", BSON_SUBTYPE_USER, bin, sizeof bin);
   BSON_APPEND_UNDEFINED (doc, "undef");
   BSON_APPEND_BOOL (doc, "yes", true);
   BSON_APPEND_DATE_TIME (doc, "date", 1714564800123);
   BSON_APPEND_DATE_TIME (doc, "old", -1000);
   BSON_APPEND_NULL (doc, "nul");
   BSON_APPEND_REGEX (doc, "re", "^a.c", "im");
   BSON_APPEND_DBPOINTER (doc, "ptr", "orders", &oid);
   BSON_APPEND_CODE (doc, "code", "return 1");
   BSON_APPEND_SYMBOL (doc, "sym", "legacy");
   bson_init (&scope);
   BSON_APPEND_INT32 (&scope, "x", 1);
   BSON_APPEND_CODE_WITH_SCOPE (doc, "cws", "return x", &scope);
   bson_destroy (&scope);
   BSON_APPEND_INT32 (doc, "i32", -7);
   BSON_APPEND_TIMESTAMP (doc, "ts", 1714564800, 3);
   BSON_APPEND_INT64 (doc, "i64", 5);
   BSON_APPEND_INT64 (doc, "big", 9007199254740993LL);
   BSON_APPEND_DECIMAL128 (doc, "dec", &dec);
   BSON_APPEND_MINKEY (doc, "min");
   BSON_APPEND_MAXKEY (doc, "max");
}

static const char ALL_TYPES_JSON[] =
   "{\"_id\":{\"$oid\":\"64f1a2b3c4d5e6f7a8b9c0d1\"},\"dbl\":2.0,\"str\":\"a\\\"b/\xc3\xa9\","
   "\"sub\":{\"z\":1,\"a\":2},\"arr\":[1,\"x\"],\"empty\":[],"
   "\"bin\":{\"$binary\":{\"base64\":\"AQID/w==\",\"subType\":\"80\"}},"
   "\"undef\":{\"$undefined\":true},\"yes\":true,\"date\":{\"$date\":\"2024-05-01T12:00:00.123Z\"},"
   "\"old\":{\"$date\":{\"$numberLong\":\"-1000\"}},\"nul\":null,"
   "\"re\":{\"$regularExpression\":{\"pattern\":\"^a.c\",\"options\":\"im\"}},"
   "\"ptr\":{\"$dbPointer\":{\"$ref\":\"orders\",\"$id\":{\"$oid\":\"64f1a2b3c4d5e6f7a8b9c0d1\"}}},"
   "\"code\":{\"$code\":\"return 1\"},\"sym\":{\"$symbol\":\"legacy\"},"
   "\"cws\":{\"$code\":\"return x\",\"$scope\":{\"x\":1}},\"i32\":-7,"
   "\"ts\":{\"$timestamp\":{\"t\":1714564800,\"i\":3}},\"i64\":5,"
   "\"big\":{\"$numberLong\":\"9007199254740993\"},\"dec\":{\"$numberDecimal\":\"19.99\"},"
   "\"min\":{\"$minKey\":1},\"max\":{\"$maxKey\":1}}";

static void
push_all_types_view (lua_State *L)
{
   bson_t doc;
   /* Views get their metatable once flowwarden.core is open, as in a stream. */
   lua_getglobal (L, "require");
   lua_pushliteral (L, "flowwarden");
   assert_int_equal (lua_pcall (L, 1, 0, 0), LUA_OK);
   build_all_types (&doc);
   fw_bson_view_push_copy (L, bson_get_data (&doc), doc.len, false);
   lua_setglobal (L, "doc");
   bson_destroy (&doc);
}

static void
json_encodes_every_bson_type_of_a_view_as_relaxed_extended_json (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   push_all_types_view (fw_lua_host_state (host));
   assert_true (run (host, "return fw.json.encode(doc)"));
   assert_string_equal (result, ALL_TYPES_JSON);
   fw_lua_host_destroy (host);
}

/* mode = "plain": what a web hook that knows nothing of Extended JSON reads. */
static const char ALL_TYPES_PLAIN[] =
   "{\"_id\":\"64f1a2b3c4d5e6f7a8b9c0d1\",\"dbl\":2.0,\"str\":\"a\\\"b/\xc3\xa9\","
   "\"sub\":{\"z\":1,\"a\":2},\"arr\":[1,\"x\"],\"empty\":[],"
   "\"bin\":\"AQID/w==\",\"undef\":null,\"yes\":true,\"date\":\"2024-05-01T12:00:00.123Z\","
   "\"old\":\"1969-12-31T23:59:59.000Z\",\"nul\":null,\"re\":\"/^a.c/im\","
   "\"ptr\":{\"ref\":\"orders\",\"id\":\"64f1a2b3c4d5e6f7a8b9c0d1\"},"
   "\"code\":\"return 1\",\"sym\":\"legacy\",\"cws\":{\"code\":\"return x\",\"scope\":{\"x\":1}},"
   "\"i32\":-7,\"ts\":{\"t\":1714564800,\"i\":3},\"i64\":5,\"big\":\"9007199254740993\","
   "\"dec\":\"19.99\",\"min\":\"MinKey\",\"max\":\"MaxKey\"}";

static void
json_plain_mode_writes_every_bson_type_of_a_view_as_plain_json (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   push_all_types_view (fw_lua_host_state (host));
   assert_true (run (host, "return fw.json.encode(doc, { mode = 'plain' })"));
   assert_string_equal (result, ALL_TYPES_PLAIN);
   /* The default stays Extended JSON, and "extended" names it. */
   assert_true (run (host, "return fw.json.encode(doc, { mode = 'extended' })"));
   assert_string_equal (result, ALL_TYPES_JSON);
   /* Typed values built in Lua and nested in tables, and far-off dates. */
   assert_true (run (host,
                     "return fw.json.encode({ id = fw.object_id('64f1a2b3c4d5e6f7a8b9c0d1'), "
                     "at = fw.date(-62198755200000), far = fw.date(8640000000000000), "
                     "n = fw.int64(-9007199254740992), m = fw.int64(-9007199254740993) }, "
                     "{ mode = 'plain' })"));
   assert_string_equal (result,
                        "{\"at\":\"-000001-01-01T00:00:00.000Z\","
                        "\"far\":\"+275760-09-13T00:00:00.000Z\","
                        "\"id\":\"64f1a2b3c4d5e6f7a8b9c0d1\",\"m\":\"-9007199254740993\","
                        "\"n\":-9007199254740992}");
   fw_lua_host_destroy (host);
}

static void
json_extended_decode_gives_back_the_same_bson_bytes (void **state)
{
   fw_lua_host_t *host = new_host ();
   lua_State *L = fw_lua_host_state (host);
   bson_t doc, back = BSON_INITIALIZER;
   fw_error_t err;
   (void) state;

   push_all_types_view (L);
   /* Decoded tables are written _id first, then sorted: compare through the
    * view of the original, re-encoded (the view keeps BSON order). */
   assert_true (run (host,
                     "local v = fw.json.decode(fw.json.encode(doc), { extended = true })\n"
                     "decoded = v\n"
                     "for k, x in pairs(doc) do\n"
                     "  local y = v[k]\n"
                     "  if type(x) == 'userdata' and getmetatable(x) == 'flowwarden.view' then\n"
                     "    x, y = fw.json.encode(fw.table(x)), fw.json.encode(y)\n"
                     "  end\n"
                     "  if x ~= y and not (k == 'big' and y.value == x) then\n"
                     "    return k .. ': ' .. tostring(x) .. ' ~= ' .. tostring(y)\n"
                     "  end\n"
                     "end\n"
                     "assert(math.type(v.dbl) == 'float' and math.type(v.i32) == 'integer')\n"
                     "assert(math.type(v.i64) == 'integer' and v.big.type == 'int64')\n"
                     "assert(v.big.value == 9007199254740993)\n"
                     "assert(v.nul == fw.null and fw.json.null == fw.null)\n"
                     "assert(getmetatable(v.empty) == 'flowwarden.array')\n"
                     "return 'same'"));
   assert_string_equal (result, "same");
   /* And to BSON: every element has the original's type and value. */
   build_all_types (&doc);
   lua_getglobal (L, "decoded");
   assert_true (fw_bson_lua_to_bson (L, -1, NULL, &back, &err));
   lua_pop (L, 1);
   {
      bson_iter_t a, b;
      assert_true (bson_iter_init (&a, &doc));
      while (bson_iter_next (&a)) {
         const bson_value_t *va, *vb;
         assert_true (bson_iter_init_find (&b, &back, bson_iter_key (&a)));
         if (!strcmp (bson_iter_key (&a), "i64")) {
            continue; /* relaxed JSON writes a small int64 as a number: int32 again */
         }
         va = bson_iter_value (&a);
         vb = bson_iter_value (&b);
         if (va->value_type != vb->value_type) {
            fail_msg ("%s: type %d became %d", bson_iter_key (&a), va->value_type, vb->value_type);
         }
      }
   }
   bson_destroy (&doc);
   bson_destroy (&back);
   fw_lua_host_destroy (host);
}

static void
json_canonical_extended_json_decodes_to_typed_values (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   assert_true (run (
      host,
      "local v = fw.json.decode([[{\"i\":{\"$numberInt\":\"42\"},\"l\":{\"$numberLong\":\"-9\"},"
      "\"d\":{\"$numberDouble\":\"1\"},\"inf\":{\"$numberDouble\":\"-Infinity\"},"
      "\"nan\":{\"$numberDouble\":\"NaN\"},"
      "\"date\":{\"$date\":{\"$numberLong\":\"1714564800000\"}},"
      "\"tz\":{\"$date\":\"2024-05-01T14:00:00+02:00\"},"
      "\"bin\":{\"$binary\":{\"base64\":\"\",\"subType\":\"4\"}},"
      "\"q\":{\"$gte\":5}}]], { extended = true })\n"
      "assert(v.i == 42 and math.type(v.i) == 'integer')\n"
      "assert(v.l == fw.int64(-9))\n"
      "assert(v.d == 1.0 and math.type(v.d) == 'float')\n"
      "assert(v.inf == -math.huge and v.nan ~= v.nan)\n"
      "assert(v.date == fw.date(1714564800000) and v.tz == v.date)\n"
      "assert(v.bin == fw.binary('', 4))\n"
      "assert(v.q['$gte'] == 5)\n"
      "return fw.json.encode(fw.json.decode('{\"$oid\":\"64f1a2b3c4d5e6f7a8b9c0d1\"}'))"));
   /* Without extended = true the wrappers stay plain objects. */
   assert_string_equal (result, "{\"$oid\":\"64f1a2b3c4d5e6f7a8b9c0d1\"}");
   fw_lua_host_destroy (host);
}

static void
json_errors_name_the_function_and_the_path (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   assert_false (run (host, "return fw.json.encode({ x = print })"));
   assert_string_equal (result, "fw.json.encode: cannot encode a function at $.x");
   assert_false (run (host, "return fw.json.encode({ a = { 1, nil, 3 } })"));
   assert_string_equal (result,
                        "fw.json.encode: cannot encode a sparse array (2 elements, highest "
                        "index 3; use fw.null for an empty slot) at $.a");
   assert_false (run (host, "return fw.json.encode({ a = { 1, b = 2 } })"));
   assert_string_equal (
      result, "fw.json.encode: cannot encode a table that mixes string and integer keys at $.a");
   assert_false (run (host, "local t = {} t.self = t return fw.json.encode(t)"));
   assert_string_equal (result, "fw.json.encode: a table contains itself at $.self");
   assert_false (run (
      host, "return fw.json.decode(string.rep('{\"a\":', 101) .. '1' .. string.rep('}', 101))"));
   assert_non_null (strstr (result, "fw.json.decode: nesting deeper than 100 at $.a.a.a"));
   assert_false (run (host, "return fw.json.decode('{\"a\": [1, 2,]}')"));
   assert_string_equal (result, "fw.json.decode: unexpected character ']' at character 13");
   assert_false (
      run (host, "return fw.json.decode('{\"a\": {\"$oid\": 5}}', { extended = true })"));
   assert_string_equal (result,
                        "fw.json.decode: invalid $oid (expected a string of 24 hexadecimal "
                        "digits) at $.a");
   assert_false (run (host, "return fw.code_w_scope('return x', 5)"));
   assert_non_null (strstr (result, "code_w_scope: scope must be a table, got number"));
   assert_true (run (host,
                     "local c = fw.code_w_scope('return x', { x = 1 })\n"
                     "return c.type .. ' ' .. c.code .. ' ' .. c.scope.x"));
   assert_string_equal (result, "code_w_scope return x 1");
   assert_false (run (host, "return fw.json.encode('\\255')"));
   assert_non_null (strstr (result, "not valid UTF-8"));
   fw_lua_host_destroy (host);
}

static void
json_numbers_keep_integers_and_floats_apart (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   assert_true (run (host,
                     "return fw.json.encode({ 1, 2.0, 0.1, -0.0, 1e300, 2^63, math.maxinteger, "
                     "9007199254740992, 0/0, math.huge })"));
   assert_string_equal (result,
                        "[1,2.0,0.1,-0.0,1e+300,9.223372036854776e+18,"
                        "{\"$numberLong\":\"9223372036854775807\"},9007199254740992,"
                        "{\"$numberDouble\":\"NaN\"},{\"$numberDouble\":\"Infinity\"}]");
   assert_true (run (host,
                     "local v = fw.json.decode('[1, 2.0, 1e2, -0, 9223372036854775807]')\n"
                     "return math.type(v[1]) .. math.type(v[2]) .. math.type(v[3]) .. "
                     "math.type(v[4]) .. v[5]"));
   assert_string_equal (result, "integerfloatfloatinteger9223372036854775807");
   fw_lua_host_destroy (host);
}

static void
json_pretty_and_key_order (void **state)
{
   fw_lua_host_t *host = new_host ();
   (void) state;

   assert_true (run (host,
                     "return fw.json.encode({ b = 1, a = { fw.array() }, _id = 3 }, "
                     "{ pretty = true })"));
   assert_string_equal (result, "{\n  \"_id\": 3,\n  \"a\": [\n    []\n  ],\n  \"b\": 1\n}");
   fw_lua_host_destroy (host);
}

int
main (void)
{
   const struct CMUnitTest tests[] = {
      cmocka_unit_test (json_encodes_every_bson_type_of_a_view_as_relaxed_extended_json),
      cmocka_unit_test (json_plain_mode_writes_every_bson_type_of_a_view_as_plain_json),
      cmocka_unit_test (json_extended_decode_gives_back_the_same_bson_bytes),
      cmocka_unit_test (json_canonical_extended_json_decodes_to_typed_values),
      cmocka_unit_test (json_errors_name_the_function_and_the_path),
      cmocka_unit_test (json_numbers_keep_integers_and_floats_apart),
      cmocka_unit_test (json_pretty_and_key_order),
   };
   return cmocka_run_group_tests (tests, NULL, NULL);
}
