-- Specs for examples/redis_cache.lua: `flowwarden test examples/redis_cache_spec.lua`.
-- fw.redis runs on app.redis, an in-memory Redis (docs/testing-scripts.md).
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "redis_cache.lua"
local URI = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" -- the database; never connected to

describe("redis_cache.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT, { env = { REDIS_URI = "redis://127.0.0.1:6379/0" }, uri = URI })
  end)

  it("deletes the order's cache key on every change", function()
    app.redis:call("cache", "SET", "order:7", "cached")
    local r = app:deliver("order-cache", fwt.update({ _id = 7, customer = "c1" },
      { set = { total = 3 } }))
    assert.equal("handled", r.outcome)
    assert.is_nil(app.redis:get("cache", "order:7"))
  end)

  it("counts each order once, also when its event is delivered again", function()
    local event = fwt.insert({ _id = 1, customer = "c1" })
    assert.equal("handled", app:deliver("order-cache", event).outcome)
    assert.equal("handled", app:deliver("order-cache", event).outcome)  -- a replay: same event id
    assert.equal("handled", app:deliver("order-cache", fwt.insert({ _id = 2, customer = "c1" })).outcome)
    assert.equal("2", app.redis:get("cache", "orders:c1"))
  end)

  it("retries while Redis is unreachable, then counts once", function()
    app.redis:fail("EVAL", "Redis.Connection", { times = 2 })
    local r = app:deliver("order-cache", fwt.insert({ _id = 3, customer = "c2" }))
    assert.equal("handled", r.outcome)
    assert.equal(3, r.attempts)
    assert.equal("1", app.redis:get("cache", "orders:c2"))
  end)

  it("dead-letters a Redis.Error without retrying", function()
    app.redis:call("cache", "HSET", "orders:c3", "x", "1")   -- the counter's key holds a hash
    local r = app:deliver("order-cache", fwt.insert({ _id = 4, customer = "c3" }))
    assert.equal(1, r.attempts)
    assert.equal("Redis.Error", r.dlq_entry.error.type)
  end)
end)
