-- exactly_once (issues 39 and 40). `true`: each handler call's fw.mongo
-- reads and writes on the stream's own MongoDB client and the stream's
-- checkpoint commit in one transaction. `{ connection = "name" }` naming a
-- PostgreSQL connection: the call's fw.pg statements on that connection and
-- the stream's position (in flowwarden_checkpoints there) commit in one SQL
-- transaction. Naming another MongoDB connection (a sink deployment): the
-- call's fw.mongo reads and writes on that connection and the stream's
-- checkpoint (in _fw_checkpoints there) commit in one MongoDB transaction
-- on that connection's client. What it cannot run with is a check error
-- that names the setting and the remedy.
local M = {}

-- The sink named by { connection = name }: sets spec.exactly_once_pg (a
-- PostgreSQL connection) or spec.exactly_once_connection (a MongoDB one other
-- than "default"), or fails. False when the setting is refused.
local function named_sink(ctx, v, spec, opts, repr)
  for k in pairs(v) do
    if k ~= "connection" then
      ctx:fail("exactly_once", "unknown field %s (expected { connection = \"name\" })", repr(k))
      return false
    end
  end
  local name = v.connection
  if type(name) ~= "string" or name == "" then
    ctx:fail("exactly_once.connection", "expected the name of a declared connection, got %s",
      repr(name))
    return false
  end
  if name == "default" then
    return true -- the stream's own deployment: exactly_once = true
  end
  local c = opts.kinds and opts.kinds[name]
  if not c then
    ctx:fail("exactly_once.connection", "unknown connection %s (declare it with fw.connection "
      .. "{ name = %s, uri = \"mongodb://...\" } for another MongoDB deployment, or "
      .. "uri = \"postgresql://...\" for PostgreSQL)", repr(name), repr(name))
    return false
  end
  if c.kind == "postgresql" then
    spec.exactly_once_pg = name
    return true
  end
  if c.kind == "redis" then
    ctx:fail("exactly_once.connection", "connection %s is a Redis connection; exactly once runs "
      .. "into MongoDB (exactly_once = true) or PostgreSQL ({ connection = \"a postgresql:// "
      .. "connection\" }); for Redis make the handler's writes idempotent (docs/lua-api.md, "
      .. "fw.redis)", repr(name))
    return false
  end
  if c.kind == "mongodb" then
    spec.exactly_once_connection = name -- transactions on that deployment's client
    return true
  end
  ctx:fail("exactly_once.connection", "connection %s is neither a MongoDB nor a PostgreSQL "
    .. "connection", repr(name))
  return false
end

function M.check(ctx, t, spec, repr, opts)
  spec.exactly_once = false
  spec.exactly_once_pg = nil
  spec.exactly_once_connection = nil
  local v = t.exactly_once
  if v == nil or v == false then return end
  if type(v) == "table" then
    if not named_sink(ctx, v, spec, opts or {}, repr) then
      return
    end
  elseif v ~= true then
    ctx:fail("exactly_once", "expected true, false or { connection = \"name\" }, got %s", repr(v))
    return
  end
  spec.exactly_once = true
  if spec.lanes and spec.lanes > 1 then
    ctx:fail("exactly_once", "cannot run with lanes = %d: the checkpoint commits with each "
      .. "event's transaction, in the stream's order; use partitions = N instead (each unit "
      .. "has its own checkpoint and commits its own transactions)", spec.lanes)
  end
  if spec.exactly_once_pg and spec.retry and spec.retry.mode == "deferred" then
    ctx:fail("exactly_once", 'into PostgreSQL (connection %s) cannot run with retry.mode = '
      .. '"deferred" (a deferred retry runs outside the stream\'s order, so its statements '
      .. 'cannot commit with the position): use mode = "blocking"', repr(spec.exactly_once_pg))
  end
  -- Into MongoDB each snapshot row's call commits the snapshot's progress past the row in
  -- its transaction; PostgreSQL's position table keeps no snapshot progress yet.
  if spec.exactly_once_pg and (t.snapshot ~= nil or (type(t.checkpoint) == "table"
      and t.checkpoint.start_position == "snapshot")) then
    ctx:fail("exactly_once", "into PostgreSQL (connection %s) cannot run with an incremental "
      .. "snapshot yet (a snapshot's row has no resume token, and its progress is not kept in "
      .. "flowwarden_checkpoints): take the snapshot with exactly_once = true or into a MongoDB "
      .. "connection, or without exactly_once", repr(spec.exactly_once_pg))
  end
end

return M
