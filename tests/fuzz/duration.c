/*
 * fuzz_duration: the input as the text of a duration ("500ms", "1.5s") and
 * of a size ("256MB"), through flowwarden.duration as scripts' settings are.
 *
 * Invariants: parse and parse_size return an integer in 0 .. 2^53 or nil
 * and a message naming the value; whatever parses formats to a text that
 * parses back to the same integer; the command line's parser
 * (fw_duration_parse) accepts exactly what a script's accepts, as the same
 * number of milliseconds.
 */
#define FUZZ_LUA_COVERAGE 1
#include "fuzz_common.h"

#include <string.h>

#include "flowwarden/duration.h"

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
   "return function(text, c_ms)\n"
   "  check(duration.parse, duration.format, text, 'duration')\n"
   "  check(duration.parse_size, duration.format_size, text, 'size')\n"
   "  if c_ms == 'skip' then return end\n"
   "  local v = duration.parse(text)\n"
   "  assert(v == c_ms, string.format('%q', text) .. ': the script parser says ' .. tostring(v)\n"
   "    .. ', the command line parser ' .. tostring(c_ms))\n"
   "end\n";

static int harness_ref;

static int
run (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);
   char text[256];
   int64_t ms;

   fuzz_push_harness (L, &harness_ref, "=duration", harness);
   lua_pushlstring (L, (const char *) in->data, in->size);
   /* C strings end at the first NUL: compare only inputs without one. */
   if (in->size < sizeof text && !memchr (in->data, 0, in->size)) {
      memcpy (text, in->data, in->size);
      text[in->size] = '\0';
      if (fw_duration_parse (text, &ms, NULL)) {
         lua_pushinteger (L, ms);
      } else {
         lua_pushnil (L);
      }
   } else {
      lua_pushliteral (L, "skip");
   }
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
