-- flowwarden.config.outage (issue 29): circuit and rate_limit on fw.stream.
local config = require("flowwarden.config")
local describe_mod = require("flowwarden.describe")

local HEADER = "local fw = require('flowwarden')\nlocal h = function() end\n"
local SCRIPT = "/s/outage.lua"
local S = SCRIPT .. ':3: stream "s": '

local function run(src)
  return config.load_string(HEADER .. src, SCRIPT, {})
end

local function stream(extra)
  return "fw.stream { name = 's', database = 'shop', on_change = h, " .. extra .. " }"
end

describe("config: circuit", function()
  it("is off by default", function()
    local cfg = assert(run(stream("dlq = true")))
    assert.is_nil(cfg.streams[1].circuit)
    assert.is_nil(cfg.streams[1].rate_limit)
  end)

  it("circuit = true takes the defaults", function()
    local cfg = assert(run(stream("circuit = true")))
    assert.are.same({
      on = { "Http.Connect", "Http.Timeout", "Http.Status.Transient", "Mongo.Network",
             "Mongo.Timeout", "Mongo.NotWritablePrimary", "Pg.Connection", "Pg.Timeout",
             "Redis.Connection", "Redis.Timeout", "Redis.ReadOnly" },
      open_for_ms = 5000, max_open_for_ms = 300000, give_up_after_ms = 0,
    }, cfg.streams[1].circuit)
  end)

  it("reads every setting", function()
    local cfg = assert(run(stream(
      "circuit = { on = { 'Http' }, open_for = '2s', max_open_for = '1m', give_up_after = '30m' }, "
      .. "rate_limit = '12000/m'")))
    assert.are.same({ on = { "Http" }, open_for_ms = 2000, max_open_for_ms = 60000,
                      give_up_after_ms = 1800000 }, cfg.streams[1].circuit)
    assert.are.equal("12000/m", cfg.streams[1].rate_limit)
  end)

  local BAD = {
    { "circuit = 'yes'",
      S .. 'circuit: expected true, false or a table of circuit settings, got "yes"' },
    { "circuit = { open_for = 5 }",
      S .. 'circuit.open_for: expected a duration string, got 5 (a number has no unit: write "5s" '
        .. 'or "5ms")' },
    { "circuit = { give_up_after = 'never' }",
      S .. 'circuit.give_up_after: expected "off" or a duration such as "30m", got "never"' },
    { "circuit = { on = {} }",
      S .. "circuit.on: the empty list never opens the breaker (omit on for the default outage "
        .. "types, or remove circuit)" },
    { "circuit = { on = { 'http connect' } }",
      S .. 'circuit.on[1]: invalid error type "http connect" (expected a dotted name such as '
        .. '"Http.Timeout")' },
    { "circuit = { open_for = '10m' }",
      S .. 'circuit.max_open_for: must be >= circuit.open_for ("10m"), got "5m"' },
    { "circuit = { opn_for = '1s' }",
      S .. 'circuit: unknown key "opn_for" (did you mean "open_for"?)' },
    { "rate_limit = 200",
      S .. 'rate_limit: expected "N/s" or "N/m" with N a whole number from 1 to 1000000000 '
        .. '(handler attempts per second or minute), such as "200/s" or "12000/m", got 200, '
        .. 'or a table { rate = "50/s", burst = N }' },
    { "rate_limit = { rate = '50/s', burst = -1 }",
      S .. "rate_limit.burst: expected an integer >= 0, got -1" },
    { "rate_limit = { rate = '50/s', burst = 1.5 }",
      S .. "rate_limit.burst: expected an integer >= 0, got 1.5" },
    { "rate_limit = { rate = '50/s', burst = '10' }",
      S .. 'rate_limit.burst: expected an integer >= 0, got "10"' },
    { "rate_limit = { rate = '50/s', burst = 2000000000 }",
      S .. "rate_limit.burst: expected an integer from 0 to 1000000000, got 2000000000" },
    { "rate_limit = { burst = 0 }",
      S .. 'rate_limit.rate: missing: the rate, such as "50/s" (rate_limit = { rate = "50/s", '
        .. 'burst = 0 })' },
    { "rate_limit = { rate = '50/h' }",
      S .. 'rate_limit.rate: expected "N/s" or "N/m" with N a whole number from 1 to 1000000000 '
        .. '(handler attempts per second or minute), such as "200/s" or "12000/m", got "50/h"' },
    { "rate_limit = { rate = '50/s', brust = 0 }",
      S .. 'rate_limit: unknown key "brust" (did you mean "burst"?)' },
    { "rate_limit = '200/h'",
      S .. 'rate_limit: expected "N/s" or "N/m" with N a whole number from 1 to 1000000000 '
        .. '(handler attempts per second or minute), such as "200/s" or "12000/m", got "200/h"' },
    { "rate_limit = '0/s'",
      S .. 'rate_limit: expected "N/s" or "N/m" with N a whole number from 1 to 1000000000 '
        .. '(handler attempts per second or minute), such as "200/s" or "12000/m", got "0/s"' },
  }
  for _, case in ipairs(BAD) do
    it("rejects " .. case[1], function()
      local cfg, errs = run(stream(case[1]))
      assert.is_nil(cfg)
      assert.are.same({ case[2] }, errs)
    end)
  end

  it("check prints the effective settings", function()
    local cfg = assert(run(stream("circuit = { give_up_after = '1h' }, rate_limit = '100/s'")))
    local text = describe_mod.text(cfg)
    assert.matches("circuit.open_for%s+5s %(doubles after each failed probe%)", text)
    assert.matches("circuit.give_up_after%s+1h", text)
    assert.matches("rate_limit%s+100/s %(handler attempts, retries and probes included; burst "
      .. "99 %(default%): at most 199 in any one second%)", text)
  end)

  it("accepts rate_limit = { rate, burst } and prints its window bound", function()
    local cfg = assert(run(stream("rate_limit = { rate = '50/s', burst = 0 }")))
    assert.are.equal("50/s", cfg.streams[1].rate_limit)
    assert.are.equal(0, cfg.streams[1].rate_burst)
    assert.matches("rate_limit%s+50/s %(handler attempts, retries and probes included; burst "
      .. "0: at most 50 in any one second%)", describe_mod.text(cfg))
    cfg = assert(run(stream("rate_limit = { rate = '600/m', burst = 30 }")))
    assert.matches("burst 30: at most 630 in any one minute%)", describe_mod.text(cfg))
    cfg = assert(run(stream("rate_limit = { rate = '50/s' }")))
    assert.is_nil(cfg.streams[1].rate_burst)
    assert.matches("burst 49 %(default%): at most 99 in any one second%)", describe_mod.text(cfg))
  end)
end)
