--[[
flowwarden.env: fw.env(name [, default]), an environment variable for the
script (typically read at load time, for tokens and hosts).

  fw.env("HOOK_TOKEN")            the value; unset: an error that stops the load
  fw.env("HOOK_TOKEN", "dev")     the value, or "dev" when unset
  fw.env("HOOK_TOKEN", nil)       the value, or nil when unset (explicitly optional)

Values are never logged. Every non-empty string fw.env returns (the
variable's value or the default) is remembered, per Lua state, in the set
values() returns (value -> true), so the runtime can keep them out of logs.
The set is the registry field "flowwarden.env_values" (C:
lua_getfield(L, LUA_REGISTRYINDEX, "flowwarden.env_values")).
]]

local M = {}

M.REGISTRY_KEY = "flowwarden.env_values"

-- Where values come from: the process's environment, or under
-- flowwarden.testing the spec's opts.env only (a test sees no variable it did
-- not give).
M.getenv = os.getenv

-- The set of values fw.env returned in this state (value -> true).
function M.values()
  local registry = debug.getregistry()
  local set = registry[M.REGISTRY_KEY]
  if type(set) ~= "table" then
    set = {}
    registry[M.REGISTRY_KEY] = set
  end
  return set
end

function M.env(...)
  local n = select("#", ...)
  local name, default = ...
  if n == 0 or n > 2 then
    error(string.format("fw.env: expected (name [, default]), got %d arguments", n), 2)
  end
  if type(name) ~= "string" or name == "" or name:find("[%z=]") then
    error(string.format("fw.env: name must be a non-empty string without '=', got %s",
      type(name) == "string" and string.format("%q", name) or type(name)), 2)
  end
  if n == 2 and default ~= nil and type(default) ~= "string" then
    error(string.format("fw.env: the default for %s must be a string or nil, got %s", name,
      type(default)), 2)
  end
  local value = M.getenv(name)
  if value == nil then
    if n < 2 then
      error(string.format('fw.env: environment variable %s is not set (give a default: '
        .. 'fw.env("%s", "..."))', name, name), 2)
    end
    value = default
  end
  if value ~= nil and value ~= "" then
    M.values()[value] = true
  end
  return value
end

return M
