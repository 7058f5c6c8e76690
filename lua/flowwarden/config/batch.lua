--[[
flowwarden.config.batch: a stream's batch handler (issue 30).

  batch = { max_events = 500, max_wait = "20ms" },   -- defaults
  on_batch = function(batch) ... end

on_batch is declared instead of the per-operation handlers; batch without
on_batch is an error. check() fills spec.batch = { max_events, max_wait_ms }
and spec.handlers.batch when the stream declares on_batch.
]]

local fields = require("flowwarden.config.fields")

local M = {}

M.DEFAULT = { max_events = 500, max_wait_ms = 20 }
-- A batch is one Lua call over up to this many ctx: large enough for any
-- bulk write (MongoDB splits a bulk write of more than 100,000 operations
-- itself), small enough that a batch's retries and bisection stay bounded.
M.MAX_EVENTS = 10000
-- The longest a batch waits for more events once its first is there.
M.MAX_WAIT_MS = 10000

local function max_events(ctx, path, v)
  local i = math.type(v) == "integer" and v or (math.type(v) == "float" and math.tointeger(v))
  if not i or i < 1 or i > M.MAX_EVENTS then
    ctx:fail(path, "expected an integer from 1 to %d (events per on_batch call), got %s",
      M.MAX_EVENTS, fields.repr(v))
    return false
  end
  return true, i
end

local function max_wait(ctx, path, v)
  local ok, ms = fields.positive_duration(ctx, path, v)
  if not ok then
    return false
  end
  if ms > M.MAX_WAIT_MS then
    ctx:fail(path, '%s is too long (at most "10s": a batch waits at most this long for more '
      .. "events once its first is there)", fields.repr(v))
    return false
  end
  return true, ms
end

local BATCH = {
  { "max_events", max_events },
  { "max_wait", max_wait, "max_wait_ms" },
}

-- Validates t.batch and t.on_batch of the stream declaration t into spec.
-- Returns true when the stream declares on_batch (a handler).
function M.check(ctx, t, spec)
  local has_batch = t.on_batch ~= nil
  if has_batch and type(t.on_batch) ~= "function" then
    ctx:fail("on_batch", "expected a function(batch), got %s", fields.repr(t.on_batch))
  elseif has_batch then
    spec.handlers.batch = t.on_batch
  end
  if has_batch then
    local others = {}
    for _, key in ipairs(fields.HANDLER_KEYS) do
      if t[key] ~= nil then
        others[#others + 1] = key
      end
    end
    if #others > 0 then
      ctx:fail("on_batch", "declared together with %s: a stream has either on_batch or the "
        .. "per-operation handlers, not both", table.concat(others, ", "))
    end
  end
  if t.batch ~= nil then
    if not has_batch then
      ctx:fail("batch", "set without on_batch (declare on_batch = function(batch) ... end, or "
        .. "remove batch)")
    end
    if type(t.batch) ~= "table" then
      ctx:fail("batch", 'expected a table such as { max_events = 500, max_wait = "20ms" }, got %s',
        fields.repr(t.batch))
    else
      local own = fields.check_table(ctx, "batch", t.batch, BATCH)
      spec.batch = {
        max_events = own.max_events or M.DEFAULT.max_events,
        max_wait_ms = own.max_wait_ms or M.DEFAULT.max_wait_ms,
      }
    end
  end
  if has_batch and not spec.batch then
    spec.batch = { max_events = M.DEFAULT.max_events, max_wait_ms = M.DEFAULT.max_wait_ms }
  end
  return has_batch
end

return M
