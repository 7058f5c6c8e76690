-- The Lua side of replaying dead letters (issue 12): fw.dlq's decisions, the
-- enqueue policy, dlq.reprocess validation and schedule, and what check prints.
local config = require("flowwarden.config")
local cron = require("flowwarden.cron")
local describe_mod = require("flowwarden.describe")
local dlq = require("flowwarden.dlq")
local fw = require("flowwarden")

local HEADER = "local fw = require('flowwarden')\nlocal h = function() end\n"
local SCRIPT = "/s/r.lua"
local S = SCRIPT .. ':3: stream "s": '

local function run(src)
  return config.load_string(HEADER .. src, SCRIPT)
end

local function spec_of(dlq_src)
  local cfg, errs = run("fw.stream { name = 's', database = 'd', on_insert = h, dlq = " .. dlq_src .. " }")
  assert.is_nil(errs, errs and table.concat(errs, "\n"))
  return cfg.streams[1], cfg
end

local function errors_of(dlq_src)
  local cfg, errs = run("fw.stream { name = 's', database = 'd', on_insert = h, dlq = " .. dlq_src .. " }")
  assert.is_nil(cfg, "the script was expected to be rejected")
  return errs
end

describe("dlq.reprocess validation", function()
  it("takes every or cron with batch_size and max_attempts defaults", function()
    local spec = spec_of('{ reprocess = { every = "10m" } }')
    assert.are.same({ every_ms = 600000, batch_size = 100, max_attempts = 5 }, spec.dlq.reprocess)
    spec = spec_of('{ reprocess = { cron = "*/15 * * * *", batch_size = 10, max_attempts = 2 } }')
    assert.are.same({ cron = "*/15 * * * *", batch_size = 10, max_attempts = 2 }, spec.dlq.reprocess)
  end)

  it("comes from fw.defaults when the stream has none", function()
    local cfg, errs = run([[fw.defaults { dlq = { reprocess = { every = "1s" } } }
fw.stream { name = 's', database = 'd', on_insert = h, dlq = true }]])
    assert.is_nil(errs)
    assert.are.equal(1000, cfg.streams[1].dlq.reprocess.every_ms)
  end)

  it("names the bad cron field", function()
    assert.are.same({ S .. 'dlq.reprocess.cron: bad minute field "61"' },
      errors_of('{ reprocess = { cron = "61 * * * *" } }'))
    assert.are.same({ S .. 'dlq.reprocess.cron: bad day-of-week field "9"' },
      errors_of('{ reprocess = { cron = "0 0 * * 9" } }'))
    assert.are.same({ S .. 'dlq.reprocess.cron: "0 0 30 2 *" never matches a date' },
      errors_of('{ reprocess = { cron = "0 0 30 2 *" } }'))
  end)

  it("wants exactly one of every and cron", function()
    assert.are.same({ S .. "dlq.reprocess: set either every or cron, not both" },
      errors_of('{ reprocess = { every = "1m", cron = "* * * * *" } }'))
    assert.are.same({ S .. 'dlq.reprocess: missing every or cron (e.g. every = "10m" or cron = "*/15 * * * *")' },
      errors_of('{ reprocess = { batch_size = 5 } }'))
  end)

  it("checks every key", function()
    assert.are.same({ S .. 'dlq.reprocess: unknown key "size" (valid keys: every, cron, batch_size, max_attempts)',
                      S .. "dlq.reprocess.batch_size: expected an integer >= 1, got 0" },
      errors_of('{ reprocess = { every = "1m", batch_size = 0, size = 1 } }'))
    assert.are.same({ S .. 'dlq.reprocess: expected a table such as { every = "10m" } or { cron = "*/15 * * * *" }, got "10m"' },
      errors_of('{ reprocess = "10m" }'))
  end)

  it("takes enqueue_policy as a function only", function()
    local spec = spec_of("{ enqueue_policy = function() end }")
    assert.is_function(spec.dlq.enqueue_policy)
    assert.are.same({ S .. "dlq.enqueue_policy: expected a function(letter, err) returning "
      .. "fw.dlq.requeue { ... } or fw.dlq.evict(), got true" },
      errors_of("{ enqueue_policy = true }"))
  end)
end)

describe("dlq.decide", function()
  local letter = { id = "x", diagnostics = {}, reprocess_attempts = 0 }
  local err = { type = "Http.Timeout", message = "slow" }

  it("requeues when there is no policy", function()
    assert.are.same({ "requeue" }, { dlq.decide({ dlq = {} }, letter, err) })
  end)

  it("runs the seed's policy: requeue with diagnostics, then evict", function()
    local spec = { dlq = { enqueue_policy = function(l, e)
      assert.are.equal("Http.Timeout", e.type)
      local n = (l.diagnostics.retries or 0) + 1
      if n < 5 then return fw.dlq.requeue { diagnostics = { retries = n } } end
      return fw.dlq.evict()
    end } }
    local action, diag = dlq.decide(spec, letter, err)
    assert.are.equal("requeue", action)
    assert.are.same({ retries = 1 }, diag)
    action = dlq.decide(spec, { diagnostics = { retries = 4 } }, err)
    assert.are.equal("evict", action)
  end)

  it("requeues (and logs) when the policy raises or returns something else", function()
    local logged = {}
    local previous = fw.log.set_sink(function(level, msg) logged[#logged + 1] = level .. " " .. msg end)
    local a1 = dlq.decide({ dlq = { enqueue_policy = function() error("boom") end } }, letter, err)
    local a2 = dlq.decide({ dlq = { enqueue_policy = function() return "evict" end } }, letter, err)
    fw.log.set_sink(previous)
    assert.are.equal("requeue", a1)
    assert.are.equal("requeue", a2)
    assert.matches("^error dlq.enqueue_policy failed %(RuntimeError: boom .*%); the entry is requeued$", logged[1])
    assert.are.equal('warn dlq.enqueue_policy returned "evict" (expected fw.dlq.requeue { ... } or '
      .. "fw.dlq.evict()); the entry is requeued", logged[2])
  end)

  it("fw.dlq.requeue checks its argument", function()
    assert.has_error(function() fw.dlq.requeue(5) end,
      "fw.dlq.requeue: expected a table such as { diagnostics = { retries = 1 } } or nothing, got number")
    assert.are.equal("fw.dlq.evict()", tostring(fw.dlq.evict()))
  end)
end)

describe("dlq.schedule", function()
  it("is nil without reprocess", function()
    assert.is_nil(dlq.schedule({ dlq = {} }, 0))
    assert.is_nil(dlq.schedule({}, 0))
  end)

  it("adds every to now, or finds the next cron minute", function()
    assert.are.same({ 61000, 100, 5 },
      { dlq.schedule({ dlq = { reprocess = { every_ms = 60000, batch_size = 100, max_attempts = 5 } } }, 1000) })
    local now = cron.time(2026, 1, 15, 10, 31) * 1000 + 5
    assert.are.equal(cron.time(2026, 1, 15, 10, 45) * 1000,
      (dlq.schedule({ dlq = { reprocess = { cron = "*/15 * * * *", batch_size = 1, max_attempts = 1 } } }, now)))
  end)
end)

describe("flowwarden check", function()
  it("prints the reprocess settings and the next three runs", function()
    local saved = describe_mod.now
    describe_mod.now = function() return cron.time(2026, 1, 15, 10, 30) end
    local spec = spec_of('{ reprocess = { cron = "0 */6 * * *", batch_size = 50 }, enqueue_policy = function() end }')
    local text = describe_mod.stream(spec)
    describe_mod.now = saved
    assert.matches([[
  dlq.connection                 default
  dlq.enqueue_policy             declared
  dlq.reprocess.cron             0 %*/6 %* %* %* %(UTC%)
  dlq.reprocess.batch_size       50
  dlq.reprocess.max_attempts     5
  dlq.reprocess.next_runs        2026%-01%-15T12:00:00Z, 2026%-01%-15T18:00:00Z, 2026%-01%-16T00:00:00Z
$]], text)
  end)

  it("prints every as a duration", function()
    local saved = describe_mod.now
    describe_mod.now = function() return cron.time(2026, 1, 15, 10, 30) end
    local text = describe_mod.stream(spec_of('{ reprocess = { every = "10m" } }'))
    describe_mod.now = saved
    assert.truthy(text:find("  dlq.reprocess.every" .. (" "):rep(12) .. "10m\n", 1, true))
    assert.truthy(text:find("next_runs        2026-01-15T10:40:00Z, 2026-01-15T10:50:00Z, "
      .. "2026-01-15T11:00:00Z\n", 1, true))
  end)
end)
