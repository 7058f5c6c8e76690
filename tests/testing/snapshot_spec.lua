-- Snapshot events in flowwarden.testing (issue 28): fwt.snapshot(doc) builds
-- the event an incremental snapshot hands out; it goes to on_snapshot, else
-- on_insert, through the same retries and DLQ as any event (operationType
-- SNAPSHOT), and a replay of its dead letter calls on_snapshot again.
local fwt = require("flowwarden.testing")

local function messages(r)
  local out = {}
  for _, l in ipairs(r.logs) do out[#out + 1] = l.message end
  return out
end

local function load(script)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(script)
  f:close()
  local ok, app = pcall(fwt.load, path)
  os.remove(path)
  assert(ok, app)
  return app
end

local WITH_ON_SNAPSHOT = [[
local fw = require("flowwarden")
fw.stream { name = "s", database = "shop", collection = "orders", dlq = true,
  on_snapshot = function(ctx)
    if ctx:full_document().bad then error(fw.error("Validation", "bad order")) end
    fw.log.info("on_snapshot " .. ctx:operation_type() .. ":" .. tostring(ctx:document_key()._id))
  end,
  on_insert = function(ctx) fw.log.info("on_insert " .. ctx:operation_type()) end }
]]

local ON_INSERT_ONLY = [[
local fw = require("flowwarden")
fw.stream { name = "s", database = "shop", collection = "orders",
  on_insert = function(ctx)
    fw.log.info("got " .. ctx:operation_type() .. ":" .. ctx:full_document().name)
  end }
]]

describe("fwt.snapshot", function()
  it("builds an event that on_snapshot handles, as its operation type says", function()
    local app = load(WITH_ON_SNAPSHOT)
    local ev = fwt.snapshot({ _id = 1, total = 5 })
    assert.equal("snapshot", ev.operationType)
    assert.same({ _id = 1 }, ev.documentKey)
    local r = app:deliver("s", ev)
    assert.equal("handled", r.outcome)
    assert.same({ "on_snapshot snapshot:1" }, messages(r))
    assert.same({ "on_insert insert" }, messages(app:deliver("s", fwt.insert({ _id = 2 }))))
  end)

  it("dead-letters a failing snapshot event with operationType SNAPSHOT, and replays it",
    function()
      local app = load(WITH_ON_SNAPSHOT)
      local r = app:deliver("s", fwt.snapshot({ _id = 3, bad = true }))
      assert.equal("dlq", r.outcome)
      assert.equal("SNAPSHOT", r.dlq_entry.operationType)
      -- Replayed to on_snapshot, which fails again: back in the queue.
      local replays = app:replay_dlq({ stream = "s", no_retry = true })
      assert.equal(1, #replays)
      assert.equal("requeued", replays[1].status)
      assert.equal("Validation", replays[1].error.type)
    end)

  it("goes to on_insert when the stream has no on_snapshot", function()
    local app = load(ON_INSERT_ONLY)
    local r = app:deliver("s", fwt.snapshot({ _id = 4, name = "n" }))
    assert.equal("handled", r.outcome)
    assert.same({ "got snapshot:n" }, messages(r))
  end)
end)
