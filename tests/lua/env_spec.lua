-- fw.env: required, defaulted and explicitly optional variables.
local env = require("flowwarden.env")

describe("fw.env", function()
  local set = os.getenv("HOME") -- set in any test environment
  local unset = "FW_TEST_SURELY_UNSET_VARIABLE"

  it("returns a variable's value and remembers it for redaction", function()
    assert.are.equal(set, env.env("HOME"))
    assert.is_true(env.values()[set])
    assert.are.equal(debug.getregistry()["flowwarden.env_values"], env.values())
  end)

  it("stops the load when a variable without default is unset", function()
    local ok, err = pcall(function() return env.env(unset) end)
    assert.is_false(ok)
    assert.truthy(err:find('fw.env: environment variable ' .. unset .. ' is not set (give a default: '
      .. 'fw.env("' .. unset .. '", "..."))', 1, true))
  end)

  it("gives the default, or nil when the default is an explicit nil", function()
    assert.are.equal("dflt", env.env(unset, "dflt"))
    assert.is_nil(env.env(unset, nil))
    assert.are.equal(set, env.env("HOME", nil))
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() env.env() end, "fw.env: expected (name [, default]), got 0 arguments")
    assert.has_error(function() env.env(5) end,
      "fw.env: name must be a non-empty string without '=', got number")
    assert.has_error(function() env.env("X", 5) end, "fw.env: the default for X must be a string or nil, got number")
  end)
end)
