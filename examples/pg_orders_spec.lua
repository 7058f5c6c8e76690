-- Specs for examples/pg_orders.lua: `flowwarden test examples/pg_orders_spec.lua`.
-- fw.pg runs on app.pg, a recorder of statements with scripted answers
-- (docs/testing-scripts.md).
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "pg_orders.lua"
local URI = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" -- the database; never connected to

describe("pg_orders.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT, { env = { PG_URI = "postgresql://u@127.0.0.1:5432/reporting" }, uri = URI })
  end)

  it("upserts an inserted order with $ parameters", function()
    local r = app:deliver("orders-to-pg", fwt.insert({ _id = 5, customer = "c1", total = 12,
                                                       status = "new" }))
    assert.equal("handled", r.outcome)
    local st = app.pg.statements[1]
    assert.equal("execute", st.kind)
    assert.truthy(st.sql:find("ON CONFLICT (id) DO UPDATE", 1, true))
    assert.same({ "5", "c1", 12, "new" }, { st.params[1], st.params[2], st.params[3], st.params[4] })
    assert.equal("c1", require("flowwarden").json.decode(st.params[5]).customer)
  end)

  it("deletes a deleted order by key", function()
    app:deliver("orders-to-pg", fwt.delete({ _id = 5 }))
    local st = app.pg.statements[1]
    assert.equal("DELETE FROM orders WHERE id = $1", st.sql)
    assert.same({ "5" }, st.params)
  end)

  it("dead-letters a unique violation at once and retries a lost connection", function()
    app.pg:stub("INSERT INTO orders", { err = "Pg.UniqueViolation" }, { times = 1 })
    local r = app:deliver("orders-to-pg", fwt.insert({ _id = 6, customer = "c", total = 1 }))
    assert.equal(1, r.attempts)
    assert.equal("Pg.UniqueViolation", r.dlq_entry.error.type)
    app.pg:stub("INSERT INTO orders", { err = "Pg.Connection" }, { times = 2 })
    r = app:deliver("orders-to-pg", fwt.insert({ _id = 7, customer = "c", total = 1 }))
    assert.equal("handled", r.outcome)
    assert.equal(3, r.attempts)
  end)
end)
