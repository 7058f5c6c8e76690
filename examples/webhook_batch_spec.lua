-- Specs for examples/webhook_batch.lua: `flowwarden test examples/webhook_batch_spec.lua`.
local fwt = require("flowwarden.testing")
local fw = require("flowwarden")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "webhook_batch.lua"
local HOOK = "https://hooks.example/orders/batch"
local URI = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" -- the database; never connected to

describe("webhook_batch.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT, { env = { HOOK_URL = HOOK, HOOK_TOKEN = "t0k" }, uri = URI })
  end)

  local function paid(id)
    return fwt.update({ _id = id, total = 12 }, { set = { status = "PAID" }, full_document = true })
  end

  it("posts one JSON array per batch, paid orders only", function()
    app.http:stub("POST", HOOK, { status = 200, json = { ok = true } })
    local shipped = fwt.update({ _id = 9, total = 1 }, { set = { status = "SHIPPED" },
                                                        full_document = true })
    local r = app:deliver_batch("paid-orders-batch", { paid(1), shipped, paid(2) })
    assert.same({ "handled", "handled", "handled" }, r.outcomes)
    assert.equal(1, #app.http.calls)
    local body = fw.json.decode(app.http.calls[1].body)
    assert.same({ 1, 2 }, { body[1].order, body[2].order })
    assert.equal("Bearer t0k", app.http.calls[1].headers.authorization)
  end)

  it("dead-letters only the events the service rejected", function()
    app.http:stub("POST", HOOK, function(req)
      local items = fw.json.decode(req.body)
      for i, item in ipairs(items) do
        if item.order == 2 then
          return { status = 207, json = { rejected = { { index = i, reason = "unknown customer" } } } }
        end
      end
      return { status = 200, json = { ok = true } }
    end)
    local r = app:deliver_batch("paid-orders-batch", { paid(1), paid(2), paid(3) })
    assert.same({ "handled", "dlq", "handled" }, r.outcomes)
    local dlq = app:dlq("paid-orders-batch")
    assert.equal(1, #dlq)
    assert.same({ 2, "Hook.Rejected", "unknown customer" },
                { dlq[1].documentKey._id, dlq[1].error.type, dlq[1].error.message })
  end)
end)
