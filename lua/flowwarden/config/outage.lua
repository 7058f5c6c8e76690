--[[
flowwarden.config.outage: a stream's dependency-outage settings (issue 29),
validated and normalized for the C host (src/runtime/config/outage_config.c).

  circuit = true | { on = { "Http.Connect", ... }, open_for = "5s",
                     max_open_for = "5m", give_up_after = "off" | "<duration>" }
    -> spec.circuit = { on = {...}, open_for_ms, max_open_for_ms,
                        give_up_after_ms (0: off) } | nil
  rate_limit = "200/s" | "12000/m" | { rate = "50/s", burst = 0 }
    -> spec.rate_limit = "200/s" (the rate as written) | nil,
       spec.rate_burst = N (attempts above the rate in any one period of
       the rate: a second for "/s", a minute for "/m") | nil (the default,
       one second's worth minus one: the bucket holds one second's worth)
]]

local fields = require("flowwarden.config.fields")
local duration = require("flowwarden.duration")

local M = {}

-- The errors of a dependency that is down, not of the event.
M.DEFAULT_ON = { "Http.Connect", "Http.Timeout", "Http.Status.Transient",
                 "Mongo.Network", "Mongo.Timeout", "Mongo.NotWritablePrimary",
                 "Pg.Connection", "Pg.Timeout",
                 "Redis.Connection", "Redis.Timeout", "Redis.ReadOnly" }
M.DEFAULT_OPEN_FOR_MS = 5000
M.DEFAULT_MAX_OPEN_FOR_MS = 5 * 60 * 1000
M.MAX_RATE = 1000000000

local function give_up_after(ctx, path, v)
  if v == "off" then
    return true, 0
  end
  if type(v) == "string" and not duration.parse(v) then
    ctx:fail(path, 'expected "off" or a duration such as "30m", got %s', fields.repr(v))
    return false
  end
  return fields.positive_duration(ctx, path, v)
end

local CIRCUIT = {
  { "on", fields.type_list },
  { "open_for", fields.positive_duration, "open_for_ms" },
  { "max_open_for", fields.positive_duration, "max_open_for_ms" },
  { "give_up_after", give_up_after, "give_up_after_ms" },
}
M.CIRCUIT = CIRCUIT

local function check_circuit(ctx, v)
  local before = #ctx.errors
  local own = fields.check_switchable(ctx, "circuit", v, CIRCUIT, "circuit")
  if not own then
    return nil
  end
  local c = {
    on = own.on or fields.copy_list(M.DEFAULT_ON),
    open_for_ms = own.open_for_ms or M.DEFAULT_OPEN_FOR_MS,
    max_open_for_ms = own.max_open_for_ms or M.DEFAULT_MAX_OPEN_FOR_MS,
    give_up_after_ms = own.give_up_after_ms or 0,
  }
  if type(v) == "table" and v.on ~= nil and own.on and #own.on == 0 then
    ctx:fail("circuit.on", "the empty list never opens the breaker (omit on for the default "
      .. "outage types, or remove circuit)")
  end
  if #ctx.errors == before and c.max_open_for_ms < c.open_for_ms then
    ctx:fail("circuit.max_open_for", 'must be >= circuit.open_for ("%s"), got "%s"',
      duration.format(c.open_for_ms), duration.format(c.max_open_for_ms))
  end
  return c
end

-- "N/s" | "N/m", N a whole number from 1: the text, else nil and the error.
function M.parse_rate(v)
  local n, unit
  if type(v) == "string" then
    n, unit = v:match("^(%d+)/([sm])$")
  end
  n = n and tonumber(n)
  if not n or n < 1 or n > M.MAX_RATE or math.type(n) ~= "integer" then
    return nil, string.format('expected "N/s" or "N/m" with N a whole number from 1 to %d '
      .. '(handler attempts per second or minute), such as "200/s" or "12000/m", got %s',
      M.MAX_RATE, fields.repr(v))
  end
  return { count = n, per_ms = unit == "s" and 1000 or 60000 }
end

-- The bucket's size: burst + 1 (burst = 0 lets no more than the rate
-- through in any one period), else one second's worth, at least 1.
function M.bucket_size(r, burst)
  if burst then
    return burst + 1
  end
  return math.max(1, r.count * 1000 // r.per_ms)
end

local RATE_LIMIT = {
  { "rate", function(ctx, path, v)
      local r, err = M.parse_rate(v)
      if not r then
        ctx:fail(path, "%s", err)
        return false
      end
      return true, v
    end },
  { "burst", function(ctx, path, v)
      local ok, n = fields.int_min(0)(ctx, path, v)
      if ok and n > M.MAX_RATE then
        ctx:fail(path, "expected an integer from 0 to %d, got %s", M.MAX_RATE, fields.repr(v))
        return false
      end
      return ok, n
    end },
}

-- Checks t.circuit and t.rate_limit of a stream declaration into spec.
function M.check(ctx, t, spec)
  spec.circuit = check_circuit(ctx, t.circuit)
  local v = t.rate_limit
  if type(v) == "table" then
    local own = fields.check_table(ctx, "rate_limit", v, RATE_LIMIT)
    if v.rate == nil then
      ctx:fail("rate_limit.rate", 'missing: the rate, such as "50/s" (rate_limit = '
        .. '{ rate = "50/s", burst = 0 })')
    end
    spec.rate_limit, spec.rate_burst = own.rate, own.burst
  elseif v ~= nil then
    local r, err = M.parse_rate(v)
    if r then
      spec.rate_limit = v
    else
      ctx:fail("rate_limit", "%s%s", err, type(v) == "string" and ""
        or ', or a table { rate = "50/s", burst = N }')
    end
  end
end

-- The effective settings, for `flowwarden check` (add(key, value)); a stream
-- without them prints nothing (its exhausted attempts follow the DLQ policy).
function M.describe(spec, add)
  local c = spec.circuit
  if c then
    add("circuit.on", table.concat(c.on, ", "))
    add("circuit.open_for", duration.format(c.open_for_ms) .. " (doubles after each failed probe)")
    add("circuit.max_open_for", duration.format(c.max_open_for_ms))
    add("circuit.give_up_after", c.give_up_after_ms == 0 and "off (the event is held until a "
      .. "probe succeeds)" or duration.format(c.give_up_after_ms))
  end
  if spec.rate_limit then
    local r = M.parse_rate(spec.rate_limit)
    local size = M.bucket_size(r, spec.rate_burst)
    add("rate_limit", string.format("%s (handler attempts, retries and probes included; "
      .. "burst %d%s: at most %d in any one %s)", spec.rate_limit, size - 1,
      spec.rate_burst and "" or " (default)", r.count + size - 1,
      r.per_ms == 1000 and "second" or "minute"))
  end
end

return M
