-- flowwarden test: dlq.enqueue_policy's err has on_error's fields (issue 25,
-- section 5): type, message, where, fields and traceback.
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

describe("the enqueue policy's err", function()
  local app
  before_each(function()
    app = fwt.load(DIR .. "enqueue_policy.lua")
  end)

  it("carries the failed attempt's fields, where and traceback", function()
    assert.equal("dlq", app:deliver("pay", fwt.insert { _id = 1 }).outcome)
    local results = app:replay_dlq()
    assert.equal(1, #results)
    assert.equal("requeued", results[1].status)
    local d = app:dlq("pay")[1].diagnostics
    assert.equal("Pay.Declined", d.type)
    assert.equal("card refused", d.message)
    assert.equal(42, d.code)
    assert.equal(1, d.fields)
    assert.matches("enqueue_policy.lua:%d+$", d.where)
    assert.is_true(d.traceback)
  end)

  it("has empty fields and traceback for ctx:send_to_dlq", function()
    assert.equal("dlq", app:deliver("pay", fwt.insert { _id = 2, send = true }).outcome)
    app:replay_dlq()
    local d = app:dlq("pay")[1].diagnostics
    assert.equal("DlqRequested", d.type)
    assert.equal("sent by hand", d.message)
    assert.is_nil(d.code)
    assert.equal(0, d.fields)
    assert.equal("none", d.where)
    assert.is_false(d.traceback)
  end)
end)
