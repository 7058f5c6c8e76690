/*
 * fuzz_lua_to_bson: the input is a small program that builds a Lua value
 * (nested documents, marked and plain arrays, integers, floats, strings,
 * booleans, null, every typed value, a document view, and now and then
 * something BSON cannot hold: a function, a hole, a float key, a cycle, a
 * key with a NUL), which fw_bson_lua_to_bson then writes.
 *
 * Invariants: a value with nothing unconvertible converts, one with
 * something unconvertible fails with a message and leaves the output and the
 * stack as they were; what was written reads back (fw_bson_lua_push_document)
 * as an equal value (same types: integers stay integers, floats keep their
 * bits, int64 stays an integer, regex options come back sorted), and writing
 * that again gives the same bytes.
 */
#include <bson/bson.h>

#include "bson/bson_lua.h"
#include "bson/bson_view.h"
#include "fuzz_common.h"

typedef struct {
   const uint8_t *data;
   size_t size;
} input_t;

static const char harness[] =
   "local HEX = '0123456789abcdef'\n"
   "local function build(input)\n"
   "  local pos = 1\n"
   "  local function byte() local b = input:byte(pos) or 0; pos = pos + 1; return b end\n"
   "  local function bytes(n) local s = input:sub(pos, pos + n - 1); pos = pos + n; return s end\n"
   "  local function i64() local s = bytes(8); return (string.unpack('<i8', s .. ('\\0'):rep(8 - #s))) end\n"
   "  local function f64() local s = bytes(8); return (string.unpack('<d', s .. ('\\0'):rep(8 - #s))) end\n"
   "  local function u32() local s = bytes(4); return (string.unpack('<I4', s .. ('\\0'):rep(4 - #s))) end\n"
   "  local function text() return bytes(byte() % 24) end\n"
   "  local function no_nul(s) return (s:gsub('%z', '0')) end\n"
   "  local function hex()\n"
   "    local s = bytes(12) .. ('\\0'):rep(12)\n"
   "    return (s:sub(1, 12):gsub('.', function(c) return string.format('%02x', c:byte()) end))\n"
   "  end\n"
   "  local root = {}\n"
   "  local stack = { { t = root, mode = 'doc' } }\n"
   "  -- Unconvertible values go under a key text() cannot make (longer than\n"
   "  -- 23 bytes), so no later field overwrites them.\n"
   "  local BAD_KEY = 'an unconvertible value is here'\n"
   "  local function put(v, key)\n"
   "    local top = stack[#stack]\n"
   "    if top.mode == 'doc' then\n"
   "      local k = key or text()\n"
   "      top.t[k] = v\n"
   "    else\n"
   "      top.t[#top.t + 1] = v\n"
   "    end\n"
   "  end\n"
   "  local function open(t, mode)\n"
   "    if #stack >= 120 then return end -- below the depth limit, even with VIEW inside\n"
   "    put(t)\n"
   "    stack[#stack + 1] = { t = t, mode = mode }\n"
   "  end\n"
   "  local TYPED = {\n"
   "    function() return fw.object_id(hex()) end,\n"
   "    function() return fw.date(i64()) end,\n"
   "    function() return fw.timestamp(u32(), u32()) end,\n"
   "    function() return fw.decimal128(string.format('%d.%dE%d', i64(), byte(), byte() - 128)) end,\n"
   "    function() return fw.binary(text(), byte()) end,\n"
   "    function()\n"
   "      local opts, b = {}, byte()\n"
   "      for i = 1, 6 do if b & (1 << (i - 1)) ~= 0 then opts[#opts + 1] = ('ilmsux'):sub(i, i) end end\n"
   "      if b & 64 ~= 0 then table.sort(opts, function(x, y) return x > y end) end\n"
   "      return fw.regex(no_nul(text()), table.concat(opts))\n"
   "    end,\n"
   "    function() return fw.min_key() end,\n"
   "    function() return fw.max_key() end,\n"
   "    function() return fw.code(no_nul(text())) end,\n"
   "    function() return fw.symbol(text()) end,\n"
   "    function() return fw.db_pointer(no_nul(text()), hex()) end,\n"
   "    function() return fw.undefined() end,\n"
   "    function() return fw.int64(i64()) end,\n"
   "  }\n"
   "  while pos <= #input do\n"
   "    local op = byte() % 16\n"
   "    if op == 0 then open({}, 'doc')\n"
   "    elseif op == 1 then open(fw.array(), 'array')\n"
   "    elseif op == 2 then open({}, 'plain')\n"
   "    elseif op == 3 then if #stack > 1 then stack[#stack] = nil end\n"
   "    elseif op == 4 then put(byte() - 128)\n"
   "    elseif op == 5 then put(i64())\n"
   "    elseif op == 6 then put(f64())\n"
   "    elseif op == 7 then put(text())\n"
   "    elseif op == 8 then put(byte() % 2 == 0)\n"
   "    elseif op == 9 then put(fw.null)\n"
   "    elseif op == 10 then put(TYPED[byte() % #TYPED + 1]())\n"
   "    elseif op == 11 then put(VIEW)\n"
   "    elseif op == 12 then put(byte() + 0.0)\n"
   "    elseif op == 13 then\n"
   "      -- something BSON cannot hold, rarely (most inputs should convert)\n"
   "      local what, t = byte() % 8, stack[#stack].t\n"
   "      if what == 0 then put(print, BAD_KEY)\n"
   "      elseif what == 1 then t[1 << 40] = 1 -- a hole nothing fills\n"
   "      elseif what == 2 then rawset(t, 0.5, 1)\n"
   "      elseif what == 3 then put(t, BAD_KEY)\n"
   "      elseif what == 4 then put(coroutine.create(print), BAD_KEY)\n"
   "      end\n"
   "    end\n"
   "  end\n"
   "  return root\n"
   "end\n"
   "-- Whether the finished value holds any of what op 13 plants (a later field\n"
   "-- with the same key may have replaced the container that held it).\n"
   "local function convertible(t, open)\n"
   "  if open[t] then return false end\n"
   "  open[t] = true\n"
   "  for k, v in pairs(t) do\n"
   "    if k == 1 << 40 or k == 0.5 or (type(k) == 'string' and k:find('%z')) then return false end\n"
   "    local tv = type(v)\n"
   "    if tv == 'function' or tv == 'thread' then return false end\n"
   "    if tv == 'table' and not convertible(v, open) then return false end\n"
   "  end\n"
   "  open[t] = nil\n"
   "  return true\n"
   "end\n"
   "local function check(ok, fmt, ...) if not ok then error(string.format(fmt, ...), 2) end end\n"
   "local function bits(x) return string.pack('<d', x) end\n"
   "local function sorted_options(o)\n"
   "  local t = {}\n"
   "  for c in o:gmatch('.') do t[#t + 1] = c end\n"
   "  table.sort(t)\n"
   "  return table.concat(t)\n"
   "end\n"
   "local equal\n"
   "local function equal_tables(a, b, path)\n"
   "  local n = 0\n"
   "  for k, v in pairs(a) do\n"
   "    n = n + 1\n"
   "    equal(v, b[k], path, k)\n"
   "  end\n"
   "  local m = 0\n"
   "  for _ in pairs(b) do m = m + 1 end\n"
   "  check(n == m, '%s: %d entries written, %d read back', path, n, m)\n"
   "  local is_array = getmetatable(a) == 'flowwarden.array' or (n > 0 and #a == n and a[1] ~= nil)\n"
   "  check((getmetatable(b) == 'flowwarden.array') == is_array, '%s: array-ness changed', path)\n"
   "end\n"
   "function equal(a, b, parent, key)\n"
   "  local path = key == nil and parent or parent .. '.' .. tostring(key)\n"
   "  local ta, mt = type(a), getmetatable(a)\n"
   "  if ta == 'number' then\n"
   "    check(math.type(a) == math.type(b), '%s: %s came back as %s', path, math.type(a), math.type(b))\n"
   "    check(math.type(a) == 'integer' and a == b or math.type(a) == 'float' and bits(a) == bits(b), '%s: number changed', path)\n"
   "  elseif mt == 'flowwarden.view' then\n"
   "    equal_tables(fw.table(a), b, path)\n"
   "  elseif mt == 'flowwarden.bson_value' and a.type == 'int64' then\n"
   "    check(math.type(b) == 'integer' and b == a.value, '%s: int64 changed', path)\n"
   "  elseif mt == 'flowwarden.bson_value' and a.type == 'regex' then\n"
   "    check(getmetatable(b) == mt and b.type == 'regex' and b.pattern == a.pattern\n"
   "      and b.options == sorted_options(a.options), '%s: regex changed', path)\n"
   "  elseif ta == 'table' then\n"
   "    check(type(b) == 'table', '%s: a table came back as %s', path, type(b))\n"
   "    equal_tables(a, b, path)\n"
   "  else\n"
   "    check(a == b, '%s: %s came back as %s', path, a, b)\n"
   "  end\n"
   "end\n"
   "return function(input, convert)\n"
   "  local root = build(input)\n"
   "  local valid = convertible(root, {})\n"
   "  local back, err = convert(root)\n"
   "  if back == nil then\n"
   "    assert(not valid, 'a convertible value failed: ' .. tostring(err))\n"
   "    assert(type(err) == 'string' and err:find('^doc'), 'an error without the path: ' .. tostring(err))\n"
   "    return\n"
   "  end\n"
   "  assert(valid, 'a value with something unconvertible was converted')\n"
   "  equal(root, back, 'doc')\n"
   "end\n";

static int harness_ref;

/* convert(t) -> table read back from what t became, or nil, message. */
static int
convert (lua_State *L)
{
   bson_t out = BSON_INITIALIZER, again = BSON_INITIALIZER;
   fw_error_t err;
   int top = lua_gettop (L);
   bool ok;

   ok = fw_bson_lua_to_bson (L, 1, "doc", &out, &err);
   FUZZ_ASSERT (lua_gettop (L) == top, "fw_bson_lua_to_bson changed the stack");
   if (!ok) {
      FUZZ_ASSERT (out.len == 5, "a failed conversion left %u bytes in out", out.len);
      bson_destroy (&out);
      lua_pushnil (L);
      lua_pushstring (L, err.message);
      return 2;
   }
   ok = fw_bson_lua_push_document (L, &out, "doc", &err);
   FUZZ_ASSERT (ok, "BSON written from Lua cannot be read back: %s", err.message);
   ok = fw_bson_lua_to_bson (L, -1, "doc", &again, &err);
   FUZZ_ASSERT (ok, "a table read back cannot be written again: %s", err.message);
   FUZZ_ASSERT (out.len == again.len &&
                   memcmp (bson_get_data (&out), bson_get_data (&again), out.len) == 0,
                "Lua -> BSON -> Lua -> BSON is not stable (%u vs %u bytes)", out.len, again.len);
   bson_destroy (&out);
   bson_destroy (&again);
   return 1;
}

static int
run (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);
   bson_t *sample;

   fuzz_push_harness (L, &harness_ref, "=lua_to_bson", harness);
   /* VIEW: a view of a small document, as handlers get from ctx. */
   lua_getglobal (L, "VIEW");
   if (lua_isnil (L, -1)) {
      sample = BCON_NEW ("a", BCON_INT32 (1), "b", "[", BCON_INT64 (2), "x", "]", "c", "{", "d",
                         BCON_DOUBLE (0.5), "}");
      fw_bson_view_push_copy (L, bson_get_data (sample), sample->len, false);
      bson_destroy (sample);
      lua_setglobal (L, "VIEW");
   }
   lua_pop (L, 1);
   lua_pushlstring (L, (const char *) in->data, in->size);
   lua_pushcfunction (L, convert);
   lua_call (L, 2, 0);
   return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   input_t in = {data, size};

   fuzz_run (fuzz_state (), run, &in);
   return 0;
}
