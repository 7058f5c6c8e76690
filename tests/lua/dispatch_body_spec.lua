-- flowwarden.dispatch's excerpt of an HTTP error's reply for the DLQ entry
-- (issue 38: error.body, at most 512 bytes of valid UTF-8).
local dispatch = require("flowwarden.dispatch")

describe("dispatch.body_excerpt", function()
  it("keeps a short body whole", function()
    assert.are.equal('{"error":"bad sku"}', dispatch.body_excerpt('{"error":"bad sku"}'))
  end)

  it("keeps the first 512 bytes of a long one", function()
    local got = dispatch.body_excerpt(string.rep("a", 2000))
    assert.are.equal(string.rep("a", 512), got)
  end)

  it("leaves out a character the cut splits", function()
    -- "é" is 2 bytes at 512-513, "€" 3 bytes at 511-513
    assert.are.equal(string.rep("a", 511), dispatch.body_excerpt(string.rep("a", 511) .. "é" .. "tail"))
    assert.are.equal(string.rep("a", 510), dispatch.body_excerpt(string.rep("a", 510) .. "€" .. "tail"))
    assert.are.equal(string.rep("a", 510) .. "é", dispatch.body_excerpt(string.rep("a", 510) .. "é" .. "tail"))
  end)

  it("replaces the bytes of a reply that is not UTF-8", function()
    assert.are.equal("ab??cd", dispatch.body_excerpt("ab\255\254cd"))
  end)

  it("the decision carries status and body of an error with both", function()
    local spec = { retry = { max_attempts = 1, retry_on = {}, no_retry_on = {} }, dlq = {} }
    local c = { type = "Http.Status.Permanent", message = "HTTP 422",
                fields = { status = 422, body = "no such sku" } }
    local d = dispatch.decide(spec, c, 1, nil, nil, nil)
    assert.are.same({ "dlq", 422, "no such sku" }, { d.action, d.status, d.body })
    c.fields = { status = "422", body = "x" }
    d = dispatch.decide(spec, c, 1, nil, nil, nil)
    assert.is_nil(d.status)
    assert.is_nil(d.body)
    -- an error of the script's own keeps the seed's error fields only
    c = { type = "Payment.Unavailable", message = "down", fields = { status = 503, body = "x" } }
    d = dispatch.decide(spec, c, 1, nil, nil, nil)
    assert.is_nil(d.status)
  end)
end)
