-- The demo script: one stream over shop.orders with a handler per operation
-- type, a retry policy, a dead-letter queue and one side effect: accepted
-- orders are added to a read model, shop.customer_totals, with fw.mongo.
-- exactly_once = true commits that $inc with the stream's checkpoint in one
-- transaction, so a crash never counts an order twice (docs/reliability.md).
--
--   flowwarden run examples/orders.lua --uri mongodb://127.0.0.1:27017/shop?replicaSet=rs0
local fw = require("flowwarden")

fw.defaults { database = "shop" }

fw.stream {
  name = "order-watcher",
  collection = "orders",
  full_document = "updateLookup",
  exactly_once = true,
  -- Seed 001's policy with jitter off so the demo's timing reads cleanly.
  retry = { max_attempts = 3, initial_delay = "200ms", jitter = false,
            no_retry_on = { "Validation", "NilError", "TypeError", "ArgumentError" } },
  dlq = { collection = "orders_dlq", ttl_days = 90 },

  on_insert = function(ctx)
    local order = ctx:full_document()
    if order.total < 0 then
      -- A business rejection: retrying will not fix it.
      ctx:add_metadata("rule", "total must be >= 0")
      ctx:send_to_dlq("Invalid order total: " .. tostring(order.total))
      return
    end
    if order.gateway == "flaky" and ctx:attempt_number() < 3 then
      -- A transient failure: recovers on the third attempt.
      error(fw.error("Payment.Timeout", "payment gateway did not answer", { status = 504 }))
    end
    if order.gateway == "down" then
      -- A permanent failure: retried, then dead-lettered.
      error(fw.error("Payment.Unavailable", "payment gateway is down"))
    end
    -- An upsert: the read model needs no set-up. Network errors and the like
    -- are typed (Mongo.Network, ...) and retried by the policy above.
    fw.mongo.collection("shop", "customer_totals"):update_one(
      { _id = order.customer },
      { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    fw.log.info(string.format("order %s accepted: %s x%d = %.2f (attempt %d)",
      tostring(order._id), order.item, order.qty, order.total, ctx:attempt_number()))
  end,

  on_update = function(ctx)
    local changed = ctx:update_description().updatedFields
    if changed.status then
      fw.log.info(string.format("order %s is now %s", tostring(ctx:document_key()._id),
        changed.status))
    end
  end,

  on_delete = function(ctx)
    fw.log.info(string.format("order %s was deleted", tostring(ctx:document_key()._id)))
  end,
}
