--[[
flowwarden.cron: five-field cron expressions (UTC), for dlq.reprocess.cron.

  cron.parse("*/15 * * * *")  -> schedule | nil, 'bad minute field "61"'
  cron.next(schedule, t)      -> the first matching minute strictly after t
                                 (seconds since the epoch, UTC), or nil when
                                 none comes within 8 years ("0 0 30 2 *")
  cron.format(t)              -> "2026-01-15T10:30:00Z"
  cron.time(y, m, d, h, mi)   -> seconds since the epoch of that UTC time

Fields: minute (0-59), hour (0-23), day-of-month (1-31), month (1-12 or
JAN-DEC), day-of-week (0-7 or SUN-SAT, 0 and 7 both Sunday). Each field is a
comma-separated list of items: "*", "N", "A-B", each optionally followed by
"/STEP" ("N/STEP" means N to the field's maximum). As in Vixie cron, when
both day-of-month and day-of-week are restricted (neither starts with "*"),
a day matches when either does; otherwise both must.

No cron library ships with Debian for C, and this only runs when a schedule
is due, so it is written in Lua.
]]

local M = {}

local FIELDS = {
  { name = "minute", min = 0, max = 59 },
  { name = "hour", min = 0, max = 23 },
  { name = "day-of-month", min = 1, max = 31 },
  { name = "month", min = 1, max = 12,
    names = { jan = 1, feb = 2, mar = 3, apr = 4, may = 5, jun = 6, jul = 7, aug = 8, sep = 9,
              oct = 10, nov = 11, dec = 12 } },
  { name = "day-of-week", min = 0, max = 7,
    names = { sun = 0, mon = 1, tue = 2, wed = 3, thu = 4, fri = 5, sat = 6 } },
}

local function value_of(text, f)
  local n = text:match("^%d+$") and tonumber(text)
  if not n and f.names then
    n = f.names[text:lower()]
  end
  if not n or n < f.min or n > f.max then
    return nil
  end
  return math.tointeger(n)
end

-- A set {[v] = true} for one field's text, or nil.
local function parse_field(text, f)
  local set = {}
  for item in (text .. ","):gmatch("([^,]*),") do
    local range, step = item:match("^([^/]+)/(%d+)$")
    if not range then
      range, step = item, nil
    end
    step = step and tonumber(step)
    if step == 0 then
      return nil
    end
    local lo, hi
    if range == "*" then
      lo, hi = f.min, f.max
    else
      local a, b = range:match("^([^-]+)-([^-]+)$")
      if a then
        lo, hi = value_of(a, f), value_of(b, f)
        if not lo or not hi or lo > hi then
          return nil
        end
      else
        lo = value_of(range, f)
        if not lo then
          return nil
        end
        hi = step and f.max or lo
      end
    end
    for v = lo, hi, step or 1 do
      set[v] = true
    end
  end
  return set
end

function M.parse(expr)
  if type(expr) ~= "string" then
    return nil, string.format("expected a cron expression string such as \"*/15 * * * *\", got %s",
      type(expr))
  end
  local parts = {}
  for p in expr:gmatch("%S+") do
    parts[#parts + 1] = p
  end
  if #parts ~= 5 then
    return nil, string.format('expected 5 fields (minute hour day-of-month month day-of-week), '
      .. 'got %d in "%s"', #parts, expr)
  end
  local s = { text = expr }
  for i, f in ipairs(FIELDS) do
    local set = parse_field(parts[i], f)
    if not set then
      return nil, string.format('bad %s field "%s"', f.name, parts[i])
    end
    s[i] = set
  end
  if s[5][7] then
    s[5][0] = true
  end
  s.dom_any = parts[3]:sub(1, 1) == "*"
  s.dow_any = parts[5]:sub(1, 1) == "*"
  return s
end

local calendar = require("flowwarden.calendar")
local days_from_civil, civil_from_days = calendar.days_from_civil, calendar.civil_from_days

local function day_matches(s, days)
  local _, m, d = civil_from_days(days)
  if not s[4][m] then
    return false
  end
  local dow = (days + 4) % 7 -- 1970-01-01 was a Thursday
  local dom_ok, dow_ok = s[3][d] == true, s[5][dow] == true
  if s.dom_any or s.dow_any then
    return dom_ok and dow_ok
  end
  return dom_ok or dow_ok
end

-- First (hour, minute) of the day at or after minute-of-day `from`, or nil.
local function first_time(s, from)
  for h = from // 60, 23 do
    if s[2][h] then
      for mi = (h == from // 60) and from % 60 or 0, 59 do
        if s[1][mi] then
          return h * 60 + mi
        end
      end
    end
  end
  return nil
end

function M.next(s, t)
  local start = (math.floor(t) // 60 + 1) * 60 -- the next whole minute after t
  local day = start // 86400
  local from = (start % 86400) // 60
  -- Days start .. start + 8 x 366: a match is at most 8 x 366 days and a
  -- minute after t, as "within 8 years" promises (one day more was looked
  -- at before, and its match came later than that; found by fuzz_cron).
  for _ = 1, 366 * 8 + 1 do
    if day_matches(s, day) then
      local m = first_time(s, from)
      if m then
        return day * 86400 + m * 60
      end
    end
    day, from = day + 1, 0
  end
  return nil
end

-- Seconds since the epoch of a UTC date and time.
function M.time(y, m, d, h, mi)
  return days_from_civil(y, m, d) * 86400 + (h or 0) * 3600 + (mi or 0) * 60
end

-- "2026-01-15T10:30:00Z" for seconds since the epoch.
function M.format(t)
  local y, m, d = civil_from_days(t // 86400)
  local r = t % 86400
  return string.format("%04d-%02d-%02dT%02d:%02d:%02dZ", y, m, d, r // 3600, r % 3600 // 60, r % 60)
end

return M
