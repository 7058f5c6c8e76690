-- Specs for examples/webhook.lua: `flowwarden test examples/webhook_spec.lua`.
local fwt = require("flowwarden.testing")

local SCRIPT = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "webhook.lua"
local HOOK = "https://hooks.example/orders"
local URI = "mongodb://127.0.0.1:27017/shop?replicaSet=rs0" -- the database; never connected to

describe("webhook.lua", function()
  local app
  before_each(function()
    app = fwt.load(SCRIPT, { env = { HOOK_URL = HOOK, HOOK_TOKEN = "t0k" }, uri = URI })
    app.http:stub("POST", HOOK, { status = 200, json = { ok = true } })
  end)

  local function paid(id)
    return fwt.update({ _id = id, total = 12 }, { set = { status = "PAID" }, full_document = true })
  end

  it("posts a paid order with the token", function()
    local r = app:deliver("paid-orders-webhook", paid(1))
    assert.equal("handled", r.outcome)
    assert.equal(1, #app.http.calls)
    local call = app.http.calls[1]
    assert.equal("POST", call.method)
    assert.equal("Bearer t0k", call.headers.authorization)
    assert.equal(r.event_id, call.headers["idempotency-key"])
  end)

  it("sends plain JSON: the ObjectId as hex, the Decimal128 as a string", function()
    local fw = require("flowwarden")
    local id = fw.object_id("64f1a2b3c4d5e6f7a8b9c0d1")
    local order = { _id = id, total = fw.decimal128("19.99") }
    local r = app:deliver("paid-orders-webhook",
      fwt.update(order, { set = { status = "PAID" }, full_document = true }))
    assert.equal("handled", r.outcome)
    local call = app.http.calls[1]
    assert.equal("application/json", call.headers["content-type"])
    local body = fw.json.decode(call.body)
    assert.equal("64f1a2b3c4d5e6f7a8b9c0d1", body.order)
    assert.equal("19.99", body.total)
    assert.equal(r.event_id, body.event)
  end)

  it("retries when the web hook answers 503", function()
    app.http:stub("POST", HOOK, { status = 503 }, { times = 1 })
    local r = app:deliver("paid-orders-webhook", paid(2))
    assert.equal("handled", r.outcome)
    assert.equal(2, r.attempts)
    assert.equal(2, #app.http.calls)
    assert.equal("Http.Status.Transient", r.errors[1].type)
  end)

  it("dead-letters a 400 without retrying", function()
    app.http:stub("POST", HOOK, { status = 400, body = "bad order" })
    local r = app:deliver("paid-orders-webhook", paid(3))
    assert.equal("dlq", r.outcome)
    assert.equal(1, r.attempts)
    assert.equal("Http.Status.Permanent", r.dlq_entry.error.type)
  end)

  it("retries a refused connection four times, then dead-letters it", function()
    app.http:stub("POST", HOOK, { error = "Http.Connect", message = "connection refused" })
    local r = app:deliver("paid-orders-webhook", paid(4))
    assert.equal("dlq", r.outcome)
    assert.equal(4, r.attempts)
    assert.same({ 0.5, 1.0, 2.0 }, r.delays)
  end)

  it("ignores updates that do not pay", function()
    local r = app:deliver("paid-orders-webhook",
      fwt.update({ _id = 5 }, { set = { status = "SHIPPED" }, full_document = true }))
    assert.equal("handled", r.outcome)
    assert.equal(0, #app.http.calls)
  end)

  it("fails an unstubbed request with Http.Connect", function()
    app = fwt.load(SCRIPT, { env = { HOOK_URL = "https://other.example/x", HOOK_TOKEN = "t" },
      uri = URI })
    local r = app:deliver("paid-orders-webhook", paid(6))
    assert.equal("Http.Connect", r.errors[1].type)
  end)
end)
