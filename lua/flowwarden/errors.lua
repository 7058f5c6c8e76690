--[[
flowwarden.errors: typed errors, classification of anything a handler raises,
retry filtering and on_error actions (issue 4).

A classified error is a plain table the host can read field by field:

  {
    type      = "Http.Timeout",   -- dotted name; Lua's own errors get NilError,
                                  -- TypeError, ArgumentError, MemoryError or RuntimeError
    message   = "gateway did not answer",  -- clean text, without a "file:line: " prefix
    where     = "/srv/orders.lua:42" | nil, -- the position Lua put in front of the
                                           -- message, or where fw.error was called
    fields    = { status = 504 },          -- always a table (empty when none)
    traceback = "stack traceback: ..." | nil, -- whatever the host's message handler passed
  }

The position is kept apart from the message so that `type`/`message` can be
grouped and compared across events (and stored as the DLQ entry's
error.type / error.message), while `where` and `traceback` keep the detail.
Use errors.format(c) for a one-line log text that has both.
]]

local M = {}

-- Lua's built-in error families, named as the Lua counterparts of the seed's
-- NullPointerException, ClassCastException and IllegalArgumentException.
M.NIL_ERROR = "NilError"
M.TYPE_ERROR = "TypeError"
M.ARGUMENT_ERROR = "ArgumentError"
M.MEMORY_ERROR = "MemoryError"
M.RUNTIME_ERROR = "RuntimeError"

-- Every type flowwarden itself raises or stores, and the families above
-- them (docs/lua-api.md lists each): a retry_on or circuit.on entry close to
-- one of these but not one is most likely a typo (flowwarden check warns).
M.BUILTIN_TYPES = {
  "NilError", "TypeError", "ArgumentError", "MemoryError", "RuntimeError", "Timeout",
  "DlqRequested",
  "Http", "Http.Timeout", "Http.Connect", "Http.TLS", "Http.TooLarge", "Http.Protocol",
  "Http.Denied", "Http.Status", "Http.Status.Transient", "Http.Status.Permanent",
  "Mongo", "Mongo.DuplicateKey", "Mongo.Invalid", "Mongo.Timeout", "Mongo.Network",
  "Mongo.NotWritablePrimary", "Mongo.WriteConcern", "Mongo.Command",
  "Mongo.TransactionTooLong", "Mongo.TransactionTooLarge", "Mongo.TransactionsUnsupported",
}

local error_mt = { __name = "flowwarden.error" }
error_mt.__index = error_mt
error_mt.__tostring = function(e)
  if e.message == "" then
    return e.type
  end
  return e.type .. ": " .. e.message
end

-- True when `name` is one or more Lua identifiers joined by dots
-- ("Timeout", "Http.Timeout", "java.net.SocketTimeoutException").
function M.valid_type_name(name)
  if type(name) ~= "string" or name == "" then
    return false
  end
  for part in (name .. "."):gmatch("(.-)%.") do
    if not part:match("^[%a_][%w_]*$") then
      return false
    end
  end
  return true
end

local function short_repr(v)
  if type(v) == "string" then
    return string.format("%q", v)
  end
  return type(v)
end

-- Creates a typed error object; raise it with error(). Misuse raises an error
-- whose text starts with "bad argument #", so it classifies as ArgumentError.
function M.new(type_name, message, fields)
  if not M.valid_type_name(type_name) then
    error(string.format("bad argument #1 to 'fw.error' (error type must be a dotted name "
      .. "such as \"Http.Timeout\", got %s)", short_repr(type_name)), 2)
  end
  if message ~= nil and type(message) ~= "string" and type(message) ~= "number" then
    error(string.format("bad argument #2 to 'fw.error' (message must be a string, got %s)",
      type(message)), 2)
  end
  if fields ~= nil and type(fields) ~= "table" then
    error(string.format("bad argument #3 to 'fw.error' (fields must be a table, got %s)",
      type(fields)), 2)
  end
  local where
  local info = debug.getinfo(2, "Sl")
  if info and info.currentline and info.currentline > 0 then
    where = (info.source:sub(1, 1) == "@" and info.source:sub(2) or info.short_src)
      .. ":" .. info.currentline
  end
  return setmetatable({
    type = type_name,
    message = message ~= nil and tostring(message) or "",
    fields = fields or {},
    where = where,
  }, error_mt)
end

function M.is_error(v)
  return getmetatable(v) == error_mt
end

-- Splits "chunk:line: text" into "chunk:line", "text". A chunk name with
-- spaces must end like one ("x.lua", "[string ...]", "(command line)"), which
-- keeps "retry at 10:30: later" whole.
local function split_position(msg)
  local src, line, rest = msg:match("^([^\n]-):(%d+): (.*)$")
  if src and (not src:find("%s") or src:find("%.lua$") or src:find("[%]%)]$")) then
    return src .. ":" .. line, rest
  end
  return nil, msg
end

-- Ordered: the first pattern that matches the clean message decides.
local LUA_ERROR_KINDS = {
  { "^not enough memory", M.MEMORY_ERROR },
  { "^attempt to index a nil value", M.NIL_ERROR },
  { "^attempt to call a nil value", M.NIL_ERROR },
  { "^attempt to perform arithmetic on ", M.TYPE_ERROR },
  { "^attempt to perform bitwise operation on ", M.TYPE_ERROR },
  { "^attempt to concatenate ", M.TYPE_ERROR },
  { "^attempt to compare ", M.TYPE_ERROR },
  { "^attempt to call a ", M.TYPE_ERROR },
  { "^attempt to index a ", M.TYPE_ERROR },
  { "^attempt to get length of ", M.TYPE_ERROR },
  { "^number.- has no integer representation", M.TYPE_ERROR },
  -- Arithmetic on strings goes through the string metatable, which words it so.
  { "^attempt to %a+ a '%a+' with a '%a+'", M.TYPE_ERROR },
  { "^bad 'for' ", M.TYPE_ERROR },
  { "^'for' %a+ ", M.TYPE_ERROR },
  { "^bad argument #", M.ARGUMENT_ERROR },
  { "^calling '.-' on bad self", M.ARGUMENT_ERROR },
  { "^invalid value %(.-%) at index %d+ in table for 'concat'", M.ARGUMENT_ERROR },
}

-- Classifies any value raised by a handler (see the shape at the top).
-- `traceback` is optional and passed through untouched.
function M.classify(err, traceback)
  if M.is_error(err) then
    return {
      type = err.type,
      message = err.message,
      fields = err.fields,
      where = err.where,
      traceback = traceback,
    }
  end
  if type(err) == "string" then
    local where, message = split_position(err)
    local kind = M.RUNTIME_ERROR
    for _, rule in ipairs(LUA_ERROR_KINDS) do
      if message:find(rule[1]) then
        kind = rule[2]
        break
      end
    end
    return { type = kind, message = message, fields = {}, where = where, traceback = traceback }
  end
  local message
  local mt = getmetatable(err)
  if type(err) == "number" then
    message = tostring(err)
  elseif type(mt) == "table" and mt.__tostring then
    message = tostring(err)
  else
    -- The wording lua.c uses for error objects it cannot print.
    message = string.format("(error object is a %s value)", type(err))
  end
  return { type = M.RUNTIME_ERROR, message = message, fields = {}, traceback = traceback }
end

-- One line for logs: "Type: message (at file:line)".
function M.format(c)
  local text = c.message == "" and c.type or (c.type .. ": " .. c.message)
  if c.where then
    text = text .. " (at " .. c.where .. ")"
  end
  return text
end

-- True (and the entry) when `type_name` is an entry of `list` or below one:
-- "Http" matches "Http" and "Http.Timeout", never "HttpX".
function M.matches(type_name, list)
  for _, entry in ipairs(list or {}) do
    if type_name == entry
      or (type_name:sub(1, #entry + 1) == entry .. ".") then
      return true, entry
    end
  end
  return false
end

-- Whether an error of `type_name` may be retried under `retry` (an effective
-- retry spec from flowwarden.config). Attempts left are the host's concern.
-- Returns the decision and a short reason for logs.
function M.should_retry(retry, type_name)
  local hit, entry = M.matches(type_name, retry.no_retry_on)
  if hit then
    return false, string.format("%s matches no_retry_on %q", type_name, entry)
  end
  if retry.retry_on and #retry.retry_on > 0 then
    hit, entry = M.matches(type_name, retry.retry_on)
    if not hit then
      return false, string.format("%s is not in retry_on", type_name)
    end
    return true, string.format("%s matches retry_on %q", type_name, entry)
  end
  return true, "retry_on is empty: every type not in no_retry_on is retried"
end

-- on_error actions. Each constant is a unique table; tostring gives "fw.SKIP".
local action_mt = { __name = "flowwarden.action" }
local action_by_value = {}
action_mt.__tostring = function(a)
  return "fw." .. action_by_value[a]
end
action_mt.__index = function(a, key)
  if key == "name" then
    return action_by_value[a]
  end
end
action_mt.__newindex = function()
  error("flowwarden actions are constants", 2)
end

M.ACTION_NAMES = { "SKIP", "RETRY", "DLQ", "RETHROW" }
M.actions = {}
for _, name in ipairs(M.ACTION_NAMES) do
  local a = setmetatable({}, action_mt)
  M.actions[name] = a
  action_by_value[a] = name
end

-- Maps what on_error returned to "SKIP" | "RETRY" | "DLQ" | "RETHROW".
-- nil means the standard policy (RETHROW). Anything else is also RETHROW,
-- with a warning text as the second result for the host to log.
function M.action_from(value)
  if value == nil then
    return "RETHROW"
  end
  local name = action_by_value[value]
  if name then
    return name
  end
  local hint = ""
  if type(value) == "string" then
    for _, n in ipairs(M.ACTION_NAMES) do
      if value:upper() == n then
        hint = string.format(" (did you mean fw.%s?)", n)
      end
    end
  end
  local shown = type(value) == "string" and string.format("%q", value)
    or (type(value) == "number" or type(value) == "boolean") and tostring(value)
    or ("a " .. type(value))
  return "RETHROW", string.format("on_error returned %s%s; expected fw.SKIP, fw.RETRY, "
    .. "fw.DLQ, fw.RETHROW or nil: treated as fw.RETHROW", shown, hint)
end

return M
