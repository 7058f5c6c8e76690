--[[
flowwarden.dlq: what a replay of dead letters asks the Lua side (issue 12).

  fw.dlq.requeue { diagnostics = { retries = 2 } }  an enqueue policy's decision:
                                  back to PENDING, diagnostics merged
  fw.dlq.evict()                  an enqueue policy's decision: DISCARDED

For the C host (src/runtime/dlq/dlq_replay.c):

  dlq.decide(spec, letter, err) -> "requeue" | "evict", diagnostics | nil
      runs spec.dlq.enqueue_policy(letter, err) (Axon's EnqueuePolicy). No
      policy, a policy that raises or returns something else: "requeue"
      (logged). letter is the table ctx:dead_letter() returns; err the
      last attempt's error as on_error's err: { type, message, where, fields,
      traceback } (dlq_replay.c builds it).
  dlq.schedule(spec, now_ms) -> next_ms, batch_size, max_attempts | nil
      when spec.dlq.reprocess is set: the time of the next automatic round
      after now_ms (every: now + every; cron: the next matching minute, UTC)
  dlq.next_runs(reprocess, now_s, n) -> { seconds, ... }   for `flowwarden check`
]]

local cron = require("flowwarden.cron")

local M = {}

local DECISION = {}
DECISION.__index = DECISION
DECISION.__name = "flowwarden.dlq.decision"
DECISION.__tostring = function(d)
  return "fw.dlq." .. d.action .. "()"
end

M.api = {}

function M.api.requeue(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error("fw.dlq.requeue: expected a table such as { diagnostics = { retries = 1 } } or nothing, got "
      .. type(opts), 2)
  end
  local diagnostics = opts and opts.diagnostics
  if diagnostics ~= nil and type(diagnostics) ~= "table" then
    error("fw.dlq.requeue: diagnostics must be a table, got " .. type(diagnostics), 2)
  end
  return setmetatable({ action = "requeue", diagnostics = diagnostics }, DECISION)
end

function M.api.evict()
  return setmetatable({ action = "evict" }, DECISION)
end

local function log(level, ...)
  local fw = require("flowwarden")
  fw.log[level](...)
end

function M.decide(spec, letter, err)
  local policy = spec.dlq and spec.dlq.enqueue_policy
  if not policy then
    return "requeue", nil
  end
  local ok, d = pcall(policy, letter, err)
  if not ok then
    local errors = require("flowwarden.errors")
    log("error", string.format("dlq.enqueue_policy failed (%s); the entry is requeued",
      errors.format(errors.classify(d))))
    return "requeue", nil
  end
  if getmetatable(d) ~= DECISION then
    log("warn", string.format("dlq.enqueue_policy returned %s (expected fw.dlq.requeue { ... } or "
      .. "fw.dlq.evict()); the entry is requeued", type(d) == "string" and string.format("%q", d)
      or tostring(d)))
    return "requeue", nil
  end
  return d.action, d.diagnostics
end

local function next_after(r, now_ms)
  if r.every_ms then
    return now_ms + r.every_ms
  end
  local s = cron.parse(r.cron)
  local t = s and cron.next(s, now_ms // 1000)
  return t and t * 1000 or nil
end

function M.schedule(spec, now_ms)
  local r = spec.dlq and spec.dlq.reprocess
  if not r then
    return nil
  end
  local at = next_after(r, now_ms)
  if not at then
    return nil
  end
  return at, r.batch_size, r.max_attempts
end

function M.next_runs(r, now_s, n)
  local out, t = {}, now_s * 1000
  for i = 1, n do
    t = next_after(r, t)
    if not t then
      break
    end
    out[i] = t // 1000
  end
  return out
end

return M
