/*
 * test_bson_values.c - the typed BSON values scripts see: constructors and
 * their validation, tostring, equality, ordering and field access.
 */
#include "bson_lua_test.h"

static void
object_id_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local o = fw.object_id('5F1E2D3C4B5A69788796A5B4')"
          " return tostring(o) == '5f1e2d3c4b5a69788796a5b4' and o.hex == tostring(o)"
          " and o.time == 0x5f1e2d3c and o.type == 'object_id'"
          " and o == fw.object_id('5f1e2d3c4b5a69788796a5b4')"
          " and o ~= fw.object_id('5f1e2d3c4b5a69788796a5b5')"
          " and o < fw.object_id('5f1e2d3c4b5a69788796a5b5') and o.nope == nil");
   check (L, "local a, b = fw.object_id(), fw.object_id() return a ~= b and #a.hex == 24");
}

static void
object_id_validation (void **state)
{
   lua_State *L = *state;

   assert_string_equal (eval_error (L, "fw.object_id('abc')"),
                        "test:1: object_id: expected 24 hexadecimal digits, got 3 characters");
   assert_string_equal (eval_error (L, "fw.object_id('5f1e2d3c4b5a69788796a5bz')"),
                        "test:1: object_id: \"5f1e2d3c4b5a69788796a5bz\" is not hexadecimal "
                        "(character 24)");
   assert_string_equal (
      eval_error (L, "fw.object_id(12)"),
      "test:1: object_id: expected a string of 24 hexadecimal digits, got number");
   lua_settop (L, 0);
}

static void
date_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local d = fw.date(1700000000123)"
          " return tostring(d) == '2023-11-14T22:13:20.123Z' and d.ms == 1700000000123"
          " and d == fw.date(1700000000123) and d ~= fw.date(1)"
          " and fw.date(1) < d and d <= d and d.type == 'date'");
   check (L,
          "return tostring(fw.date(0)) == '1970-01-01T00:00:00.000Z'"
          " and tostring(fw.date(-1)) == '1969-12-31T23:59:59.999Z'"
          " and tostring(fw.date(951782400000)) == '2000-02-29T00:00:00.000Z'"
          " and tostring(fw.date(math.maxinteger)) == 'Date(9223372036854775807)'");
   check (L, "return math.abs(fw.date().ms - os.time() * 1000) < 5000");
   assert_string_equal (
      eval_error (L, "fw.date('now')"),
      "test:1: date: milliseconds since the epoch must be an integer, got string");
   assert_string_equal (eval_error (L, "fw.date(1.5)"),
                        "test:1: date: milliseconds since the epoch must be an integer, got a "
                        "non-integral number");
   lua_settop (L, 0);
}

static void
timestamp_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local t = fw.timestamp(4294967295, 3)"
          " return tostring(t) == 'Timestamp(4294967295, 3)' and t.t == 4294967295"
          " and t.i == 3 and t == fw.timestamp(4294967295, 3)"
          " and fw.timestamp(1, 9) < fw.timestamp(2, 0)");
   assert_string_equal (eval_error (L, "fw.timestamp(-1, 0)"),
                        "test:1: timestamp: t must be an integer from 0 to 4294967295, got -1");
   assert_string_equal (eval_error (L, "fw.timestamp(1)"),
                        "test:1: timestamp: i must be an integer, got no value");
   lua_settop (L, 0);
}

static void
decimal128_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local d = fw.decimal128('1.10')"
          " return tostring(d) == '1.10' and d.string == '1.10'"
          " and d == fw.decimal128('1.10') and d ~= fw.decimal128('1.1')"
          " and tostring(fw.decimal128('NaN')) == 'NaN'");
   assert_string_equal (eval_error (L, "fw.decimal128('abc')"),
                        "test:1: decimal128: \"abc\" is not a decimal number");
   assert_string_equal (eval_error (L, "fw.decimal128(1)"),
                        "test:1: decimal128: the value must be a string, got number");
   assert_string_equal (eval_error (L, "return fw.decimal128('1') < fw.decimal128('2')"),
                        "test:1: attempt to compare two decimal128 values");
   lua_settop (L, 0);
}

static void
binary_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local b = fw.binary('hi\\0', 4)"
          " return b.data == 'hi\\0' and b.subtype == 4 and tostring(b) == 'Binary(4, aGkA)'"
          " and b == fw.binary('hi\\0', 4) and b ~= fw.binary('hi\\0', 0)"
          " and fw.binary('x').subtype == 0 and tostring(fw.binary('')) == 'Binary(0, )'");
   assert_string_equal (eval_error (L, "fw.binary('x', 256)"),
                        "test:1: binary: subtype must be an integer from 0 to 255, got 256");
   assert_string_equal (eval_error (L, "fw.binary(nil)"),
                        "test:1: binary: data must be a string, got nil");
   lua_settop (L, 0);
}

static void
regex_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local r = fw.regex('^a', 'i')"
          " return tostring(r) == '/^a/i' and r.pattern == '^a' and r.options == 'i'"
          " and r == fw.regex('^a', 'i') and r ~= fw.regex('^a') and fw.regex('x').options == ''");
   assert_string_equal (eval_error (L, "fw.regex('a', 'q')"),
                        "test:1: regex: unknown option 'q' (valid options: i, l, m, s, u, x)");
   assert_string_equal (eval_error (L, "fw.regex('a\\0')"),
                        "test:1: regex: pattern must not contain a NUL byte");
   lua_settop (L, 0);
}

static void
keys_code_symbol_undefined_values (void **state)
{
   lua_State *L = *state;

   check (L,
          "return tostring(fw.min_key()) == 'MinKey' and tostring(fw.max_key()) == 'MaxKey'"
          " and fw.min_key() == fw.min_key() and fw.min_key() ~= fw.max_key()"
          " and tostring(fw.undefined()) == 'undefined' and fw.undefined() == fw.undefined()");
   check (L,
          "local c = fw.code('return 1')"
          " return tostring(c) == 'return 1' and c.code == 'return 1' and c.type == 'code'"
          " and c == fw.code('return 1') and c ~= fw.symbol('return 1')");
   check (L,
          "local s = fw.symbol('a\\0b')"
          " return s.symbol == 'a\\0b' and tostring(s) == 'a\\0b' and s == fw.symbol('a\\0b')");
   assert_string_equal (eval_error (L, "fw.code('a\\0b')"),
                        "test:1: code: the text must not contain a NUL byte");
   lua_settop (L, 0);
}

static void
db_pointer_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local p = fw.db_pointer('users', '5f1e2d3c4b5a69788796a5b4')"
          " return p.collection == 'users' and p.id.hex == '5f1e2d3c4b5a69788796a5b4'"
          " and tostring(p) == 'DBPointer(users, 5f1e2d3c4b5a69788796a5b4)'"
          " and p == fw.db_pointer('users', '5f1e2d3c4b5a69788796a5b4')"
          " and p ~= fw.db_pointer('other', '5f1e2d3c4b5a69788796a5b4')");
   assert_string_equal (eval_error (L, "fw.db_pointer('users', 'x')"),
                        "test:1: db_pointer: expected 24 hexadecimal digits, got 1 characters");
   lua_settop (L, 0);
}

static void
code_w_scope_value (void **state)
{
   lua_State *L = *state;

   push_json (L, "{\"c\": {\"$code\": \"x\", \"$scope\": {\"x\": 1}}}");
   lua_setglobal (L, "doc");
   check (L,
          "local c = doc.c return tostring(c) == 'x' and c.code == 'x' and c.scope.x == 1"
          " and c.type == 'code_w_scope' and c == doc.c");
}

static void
int64_value (void **state)
{
   lua_State *L = *state;

   check (L,
          "local n = fw.int64(5) return tostring(n) == '5' and n.value == 5"
          " and n == fw.int64(5) and n < fw.int64(6) and n.type == 'int64'");
   assert_string_equal (eval_error (L, "fw.int64(0.5)"),
                        "test:1: int64: the value must be an integer, got a non-integral number");
   lua_settop (L, 0);
}

static void
typed_values_differ_across_types (void **state)
{
   lua_State *L = *state;

   check (L,
          "return fw.date(5) ~= fw.int64(5) and fw.null ~= fw.undefined()"
          " and fw.min_key() ~= fw.null and getmetatable(fw.date(0)) == 'flowwarden.bson_value'");
   assert_string_equal (eval_error (L, "return fw.date(1) < fw.int64(2)"),
                        "test:1: attempt to compare date with int64");
   lua_settop (L, 0);
}

int
main (void)
{
#define T(name) cmocka_unit_test_setup_teardown (name, setup, teardown)
   const struct CMUnitTest tests[] = {
      T (object_id_value),  T (object_id_validation),
      T (date_value),       T (timestamp_value),
      T (decimal128_value), T (binary_value),
      T (regex_value),      T (keys_code_symbol_undefined_values),
      T (db_pointer_value), T (code_w_scope_value),
      T (int64_value),      T (typed_values_differ_across_types),
   };
#undef T

   return cmocka_run_group_tests_name ("bson_values", tests, NULL, NULL);
}
