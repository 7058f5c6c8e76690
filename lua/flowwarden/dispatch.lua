--[[
flowwarden.dispatch: what the runtime does after a handler attempt failed.

The C host calls on_failure only on the failure path; the success path never
enters Lua beyond the handler itself. It answers with a plain table:

  { action = "retry" | "dlq" | "skip" | "drop",
    type, message, traceback }      -- the classified error, for logs and the DLQ

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

-- spec: the stream's effective spec; failure: {value, traceback} from the
-- host's message handler; ctx: the event's ctx; attempt: 1-based;
-- stopped: "timeout" | "memory" | nil when the host interrupted the handler.
function M.on_failure(spec, failure, ctx, attempt, stopped)
  local c = errors.classify(failure.value, failure.traceback)
  if stopped == "timeout" then
    c.type = "Timeout"
    c.message = string.format("handler exceeded its timeout of %d ms", spec.timeout_ms)
  elseif stopped == "memory" then
    c.type = errors.MEMORY_ERROR
    c.message = string.format("handler exceeded its memory_limit of %d bytes", spec.memory_limit_bytes)
  end

  local action = "RETHROW"
  if spec.on_error then
    local ok, result = pcall(spec.on_error, user_error(c), ctx)
    if not ok then
      fw.log.error(string.format("on_error failed (%s); applying the standard policy",
        errors.format(errors.classify(result))))
    else
      local warning
      action, warning = errors.action_from(result)
      if warning then
        fw.log.warn(warning)
      end
    end
  end

  local max_attempts = spec.retry.max_attempts
  local has_dlq = spec.dlq ~= nil
  local give_up = has_dlq and "dlq" or "drop"
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
  return { action = decision, type = c.type, message = c.message,
           traceback = c.traceback or "" }
end

return M
