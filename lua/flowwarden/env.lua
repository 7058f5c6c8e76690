--[[
flowwarden.env: fw.env(name [, default] [, opts]), an environment variable for
the script (typically read at load time, for tokens and hosts).

  fw.env("HOOK_TOKEN")            the value; unset: an error that stops the load
  fw.env("HOOK_TOKEN", "dev")     the value, or "dev" when unset
  fw.env("HOOK_TOKEN", nil)       the value, or nil when unset (explicitly optional)
  fw.env("REGION", { secret = false })          required, and not a secret
  fw.env("REGION", "eu", { secret = false })    defaulted, and not a secret

Every value fw.env returns (the variable's value or the default) is a secret
unless opts.secret is false: the runtime replaces it by "[redacted]" in
every text it writes (log lines, DLQ entries, status, metrics labels, check
output). Values shorter than 4 bytes are exempt (FW_SECRETS_MIN_LEN,
include/flowwarden/secrets.h). The host gives M.register (the core's
process-wide set); the secret values are also remembered per Lua state in
the set values() returns (value -> true), the registry field
"flowwarden.env_values".
]]

local M = {}

M.REGISTRY_KEY = "flowwarden.env_values"

-- Set to true in the registry by a host that loads the script only for its
-- settings (`flowwarden dlq list|show|stats|export|import|discard|purge`): an
-- unset required variable then gives a placeholder instead of stopping the
-- load, so an operator needs none of the script's secrets. Those verbs run no
-- handler; everything else (run, check, test, replay) keeps the error.
M.PLACEHOLDER_KEY = "flowwarden.env_placeholders"

-- What fw.env returns for an unset variable in that mode: a string no real
-- value looks like, so that top-level code (concatenation, formats) runs on.
function M.placeholder(name)
  return "<unset " .. name .. ">"
end

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

-- Set by the host (flowwarden.core's secret): registers a value for
-- redaction. nil under plain busted.
M.register = nil

-- The options of fw.env: { secret = boolean }.
local function check_opts(name, opts)
  if type(opts) ~= "table" then
    error(string.format("fw.env: the options for %s must be a table, got %s", name, type(opts)), 3)
  end
  for k, v in pairs(opts) do
    if k ~= "secret" then
      error(string.format("fw.env: unknown option %s for %s (the option is secret)", tostring(k), name), 3)
    end
    if type(v) ~= "boolean" then
      error(string.format("fw.env: option secret for %s must be a boolean, got %s", name, type(v)), 3)
    end
  end
  return opts.secret ~= false
end

function M.env(...)
  local n = select("#", ...)
  local name, default, opts = ...
  if n == 0 or n > 3 then
    error(string.format("fw.env: expected (name [, default] [, opts]), got %d arguments", n), 2)
  end
  if type(name) ~= "string" or name == "" or name:find("[%z=]") then
    error(string.format("fw.env: name must be a non-empty string without '=', got %s",
      type(name) == "string" and string.format("%q", name) or type(name)), 2)
  end
  local optional = n >= 2
  if n == 2 and type(default) == "table" then
    -- fw.env(name, opts): required, with options
    opts, default, optional = default, nil, false
  end
  if default ~= nil and type(default) ~= "string" then
    error(string.format("fw.env: the default for %s must be a string or nil, got %s", name,
      type(default)), 2)
  end
  local secret = true
  if opts ~= nil then
    secret = check_opts(name, opts)
  end
  local value = M.getenv(name)
  if value == nil then
    if not optional then
      if debug.getregistry()[M.PLACEHOLDER_KEY] == true then
        return M.placeholder(name)
      end
      error(string.format('fw.env: environment variable %s is not set (give a default: '
        .. 'fw.env("%s", "..."))', name, name), 2)
    end
    value = default
  end
  if secret and value ~= nil and value ~= "" then
    M.values()[value] = true
    if M.register then
      M.register(value)
    end
  end
  return value
end

return M
