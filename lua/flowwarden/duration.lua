--[[
flowwarden.duration: the duration strings of the seeds ("500ms", "1s", "1m")
and the size strings of memory_limit ("256MB"), to and from integers.

Durations: a number, then one of ms, s, m, h, d (24 h), w (7 d), with nothing
around or between ("5 sec", " 1s", "1S", "-1s", "1y" and "" are rejected). A
decimal point is accepted when the result is a whole number of milliseconds
("1.5s" = 1500, "0.5ms" is rejected). "0s" parses to 0: whether zero is
allowed is the caller's rule. The command line's durations (--since,
--claim-ttl) follow the same grammar (include/flowwarden/duration.h);
tests/data/durations.txt holds the cases both must agree on.

Sizes: an integer, then B, KB, MB or GB, 1024-based ("64KB" = 65536).

parse functions return the integer, or nil and a message that names the
value and says what is expected, ready to follow "field: ".
]]

local M = {}

local DURATION_UNITS = {
  ms = 1, s = 1000, m = 60 * 1000, h = 60 * 60 * 1000,
  d = 24 * 60 * 60 * 1000, w = 7 * 24 * 60 * 60 * 1000,
}
local SIZE_UNITS = { B = 1, KB = 1024, MB = 1024 * 1024, GB = 1024 * 1024 * 1024 }

-- Beyond 2^53 milliseconds (285,000 years) numbers stop being exact anywhere
-- a C double might hold them; nothing sensible is that long.
M.MAX_MS = 1 << 53

local EXPECTED = 'expected a number followed by ms, s, m, h, d or w, e.g. "500ms"'

function M.parse(text)
  if type(text) ~= "string" then
    return nil, string.format("expected a duration string such as \"30s\", got %s", tostring(text))
  end
  local int, frac, unit = text:match("^(%d+)(%.?%d*)(%a+)$")
  local scale = DURATION_UNITS[unit or ""]
  if not int or frac == "." or not scale then
    return nil, string.format("invalid duration %q (%s)", text, EXPECTED)
  end
  -- Whole part and fraction are kept apart and bounded before multiplying,
  -- so that no integer product can wrap around.
  int = int:gsub("^0+(%d)", "%1")
  local whole = #int <= 16 and math.tointeger(tonumber(int))
  if not whole or whole > M.MAX_MS // scale then
    return nil, string.format("invalid duration %q (too large)", text)
  end
  whole = whole * scale
  local digits = frac:sub(2):gsub("0+$", "")
  if digits == "" then
    return whole
  end
  -- scale is at most 2^10 * 3^3 * 5^5 * 7 ms, so a fraction of more than 10
  -- significant decimals can never come to whole milliseconds.
  local part = #digits <= 10 and math.tointeger(tonumber(digits)) * scale
  local divisor = math.tointeger(10 ^ #digits)
  if not part or part % divisor ~= 0 then
    return nil, string.format("invalid duration %q (not a whole number of milliseconds)", text)
  end
  if whole + part // divisor > M.MAX_MS then
    return nil, string.format("invalid duration %q (too large)", text)
  end
  return whole + part // divisor
end

-- The shortest exact text for an integer number of milliseconds:
-- 1500 -> "1500ms", 60000 -> "1m", 300000 -> "5m", 0 -> "0ms".
function M.format(ms)
  if ms ~= 0 then
    for _, u in ipairs({ { "h", DURATION_UNITS.h }, { "m", DURATION_UNITS.m }, { "s", 1000 } }) do
      if ms % u[2] == 0 then
        return string.format("%d%s", ms // u[2], u[1])
      end
    end
  end
  return string.format("%dms", ms)
end

function M.parse_size(text)
  if type(text) ~= "string" then
    return nil, string.format("expected a size string such as \"256MB\", got %s", tostring(text))
  end
  local n, unit = text:match("^(%d+)(%a+)$")
  local scale = SIZE_UNITS[unit or ""]
  if not n or not scale then
    return nil, string.format('invalid size %q (expected an integer followed by B, KB, MB or GB, '
      .. 'e.g. "256MB")', text)
  end
  if (tonumber(n) + 0.0) * scale > M.MAX_MS then
    return nil, string.format("invalid size %q (too large)", text)
  end
  return math.tointeger(tonumber(n)) * scale
end

-- The largest unit that divides the size exactly: 268435456 -> "256MB".
function M.format_size(bytes)
  if bytes ~= 0 then
    for _, u in ipairs({ { "GB", SIZE_UNITS.GB }, { "MB", SIZE_UNITS.MB }, { "KB", SIZE_UNITS.KB } }) do
      if bytes % u[2] == 0 then
        return string.format("%d%s", bytes // u[2], u[1])
      end
    end
  end
  return string.format("%dB", bytes)
end

return M
