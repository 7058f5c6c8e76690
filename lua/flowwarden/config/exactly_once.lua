-- exactly_once = true (issue 39): each handler call's fw.mongo reads and
-- writes on the stream's own MongoDB client and the stream's checkpoint
-- commit in one transaction. What it cannot run with is a check error that
-- names the setting and the remedy.
local M = {}

function M.check(ctx, t, spec, repr)
  spec.exactly_once = false
  local v = t.exactly_once
  if v == nil or v == false then return end
  if type(v) == "table" then
    ctx:fail("exactly_once", "a sink other than the stream's own deployment "
      .. "({ connection = ... }) is not supported yet: use exactly_once = true, whose "
      .. "transactions run on the stream's own MongoDB client")
    return
  end
  if v ~= true then
    ctx:fail("exactly_once", "expected true or false, got %s", repr(v))
    return
  end
  spec.exactly_once = true
  if spec.lanes and spec.lanes > 1 then
    ctx:fail("exactly_once", "cannot run with lanes = %d: the checkpoint commits with each "
      .. "event's transaction, in the stream's order; use partitions = N instead (each unit "
      .. "has its own checkpoint and commits its own transactions)", spec.lanes)
  end
  if spec.handlers.batch then
    ctx:fail("exactly_once", "is not supported with on_batch yet: use per-event handlers "
      .. "(on_insert, on_update, ...)")
  end
  if t.snapshot ~= nil or (type(t.checkpoint) == "table"
      and t.checkpoint.start_position == "snapshot") then
    ctx:fail("exactly_once", "is not supported with incremental snapshots yet")
  end
end

return M
