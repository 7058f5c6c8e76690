-- A Redis cache kept in step with shop.orders, and an exact order count per
-- customer (the database is the URI's: shop below).
--
--   REDIS_URI=redis://:PASSWORD@127.0.0.1:6379/0 \
--   flowwarden run examples/redis_cache.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- Every change deletes the order's cache key ("order:<id>"): readers fill it
-- again from MongoDB. Deleting twice is harmless, so retries need no care.
--
-- The counter must not count an event twice when a retry or a restart runs
-- it again (the INCR may have been applied before Redis's reply was lost).
-- So each count is guarded by a key named after the event (ctx:event_id(),
-- stable across retries and restarts), and the guard and the INCR happen in
-- one atomic step on the server: a small script (EVAL) that sets the guard
-- with SET NX and increments only when it created it. (MULTI/EXEC alone
-- cannot do this: the commands it queues cannot depend on each other's
-- replies, so an INCR queued after SETNX would run either way.) The guards
-- expire after a week, longer than any event waits in retries.
--
-- A Redis restart in the middle raises Redis.Connection, retried below; the
-- counts stay exact across it when Redis keeps what it acknowledged
-- (appendonly yes, appendfsync always).
local fw = require("flowwarden")

fw.connection { name = "cache", uri = fw.env("REDIS_URI", "redis://127.0.0.1:6379/0") }

local WEEK = 7 * 24 * 3600
-- KEYS[1]: the event's guard, KEYS[2]: the counter, ARGV[1]: the guard's TTL.
local COUNT_ONCE = [[
if redis.call("SET", KEYS[1], "1", "NX", "EX", ARGV[1]) then
  return redis.call("INCR", KEYS[2])
end
return false
]]

-- Deletes order id's cache key; counts a new order once per event.
local function changed(ctx)
  local id = tostring(ctx:document_key()._id)
  fw.redis.call("cache", "DEL", "order:" .. id)
  if ctx:operation_type() ~= "insert" then
    return
  end
  local customer = ctx:full_document().customer
  if customer == nil then
    return
  end
  fw.redis.call("cache", "EVAL", COUNT_ONCE, 2, "seen:" .. ctx:event_id(),
    "orders:" .. tostring(customer), WEEK)
end

fw.stream {
  name = "order-cache",
  collection = "orders",
  -- Redis.Connection, Redis.Timeout and Redis.ReadOnly are retried; a
  -- Redis.Error (e.g. WRONGTYPE) goes to the DLQ at once.
  retry = { max_attempts = 10, initial_delay = "200ms", max_delay = "5s" },
  dlq = true,
  on_change = changed,
}
