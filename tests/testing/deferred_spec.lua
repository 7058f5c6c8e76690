-- flowwarden test: retry.mode = "deferred" (issue 29). Its DLQ is in memory
-- and keeps scheduled retries as run's MongoDB DLQ does: a failed attempt
-- schedules the retry, and the delivery runs the stream's due retries on the
-- virtual clock, with the deferred backoff (30s, 2m, 8m, 32m).
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("deferred retries under flowwarden test", function()
  it("retries on the virtual clock with the configured backoff", function()
    local app = fwt.load(DIR .. "deferred.lua")
    local r = app:deliver("deferred", fwt.insert { _id = 1, fails = 2 })
    assert.equal("handled", r.outcome)
    assert.equal(3, r.attempts)
    assert.same({ 30, 120 }, r.delays)
    assert.is_nil(r.dlq_entry) -- resolved
  end)

  it("schedules the retry as run does instead of retrying in place", function()
    local app = fwt.load(DIR .. "deferred.lua")
    local r = app:deliver("deferred", fwt.insert { _id = 3, fails = 1 })
    assert.equal("handled", r.outcome)
    assert.equal(2, r.attempts)
    local scheduled, resolved
    for _, l in ipairs(r.logs) do
      scheduled = scheduled or l.message:find("scheduled in _fw_dlq for a deferred retry in 30000 ms; "
        .. "the stream goes on", 1, true)
      resolved = resolved or l.message:find(": handled on attempt 2", 1, true)
      assert.is_nil(l.message:find("retrying in", 1, true)) -- never retried in place
    end
    assert.truthy(scheduled)
    assert.truthy(resolved)
  end)

  it("dead-letters after max_attempts with every attempt counted", function()
    local app = fwt.load(DIR .. "deferred.lua")
    local r = app:deliver("deferred", fwt.insert { _id = 2, fails = 9 })
    assert.equal("dlq", r.outcome)
    assert.equal(5, r.attempts)
    assert.equal(5, r.dlq_entry.attempts)
    assert.same({ 30, 120, 480, 1920 }, r.delays)
  end)
end)
