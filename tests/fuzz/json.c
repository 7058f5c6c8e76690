/*
 * fuzz_json: the input as JSON text for fw.json.decode, plain and with
 * { extended = true }.
 *
 * Invariants: decode either returns a value or raises a message starting
 * "fw.json.decode: "; a decoded value encodes (fw.json.encode, plain and
 * pretty) and the text decodes again to a value that encodes to the same
 * text (encoding is deterministic and loses nothing it wrote); the pretty
 * text decodes to the same value as the compact one; a decoded value also
 * converts to BSON when it is a document.
 */
#include <bson/bson.h>

#include "bson/bson_lua.h"
#define FUZZ_LUA_COVERAGE 1
#include "fuzz_common.h"

typedef struct {
   const uint8_t *data;
   size_t size;
} input_t;

static const char harness[] =
   "local json = fw.json\n"
   "local function decode(text, opts)\n"
   "  local ok, v = pcall(json.decode, text, opts)\n"
   "  if not ok then\n"
   "    assert(type(v) == 'string' and v:find('^fw%.json%.decode: '), 'decode raised ' .. tostring(v))\n"
   "    return nil, v\n"
   "  end\n"
   "  return v\n"
   "end\n"
   "local function trip(text, opts)\n"
   "  local v, err = decode(text, opts)\n"
   "  if err then return end\n"
   "  local ok, once = pcall(json.encode, v)\n"
   "  if not ok and once:find('^fw%.json%.encode: nesting deeper than') then\n"
   "    return -- known: at the limit, a wrapper written deeper than it was read (docs/testing.md)\n"
   "  end\n"
   "  assert(ok, 'a decoded value does not encode: ' .. tostring(once))\n"
   "  local v2, err2 = decode(once, opts)\n"
   "  assert(not err2, 'encode wrote what decode refuses: ' .. tostring(err2) .. '\\n' .. once)\n"
   "  local twice = json.encode(v2)\n"
   "  assert(once == twice, 'not stable:\\n' .. once .. '\\n' .. twice)\n"
   "  local pretty = json.encode(v, { pretty = true })\n"
   "  local v3, err3 = decode(pretty, opts)\n"
   "  assert(not err3, 'pretty text refused: ' .. tostring(err3))\n"
   "  assert(json.encode(v3) == once, 'pretty text decodes to another value')\n"
   "  if type(v) == 'table' then TO_BSON(v) end\n"
   "end\n"
   "return function(text)\n"
   "  trip(text, nil)\n"
   "  trip(text, { extended = true })\n"
   "end\n";

static int harness_ref;

/* TO_BSON(t): converts, and checks only that a failure is reported as one. */
static int
to_bson (lua_State *L)
{
   bson_t out = BSON_INITIALIZER;
   fw_error_t err;

   if (!fw_bson_lua_to_bson (L, 1, NULL, &out, &err)) {
      FUZZ_ASSERT (err.message[0] != '\0' && out.len == 5, "a failure without a message");
   }
   bson_destroy (&out);
   return 0;
}

static int
run (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);

   fuzz_push_harness (L, &harness_ref, "=json", harness);
   lua_pushcfunction (L, to_bson);
   lua_setglobal (L, "TO_BSON");
   lua_pushlstring (L, (const char *) in->data, in->size);
   lua_call (L, 1, 0);
   return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
   input_t in = {data, size};

   fuzz_run (fuzz_state (), run, &in);
   return 0;
}
