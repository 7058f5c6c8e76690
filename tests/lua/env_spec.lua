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

  it("gives a placeholder for an unset variable when the host reads only settings", function()
    local registry = debug.getregistry()
    registry[env.PLACEHOLDER_KEY] = true
    local ok, v = pcall(env.env, unset)
    local dflt = env.env(unset, "dflt")
    registry[env.PLACEHOLDER_KEY] = nil
    assert.is_true(ok)
    assert.are.equal("<unset " .. unset .. ">", v)
    assert.is_nil(env.values()[v]) -- no secret to redact
    assert.are.equal("dflt", dflt)
    assert.is_false(pcall(env.env, unset)) -- the mode ends with the flag
  end)

  it("gives the default, or nil when the default is an explicit nil", function()
    assert.are.equal("dflt", env.env(unset, "dflt"))
    assert.is_nil(env.env(unset, nil))
    assert.are.equal(set, env.env("HOME", nil))
  end)

  it("registers secret values with the host, not the ones marked secret = false", function()
    local registered = {}
    env.register = function(v) registered[#registered + 1] = v end
    local saved = env.getenv
    env.getenv = function(name)
      return ({ TOKEN = "tok-1", REGION = "eu-west-1", HOST = "db.internal" })[name]
    end
    local ok, err = pcall(function()
      assert.are.equal("tok-1", env.env("TOKEN"))
      assert.are.equal("eu-west-1", env.env("REGION", { secret = false }))
      assert.are.equal("db.internal", env.env("HOST", "localhost", { secret = false }))
      assert.are.equal("dflt-2", env.env(unset, "dflt-2", { secret = true }))
      assert.are.equal("dflt-3", env.env(unset, "dflt-3", nil))
      assert.is_nil(env.env(unset, nil, { secret = false }))
    end)
    env.register, env.getenv = nil, saved
    assert(ok, err)
    assert.are.same({ "tok-1", "dflt-2", "dflt-3" }, registered)
    assert.is_nil(env.values()["eu-west-1"])
    assert.is_true(env.values()["tok-1"])
  end)

  it("with options but no default, the variable is still required", function()
    assert.has_error(function() env.env(unset, { secret = false }) end,
      'fw.env: environment variable ' .. unset .. ' is not set (give a default: fw.env("'
        .. unset .. '", "..."))')
  end)

  it("rejects bad options", function()
    assert.has_error(function() env.env("HOME", nil, { secrets = false }) end,
      "fw.env: unknown option secrets for HOME (the option is secret)")
    assert.has_error(function() env.env("HOME", nil, { secret = "no" }) end,
      'fw.env: option secret for HOME must be true, false, "query" or "all", got "no"')
    assert.has_error(function() env.env("HOME", nil, { secret = 1 }) end,
      'fw.env: option secret for HOME must be true, false, "query" or "all", got number')
    assert.has_error(function() env.env("HOME", nil, "x") end,
      "fw.env: the options for HOME must be a table, got string")
  end)

  it("hides a URL's secret parts by its mode (issue 38)", function()
    local url = "https://svc:pa55w0rd@hooks.example.com:8443/services/T0/B1/XXXX?token=abcd1234&v=1#frag"
    local function hidden(mode)
      local set = {}
      for _, p in ipairs(env.secret_parts(url, mode)) do
        set[p] = true
      end
      return set
    end
    -- default: all but scheme and host
    assert.are.same({ ["svc:pa55w0rd"] = true, pa55w0rd = true,
      ["/services/T0/B1/XXXX?token=abcd1234&v=1#frag"] = true,
      ["/services/T0/B1/XXXX"] = true, ["token=abcd1234&v=1"] = true, frag = true }, hidden(true))
    -- "query": userinfo (and its password alone), query values, fragment
    assert.are.same({ ["svc:pa55w0rd"] = true, pa55w0rd = true, abcd1234 = true, frag = true },
      hidden("query"))
    assert.are.same({ [url] = true }, hidden("all"))
    -- not a URL: whole, whatever the mode
    assert.are.same({ "s3cret-token" }, env.secret_parts("s3cret-token", "query"))
    assert.are.same({ "s3cret-token" }, env.secret_parts("s3cret-token", true))
    assert.are.same({ "https://" }, env.secret_parts("https://", true))
    -- a host alone has nothing secret but under "all"
    assert.are.same({}, env.secret_parts("http://127.0.0.1:8080", true))
    assert.are.same({}, env.secret_parts("http://127.0.0.1:8080/", "query"))
  end)

  it("hides a user name without a password only as the URI's userinfo", function()
    local parts, names = env.secret_parts("postgresql://flowwarden@127.0.0.1:5432/reporting", true)
    for _, p in ipairs(parts) do
      assert.are.equal("/reporting", p) -- the path (as the rest and as the path)
    end
    assert.are.same({ "flowwarden" }, names)
    parts, names = env.secret_parts("postgresql://flowwarden@127.0.0.1:5432", "query")
    assert.are.same({}, parts)
    assert.are.same({ "flowwarden" }, names)
    parts, names = env.secret_parts("postgresql://flowwarden@127.0.0.1:5432", "all")
    assert.are.same({ "postgresql://flowwarden@127.0.0.1:5432" }, parts)
    assert.are.same({}, names)
  end)

  it("rejects bad arguments", function()
    assert.has_error(function() env.env() end, "fw.env: expected (name [, default] [, opts]), got 0 arguments")
    assert.has_error(function() env.env("X", nil, {}, 1) end,
      "fw.env: expected (name [, default] [, opts]), got 4 arguments")
    assert.has_error(function() env.env(5) end,
      "fw.env: name must be a non-empty string without '=', got number")
    assert.has_error(function() env.env("X", 5) end, "fw.env: the default for X must be a string or nil, got number")
  end)
end)
