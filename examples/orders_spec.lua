-- Specs for examples/orders.lua, run offline with `flowwarden test examples/orders_spec.lua`
-- (docs/testing-scripts.md).
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "orders.lua"

local function order(fields)
  local o = { item = "book", qty = 1, customer = "ann", total = 10 }
  for k, v in pairs(fields) do
    o[k] = v
  end
  return o
end

describe("orders.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT)
  end)

  it("adds an accepted order to the customer's totals", function()
    local r = app:deliver("order-watcher", fwt.insert(order { _id = 1, total = 25 }))
    assert.equal("handled", r.outcome)
    assert.equal(1, r.attempts)
    local totals = app.mongo:collection("shop", "customer_totals"):find_one({ _id = "ann" })
    assert.same({ _id = "ann", orders = 1, amount = 25 }, totals)
    assert.equal("order 1 accepted: book x1 = 25.00 (attempt 1)", r.logs[1].message)
  end)

  it("dead-letters a negative total at once, with the handler's metadata", function()
    local r = app:deliver("order-watcher", fwt.insert(order { _id = 2, total = -5 }))
    assert.equal("dlq", r.outcome)
    assert.equal(1, r.attempts)
    assert.equal("DlqRequested", r.dlq_entry.error.type)
    assert.equal("Invalid order total: -5", r.dlq_entry.error.message)
    assert.same({ rule = "total must be >= 0" }, r.dlq_entry.metadata)
    assert.equal("INSERT", r.dlq_entry.operationType)
    assert.same({ db = "shop", coll = "orders" }, r.dlq_entry.ns)
    assert.is_nil(app.mongo:collection("shop", "customer_totals"):find_one({ _id = "ann" }))
  end)

  it("recovers from a flaky gateway on attempt 3, after 200ms and 400ms", function()
    local before = app.clock:now()
    local r = app:deliver("order-watcher", fwt.insert(order { _id = 3, gateway = "flaky" }))
    assert.equal("handled", r.outcome)
    assert.equal(3, r.attempts)
    assert.same({ 0.2, 0.4 }, r.delays)
    assert.equal(600, app.clock:now() - before)  -- the virtual clock moved, nothing slept
    assert.equal(2, #r.errors)
    assert.equal("Payment.Timeout", r.errors[1].type)
    assert.equal("retry", r.errors[1].action)
  end)

  it("dead-letters a down gateway after three attempts", function()
    local r = app:deliver("order-watcher", fwt.insert(order { _id = 4, gateway = "down" }))
    assert.equal("dlq", r.outcome)
    assert.equal(3, r.attempts)
    assert.equal("Payment.Unavailable", r.dlq_entry.error.type)
    assert.equal(3, r.dlq_entry.attempts)
    assert.equal(1, #app:dlq("order-watcher"))
  end)

  it("logs status changes and deletes", function()
    local r = app:deliver("order-watcher", fwt.update({ _id = 5 }, { set = { status = "PAID" } }))
    assert.equal("handled", r.outcome)
    assert.equal("order 5 is now PAID", r.logs[1].message)
    r = app:deliver("order-watcher", fwt.delete(5))
    assert.equal("order 5 was deleted", r.logs[1].message)
  end)

  it("replays a dead letter once the cause is gone", function()
    app:deliver("order-watcher", fwt.insert(order { _id = 6, gateway = "down" }))
    local entry = app:dlq("order-watcher")[1]
    -- The handler still fails: the entry is requeued with the error.
    local results = app:replay_dlq()
    assert.equal(1, #results)
    assert.equal("requeued", results[1].status)
    assert.equal("Payment.Unavailable", results[1].error.type)
    entry = app:dlq("order-watcher")[1]
    assert.equal("PENDING", entry.status)
    assert.equal(1, entry.reprocessAttempts)
  end)

  it("refuses an unknown stream and a non-table event", function()
    assert.has_error(function() app:deliver("orders", fwt.insert(order { _id = 7 })) end,
      'deliver: unknown stream "orders" (' .. SCRIPT .. ' declares "order-watcher")')
    assert.has_error(function() app:deliver("order-watcher", "insert") end,
      "deliver: event must be a table (build one with fwt.insert, fwt.update, fwt.replace or "
        .. "fwt.delete), got string")
  end)
end)
