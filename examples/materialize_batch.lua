-- A read model fed in batches (issue 30): order_view holds each order's
-- customer and total, written with one unordered bulk_write per batch of up
-- to 500 change events, instead of one round trip per event.
--
--   flowwarden run examples/materialize_batch.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- Every write is keyed by the order's _id (a replacement or a delete), so a
-- batch written again after a retry or a crash changes nothing. An order
-- the view refuses (here: one without a customer, or a write the server
-- rejects) is marked with batch:fail: it alone is retried, then
-- dead-lettered with its own error, while the rest of its batch is applied.
local fw = require("flowwarden")

-- The bulk_write operation for one event, or nil when it has none.
local function operation(ctx)
  local op, o = ctx:operation_type(), ctx:full_document()
  if op == "delete" or (op == "update" and o == nil) then   -- nil: deleted since
    return { delete_one = { filter = { _id = ctx:document_key()._id } } }
  elseif o == nil then
    return nil                                              -- drop, rename, ...
  elseif o.customer == nil then
    return false
  end
  return { replace_one = { filter = { _id = o._id },
    replacement = { customer = o.customer, total = o.total }, upsert = true } }
end

fw.stream {
  name = "order-view",
  collection = "orders",
  full_document = "updateLookup",
  retry = { max_attempts = 3, initial_delay = "200ms" },
  dlq = true,
  batch = { max_events = 500, max_wait = "20ms" },

  on_batch = function(batch)
    local view = fw.mongo.collection(batch:get(1):database_name(), "order_view")
    local ops, event_of = {}, {}
    for i, ctx in batch:events() do
      local w = operation(ctx)
      if w == false then
        batch:fail(i, fw.error("Order.Invalid", "order without a customer"))
      elseif w then
        ops[#ops + 1] = w
        event_of[#ops] = i                    -- write_errors number the operations
      end
    end
    if #ops == 0 then
      return
    end
    local ok, err = pcall(view.bulk_write, view, ops, { ordered = false })
    if not ok then
      local we = type(err) == "table" and err.fields and err.fields.write_errors or {}
      if #we == 0 then
        error(err, 0)                         -- the whole batch failed: retried whole
      end
      for _, e in ipairs(we) do
        batch:fail(event_of[e.index], err)    -- only these events failed
      end
    end
  end,
}
