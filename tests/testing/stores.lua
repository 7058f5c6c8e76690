-- A script for stores_spec.lua: each inserted document names a case.
local fw = require("flowwarden")

fw.connection { name = "cache", uri = "redis://127.0.0.1:6379/0" }
fw.connection { name = "rep", uri = "postgresql://u@127.0.0.1:5432/db" }

local cases = {}

function cases.redis_types()
  fw.redis.call("cache", "SET", "k", "v")
  local r = fw.redis.pipeline("cache", {
    { "MULTI" }, { "INCR", "n" }, { "SETNX", "k", "w" }, { "EXEC" },
    { "MGET", "k", "missing" }, { "GET", "missing" },
  })
  assert(r[1] == "OK" and r[2] == "QUEUED" and r[4][1] == 1 and r[4][2] == 0, "transaction replies")
  assert(r[5][1] == "v" and r[5][2] == fw.null and #r[5] == 2, "MGET keeps the nil's place")
  assert(r[6] == fw.null, "a nil reply in a pipeline is fw.null")
  assert(fw.redis.call("cache", "GET", "missing") == nil, "a nil reply is nil")
end

function cases.redis_wrongtype()
  fw.redis.call("cache", "LPUSH", "l", "x")
  fw.redis.call("cache", "INCR", "l")
end

function cases.redis_undeclared()
  fw.redis.call("rep", "PING")
end

function cases.pg_tx(doc)
  fw.pg.transaction("rep", function(tx)
    tx:execute("UPDATE t SET n = $1 WHERE id = $2", { 1, doc._id })
    if doc.fail then
      error(fw.error("Validation", "no"))
    end
  end)
end

function cases.pg_rows()
  local rows = fw.pg.query("rep", "SELECT id FROM t WHERE a = $1 AND b = $2", { nil, 2 })
  assert(rows[1].id == 9, "scripted rows")
end

function cases.pg_many(doc)
  local ok, n = pcall(fw.pg.execute_many, "rep", "INSERT INTO t (id, v) VALUES ($1, $2)",
    { { 1, "a" }, { nil, "b" }, { 3, "c" } })
  if doc.fail then
    assert(not ok and n.fields.row == 2, "the error names the row")
    error(n)
  end
  assert(n == 3, "affected rows add up, got " .. tostring(n))
  assert(fw.pg.execute_many("rep", "INSERT INTO t (id, v) VALUES ($1, $2)", {}) == 0, "no rows")
end

fw.stream {
  name = "s", database = "shop", collection = "c",
  retry = { max_attempts = 2, initial_delay = "10ms" },
  dlq = true,
  on_insert = function(ctx)
    local doc = ctx:full_document()
    cases[doc.case](doc)
  end,
}
