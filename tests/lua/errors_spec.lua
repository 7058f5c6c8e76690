local errors = require("flowwarden.errors")

-- Runs `code` (a chunk named "@/h/handler.lua") under xpcall with a traceback
-- handler, the way the host runs handlers, and classifies what it raised.
local function raise(code, env)
  local chunk = assert(load(code, "@/h/handler.lua", "t", setmetatable(env or {}, { __index = _G })))
  local tb
  local ok, err = xpcall(chunk, function(e)
    tb = debug.traceback("", 2)
    return e
  end)
  assert.is_false(ok, "the code was expected to raise")
  return errors.classify(err, tb), err
end

describe("fw.error", function()
  it("creates an error object whose tostring is 'Type: message'", function()
    local e = errors.new("Http.Timeout", "gateway did not answer", { status = 504 })
    assert.are.equal("Http.Timeout: gateway did not answer", tostring(e))
    assert.are.equal("Http.Timeout", e.type)
    assert.are.equal("gateway did not answer", e.message)
    assert.are.same({ status = 504 }, e.fields)
    assert.is_true(errors.is_error(e))
  end)

  it("defaults to an empty message and empty fields", function()
    local e = errors.new("Timeout")
    assert.are.equal("Timeout", tostring(e))
    assert.are.equal("", e.message)
    assert.are.same({}, e.fields)
  end)

  it("records where it was created", function()
    local chunk = load("local e = require('flowwarden.errors').new('X', 'm') return e", "@/h/make.lua")
    assert.are.equal("/h/make.lua:1", chunk().where)
  end)

  local bad_types = { "", "http timeout", "Http..Timeout", ".Http", "Http.", "1Http", "Http-Error" }
  for _, name in ipairs(bad_types) do
    it("rejects the type " .. string.format("%q", name) .. " as a bad argument", function()
      local ok, err = pcall(errors.new, name, "m")
      assert.is_false(ok)
      assert.are.equal(string.format('bad argument #1 to \'fw.error\' (error type must be a dotted '
        .. 'name such as "Http.Timeout", got %q)', name), err)
    end)
  end

  it("rejects a type that is not a string", function()
    local ok, err = pcall(errors.new, 42, "m")
    assert.is_false(ok)
    assert.are.equal('bad argument #1 to \'fw.error\' (error type must be a dotted name such as '
      .. '"Http.Timeout", got number)', err)
  end)

  it("rejects bad message and fields arguments, with the caller's position", function()
    local c = raise("local fw = require('flowwarden') error(fw.error('X', {}))")
    assert.are.equal("ArgumentError", c.type)
    assert.are.equal("bad argument #2 to 'fw.error' (message must be a string, got table)", c.message)
    assert.are.equal("/h/handler.lua:1", c.where)
    c = raise("local fw = require('flowwarden') error(fw.error('X', 'm', 'f'))")
    assert.are.equal("bad argument #3 to 'fw.error' (fields must be a table, got string)", c.message)
  end)

  it("accepts dotted names of identifiers", function()
    for _, name in ipairs({ "Timeout", "Http.Timeout", "java.net.SocketTimeoutException", "_x.y_1" }) do
      assert.is_true(errors.valid_type_name(name), name)
    end
  end)
end)

describe("errors.classify", function()
  it("keeps a raised fw.error's type, message, fields and position", function()
    local c = raise([[
local fw = require("flowwarden")
error(fw.error("Http.Timeout", "gateway did not answer", { status = 504 }))]])
    assert.are.equal("Http.Timeout", c.type)
    assert.are.equal("gateway did not answer", c.message)
    assert.are.same({ status = 504 }, c.fields)
    assert.are.equal("/h/handler.lua:2", c.where)
    assert.matches("stack traceback:", c.traceback, 1, true)
  end)

  local lua_errors = {
    { "index a nil global", "return missing.field", "NilError",
      "attempt to index a nil value (global 'missing')" },
    { "index a nil field", "local t = {} return t.a.b", "NilError",
      "attempt to index a nil value (field 'a')" },
    { "index a nil local", "local t return t.x", "NilError",
      "attempt to index a nil value (local 't')" },
    { "index a nil upvalue", "local u local function f() return u.x end return f()", "NilError",
      "attempt to index a nil value (upvalue 'u')" },
    { "call a nil global", "nothing()", "NilError",
      "attempt to call a nil value (global 'nothing')" },
    { "call a nil field", "local t = {} t.go()", "NilError",
      "attempt to call a nil value (field 'go')" },
    { "call a nil method", "local t = {} t:go()", "NilError",
      "attempt to call a nil value (method 'go')" },
    { "arithmetic on nil", "local x return x + 1", "TypeError",
      "attempt to perform arithmetic on a nil value (local 'x')" },
    { "arithmetic on a table", "local t = {} return t * 2", "TypeError",
      "attempt to perform arithmetic on a table value (local 't')" },
    { "arithmetic on a non-numeric string", "return ('abc') + 1", "TypeError",
      "attempt to add a 'string' with a 'number'" },
    { "bitwise on a float", "local x = 1.5 return x | 0", "TypeError",
      "number (local 'x') has no integer representation" },
    { "concatenate a table", "local t = {} return 'a' .. t", "TypeError",
      "attempt to concatenate a table value (local 't')" },
    { "concatenate nil", "local x return 'a' .. x", "TypeError",
      "attempt to concatenate a nil value (local 'x')" },
    { "compare number with nil", "local x return 1 < x", "TypeError",
      "attempt to compare number with nil" },
    { "compare two tables", "return {} < {}", "TypeError",
      "attempt to compare two table values" },
    { "call a number", "local n = 5 n()", "TypeError",
      "attempt to call a number value (local 'n')" },
    { "index a number", "local n = 5 return n.x", "TypeError",
      "attempt to index a number value (local 'n')" },
    { "length of nil", "local x return #x", "TypeError",
      "attempt to get length of a nil value (local 'x')" },
    { "for loop over nil", "local x for i = x, 2 do end", "TypeError",
      "bad 'for' initial value (number expected, got nil)" },
    { "bad argument to a library function", "return string.rep()", "ArgumentError",
      "bad argument #1 to 'rep' (string expected, got no value)" },
    { "bad argument to math", "return math.floor('x')", "ArgumentError",
      "bad argument #1 to 'floor' (number expected, got string)" },
    { "error() with a string", "error('payment gateway refused')", "RuntimeError",
      "payment gateway refused" },
    { "integer division by zero", "local z = 0 return 1 // z", "RuntimeError",
      "attempt to divide by zero" },
  }
  for _, case in ipairs(lua_errors) do
    it("types '" .. case[1] .. "' as " .. case[3], function()
      local c, raw = raise(case[2])
      assert.are.equal(case[3], c.type)
      assert.are.equal(case[4], c.message)
      assert.are.equal("/h/handler.lua:1", c.where)
      assert.are.equal("/h/handler.lua:1: " .. case[4], raw)
      assert.are.same({}, c.fields)
    end)
  end

  it("types 'bad argument' from a C function called directly as ArgumentError", function()
    local ok, err = pcall(string.rep)
    assert.is_false(ok)
    local c = errors.classify(err)
    assert.are.equal("ArgumentError", c.type)
    assert.is_nil(c.where)
  end)

  it("types table.concat's invalid value as ArgumentError", function()
    local ok, err = pcall(table.concat, { {} })
    assert.is_false(ok)
    assert.are.equal("ArgumentError", errors.classify(err).type)
  end)

  it("types a real out-of-memory error as MemoryError", function()
    -- A child Lua under a virtual-memory limit raises the genuine error.
    local p = assert(io.popen("ulimit -v 60000; lua5.4 -e 'local ok, e = pcall(function() "
      .. "local t = {} for i = 1, 1e9 do t[i] = {} end end) io.write(tostring(e))' 2>&1"))
    local raised = p:read("a")
    p:close()
    assert.are.equal("not enough memory", raised)
    local c = errors.classify(raised)
    assert.are.equal("MemoryError", c.type)
    assert.are.equal("not enough memory", c.message)
  end)

  it("keeps a text that only looks like it starts with a position whole", function()
    local c = errors.classify("retry at 10:30: later")
    assert.are.equal("RuntimeError", c.type)
    assert.are.equal("retry at 10:30: later", c.message)
    assert.is_nil(c.where)
  end)

  it("keeps paths with spaces as the position", function()
    local c = raise("error('boom')", nil)
    assert.are.equal("/h/handler.lua:1", c.where)
    c = errors.classify("/srv/my scripts/x.lua:7: boom")
    assert.are.equal("/srv/my scripts/x.lua:7", c.where)
    assert.are.equal("boom", c.message)
  end)

  it("types error(\"msg\", 0) (no position) as RuntimeError with no where", function()
    local c = raise("error('plain', 0)")
    assert.are.equal("RuntimeError", c.type)
    assert.are.equal("plain", c.message)
    assert.is_nil(c.where)
  end)

  it("types non-string error values as RuntimeError", function()
    local c = raise("error(42)")
    assert.are.same({ type = "RuntimeError", message = "42", fields = {} },
      { type = c.type, message = c.message, fields = c.fields })
    c = raise("error({ code = 1 })")
    assert.are.equal("RuntimeError", c.type)
    assert.are.equal("(error object is a table value)", c.message)
    c = raise("error(nil)")
    assert.are.equal("RuntimeError", c.type)
    assert.are.equal("(error object is a nil value)", c.message)
    c = raise("error(setmetatable({}, { __tostring = function() return 'custom' end }))")
    assert.are.equal("RuntimeError", c.type)
    assert.are.equal("custom", c.message)
  end)

  it("does not trust tables that only look like fw.error", function()
    local c = errors.classify({ type = "Timeout", message = "x" })
    assert.are.equal("RuntimeError", c.type)
  end)

  it("passes the traceback through", function()
    assert.are.equal("TB", errors.classify("x", "TB").traceback)
    assert.is_nil(errors.classify("x").traceback)
  end)

  it("formats one line with the position", function()
    local c = raise("local t = {} return t.a.b")
    assert.are.equal("NilError: attempt to index a nil value (field 'a') (at /h/handler.lua:1)",
      errors.format(c))
    assert.are.equal("Timeout", errors.format({ type = "Timeout", message = "" }))
  end)
end)

describe("errors.matches", function()
  it("matches the type itself", function()
    assert.is_true(errors.matches("Http", { "Http" }))
  end)
  it("matches every type below an entry", function()
    local hit, entry = errors.matches("Http.Timeout", { "Validation", "Http" })
    assert.is_true(hit)
    assert.are.equal("Http", entry)
    assert.is_true(errors.matches("Http.Timeout.Read", { "Http.Timeout" }))
  end)
  it("does not match a longer name that only shares a prefix", function()
    assert.is_false(errors.matches("HttpX", { "Http" }))
    assert.is_false(errors.matches("Http.TimeoutX", { "Http.Timeout" }))
  end)
  it("does not match a parent of an entry", function()
    assert.is_false(errors.matches("Http", { "Http.Timeout" }))
  end)
  it("matches nothing with an empty or absent list", function()
    assert.is_false(errors.matches("Http", {}))
    assert.is_false(errors.matches("Http", nil))
  end)
end)

describe("errors.should_retry", function()
  local function policy(retry_on, no_retry_on)
    return { retry_on = retry_on, no_retry_on = no_retry_on or { "NilError", "TypeError", "ArgumentError" } }
  end

  it("retries every type not in no_retry_on when retry_on is empty", function()
    assert.is_true((errors.should_retry(policy({}), "RuntimeError")))
    assert.is_true((errors.should_retry(policy({}), "Timeout")))
  end)
  it("never retries the default no_retry_on types", function()
    for _, t in ipairs({ "NilError", "TypeError", "ArgumentError" }) do
      local retry, why = errors.should_retry(policy({}), t)
      assert.is_false(retry)
      assert.are.equal(string.format('%s matches no_retry_on "%s"', t, t), why)
    end
  end)
  it("retries only retry_on types (and their subtypes) when retry_on is set", function()
    local p = policy({ "Timeout", "Http" })
    assert.is_true((errors.should_retry(p, "Http.Status503")))
    assert.is_true((errors.should_retry(p, "Timeout")))
    local retry, why = errors.should_retry(p, "RuntimeError")
    assert.is_false(retry)
    assert.are.equal("RuntimeError is not in retry_on", why)
  end)
  it("lets no_retry_on win over retry_on", function()
    local p = policy({ "Http" }, { "Http.BadRequest" })
    assert.is_true((errors.should_retry(p, "Http.Timeout")))
    local retry, why = errors.should_retry(p, "Http.BadRequest")
    assert.is_false(retry)
    assert.are.equal('Http.BadRequest matches no_retry_on "Http.BadRequest"', why)
    assert.is_false((errors.should_retry(policy({ "NilError" }), "NilError")))
  end)
end)

describe("on_error actions", function()
  it("are four distinct constants with readable names", function()
    local seen = {}
    for _, name in ipairs({ "SKIP", "RETRY", "DLQ", "RETHROW" }) do
      local a = errors.actions[name]
      assert.are.equal("fw." .. name, tostring(a))
      assert.is_nil(seen[a])
      seen[a] = true
    end
  end)

  it("cannot be modified", function()
    assert.has_error(function()
      errors.actions.SKIP.name = "RETRY"
    end, "flowwarden actions are constants")
    assert.are.equal("SKIP", errors.actions.SKIP.name)
    assert.has_error(function()
      errors.actions.SKIP.other = 1
    end, "flowwarden actions are constants")
  end)

  it("maps each constant to its name", function()
    for _, name in ipairs({ "SKIP", "RETRY", "DLQ", "RETHROW" }) do
      local action, warning = errors.action_from(errors.actions[name])
      assert.are.equal(name, action)
      assert.is_nil(warning)
    end
  end)

  it("treats nil as RETHROW without a warning", function()
    local action, warning = errors.action_from(nil)
    assert.are.equal("RETHROW", action)
    assert.is_nil(warning)
  end)

  it("treats anything else as RETHROW with a warning", function()
    local action, warning = errors.action_from("skip")
    assert.are.equal("RETHROW", action)
    assert.are.equal('on_error returned "skip" (did you mean fw.SKIP?); expected fw.SKIP, fw.RETRY, '
      .. "fw.DLQ, fw.RETHROW or nil: treated as fw.RETHROW", warning)
    action, warning = errors.action_from(true)
    assert.are.equal("RETHROW", action)
    assert.are.equal("on_error returned true; expected fw.SKIP, fw.RETRY, fw.DLQ, fw.RETHROW or nil: "
      .. "treated as fw.RETHROW", warning)
    action, warning = errors.action_from({ name = "SKIP" })
    assert.are.equal("RETHROW", action)
    assert.are.equal("on_error returned a table; expected fw.SKIP, fw.RETRY, fw.DLQ, fw.RETHROW or "
      .. "nil: treated as fw.RETHROW", warning)
  end)
end)
