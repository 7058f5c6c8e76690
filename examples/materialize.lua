-- A read model kept up to date from a change stream: per-customer order
-- counts and amounts in customer_totals, maintained with upserts, beside the
-- orders (the database is the URI's: shop below).
--
--   flowwarden run examples/materialize.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- An event handled again (a retry, a restart after kill -9 before the
-- checkpoint) adds nothing twice: the order's last applied total is kept in
-- order_view and only the difference to it is added. A crash between the two
-- writes of one event can still count that event twice; close that gap with
-- a transaction where the server offers them.
local fw = require("flowwarden")

-- Applies the order's current total (nil when it is gone) to its customer.
local function apply(ctx, id, customer, total)
  local db = ctx:database_name()
  local views = fw.mongo.collection(db, "order_view")
  local view = views:find_one({ _id = id })
  local old = view and view.total or 0
  local was = view and view.total ~= nil
  local is = total ~= nil
  if not was and not is then
    return
  end
  fw.mongo.collection(db, "customer_totals"):update_one({ _id = customer or view.customer },
    { ["$inc"] = { orders = (is and 1 or 0) - (was and 1 or 0), amount = (total or 0) - old } },
    { upsert = true })
  if is then
    views:update_one({ _id = id }, { ["$set"] = { customer = customer, total = total } },
      { upsert = true })
  else
    views:delete_one({ _id = id })
  end
end

fw.stream {
  name = "customer-totals",
  collection = "orders",
  full_document = "updateLookup",
  retry = { max_attempts = 5, initial_delay = "200ms" },   -- Mongo.Network etc. are retried
  dlq = true,                                              -- Mongo.Invalid goes straight here

  on_insert = function(ctx)
    local o = ctx:full_document()
    apply(ctx, o._id, o.customer, o.total)
  end,
  on_replace = function(ctx)
    local o = ctx:full_document()
    apply(ctx, o._id, o.customer, o.total)
  end,
  on_update = function(ctx)
    local o = ctx:full_document()
    if o ~= nil then                 -- nil: deleted since; its delete event settles it
      apply(ctx, o._id, o.customer, o.total)
    end
  end,
  on_delete = function(ctx)
    apply(ctx, ctx:document_key()._id, nil, nil)
  end,
}
