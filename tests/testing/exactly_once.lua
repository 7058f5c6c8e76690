-- A script for exactly_once_spec.lua: README's $inc read model with
-- exactly_once = true, and cases that fail after writing.
local fw = require("flowwarden")

fw.connection { name = "audit", uri = "mongodb://127.0.0.1:27017/audit" }

fw.stream {
  name = "totals", database = "shop", collection = "orders", exactly_once = true, dlq = true,
  retry = { max_attempts = 3, initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    local totals = fw.mongo.collection("shop", "customer_totals")
    totals:update_one({ _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    -- The call reads its own write.
    local seen = totals:find_one({ _id = order.customer })
    assert(seen and seen.orders >= 1, "the call sees its own write")
    if order.total < 0 then
      error(fw.error("Validation", "negative total"))
    elseif order.dlq then
      ctx:send_to_dlq("flagged")
    elseif order.audit then
      fw.mongo.collection("audit", "log", { connection = "audit" }):insert_one({ order = order._id })
    elseif order.flaky and ctx:attempt_number() == 1 then
      error(fw.error("Flaky", "first attempt fails"))
    end
  end,
  on_error = function(err, ctx)
    fw.mongo.collection("shop", "errors"):insert_one({ order = ctx:document_key()._id,
      type = err.type })
  end,
}
