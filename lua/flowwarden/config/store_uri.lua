--[[
flowwarden.config.store_uri: which kind of store a connection URI names
(its scheme), and the parts of a Redis URI fw.redis connects with.

  M.kind(uri)         "mongodb" | "redis" | "postgresql" | nil
  M.parse_redis(uri)  { host, port, db, user | nil, password | nil } or nil, why
  M.postgresql_problem(uri)  nil, or why libpq (core.pg_uri_check) refuses it

Messages never quote the URI: it may hold a password.
]]

local M = {}

local KINDS = {
  { "^mongodb://.", "mongodb" }, { "^mongodb%+srv://.", "mongodb" },
  { "^redis://.", "redis" }, { "^rediss://.", "redis" },
  { "^redis%+cluster://", "redis" }, { "^rediss%+cluster://", "redis" },
  { "^postgresql://.", "postgresql" }, { "^postgres://.", "postgresql" },
}

function M.kind(uri)
  if type(uri) ~= "string" then
    return nil
  end
  for _, k in ipairs(KINDS) do
    if uri:find(k[1]) then
      return k[2]
    end
  end
  return nil
end

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h)
    return string.char(tonumber(h, 16))
  end))
end

local CLUSTER = "Redis Cluster is not supported (fw.redis talks to one server: "
  .. "name one node, or a proxy in front of the cluster)"

-- redis://[[user]:password@]host[:port][/db][?options]
function M.parse_redis(uri)
  local scheme, rest = uri:match("^(%a[%w%+]*)://(.*)$")
  if scheme == "redis+cluster" or scheme == "rediss+cluster" then
    return nil, CLUSTER
  end
  if scheme == "rediss" then
    return nil, "TLS (rediss://) is not supported: the system's hiredis is built without it"
  end
  local query = ""
  local q = rest:find("?", 1, true)
  if q then
    rest, query = rest:sub(1, q - 1), rest:sub(q + 1)
  end
  local key = query:match("^([^&=]+)")
  if key and key:lower() == "cluster" then
    return nil, CLUSTER
  elseif key then
    return nil, string.format("unknown option %q (a Redis URI takes none)", key)
  end
  local userinfo, hostpart = rest:match("^(.*)@([^@]*)$")
  hostpart = hostpart or rest
  local out = {}
  if userinfo then
    local user, password = userinfo:match("^([^:]*):(.*)$")
    if user then
      out.user = user ~= "" and unescape(user) or nil
      out.password = unescape(password)
    else
      -- redis://secret@host: the older form, a password without a user.
      out.password = unescape(userinfo)
    end
  end
  local hostport, path = hostpart:match("^([^/]*)(.*)$")
  if hostport:find(",", 1, true) then
    return nil, CLUSTER
  end
  local host, port = hostport:match("^%[([^%]]+)%]:?(%d*)$")
  if not host then
    host, port = hostport:match("^([^:]+):?(%d*)$")
  end
  if not host or host == "" then
    return nil, "missing host (e.g. redis://127.0.0.1:6379/0)"
  end
  out.host = host
  out.port = port ~= "" and tonumber(port) or 6379
  if hostport:find(":") and port == "" and not hostport:find("^%[") then
    return nil, "invalid port (expected 1 to 65535)"
  end
  if out.port < 1 or out.port > 65535 then
    return nil, "invalid port (expected 1 to 65535)"
  end
  if path == "" or path == "/" then
    out.db = 0
  else
    local db = path:match("^/(%d+)$")
    if not db or tonumber(db) > 65535 then
      return nil, "the path must be a database number (e.g. redis://host:6379/0)"
    end
    out.db = tonumber(db)
  end
  return out
end

-- The C host checks with libpq's parser (core.pg_uri_check); plain Lua
-- (busted) only checks the scheme.
function M.postgresql_problem(uri)
  local ok, core = pcall(require, "flowwarden.core")
  if ok and type(core) == "table" and core.pg_uri_check then
    local fine, why = core.pg_uri_check(uri)
    if not fine then
      return why or "libpq cannot parse it"
    end
  end
  return nil
end

return M
