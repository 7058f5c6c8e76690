--[[
flowwarden.dispatch: what the runtime does after a handler attempt failed.

The C host enters this module only on the failure path; the success path
never enters Lua beyond the handler itself. It runs three steps, each as its
own call with its own time budget, so that an on_error that runs away cannot
take the policy down with it:

  1. classify(spec, failure, stopped)        -> c, err
  2. on_error(err, ctx)                      (the host calls the user's function)
  3. decide(spec, c, attempt, ok, value, stopped) -> decision

The decision is a plain table:

  { action = "retry" | "dlq" | "skip" | "drop",
    type, message, traceback,       -- the classified error, for logs and the DLQ
    where }                         -- "file:line" of the failing line, or nil

"drop" means the event is given up without a dead-letter queue: seed 000's
"retry only" and "neither" rows. The host logs it at error level and counts
it as lost.
]]

local errors = require("flowwarden.errors")
local fw = require("flowwarden")

local M = {}

-- The error object handed to on_error: err.type, err.message, err.fields,
-- err.traceback.
local function user_error(c)
  return { type = c.type, message = c.message, fields = c.fields or {},
           traceback = c.traceback, where = c.where }
end

-- Step 1. failure: {value, traceback} from the host's message handler;
-- stopped: "timeout" | "memory" | nil when the host interrupted the handler.
-- Returns the classified error and the object on_error receives.
function M.classify(spec, failure, stopped)
  local c = errors.classify(failure.value, failure.traceback)
  if stopped == "timeout" then
    c.type = "Timeout"
    c.message = string.format("handler exceeded its timeout of %d ms", spec.timeout_ms)
  elseif stopped == "memory" then
    c.type = errors.MEMORY_ERROR
    c.message = string.format("handler exceeded its memory_limit of %d bytes", spec.memory_limit_bytes)
  end
  return c, user_error(c)
end

-- What on_error asked for, as "SKIP" | "RETRY" | "DLQ" | "RETHROW", logging
-- a failed on_error or an unknown return value. ok: nil when there is no
-- on_error, true when it returned value, false when it raised value (or was
-- stopped by the host: stopped = "timeout" | "memory").
local function requested_action(spec, ok, value, stopped)
  if ok == nil then
    return "RETHROW"
  end
  if not ok then
    local why
    if stopped == "timeout" then
      why = string.format("it exceeded its timeout of %d ms", spec.timeout_ms)
    elseif stopped == "memory" then
      why = string.format("it exceeded the memory_limit of %d bytes", spec.memory_limit_bytes)
    else
      why = errors.format(errors.classify(value))
    end
    fw.log.error(string.format("on_error failed (%s); applying the standard policy", why))
    return "RETHROW"
  end
  local action, warning = errors.action_from(value)
  if warning then
    fw.log.warn(warning)
  end
  return action
end

-- Step 3. attempt: 1-based.
function M.decide(spec, c, attempt, ok, value, stopped)
  local action = requested_action(spec, ok, value, stopped)
  local max_attempts = spec.retry.max_attempts
  local give_up = spec.dlq ~= nil and "dlq" or "drop"
  local decision
  if action == "SKIP" then
    decision = "skip"
  elseif action == "DLQ" then
    decision = give_up
  elseif action == "RETRY" then
    decision = attempt < max_attempts and "retry" or give_up
  else
    local retry = errors.should_retry(spec.retry, c.type)
    decision = (retry and attempt < max_attempts) and "retry" or give_up
  end
  -- An HTTP server's refusal (fw.http's Http.Status.*): what it answered.
  local f = c.fields
  local status, body
  if c.type:find("^Http%.Status%.") and type(f) == "table" and math.type(f.status) == "integer"
      and f.status > 0 and f.status < 1000 then
    status = f.status
    body = type(f.body) == "string" and M.body_excerpt(f.body) or nil
  end
  return { action = decision, type = c.type, message = c.message,
           traceback = c.traceback or "", where = c.where, status = status, body = body }
end

-- Issue 38: how much of an HTTP error's reply (err.fields.body) the DLQ
-- entry keeps, as error.body.
M.MAX_BODY = 512

-- The first M.MAX_BODY bytes of body as valid UTF-8: a character the cut
-- splits is left out, and a reply that is not UTF-8 has its bytes above 127
-- replaced by "?" (BSON strings must be UTF-8).
function M.body_excerpt(body)
  local cut = body:sub(1, M.MAX_BODY)
  if #body > M.MAX_BODY then
    for drop = 0, 3 do
      if utf8.len(cut, 1, #cut - drop) then
        cut = cut:sub(1, #cut - drop)
        break
      end
    end
  end
  if not utf8.len(cut) then
    cut = cut:gsub("[\128-\255]", "?")
  end
  return cut
end

-- A whole on_batch call failed (failure and stopped as for classify): whether
-- its error is one the stream retries (retry_on, no_retry_on), as an event's
-- is; the batch is then retried whole, else bisected at once. The error
-- itself reaches on_error with each event that fails alone.
function M.batch_retries(spec, failure, stopped)
  local c = M.classify(spec, failure, stopped)
  return (errors.should_retry(spec.retry, c.type))
end

-- Sequenced DLQ (issue 14): the event's sequence key from the stream's
-- dlq.sequence_key(ctx). A key function that raises, or returns nil, fails
-- the attempt with a message naming it (the error keeps its type); the host
-- turns the returned value into the sequence id.
function M.sequence_key(spec, ctx)
  local ok, v = pcall(spec.dlq.sequence_key, ctx)
  local e
  if not ok then
    local c = errors.classify(v)
    e = errors.new(c.type, "dlq.sequence_key failed: " .. c.message)
    e.where = c.where
  elseif v == nil then
    e = errors.new(errors.NIL_ERROR, "dlq.sequence_key returned nil for this event (return "
      .. "the key of its sequence, e.g. ctx:full_document().customer_id)")
    e.where = nil
  end
  if e then
    error(e, 0)
  end
  return v
end

return M
