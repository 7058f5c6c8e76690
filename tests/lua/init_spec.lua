-- Loads a fresh copy of the flowwarden module, as a new Lua state would.
local function fresh_fw(core)
  package.loaded["flowwarden"] = nil
  package.loaded["flowwarden.core"] = nil
  package.preload["flowwarden.core"] = core
  local ok, fw = pcall(require, "flowwarden")
  package.preload["flowwarden.core"] = nil
  package.loaded["flowwarden.core"] = nil
  if not ok then
    package.loaded["flowwarden"] = nil
    error(fw, 0)
  end
  return fw
end

describe("flowwarden module", function()
  it("works without the host's flowwarden.core", function()
    local fw = fresh_fw(nil)
    assert.is_function(fw.stream)
    assert.is_function(fw.defaults)
    assert.is_function(fw.error)
    assert.is_nil(fw.object_id)
  end)

  it("exposes the on_error actions as distinct printable constants", function()
    local fw = fresh_fw(nil)
    local errors = require("flowwarden.errors")
    assert.are.equal("fw.SKIP", tostring(fw.SKIP))
    assert.are.equal("fw.RETRY", tostring(fw.RETRY))
    assert.are.equal("fw.DLQ", tostring(fw.DLQ))
    assert.are.equal("fw.RETHROW", tostring(fw.RETHROW))
    assert.are_not.equal(fw.SKIP, fw.RETRY)
    assert.are_not.equal(fw.DLQ, fw.RETHROW)
    assert.are.equal("DLQ", errors.action_from(fw.DLQ))
  end)

  it("raises typed errors with fw.error", function()
    local fw = fresh_fw(nil)
    local ok, err = pcall(error, fw.error("Timeout", "slow"))
    assert.is_false(ok)
    assert.are.equal("Timeout: slow", tostring(err))
  end)

  it("copies the host's C functions from flowwarden.core", function()
    local null = setmetatable({}, { __tostring = function() return "fw.null" end })
    local function object_id(hex) return "oid:" .. hex end
    local fw = fresh_fw(function()
      return { null = null, object_id = object_id }
    end)
    assert.are.equal(null, fw.null)
    assert.are.equal("oid:ab", fw.object_id("ab"))
  end)

  it("refuses a core field that would hide a library function", function()
    assert.has_error(function()
      fresh_fw(function()
        return { stream = function() end }
      end)
    end, 'flowwarden.core: field "stream" collides with the Lua library\'s fw.stream')
  end)

  it("propagates a core that fails to load", function()
    assert.has_error(function()
      fresh_fw(function()
        error("core init failed", 0)
      end)
    end, "core init failed")
  end)
end)

describe("fw.log", function()
  local fw, lines

  before_each(function()
    fw = fresh_fw(nil)
    lines = {}
    fw.log.set_sink(function(level, message)
      lines[#lines + 1] = level .. "|" .. message
    end)
  end)

  it("sends each level to the sink, joining arguments like print", function()
    fw.log.debug("d", 1)
    fw.log.info("order", 42, "paid", true)
    fw.log.warn(nil)
    fw.log.error("x", nil, "y")
    assert.are.same({ "debug|d 1", "info|order 42 paid true", "warn|nil", "error|x nil y" }, lines)
  end)

  it("drops messages below the host's level", function()
    fw.log.set_level("warn")
    fw.log.debug("no")
    fw.log.info("no")
    fw.log.warn("yes")
    fw.log.error("yes too")
    assert.are.same({ "warn|yes", "error|yes too" }, lines)
  end)

  it("rejects an unknown level and a sink that is not a function", function()
    assert.has_error(function()
      fw.log.set_level("verbose")
    end, 'bad argument #1 to \'set_level\' (expected "debug", "info", "warn" or "error", got verbose)')
    assert.has_error(function()
      fw.log.set_sink("stderr")
    end, "bad argument #1 to 'set_sink' (function or nil expected, got string)")
  end)

  it("returns the previous sink and restores the default with nil", function()
    local mine = function() end
    fw.log.set_sink(mine)
    assert.are.equal(mine, fw.log.set_sink(nil))
  end)

  it("uses the core's log_sink when the host provides one", function()
    local got = {}
    local fw2 = fresh_fw(function()
      return { log_sink = function(level, message) got[#got + 1] = level .. ":" .. message end }
    end)
    fw2.log.info("hello")
    assert.are.same({ "info:hello" }, got)
    assert.is_nil(fw2.log_sink)
  end)

  it("takes the runtime's level from the core's log_level and skips what is below it", function()
    local got, formatted = {}, 0
    local fw2 = fresh_fw(function()
      return { log_level = "warn",
               log_sink = function(level, message) got[#got + 1] = level .. ":" .. message end }
    end)
    local costly = setmetatable({}, { __tostring = function() formatted = formatted + 1; return "x" end })
    fw2.log.info("quiet", costly)
    fw2.log.warn("loud", costly)
    assert.are.same({ "warn:loud x" }, got)
    assert.are.equal(1, formatted)
    assert.is_nil(fw2.log_level)
  end)

  it("writes to stderr by default", function()
    local p = assert(io.popen("cd " .. os.getenv("PWD") .. " && lua5.4 -e \"package.path = "
      .. "'lua/?.lua;lua/?/init.lua;' .. package.path; require('flowwarden').log.warn('careful', 1)\" "
      .. "2>&1 >/dev/null"))
    local out = p:read("a")
    p:close()
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ WARN careful 1\n$", out)
  end)
end)
