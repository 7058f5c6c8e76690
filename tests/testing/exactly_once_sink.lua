-- A script for exactly_once_spec.lua: the $inc read model on another MongoDB
-- deployment, with exactly_once = { connection = "sink" }.
local fw = require("flowwarden")

fw.connection { name = "sink", uri = "mongodb://127.0.0.1:27018/" }

fw.stream {
  name = "totals", database = "shop", collection = "orders", dlq = true,
  exactly_once = { connection = "sink" },
  retry = { max_attempts = 2, initial_delay = "100ms" },
  on_insert = function(ctx)
    local order = ctx:full_document()
    local totals = fw.mongo.collection("shop", "customer_totals", { connection = "sink" })
    totals:update_one({ _id = order.customer }, { ["$inc"] = { orders = 1, amount = order.total } },
      { upsert = true })
    if order.total < 0 then
      error(fw.error("Validation", "negative total"))
    elseif order.own then
      fw.mongo.collection("shop", "log"):insert_one({ order = order._id })
    end
  end,
}
