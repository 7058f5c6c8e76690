-- The sequenced DLQ's default key on a sharded collection (issue 23,
-- section 8): documentKey is { shard key..., _id } there, and the shard-key
-- part changes with refineCollectionShardKey or resharding while the
-- document stays the same. The default sequence is { _id } alone, so every
-- event of one document parks behind its failed one, whatever shard key it
-- carries.
local fwt = require("flowwarden.testing")

local SCRIPT = [[
local fw = require("flowwarden")
fw.stream { name = "s", database = "shop", collection = "orders",
  on_change = function(ctx)
    local doc = ctx:full_document()
    if doc and doc.bad then
      error(fw.error("Validation", "bad order"))
    end
  end,
  dlq = { sequenced = true } }
]]

local function load()
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(SCRIPT)
  f:close()
  local ok, app = pcall(fwt.load, path)
  os.remove(path)
  assert(ok, app)
  return app
end

describe("the sequenced DLQ's default key", function()
  it("is the documentKey's _id: a shard key beside it changes nothing", function()
    local app = load()
    local r = app:deliver("s", fwt.insert({ _id = 7, bad = true },
      { documentKey = { region = "eu", _id = 7 } }))
    assert.equal("dlq", r.outcome)
    assert.equal('{"_id":{"$numberInt":"7"}}', (r.dlq_entry.sequenceId:gsub("%s", "")))

    -- The same document before the collection was sharded, and after its
    -- shard key was refined: parked behind it, in order.
    r = app:deliver("s", fwt.update({ _id = 7 }, { set = { n = 1 } }))
    assert.equal("parked", r.outcome)
    assert.equal(1, r.dlq_entry.sequenceIndex)
    local first = r.dlq_entry.sequenceId
    r = app:deliver("s", fwt.update({ _id = 7 }, { set = { n = 2 } },
      { documentKey = { region = "eu", tenant = 3, _id = 7 } }))
    assert.equal("parked", r.outcome)
    assert.equal(first, r.dlq_entry.sequenceId)
    assert.equal(2, r.dlq_entry.sequenceIndex)

    -- Another document flows.
    r = app:deliver("s", fwt.insert({ _id = 8 }, { documentKey = { region = "eu", _id = 8 } }))
    assert.equal("handled", r.outcome)
  end)
end)
