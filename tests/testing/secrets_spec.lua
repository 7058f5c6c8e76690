-- flowwarden test: the values of fw.env are hidden in what a delivery
-- returns (errors, the DLQ entry, log records), as `run` hides them (issue 25).
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local TOKEN = "tok-s3cr3t-9c8d"

local function has_token(r)
  local seen = {}
  for _, e in ipairs(r.errors) do
    seen[#seen + 1] = e.message .. e.type .. e.traceback
  end
  for _, l in ipairs(r.logs) do
    seen[#seen + 1] = l.message
  end
  local text = table.concat(seen, "\n") .. r.dlq_entry.error.message .. (r.dlq_entry.error.stackTrace or "")
  return text:find(TOKEN, 1, true) ~= nil
end

describe("fw.env values in flowwarden test", function()
  local app
  before_each(function()
    app = fwt.load(DIR .. "secrets.lua", { env = { HOOK_TOKEN = TOKEN, REGION = "eu-west-1" } })
  end)

  it("are redacted in a plain error's message, its DLQ entry and the logs", function()
    local r = app:deliver("s", fwt.insert { _id = 1 })
    assert.equal("dlq", r.outcome)
    assert.matches("cannot reach https://svc/?token=[redacted]", r.errors[1].message, 1, true)
    assert.matches("cannot reach https://svc/?token=[redacted]", r.dlq_entry.error.message, 1, true)
    local logged = {}
    for _, l in ipairs(r.logs) do logged[#logged + 1] = l.message end
    assert.matches("calling with [redacted] in eu-west-1", table.concat(logged, "\n"), 1, true)
    assert.is_false(has_token(r))
  end)

  it("are redacted in a typed error's message; a value with secret = false is not", function()
    local r = app:deliver("s", fwt.insert { _id = 2, typed = true })
    assert.equal("Auth.Failed", r.errors[1].type)
    assert.equal("refused [redacted] in eu-west-1", r.errors[1].message)
    assert.equal("refused [redacted] in eu-west-1", r.dlq_entry.error.message)
    assert.is_false(has_token(r))
  end)

  it("are redacted in the reason given to ctx:send_to_dlq", function()
    local r = app:deliver("s", fwt.insert { _id = 3, send = true })
    assert.equal("dlq", r.outcome)
    assert.equal("sent aside, token [redacted]", r.dlq_entry.error.message)
  end)
end)
