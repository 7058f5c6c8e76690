-- shop.orders copied into a PostgreSQL table in batches (issue 40): the same
-- table as pg_orders.lua, written with two statements per batch of up to 500
-- change events instead of one round trip per event.
--
--   PG_URI=postgresql://writer:PASSWORD@127.0.0.1:5432/reporting \
--   flowwarden run examples/pg_orders_batch.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- The table, created once beforehand (as for pg_orders.lua):
--
--   CREATE TABLE orders (id text PRIMARY KEY, customer text, total numeric,
--                        status text, doc jsonb);
--
-- The last change of each order in the batch decides: its row is upserted
-- (insert, update, replace) or deleted. fw.pg.execute_many sends all the rows
-- of a statement in one round trip. exactly_once = { connection = "reporting" }
-- runs each call of on_batch in one SQL transaction with the stream's position
-- past the batch's last event (a row of flowwarden_checkpoints, created in that
-- database on first use): a batch is applied whole or not at all, together
-- with the position, so a crash or a kill never applies a batch twice and a
-- restart resumes after the last batch that committed (docs/reliability.md,
-- "Exactly once into PostgreSQL"). The fw.pg.transaction below is a savepoint
-- inside it (without exactly_once, the transaction itself). An error fails
-- the whole batch and rolls it back: Pg.Connection, Pg.Timeout, Pg.Serialization
-- and Pg.Deadlock are retried; then (or at once for a Pg.UniqueViolation,
-- Pg.Syntax or Pg.Permission) the batch is bisected until the events that
-- fail alone are found, and only those go to the DLQ.
local fw = require("flowwarden")

fw.connection { name = "reporting",
                uri = fw.env("PG_URI", "postgresql://flowwarden@127.0.0.1:5432/reporting") }

local UPSERT = [[
INSERT INTO orders (id, customer, total, status, doc) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET customer = EXCLUDED.customer, total = EXCLUDED.total,
  status = EXCLUDED.status, doc = EXCLUDED.doc]]
local DELETE = "DELETE FROM orders WHERE id = $1"

-- The order's row (a parameter list) or false for a delete; nil: no change
-- to write (an update looked up after its order was deleted: the delete
-- event follows).
local function change_of(ctx)
  if ctx:operation_type() == "delete" then
    return false
  end
  local o = ctx:full_document()
  if o == nil then
    return nil
  end
  return { tostring(o._id), o.customer, o.total, o.status, fw.json.encode(o, { mode = "plain" }) }
end

fw.stream {
  name = "orders-to-pg",
  collection = "orders",
  full_document = "updateLookup",
  retry = { max_attempts = 10, initial_delay = "200ms", max_delay = "10s" },
  dlq = true,
  exactly_once = { connection = "reporting" },
  batch = { max_events = 500, max_wait = "20ms" },

  on_batch = function(batch)
    local last, order = {}, {}            -- id -> row | false, ids in first-seen order
    for _, ctx in batch:events() do
      local id = tostring(ctx:document_key()._id)
      local change = change_of(ctx)
      if change ~= nil then
        if last[id] == nil then order[#order + 1] = id end
        last[id] = change
      end
    end
    local upserts, deletes = {}, {}
    for _, id in ipairs(order) do
      if last[id] then
        upserts[#upserts + 1] = last[id]
      else
        deletes[#deletes + 1] = { id }
      end
    end
    fw.pg.transaction("reporting", function(tx)
      tx:execute_many(UPSERT, upserts)      -- an empty list sends nothing
      tx:execute_many(DELETE, deletes)
    end)
  end,
}
