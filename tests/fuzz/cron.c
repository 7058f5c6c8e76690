/*
 * fuzz_cron: the input as a five-field cron expression (dlq.reprocess.cron)
 * through flowwarden.cron.
 *
 * Invariants: parse returns a schedule or nil and a message; for a
 * schedule, next(s, t) is nil or a whole minute strictly after t, within 8
 * years, that the schedule matches, and no earlier minute after t matches
 * (checked over the first two hours); format gives an ISO-8601 text.
 */
#define FUZZ_LUA_COVERAGE 1
#include "fuzz_common.h"

typedef struct {
   const uint8_t *data;
   size_t size;
} input_t;

static const char harness[] =
   "local cron = require('flowwarden.cron')\n"
   "local function civil(t)\n"
   "  local y, mo, d, h, mi = cron.format(t):match('^(%d+)-(%d+)-(%d+)T(%d+):(%d+):00Z$')\n"
   "  assert(y, 'format gave ' .. cron.format(t))\n"
   "  return tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi)\n"
   "end\n"
   "local function matches(s, t)\n"
   "  local y, mo, d, h, mi = civil(t)\n"
   "  assert(cron.time(y, mo, d, h, mi) == t, 'time(format(t)) ~= t for ' .. t)\n"
   "  local dow = (t // 86400 + 4) % 7\n"
   "  if not (s[1][mi] and s[2][h] and s[4][mo]) then return false end\n"
   "  local dom_ok, dow_ok = s[3][d] == true, s[5][dow] == true\n"
   "  if s.dom_any or s.dow_any then return dom_ok and dow_ok end\n"
   "  return dom_ok or dow_ok\n"
   "end\n"
   "return function(expr)\n"
   "  local s, err = cron.parse(expr)\n"
   "  if not s then\n"
   "    assert(type(err) == 'string' and #err > 0, 'nil without a message')\n"
   "    return\n"
   "  end\n"
   "  for _, t in ipairs({ 0, 1700000000, 1709164799 }) do\n"
   "    local n = cron.next(s, t)\n"
   "    if n ~= nil then\n"
   "      assert(math.type(n) == 'integer' and n > t and n % 60 == 0, 'next gave ' .. tostring(n))\n"
   "      assert(n - t <= 8 * 366 * 86400 + 86400, 'next is more than 8 years away')\n"
   "      assert(matches(s, n), expr .. ': next(' .. t .. ') = ' .. cron.format(n) .. ' does not match')\n"
   "      local m = (t // 60 + 1) * 60\n"
   "      while m < n and m < t + 7200 do\n"
   "        assert(not matches(s, m), expr .. ': ' .. cron.format(m) .. ' matches before next(' .. t .. ')')\n"
   "        m = m + 60\n"
   "      end\n"
   "    end\n"
   "  end\n"
   "end\n";

static int harness_ref;

static int
run (lua_State *L)
{
   input_t *in = lua_touserdata (L, 1);

   fuzz_push_harness (L, &harness_ref, "=cron", harness);
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
