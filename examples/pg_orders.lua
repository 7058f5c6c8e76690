-- shop.orders copied into a PostgreSQL table for reporting and joins (the
-- MongoDB database is the URI's: shop below).
--
--   PG_URI=postgresql://writer:PASSWORD@127.0.0.1:5432/reporting \
--   flowwarden run examples/pg_orders.lua --uri "mongodb://127.0.0.1:27017/shop?replicaSet=rs0"
--
-- The table, created once beforehand:
--
--   CREATE TABLE orders (id text PRIMARY KEY, customer text, total numeric,
--                        status text, doc jsonb);
--
-- Inserts, updates and replaces upsert the order's row; deletes delete it.
-- exactly_once = { connection = "reporting" } runs each event's statements
-- and the stream's position (a row of flowwarden_checkpoints, a table
-- flowwarden creates in that database on first use) in one SQL transaction:
-- a crash or a kill leaves both or neither, and a restart resumes from that
-- row, so each event's statements commit exactly once (docs/reliability.md,
-- "Exactly once into PostgreSQL"). Values go as $1 parameters, never spliced
-- into the SQL; the whole document goes to a jsonb column as JSON text (a
-- Lua table would be sent as JSON too). Pg.Connection, Pg.Timeout,
-- Pg.Serialization and Pg.Deadlock are retried (a rolled-back attempt runs
-- again whole); a Pg.UniqueViolation, Pg.Syntax or Pg.Permission goes to the
-- DLQ, with nothing of the event applied.
local fw = require("flowwarden")

fw.connection { name = "reporting",
                uri = fw.env("PG_URI", "postgresql://flowwarden@127.0.0.1:5432/reporting") }

local UPSERT = [[
INSERT INTO orders (id, customer, total, status, doc) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET customer = EXCLUDED.customer, total = EXCLUDED.total,
  status = EXCLUDED.status, doc = EXCLUDED.doc]]

local function upsert(ctx)
  local o = ctx:full_document()
  if o == nil then
    return -- looked up after it was deleted: its delete event follows
  end
  fw.pg.execute("reporting", UPSERT,
    { tostring(o._id), o.customer, o.total, o.status,
      fw.json.encode(o, { mode = "plain" }) })
end

fw.stream {
  name = "orders-to-pg",
  collection = "orders",
  full_document = "updateLookup",
  exactly_once = { connection = "reporting" },
  retry = { max_attempts = 10, initial_delay = "200ms", max_delay = "10s" },
  dlq = true,
  on_insert = upsert,
  on_update = upsert,
  on_replace = upsert,
  on_delete = function(ctx)
    fw.pg.execute("reporting", "DELETE FROM orders WHERE id = $1",
      { tostring(ctx:document_key()._id) })
  end,
}
