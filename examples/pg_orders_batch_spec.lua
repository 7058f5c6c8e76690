-- Specs for examples/pg_orders_batch.lua: `flowwarden test examples/pg_orders_batch_spec.lua`.
-- fw.pg runs on app.pg, a recorder of statements with scripted answers
-- (docs/testing-scripts.md).
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "pg_orders_batch.lua"
local URI = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" -- the database; never connected to

describe("pg_orders_batch.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT, { env = { PG_URI = "postgresql://u@127.0.0.1:5432/reporting" },
                             uri = URI })
  end)

  it("writes each order's last change: upserts and deletes in one transaction", function()
    local r = app:deliver_batch("orders-to-pg", {
      fwt.insert { _id = 1, customer = "ann", total = 10, status = "new" },
      fwt.insert { _id = 2, customer = "bob", total = 5, status = "new" },
      fwt.update({ _id = 1 }, { set = { status = "paid" } },
        { fullDocument = { _id = 1, customer = "ann", total = 10, status = "paid" } }),
      fwt.delete(2),
      fwt.delete(3),
    })
    assert.same({ "handled", "handled", "handled", "handled", "handled" }, r.outcomes)
    local kinds = {}
    for i, st in ipairs(app.pg.statements) do kinds[i] = st.kind end
    assert.same({ "begin", "execute_many", "execute_many", "commit" }, kinds)
    local upserts, deletes = app.pg.statements[2], app.pg.statements[3]
    assert.truthy(upserts.sql:find("ON CONFLICT (id) DO UPDATE", 1, true))
    assert.equal(1, #upserts.rows)                       -- order 1, once, as last seen
    assert.same({ "1", "ann", 10, "paid" }, { table.unpack(upserts.rows[1], 1, 4) })
    assert.equal("DELETE FROM orders WHERE id = $1", deletes.sql)
    assert.same({ { "2" }, { "3" } }, deletes.rows)
  end)

  it("dead-letters only the order the table refuses; the rest of its batch is applied", function()
    app.pg:stub("INSERT INTO orders", function(_, params)
      return params[1] == "6" and { err = "Pg.UniqueViolation" } or { affected = 1 }
    end)
    local r = app:deliver_batch("orders-to-pg", {
      fwt.insert { _id = 5, customer = "c", total = 1 },
      fwt.insert { _id = 6, customer = "c", total = 1 },
      fwt.insert { _id = 7, customer = "c", total = 1 },
    })
    assert.same({ "handled", "dlq", "handled" }, r.outcomes)
    local dlq = app:dlq("orders-to-pg")
    assert.equal(1, #dlq)
    assert.equal("Pg.UniqueViolation", dlq[1].error.type)
    assert.equal(6, dlq[1].documentKey._id)
  end)
end)
