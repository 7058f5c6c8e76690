--[[
flowwarden.http: the Lua half of fw.http. The C half: src/lua_api/http_lua.c
(the Lua functions), http_transfer.c (libcurl), http_policy.c (allow_hosts).

This file checks and normalizes what a handler passed; the C side parses the
URL with libcurl's own parser, applies the allow list, runs the transfer and
builds the response. Keeping every decision about the URL in C means the host
that is checked is the host libcurl connects to.

  prepare(call, method, a1, a2) -> request
      call is the public name ("fw.http.post"), method the fixed method of
      get/post/... or nil for request{}; a1, a2 the caller's arguments. Raises
      a plain string (no position: the C caller adds the script's) on bad
      input. The request is
        { method = "POST", url = "...", headers = { "Name: value", ... },
          body = string | nil, timeout_ms, connect_timeout_ms | nil,
          follow_redirects, verify_tls, ca_file | nil, max_body,
          raise_for_status, allow_hosts = { "host", "*.domain", ... } | nil }
  RESPONSE_MT   the metatable of responses (res:json())
  OPTIONS       the option names of request{}
]]

local duration = require("flowwarden.duration")
local fields = require("flowwarden.config.fields")

local M = {}

M.DEFAULT_TIMEOUT_MS = 30 * 1000
M.DEFAULT_MAX_BODY = 16 * 1024 * 1024
M.METHODS = { GET = true, HEAD = true, POST = true, PUT = true, PATCH = true, DELETE = true,
  OPTIONS = true }

M.OPTIONS = { "method", "url", "headers", "body", "json", "timeout", "connect_timeout",
  "follow_redirects", "verify_tls", "ca_file", "max_body", "raise_for_status" }
local SHORT_OPTIONS = {} -- get/post/...: the same without url and method
for _, name in ipairs(M.OPTIONS) do
  if name ~= "url" and name ~= "method" then
    SHORT_OPTIONS[#SHORT_OPTIONS + 1] = name
  end
end

local function fail(fmt, ...)
  error(string.format(fmt, ...), 0)
end

local function repr(v)
  if type(v) == "string" then
    if #v > 60 then
      v = v:sub(1, 57) .. "..."
    end
    return string.format("%q", v)
  end
  return type(v)
end

-- A duration string ("2s", "500ms") or a number of seconds, as milliseconds.
local function check_duration(call, name, v)
  local ms, err
  if type(v) == "number" then
    if v ~= v or v <= 0 or v * 1000 > duration.MAX_MS then
      fail("%s: %s must be a positive number of seconds or a duration such as \"2s\", got %s",
        call, name, tostring(v))
    end
    ms = math.ceil(v * 1000)
  elseif type(v) == "string" then
    ms, err = duration.parse(v)
    if not ms then
      fail("%s: %s: %s", call, name, err)
    end
    if ms <= 0 then
      fail("%s: %s must be longer than 0s", call, name)
    end
  else
    fail("%s: %s must be a duration such as \"2s\" or a number of seconds, got %s",
      call, name, type(v))
  end
  return math.tointeger(ms)
end

-- A size string ("16MB") or a number of bytes.
local function check_size(call, name, v)
  local bytes, err
  if math.type(v) == "integer" then
    bytes = v
  elseif type(v) == "string" then
    bytes, err = duration.parse_size(v)
    if not bytes then
      fail("%s: %s: %s", call, name, err)
    end
  else
    fail("%s: %s must be a size such as \"16MB\" or an integer number of bytes, got %s",
      call, name, repr(v))
  end
  if bytes <= 0 then
    fail("%s: %s must be larger than 0 bytes", call, name)
  end
  return bytes
end

local function check_boolean(call, name, v, default)
  if v == nil then
    return default
  end
  if type(v) ~= "boolean" then
    fail("%s: %s must be true or false, got %s", call, name, repr(v))
  end
  return v
end

-- RFC 9110 token characters.
local HEADER_NAME = "^[%w!#$%%&'*+%-.^_`|~]+$"

-- Builds libcurl's "Name: value" lines. An empty value is written "Name;"
-- (libcurl's way to send an empty header; "Name:" would remove it).
local function check_headers(call, headers, has_body, is_json)
  local lines, seen = {}, {}
  if headers == nil then
    headers = {}
  elseif type(headers) ~= "table" then
    fail("%s: headers must be a table of name = value strings, got %s", call, type(headers))
  end
  local names = {}
  for k in pairs(headers) do
    if type(k) ~= "string" then
      fail("%s: header names must be strings, got %s", call, repr(k))
    end
    names[#names + 1] = k
  end
  table.sort(names) -- a stable order for the server and for tests
  for _, name in ipairs(names) do
    local v = headers[name]
    if not name:find(HEADER_NAME) then
      fail("%s: invalid header name %s (letters, digits and !#$%%&'*+-.^_`|~ only)", call,
        repr(name))
    end
    if type(v) ~= "string" then
      fail("%s: header %q: value must be a string, got %s", call, name, type(v))
    end
    if v:find("[\r\n%z]") then
      fail("%s: header %q: value must not contain CR, LF or NUL", call, name)
    end
    seen[name:lower()] = true
    lines[#lines + 1] = v == "" and (name .. ";") or (name .. ": " .. v)
  end
  if is_json and not seen["content-type"] then
    lines[#lines + 1] = "Content-Type: application/json"
  elseif has_body and not seen["content-type"] then
    lines[#lines + 1] = "Content-Type:" -- no form-urlencoded default from libcurl
  end
  if has_body and not seen["expect"] then
    lines[#lines + 1] = "Expect:" -- no 100-continue round trip
  end
  return lines
end

-- The allow list, read at request time: flowwarden.config.effective_http
-- comes from the script's fw.defaults { http = ... } (absent: every host).
local function allow_hosts()
  local ok, config = pcall(require, "flowwarden.config")
  if not ok or type(config) ~= "table" or type(config.effective_http) ~= "function" then
    return nil
  end
  local ok2, http = pcall(config.effective_http)
  if not ok2 or type(http) ~= "table" or type(http.allow_hosts) ~= "table" then
    return nil
  end
  local list = {}
  for _, h in ipairs(http.allow_hosts) do
    if type(h) == "string" then
      h = h:lower():gsub("^%[(.*)%]$", "%1"):gsub("%.$", "")
      list[#list + 1] = h
    end
  end
  return list
end

local function fwjson()
  return require("flowwarden").json
end

function M.prepare(call, method, a1, a2)
  local opts, url
  local short = method ~= nil
  if short then
    url, opts = a1, a2
    if opts ~= nil and type(opts) ~= "table" then
      fail("%s: options must be a table, got %s", call, type(opts))
    end
    opts = opts or {}
    for k in pairs(opts) do
      if k == "url" or k == "method" then
        fail("%s: unknown option %s (the URL is the first argument and the method is %s; "
          .. "use fw.http.request for both in a table)", call, repr(k), method)
      end
    end
  else
    opts = a1
    if type(opts) ~= "table" then
      fail("%s: expected a table such as { method = \"GET\", url = \"https://...\" }, got %s",
        call, type(opts))
    end
    url, method = opts.url, opts.method
    if method == nil then
      method = "GET"
    elseif type(method) ~= "string" or not M.METHODS[method:upper()] then
      fail("%s: method must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, got %s",
        call, repr(method))
    end
    method = method:upper()
  end
  local known = short and SHORT_OPTIONS or M.OPTIONS
  for k in pairs(opts) do
    local found = false
    for _, name in ipairs(known) do
      found = found or k == name
    end
    if not found then
      local hint = ""
      local s = fields.suggest(k, known)
      if s then
        hint = string.format(" (did you mean %q?)", s)
      end
      fail("%s: unknown option %s%s", call, repr(k), hint)
    end
  end
  if type(url) ~= "string" then
    fail("%s: url must be a string, got %s", call, type(url))
  end

  local body = opts.body
  if body ~= nil and opts.json ~= nil then
    fail("%s: body and json are exclusive", call)
  end
  if body ~= nil and type(body) ~= "string" then
    fail("%s: body must be a string, got %s (send a table with json = ...)", call, type(body))
  end
  local is_json = opts.json ~= nil
  if is_json then
    local ok, text = pcall(fwjson().encode, opts.json)
    if not ok then
      fail("%s: json: %s", call, (tostring(text):gsub("^fw%.json%.encode: ", "")))
    end
    body = text
  end
  if body ~= nil and method == "HEAD" then
    fail("%s: a HEAD request has no body", call)
  end
  if opts.ca_file ~= nil and type(opts.ca_file) ~= "string" then
    fail("%s: ca_file must be a string (a path), got %s", call, type(opts.ca_file))
  end

  return {
    method = method,
    url = url,
    headers = check_headers(call, opts.headers, body ~= nil, is_json),
    body = body,
    timeout_ms = opts.timeout ~= nil and check_duration(call, "timeout", opts.timeout)
      or M.DEFAULT_TIMEOUT_MS,
    connect_timeout_ms = opts.connect_timeout ~= nil
      and check_duration(call, "connect_timeout", opts.connect_timeout) or nil,
    follow_redirects = check_boolean(call, "follow_redirects", opts.follow_redirects, false),
    verify_tls = check_boolean(call, "verify_tls", opts.verify_tls, true),
    ca_file = opts.ca_file,
    max_body = opts.max_body ~= nil and check_size(call, "max_body", opts.max_body)
      or M.DEFAULT_MAX_BODY,
    raise_for_status = check_boolean(call, "raise_for_status", opts.raise_for_status, false),
    allow_hosts = allow_hosts(),
  }
end

M.RESPONSE_MT = {
  __name = "flowwarden.http.response",
  __index = {
    -- The body decoded as JSON (fw.json.decode).
    json = function(res)
      if type(res) ~= "table" or type(res.body) ~= "string" then
        error("bad argument #1 to 'json' (a response expected; call it as res:json())", 2)
      end
      return fwjson().decode(res.body)
    end,
  },
}

return M
