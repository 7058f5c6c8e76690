--[[
flowwarden.env: fw.env(name [, default] [, opts]), an environment variable for
the script (typically read at load time, for tokens and hosts).

  fw.env("HOOK_TOKEN")            the value; unset: an error that stops the load
  fw.env("HOOK_TOKEN", "dev")     the value, or "dev" when unset
  fw.env("HOOK_TOKEN", nil)       the value, or nil when unset (explicitly optional)
  fw.env("REGION", { secret = false })          required, and not a secret
  fw.env("REGION", "eu", { secret = false })    defaulted, and not a secret
  fw.env("HOOK_URL", { secret = "query" })      a URL whose path is not secret
  fw.env("HOOK_URL", { secret = "all" })        a URL whose host is secret too

Every value fw.env returns (the variable's value or the default) is a secret
unless opts.secret is false: the runtime replaces it by "[redacted]" in
every text it writes. For a URL ("scheme://host..."), what is secret
depends on opts.secret (issue 38: "POST [redacted]" hid which dependency
failed):
  true (default)  everything but the scheme and host: userinfo, path, query
                  and fragment ("POST https://hooks.example.com[redacted]")
  "query"         the userinfo, each query value and the fragment only
                  ("POST https://api.example.com/v1/orders")
  "all"           the whole value, host included
A userinfo with a password ("user:pw") is hidden whole and its password
anywhere; a user name alone only as a URI's userinfo, where "@" follows it
(postgresql://[redacted]@host): a user named "flowwarden" leaves the word
"flowwarden" elsewhere in a text alone.
A value that is not a URL is secret whole under true, "query" and "all".
It is hidden (log lines, DLQ entries, status, metrics labels, check
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

-- The options of fw.env: { secret = true | false | "query" | "all" }.
-- Returns the secret mode (true, "query", "all") or false.
local function check_opts(name, opts)
  if type(opts) ~= "table" then
    error(string.format("fw.env: the options for %s must be a table, got %s", name, type(opts)), 3)
  end
  for k, v in pairs(opts) do
    if k ~= "secret" then
      error(string.format("fw.env: unknown option %s for %s (the option is secret)", tostring(k), name), 3)
    end
    if type(v) ~= "boolean" and v ~= "query" and v ~= "all" then
      error(string.format('fw.env: option secret for %s must be true, false, "query" or "all", '
        .. "got %s", name, type(v) == "string" and string.format("%q", v) or type(v)), 3)
    end
  end
  if opts.secret == nil then
    return true
  end
  return opts.secret
end

-- The parts of value to hide under mode (see the top): the whole value,
-- or for a URL the parts its mode makes secret; and, second, the user names
-- to hide only as a URI's userinfo (before "@").
function M.secret_parts(value, mode)
  local scheme, authority, rest = value:match("^(%a[%w+.-]*://)([^/?#]*)(.*)$")
  if mode == "all" or not scheme or authority == "" then
    return { value }, {}
  end
  local parts, names = {}, {}
  local userinfo = authority:match("^(.*)@[^@]*$")
  if userinfo and userinfo:find(":", 1, true) then
    parts[#parts + 1] = userinfo
    local password = userinfo:match(":(.*)$")
    if password ~= "" then
      parts[#parts + 1] = password
    end
  elseif userinfo and #userinfo >= 4 then
    names[1] = userinfo
  end
  local path, query, fragment = rest:match("^([^?#]*)%??([^#]*)#?(.*)$")
  if mode == "query" then
    for pair in query:gmatch("[^&;]+") do
      local v = pair:match("=(.*)$")
      if v and v ~= "" then
        parts[#parts + 1] = v
      end
    end
  else
    -- The whole rest and each piece of it: a message that drops the query
    -- string (fw.http's) still hides the path.
    for _, p in ipairs({ rest, path, query }) do
      if p ~= "" then
        parts[#parts + 1] = p
      end
    end
  end
  if fragment ~= "" then
    parts[#parts + 1] = fragment
  end
  -- As the C set: shorter values are never secrets (FW_SECRETS_MIN_LEN).
  local out = {}
  for _, p in ipairs(parts) do
    if #p >= 4 then
      out[#out + 1] = p
    end
  end
  return out, names
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
    local parts, names = M.secret_parts(value, secret)
    for _, name in ipairs(names) do
      M.values()[name] = "userinfo"
      if M.register then
        M.register(name, "userinfo")
      end
    end
    for _, part in ipairs(parts) do
      -- and as JSON writes it (fw.json and lua-cjson escape "/" as "\/")
      local escaped = part:gsub("/", "\\/")
      for _, form in ipairs({ part, escaped ~= part and escaped or nil }) do
        M.values()[form] = true
        if M.register then
          M.register(form)
        end
      end
    end
  end
  return value
end

return M
