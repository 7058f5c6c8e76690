-- flowwarden test: the circuit breaker and the rate limit (issue 29) on the virtual clock.
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local HOOK = "https://hooks.example/orders"

describe("dependency outages", function()
  local app
  before_each(function()
    app = fwt.load(DIR .. "circuit.lua")
    app.http:stub("POST", HOOK, { status = 200 })
  end)

  it("holds the event through an outage and probes at open_for, doubling", function()
    app.http:stub("POST", HOOK, { status = 503 }, { times = 5 })
    local r = app:deliver("held", fwt.insert { _id = 1 })
    assert.equal("handled", r.outcome)
    assert.equal(6, r.attempts)             -- 2 attempts, then probes 3, 4, 5 (fail) and 6
    assert.same({ 1, 5, 10, 20, 20 }, r.delays) -- seconds: the retry, then the pauses
    assert.equal(0, #app:dlq("held"))
    assert.equal(6, #app.http.calls)
  end)

  it("dead-letters a probe's error outside circuit.on", function()
    app.http:stub("POST", HOOK, { status = 400 })
    app.http:stub("POST", HOOK, { status = 503 }, { times = 2 })
    local r = app:deliver("held", fwt.insert { _id = 2 })
    assert.equal("dlq", r.outcome)
    assert.equal(3, r.attempts)
    assert.equal("Http.Status.Permanent", r.dlq_entry.error.type)
  end)

  it("gives the held event up after give_up_after", function()
    app.http:stub("POST", HOOK, { status = 503 })
    local r = app:deliver("gives_up", fwt.insert { _id = 3 })
    assert.equal("dlq", r.outcome)
    assert.equal("Http.Status.Transient", r.dlq_entry.error.type)
    assert.is_true(r.attempts > 2)
  end)

  it("ends a delivery held for a virtual week as stopped", function()
    app.http:stub("POST", HOOK, { status = 503 })
    local r = app:deliver("forever", fwt.insert { _id = 4 })
    assert.equal("stopped", r.outcome)
    assert.equal(0, #app:dlq("forever"))
  end)

  it("rate_limit: a burst of one second, then the rate, on the virtual clock", function()
    local waited = {}
    for i = 1, 4 do
      waited[i] = app:deliver("limited", fwt.insert { _id = 10 + i }).delays
    end
    assert.same({ {}, {}, { 0.5 }, { 0.5 } }, waited)
  end)
  it("rate_limit with on_batch: one token per call, whatever the batch's size", function()
    local waited = {}
    for i = 1, 4 do
      local evs = {}
      for k = 1, 5 do evs[k] = fwt.insert { _id = 100 * i + k } end
      local r = app:deliver_batch("limited_batch", evs)
      assert.equal("done", r.result)
      waited[i] = r.delays
    end
    assert.same({ {}, {}, { 0.5 }, { 0.5 } }, waited)
  end)
end)
