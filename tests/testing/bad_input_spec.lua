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

  it("refuses bad replay_dlq options", function()
    local app = fwt.load(DIR .. "../../examples/orders.lua")
    assert.has_error(function() app:replay_dlq { sequense = '"k1"' } end,
      'app:replay_dlq: unknown option "sequense" (the options are stream, ids, sequence, no_retry)')
    assert.has_error(function() app:replay_dlq { sequence = 1 } end,
      "app:replay_dlq: sequence must be a sequence id as app:dlq() shows it (sequenceId, e.g. "
        .. "'{\"_id\":{\"$numberInt\":\"1\"}}'), got number")
  end)

  it("names the line of a malformed events file", function()
    local ok, err = pcall(fwt.events_from, DIR .. "malformed_events.jsonl")
    assert.is_false(ok)
    assert.matches("malformed_events.jsonl:3: not an Extended JSON document", err, 1, true)
  end)
end)
