-- flowwarden.testing given bad input: the messages a user sees.
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("flowwarden.testing bad input", function()
  it("reports a broken script with check's message", function()
    local check = io.popen(os.getenv("FW_BINARY") .. " check " .. DIR .. "broken.lua 2>&1")
    local expected = check:read("a"):gsub("\n$", "")
    check:close()
    local ok, err = pcall(fwt.load, DIR .. "broken.lua")
    assert.is_false(ok)
    assert.equal(expected, err)
  end)

  it("refuses a non-table in the event builders", function()
    assert.has_error(function() fwt.insert("x") end,
      "fwt.insert: expected the inserted document (a table), got string")
    assert.has_error(function() fwt.update(nil) end,
      "fwt.update: expected the updated document (or its key) (a table), got nil")
    assert.has_error(function() fwt.delete(nil) end,
      "fwt.delete: expected the deleted document's key (a table with _id, or the _id), got nil")
  end)

  it("refuses a sequenced DLQ, which it cannot fake yet", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write([[
local fw = require("flowwarden")
fw.stream { name = "s", database = "shop", collection = "orders",
  dlq = { sequenced = true }, on_insert = function() end }
]])
    f:close()
    local ok, err = pcall(fwt.load, path)
    os.remove(path)
    assert.is_false(ok)
    assert.equal(path .. ': stream "s": sequenced DLQs are not supported by flowwarden.testing '
      .. "yet (dlq.sequenced = true; see docs/testing-scripts.md)", err)
  end)

  it("names the line of a malformed events file", function()
    local ok, err = pcall(fwt.events_from, DIR .. "malformed_events.jsonl")
    assert.is_false(ok)
    assert.matches("malformed_events.jsonl:3: not an Extended JSON document", err, 1, true)
  end)
end)
