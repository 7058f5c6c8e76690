-- Specs for examples/materialize_batch.lua: `flowwarden test examples/materialize_batch_spec.lua`.
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "materialize_batch.lua"

describe("materialize_batch.lua", function()
  local app, view
  before_each(function()
    app = fwt.load(SCRIPT, { uri = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" })
    view = app.mongo:collection("shop", "order_view")
  end)

  it("writes a batch of inserts, updates and deletes as one view", function()
    local r = app:deliver_batch("order-view", {
      fwt.insert { _id = 1, customer = "ann", total = 10 },
      fwt.insert { _id = 2, customer = "bob", total = 5 },
      fwt.update({ _id = 1 }, { set = { total = 20 } },
        { fullDocument = { _id = 1, customer = "ann", total = 20 } }),
      fwt.delete(2),
    })
    assert.same({ "handled", "handled", "handled", "handled" }, r.outcomes)
    assert.same({ _id = 1, customer = "ann", total = 20 }, view:find_one({ _id = 1 }))
    assert.equal(1, view:count({}))
  end)

  it("dead-letters an order without a customer alone; the rest of its batch is applied", function()
    local r = app:deliver_batch("order-view", {
      fwt.insert { _id = 1, customer = "ann", total = 10 },
      fwt.insert { _id = 2, total = 5 },
      fwt.insert { _id = 3, customer = "cid", total = 7 },
    })
    assert.same({ "handled", "dlq", "handled" }, r.outcomes)
    assert.equal(2, view:count({}))
    local dlq = app:dlq("order-view")
    assert.equal(1, #dlq)
    assert.equal("Order.Invalid", dlq[1].error.type)
    assert.equal(2, dlq[1].documentKey._id)
  end)
end)
