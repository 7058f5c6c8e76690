-- Specs for examples/materialize.lua: `flowwarden test examples/materialize_spec.lua`.
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "materialize.lua"

describe("materialize.lua", function()
  local app, totals
  before_each(function()
    app = fwt.load(SCRIPT, { uri = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" })
    totals = app.mongo:collection("shop", "customer_totals")
  end)

  local function deliver(ev)
    ev.ns = { db = "shop", coll = "orders" }
    local r = app:deliver("customer-totals", ev)
    assert.equal("handled", r.outcome)
    return r
  end

  it("keeps a customer's totals through insert, update and delete", function()
    deliver(fwt.insert { _id = 1, customer = "ann", total = 10 })
    deliver(fwt.insert { _id = 2, customer = "ann", total = 5 })
    assert.same({ _id = "ann", orders = 2, amount = 15 }, totals:find_one({ _id = "ann" }))
    deliver(fwt.update({ _id = 1 }, { set = { total = 20 } },
      { fullDocument = { _id = 1, customer = "ann", total = 20 } }))
    assert.same({ _id = "ann", orders = 2, amount = 25 }, totals:find_one({ _id = "ann" }))
    deliver(fwt.delete(2))
    assert.same({ _id = "ann", orders = 1, amount = 20 }, totals:find_one({ _id = "ann" }))
  end)
end)
