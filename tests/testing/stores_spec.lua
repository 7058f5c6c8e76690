-- flowwarden test: fw.redis and fw.pg on flowwarden.testing's fakes (app.redis, app.pg).
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("store fakes", function()
  local app
  before_each(function()
    app = fwt.load(DIR .. "stores.lua")
  end)

  it("types Redis replies as fw.redis does, MULTI/EXEC included", function()
    local r = app:deliver("s", fwt.insert { _id = 1, case = "redis_types" })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    assert.equal("1", app.redis:get("cache", "n"))
  end)

  it("raises Redis.Error with the reply's prefix, not retried", function()
    local r = app:deliver("s", fwt.insert { _id = 1, case = "redis_wrongtype" })
    assert.equal(1, r.attempts)
    assert.equal("Redis.Error", r.dlq_entry.error.type)
    assert.matches('fw.redis: connection "cache": WRONGTYPE', r.dlq_entry.error.message, 1, true)
  end)

  it("refuses a connection of another kind, as run does", function()
    local r = app:deliver("s", fwt.insert { _id = 1, case = "redis_undeclared" })
    assert.equal("ArgumentError", r.dlq_entry.error.type)
    assert.matches("is not a Redis connection", r.dlq_entry.error.message, 1, true)
  end)

  it("records a transaction's statements: commit on return, rollback on error", function()
    app:deliver("s", fwt.insert { _id = 1, case = "pg_tx" })
    app:deliver("s", fwt.insert { _id = 2, case = "pg_tx", fail = true })
    local kinds = {}
    for i, st in ipairs(app.pg.statements) do
      kinds[i] = st.kind
    end
    -- the failing event runs twice (max_attempts = 2)
    assert.same({ "begin", "execute", "commit", "begin", "execute", "rollback",
                  "begin", "execute", "rollback" }, kinds)
    assert.same({ 1, 1 }, app.pg.statements[2].params)
  end)

  it("answers queries with scripted rows; a nil parameter keeps its place", function()
    app.pg:stub("^SELECT id FROM t", { rows = { { id = 9 } } })
    local r = app:deliver("s", fwt.insert { _id = 1, case = "pg_rows" })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    local params = app.pg.statements[1].params
    assert.equal(require("flowwarden").null, params[1])
    assert.equal(2, params[2])
  end)

  it("records execute_many as one statement with its rows; an error names the row", function()
    app.pg:stub("INSERT INTO t", { affected = 1 })
    local r = app:deliver("s", fwt.insert { _id = 1, case = "pg_many" })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    assert.equal(1, #app.pg.statements) -- the empty call sends nothing
    local st = app.pg.statements[1]
    assert.equal("execute_many", st.kind)
    assert.same({ require("flowwarden").null, "b" }, st.rows[2])
    app.pg:stub("INSERT INTO t", function(_, params)
      return params[2] == "b" and { err = "Pg.UniqueViolation" } or { affected = 1 }
    end)
    r = app:deliver("s", fwt.insert { _id = 2, case = "pg_many", fail = true })
    assert.equal(1, r.attempts)
    assert.equal("Pg.UniqueViolation", r.dlq_entry.error.type)
  end)
end)
