/*
 * fuzz_duration: the input as the text of a duration ("500ms", "1.5s") and
 * of a size ("256MB"), through flowwarden.duration as scripts' settings are.
 *
 * Invariants: parse and parse_size return an integer in 0 .. 2^53 or nil
 * and a message naming the value; whatever parses formats to a text that
 * parses back to the same integer.
 */
#define FUZZ_LUA_COVERAGE 1
#include "fuzz_common.h"

typedef struct {
   const uint8_t *data;
   size_t size;
} input_t;

static const char harness[] =
   "local duration = require('flowwarden.duration')\n"
   "local function check(parse, format, text, what)\n"
   "  local v, err = parse(text)\n"
   "  if v == nil then\n"
   "    assert(type(err) == 'string' and #err > 0, what .. ': nil without a message')\n"
   "    return\n"
   "  end\n"
   "  assert(err == nil, what .. ': a value and a message')\n"
   "  assert(math.type(v) == 'integer', what .. ': not an integer: ' .. tostring(v))\n"
   "  assert(v >= 0 and v <= duration.MAX_MS, what .. ': out of range: ' .. v)\n"
   "  local again = format(v)\n"
   "  local back, err2 = parse(again)\n"
   "  assert(back == v, what .. ': ' .. string.format('%q', text) .. ' = ' .. v .. ' formats as '\n"
   "    .. again .. ' which parses as ' .. tostring(back) .. ' ' .. tostring(err2))\n"
   "end\n"
   "return function(text)\n"
   "  check(duration.parse, duration.format, text, 'duration')\n"
   "  check(duration.parse_size, duration.format_size, text, 'size')\n"
   "end\n";

static int harness_ref;

static int
run (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);

   fuzz_push_harness (L, &harness_ref, "=duration", harness);
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
