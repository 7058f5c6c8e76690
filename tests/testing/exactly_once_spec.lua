-- flowwarden test with exactly_once = true (issue 39): the fake applies a
-- handler call's fw.mongo writes only when the call succeeds, as production
-- commits them with the checkpoint; a failed call's writes are not visible.
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("exactly_once under flowwarden test", function()
  local app, totals
  before_each(function()
    app = fwt.load(DIR .. "exactly_once.lua")
    totals = app.mongo:collection("shop", "customer_totals")
  end)

  it("keeps a successful call's writes", function()
    local r = app:deliver("totals", fwt.insert { _id = 1, customer = "c1", total = 5 })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    assert.same({ _id = "c1", orders = 1, amount = 5 }, totals:find_one({ _id = "c1" }))
  end)

  it("drops every write of a failed call, retries included", function()
    app:deliver("totals", fwt.insert { _id = 1, customer = "c1", total = 5 })
    local r = app:deliver("totals", fwt.insert { _id = 2, customer = "c1", total = -3 })
    assert.equal("dlq", r.outcome)
    assert.equal(3, r.attempts)
    assert.same({ _id = "c1", orders = 1, amount = 5 }, totals:find_one({ _id = "c1" }))
    -- on_error runs outside the call's transaction: its writes stay, one per attempt.
    assert.equal(3, app.mongo:collection("shop", "errors"):count({ order = 2 }))
  end)

  it("keeps only the attempt that succeeded", function()
    local r = app:deliver("totals", fwt.insert { _id = 3, customer = "c2", total = 4, flaky = true })
    assert.equal("handled", r.outcome)
    assert.equal(2, r.attempts)
    assert.same({ _id = "c2", orders = 1, amount = 4 }, totals:find_one({ _id = "c2" }))
  end)

  it("drops the writes of a call that sent its event to the DLQ", function()
    local r = app:deliver("totals", fwt.insert { _id = 4, customer = "c3", total = 2, dlq = true })
    assert.equal("dlq", r.outcome)
    assert.is_nil(totals:find_one({ _id = "c3" }))
  end)

  it("refuses a write to another connection, naming stream and connection", function()
    local r = app:deliver("totals", fwt.insert { _id = 5, customer = "c4", total = 1, audit = true })
    assert.equal("dlq", r.outcome)
    assert.equal("ArgumentError", r.dlq_entry.error.type)
    assert.matches('stream "totals" has exactly_once = true, and connection "audit" cannot join',
      r.dlq_entry.error.message, 1, true)
    assert.is_nil(totals:find_one({ _id = "c4" }))
  end)
end)

describe("exactly_once = { connection = <MongoDB> } under flowwarden test", function()
  local app, totals
  before_each(function()
    app = fwt.load(DIR .. "exactly_once_sink.lua")
    totals = app.mongo:collection("shop", "customer_totals", { connection = "sink" })
  end)

  it("keeps a successful call's writes on the sink", function()
    local r = app:deliver("totals", fwt.insert { _id = 1, customer = "c1", total = 5 })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    assert.same({ _id = "c1", orders = 1, amount = 5 }, totals:find_one({ _id = "c1" }))
  end)

  it("drops every write of a failed call on the sink", function()
    app:deliver("totals", fwt.insert { _id = 1, customer = "c1", total = 5 })
    local r = app:deliver("totals", fwt.insert { _id = 2, customer = "c1", total = -3 })
    assert.equal("dlq", r.outcome)
    assert.same({ _id = "c1", orders = 1, amount = 5 }, totals:find_one({ _id = "c1" }))
  end)

  it("refuses a write to the stream's own connection, naming stream and connection", function()
    local r = app:deliver("totals", fwt.insert { _id = 3, customer = "c2", total = 1, own = true })
    assert.equal("dlq", r.outcome)
    assert.equal("ArgumentError", r.dlq_entry.error.type)
    assert.matches('stream "totals" has exactly_once = { connection = "sink" }, and connection '
      .. '"default" cannot join', r.dlq_entry.error.message, 1, true)
    assert.is_nil(totals:find_one({ _id = "c2" }))
    assert.equal(0, app.mongo:collection("shop", "log"):count({}))
  end)
end)
