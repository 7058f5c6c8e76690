/*
 * test_bson_lua.c - BSON <-> Lua conversion: types, widths, key order, errors.
 */
#include "bson_lua_test.h"

/* White-box: the shape cache tests plant colliding entries. */
#include "../../src/bson/bson_lua-private.h"

/* ---- round trips ------------------------------------------------------- */

static void
every_type_round_trip_byte_identical (void **state)
{
   lua_State *L = *state;
   bson_t *in = from_json (EVERY_TYPE_JSON);
   bson_t *out = through_lua (L, EVERY_TYPE_JSON, NULL);

   assert_same_bytes (in, out);
   bson_destroy (in);
   bson_destroy (out);
}

static void
round_trip_twice_uses_cached_shapes (void **state)
{
   lua_State *L = *state;
   bson_t *in = from_json (EVERY_TYPE_JSON);
   int i;

   for (i = 0; i < 3; i++) {
      bson_t *out = through_lua (L, EVERY_TYPE_JSON, NULL);
      assert_same_bytes (in, out);
      bson_destroy (out);
   }
   push_json (L, EVERY_TYPE_JSON);
   push_json (L, EVERY_TYPE_JSON);
   assert_true (lua_getmetatable (L, -1) && lua_getmetatable (L, -3));
   assert_true (lua_rawequal (L, -1, -2)); /* one shape shared by both tables */
   lua_settop (L, 0);
   bson_destroy (in);
}

static void
every_type_to_lua_values (void **state)
{
   lua_State *L = *state;

   push_json (L, EVERY_TYPE_JSON);
   lua_setglobal (L, "doc");
   check (L, "return doc.zeta == 'first key on purpose'");
   check (L, "return doc._id.type == 'object_id' and doc._id.hex == '5f1e2d3c4b5a69788796a5b4'");
   check (L, "return math.type(doc.double) == 'float' and doc.double == 1.5");
   check (L, "return math.type(doc.integral_double) == 'float' and doc.integral_double == 2");
   check (L, "return doc.string == 'h\\xc3\\xa9llo'");
   check (L, "return doc.doc.b == 1 and math.type(doc.doc.b) == 'integer'");
   check (L, "return #doc.doc.a.c == 0 and next(doc.doc.a.d) == nil");
   check (L, "return #doc.array == 5 and doc.array[1] == 1 and doc.array[2] == 'two'");
   check (L, "return doc.array[3].x ~= nil and #doc.array[5][1] == 0");
   check (L,
          "return doc.binary.type == 'binary' and doc.binary.subtype == 0x80 and "
          "doc.binary.data == '\\1\\2\\3'");
   check (L, "return doc.undefined.type == 'undefined'");
   check (L, "return doc['true'] == true and doc['false'] == false");
   check (L, "return doc.date.type == 'date' and doc.date.ms == 1700000000123");
   check (L, "return doc.null == fw.null");
   check (L, "return doc.regex.pattern == '^a.c$' and doc.regex.options == 'im'");
   check (L,
          "return doc.db_pointer.collection == 'coll' and "
          "doc.db_pointer.id == fw.object_id('5f1e2d3c4b5a69788796a5b4')");
   check (L, "return doc.code.code == 'function () { return 1 }'");
   check (L, "return doc.symbol.symbol == 'sym'");
   check (L, "return doc.code_w_scope.code == 'x + 1' and doc.code_w_scope.scope.x == 1");
   check (L, "return doc.int32 == -7 and math.type(doc.int32) == 'integer'");
   check (L, "return doc.timestamp.t == 1700000000 and doc.timestamp.i == 7");
   check (L, "return doc.int64 == 9000000000 and doc.small_int64 == 5");
   check (L, "return doc.decimal.string == '123.456'");
   check (L, "return doc.min_key.type == 'min_key' and doc.max_key.type == 'max_key'");
   check (L,
          "return getmetatable(doc) == 'flowwarden.document' and "
          "getmetatable(doc.empty_array) == 'flowwarden.array' and "
          "getmetatable(doc.empty_doc) == 'flowwarden.document'");
}

static void
lua_values_to_every_type (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L,
         "return { _id = fw.object_id('5f1e2d3c4b5a69788796a5b4'), d = 1.5, i = 7,"
         " s = 'x', t = true, n = fw.null, date = fw.date(1700000000123),"
         " ts = fw.timestamp(1700000000, 7), dec = fw.decimal128('-0.5E-3'),"
         " bin = fw.binary('\\1\\2', 5), re = fw.regex('a+', 'mi'), min = fw.min_key(),"
         " max = fw.max_key(), code = fw.code('f()'), sym = fw.symbol('s'),"
         " ptr = fw.db_pointer('c', '5f1e2d3c4b5a69788796a5b4'), u = fw.undefined(),"
         " l = fw.int64(5), arr = {1, 2}, empty = fw.array(), doc = {} }");
   out = pop_to_bson (L);
   assert_json (out,
                "{\"_id\": {\"$oid\": \"5f1e2d3c4b5a69788796a5b4\"},"
                " \"arr\": [{\"$numberInt\": \"1\"}, {\"$numberInt\": \"2\"}],"
                " \"bin\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"05\"}},"
                " \"code\": {\"$code\": \"f()\"}, \"d\": {\"$numberDouble\": \"1.5\"},"
                " \"date\": {\"$date\": {\"$numberLong\": \"1700000000123\"}},"
                " \"dec\": {\"$numberDecimal\": \"-0.0005\"}, \"doc\": {}, \"empty\": [],"
                " \"i\": {\"$numberInt\": \"7\"}, \"l\": {\"$numberLong\": \"5\"},"
                " \"max\": {\"$maxKey\": 1}, \"min\": {\"$minKey\": 1}, \"n\": null,"
                " \"ptr\": {\"$dbPointer\": {\"$ref\": \"c\","
                "          \"$id\": {\"$oid\": \"5f1e2d3c4b5a69788796a5b4\"}}},"
                " \"re\": {\"$regularExpression\": {\"pattern\": \"a+\", \"options\": \"im\"}},"
                " \"s\": \"x\", \"sym\": {\"$symbol\": \"s\"}, \"t\": true,"
                " \"ts\": {\"$timestamp\": {\"t\": 1700000000, \"i\": 7}},"
                " \"u\": {\"$undefined\": true}}");
   bson_destroy (out);
}

static void
int64_extremes_round_trip (void **state)
{
   lua_State *L = *state;
   const char *json =
      "{\"min\": {\"$numberLong\": \"-9223372036854775808\"},"
      " \"max\": {\"$numberLong\": \"9223372036854775807\"},"
      " \"arr\": [{\"$numberLong\": \"-9223372036854775808\"},"
      "           {\"$numberLong\": \"9223372036854775807\"}]}";
   bson_t *in = from_json (json);
   bson_t *out = through_lua (L, json, NULL);

   assert_same_bytes (in, out);
   check (L, "return doc.min == math.mininteger and doc.max == math.maxinteger");
   bson_destroy (in);
   bson_destroy (out);
}

static void
int32_boundaries_pick_the_width (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {a = 2147483647, b = 2147483648, c = -2147483648, d = -2147483649, e = 0}");
   out = pop_to_bson (L);
   assert_json (out,
                "{\"a\": {\"$numberInt\": \"2147483647\"},"
                " \"b\": {\"$numberLong\": \"2147483648\"},"
                " \"c\": {\"$numberInt\": \"-2147483648\"},"
                " \"d\": {\"$numberLong\": \"-2147483649\"},"
                " \"e\": {\"$numberInt\": \"0\"}}");
   bson_destroy (out);
}

static void
int64_fields_stay_int64_when_changed (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L,
                              "{\"n\": {\"$numberLong\": \"5\"}, \"m\": {\"$numberInt\": \"5\"}}",
                              "doc.n = doc.n + 1; doc.m = 1 << 31; doc.added = 1");

   assert_json (out,
                "{\"n\": {\"$numberLong\": \"6\"}, \"m\": {\"$numberLong\": \"2147483648\"},"
                " \"added\": {\"$numberInt\": \"1\"}}");
   bson_destroy (out);
}

static void
int64_array_elements_keep_width (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (
      L,
      "{\"all\": [{\"$numberLong\": \"1\"}, {\"$numberLong\": \"2\"}],"
      " \"mixed\": [{\"$numberInt\": \"1\"}, {\"$numberLong\": \"2\"}, 1.0]}",
      "table.insert(doc.all, 3); doc.mixed[3] = 3; table.insert(doc.mixed, 4)");

   assert_json (out,
                "{\"all\": [{\"$numberLong\": \"1\"}, {\"$numberLong\": \"2\"},"
                "          {\"$numberLong\": \"3\"}],"
                " \"mixed\": [{\"$numberInt\": \"1\"}, {\"$numberLong\": \"2\"},"
                "            {\"$numberInt\": \"3\"}, {\"$numberInt\": \"4\"}]}");
   bson_destroy (out);
}

static void
integral_doubles_stay_doubles (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L, "{\"a\": {\"$numberDouble\": \"2.0\"}, \"b\": [-0.0, 1e300]}",
                              "doc.c = 3.0; doc.d = 3");

   assert_json (out,
                "{\"a\": {\"$numberDouble\": \"2.0\"},"
                " \"b\": [{\"$numberDouble\": \"-0.0\"}, {\"$numberDouble\": \"1e+300\"}],"
                " \"c\": {\"$numberDouble\": \"3.0\"}, \"d\": {\"$numberInt\": \"3\"}}");
   bson_destroy (out);
}

static void
strings_are_binary_safe (void **state)
{
   lua_State *L = *state;
   bson_t doc = BSON_INITIALIZER, *out;
   fw_error_t err;

   bson_append_utf8 (&doc, "s", 1, "a\0b", 3);
   assert_true (fw_bson_lua_push_document (L, &doc, "doc", &err));
   lua_setglobal (L, "doc");
   check (L, "return doc.s == 'a\\0b' and #doc.s == 3");
   lua_getglobal (L, "doc");
   out = pop_to_bson (L);
   assert_same_bytes (&doc, out);
   bson_destroy (out);
   bson_destroy (&doc);
}

static void
null_is_a_unique_sentinel (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L, "{\"a\": null, \"b\": [null]}", NULL);

   assert_json (out, "{\"a\": null, \"b\": [null]}");
   check (L,
          "return tostring(fw.null) == 'null' and doc.a == fw.null and fw.null ~= nil"
          " and doc.b[1] == fw.null and type(fw.null) == 'userdata'");
   check (L, "return getmetatable(fw.null) == 'flowwarden.null'");
   bson_destroy (out);
}

static void
empty_array_stays_array (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L, "{\"a\": [], \"b\": {}, \"c\": [[], {}]}", NULL);

   assert_json (out, "{\"a\": [], \"b\": {}, \"c\": [[], {}]}");
   bson_destroy (out);
}

static void
empty_table_becomes_empty_document (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {a = {}, b = fw.array({}), c = fw.array()}");
   out = pop_to_bson (L);
   assert_json (out, "{\"a\": {}, \"b\": [], \"c\": []}");
   bson_destroy (out);
}

/* The root table empty: nothing had allocated the key scratch yet, and
 * sorting zero keys passed its NULL to qsort (found by UBSan in the
 * FW_SANITIZE build). */
static void
empty_root_table_becomes_empty_document (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {}");
   out = pop_to_bson (L);
   assert_json (out, "{}");
   bson_destroy (out);
}

static void
sequence_becomes_array (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {list = {'a', {x = 1}, {3}}, stages = {{['$match'] = {a = 1}}}}");
   out = pop_to_bson (L);
   assert_json (out,
                "{\"list\": [\"a\", {\"x\": 1}, [3]], \"stages\": [{\"$match\": {\"a\": 1}}]}");
   bson_destroy (out);
}

static void
root_sequence_writes_array_keys (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {'a', 'b'}");
   out = pop_to_bson (L);
   assert_json (out, "{\"0\": \"a\", \"1\": \"b\"}");
   bson_destroy (out);
}

/* ---- key order --------------------------------------------------------- */

static void
key_order_preserved (void **state)
{
   lua_State *L = *state;
   const char *json = "{\"z\": 1, \"_id\": 2, \"m\": {\"y\": 1, \"b\": 2, \"x\": 3}, \"a\": 4}";
   bson_t *in = from_json (json);
   bson_t *out = through_lua (L, json, "doc.m.b = 20; doc.a = 'changed'");

   assert_json (out,
                "{\"z\": 1, \"_id\": 2, \"m\": {\"y\": 1, \"b\": 20, \"x\": 3},"
                " \"a\": \"changed\"}");
   bson_destroy (in);
   bson_destroy (out);
}

static void
key_order_after_field_added (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L, "{\"z\": 1, \"y\": 2, \"x\": 3}",
                              "doc.b = 1; doc.a = 2; doc._id = 0; doc.y = nil");

   assert_json (out, "{\"z\": 1, \"x\": 3, \"_id\": 0, \"a\": 2, \"b\": 1}");
   bson_destroy (out);
}

static void
removed_then_readded_key_keeps_position (void **state)
{
   lua_State *L = *state;
   bson_t *out = through_lua (L, "{\"c\": 1, \"b\": 2, \"a\": 3}", "doc.b = nil; doc.b = 'back'");

   assert_json (out, "{\"c\": 1, \"b\": \"back\", \"a\": 3}");
   bson_destroy (out);
}

static void
table_from_lua_sorted_with_id_first (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L, "return {zebra = 1, _id = 2, Apple = 3, apple = 4, ['_'] = 5, ab = 6, a = 7}");
   out = pop_to_bson (L);
   assert_json (out,
                "{\"_id\": 2, \"Apple\": 3, \"_\": 5, \"a\": 7, \"ab\": 6, \"apple\": 4,"
                " \"zebra\": 1}");
   bson_destroy (out);
}

/* Up to 8 keys are sorted on the Lua stack, more in the scratch (issue 41):
 * both orders, nested into each other, and fields added to a shaped table. */
static void
tables_of_every_size_sorted_alike (void **state)
{
   lua_State *L = *state;
   bson_t *out;

   eval (L,
         "local t = { one = { k = 1 } }\n"
         "for n = 7, 10 do\n"
         "  local s = {}\n"
         "  for i = n, 1, -1 do s['k' .. string.char(96 + i)] = i end\n"
         "  s._id = n\n"
         "  t['s' .. n] = s\n"
         "end\n"
         "t.s10.ka = t.s7\n"
         "return t");
   out = pop_to_bson (L);
   assert_json (out,
                "{\"one\": {\"k\": 1},"
                " \"s10\": {\"_id\": 10, \"ka\": {\"_id\": 7, \"ka\": 1, \"kb\": 2,"
                " \"kc\": 3, \"kd\": 4, \"ke\": 5, \"kf\": 6, \"kg\": 7}, \"kb\": 2,"
                " \"kc\": 3, \"kd\": 4, \"ke\": 5, \"kf\": 6, \"kg\": 7, \"kh\": 8,"
                " \"ki\": 9, \"kj\": 10},"
                " \"s7\": {\"_id\": 7, \"ka\": 1, \"kb\": 2, \"kc\": 3, \"kd\": 4,"
                " \"ke\": 5, \"kf\": 6, \"kg\": 7},"
                " \"s8\": {\"_id\": 8, \"ka\": 1, \"kb\": 2, \"kc\": 3, \"kd\": 4,"
                " \"ke\": 5, \"kf\": 6, \"kg\": 7, \"kh\": 8},"
                " \"s9\": {\"_id\": 9, \"ka\": 1, \"kb\": 2, \"kc\": 3, \"kd\": 4,"
                " \"ke\": 5, \"kf\": 6, \"kg\": 7, \"kh\": 8, \"ki\": 9}}");
   bson_destroy (out);
   out = through_lua (L, "{\"z\": 0}", "for i = 1, 12 do doc['a' .. string.char(108 - i)] = i end");
   assert_json (out,
                "{\"z\": 0, \"a`\": 12, \"aa\": 11, \"ab\": 10, \"ac\": 9, \"ad\": 8,"
                " \"ae\": 7, \"af\": 6, \"ag\": 5, \"ah\": 4, \"ai\": 3, \"aj\": 2,"
                " \"ak\": 1}");
   bson_destroy (out);
}

static void
duplicate_keys_collapse_to_last_value (void **state)
{
   lua_State *L = *state;
   bson_t doc = BSON_INITIALIZER, *out;
   fw_error_t err;

   BSON_APPEND_INT32 (&doc, "a", 1);
   BSON_APPEND_INT32 (&doc, "b", 2);
   BSON_APPEND_INT32 (&doc, "a", 3);
   assert_true (fw_bson_lua_push_document (L, &doc, "doc", &err));
   out = pop_to_bson (L);
   assert_json (out, "{\"a\": 3, \"b\": 2}");
   bson_destroy (out);
   bson_destroy (&doc);
}

static void
metamethod_named_keys_are_plain_fields (void **state)
{
   lua_State *L = *state;
   const char *json = "{\"__index\": 1, \"__newindex\": 2, \"__name\": 3, \"__gc\": 4}";
   bson_t *in = from_json (json);
   bson_t *out = through_lua (L, json, NULL);

   check (L, "return doc.__index == 1 and doc.missing == nil");
   assert_same_bytes (in, out);
   bson_destroy (in);
   bson_destroy (out);
}

/* Puts the shape of fake_json where real_json's shape is cached. */
static void
plant_colliding_shape (lua_State *L, const char *real_json, const char *fake_json)
{
   int top = lua_gettop (L);
   bool planted = false;

   fw_bson_lua_push_state (L); /* start from an empty cache */
   lua_newtable (L);
   lua_rawseti (L, -2, STATE_CACHE);
   lua_settop (L, top);
   push_json (L, real_json); /* caches the real shape */
   lua_getmetatable (L, -1); /* C sees through __metatable */
   push_json (L, fake_json);
   lua_getmetatable (L, -1);
   fw_bson_lua_push_state (L);
   lua_rawgeti (L, -1, STATE_CACHE);
   lua_pushnil (L);
   while (lua_next (L, -2)) {
      if (lua_rawequal (L, -1, top + 2)) {
         lua_pop (L, 1);
         lua_pushvalue (L, -1);
         lua_pushvalue (L, top + 4);
         lua_rawset (L, -4); /* cache[hash of real] = fake shape */
         planted = true;
         continue;
      }
      lua_pop (L, 1);
   }
   assert_true (planted);
   lua_settop (L, top);
}

static void
shape_cache_collision_falls_back (void **state)
{
   lua_State *L = *state;
   const char *real = "{\"a\": 1, \"b\": {\"$numberLong\": \"2\"}, \"c\": 3}";
   bson_t *in = from_json (real), *out;

   plant_colliding_shape (L, real, "{\"a\": 1, \"x\": {\"$numberLong\": \"2\"}, \"c\": 3}");
   out = through_lua (L, real, NULL);
   assert_same_bytes (in, out);
   check (L, "return doc.b == 2 and doc.x == nil");
   bson_destroy (out);

   plant_colliding_shape (L, real, "{\"a\": {\"$numberLong\": \"1\"}, \"b\": 2, \"c\": 3}");
   out = through_lua (L, real, NULL);
   assert_same_bytes (in, out); /* widths come from the document, not the fake */
   bson_destroy (out);
   bson_destroy (in);
}

static void
many_shapes_overflow_the_cache_safely (void **state)
{
   lua_State *L = *state;
   char json[64];
   int i;

   for (i = 0; i < 1200; i++) {
      bson_t *in, *out;
      snprintf (json, sizeof json, "{\"k%d\": 1, \"a\": {\"k%d\": 2}}", i, i);
      in = from_json (json);
      out = through_lua (L, json, NULL);
      assert_same_bytes (in, out);
      bson_destroy (in);
      bson_destroy (out);
   }
}

int
main (void)
{
#define T(name) cmocka_unit_test_setup_teardown (name, setup, teardown)
   const struct CMUnitTest tests[] = {
      T (every_type_round_trip_byte_identical),
      T (round_trip_twice_uses_cached_shapes),
      T (every_type_to_lua_values),
      T (lua_values_to_every_type),
      T (int64_extremes_round_trip),
      T (int32_boundaries_pick_the_width),
      T (int64_fields_stay_int64_when_changed),
      T (int64_array_elements_keep_width),
      T (integral_doubles_stay_doubles),
      T (strings_are_binary_safe),
      T (null_is_a_unique_sentinel),
      T (empty_array_stays_array),
      T (empty_table_becomes_empty_document),
      T (empty_root_table_becomes_empty_document),
      T (sequence_becomes_array),
      T (root_sequence_writes_array_keys),
      T (key_order_preserved),
      T (key_order_after_field_added),
      T (removed_then_readded_key_keeps_position),
      T (table_from_lua_sorted_with_id_first),
      T (tables_of_every_size_sorted_alike),
      T (duplicate_keys_collapse_to_last_value),
      T (metamethod_named_keys_are_plain_fields),
      T (shape_cache_collision_falls_back),
      T (many_shapes_overflow_the_cache_safely),
   };
#undef T

   return cmocka_run_group_tests_name ("bson_lua", tests, NULL, NULL);
}
