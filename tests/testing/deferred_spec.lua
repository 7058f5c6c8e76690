-- flowwarden test: retry.mode = "deferred" (issue 29). Its DLQ is in memory,
-- which keeps no scheduled retries: the retries run in place on the virtual
-- clock, with the deferred backoff (30s, 2m, 8m, 32m).
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("deferred retries under flowwarden test", function()
  it("retries on the virtual clock with the configured backoff", function()
    local app = fwt.load(DIR .. "deferred.lua")
    local r = app:deliver("deferred", fwt.insert { _id = 1, fails = 2 })
    assert.equal("handled", r.outcome)
    assert.equal(3, r.attempts)
    assert.same({ 30, 120 }, r.delays)
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
