--[[
flowwarden: the module operator scripts load with require("flowwarden").

  fw.stream { ... }            declare a stream (checked by config.finish())
  fw.defaults { ... }          defaults for every stream, once per script
  fw.connection { ... }        a named MongoDB connection for fw.mongo and DLQs
  fw.error(type, msg, fields)  a typed error to raise with error()
  fw.SKIP, fw.RETRY, fw.DLQ, fw.RETHROW   what on_error may return
  fw.dlq.requeue { ... }, fw.dlq.evict()  what dlq.enqueue_policy may return
  fw.log.debug/info/warn/error(...)       log through the runtime
  fw.json.encode/decode        JSON and Extended JSON (flowwarden.json)
  fw.env(name [, default] [, opts])  an environment variable, redacted (flowwarden.env)

The C host adds its functions (fw.object_id, fw.date, fw.null, ...) by
preloading a module "flowwarden.core" that returns a table; its fields are
copied into fw. Without it (busted, plain lua) the library still works.
A core field `log_sink` is installed as the log sink instead of copied, and
`log_level` sets fw.log's threshold.
]]

local config = require("flowwarden.config")
local errors = require("flowwarden.errors")

local fw = {}

fw.stream = config.stream
fw.defaults = config.defaults
fw.connection = config.connection
fw.error = errors.new
fw.dlq = require("flowwarden.dlq").api
for name, action in pairs(errors.actions) do
  fw[name] = action
end

---------------------------------------------------------------------------
-- Logging: arguments are joined like print() does (tostring, separated by a
-- space) and passed to the sink as sink(level, message). The host installs
-- its sink, which adds time and stream name; the default writes to stderr.

local LEVELS = { debug = 1, info = 2, warn = 3, error = 4 }

local function default_sink(level, message)
  io.stderr:write(os.date("!%Y-%m-%dT%H:%M:%SZ"), " ", level:upper(), " ", message, "\n")
end

local sink = default_sink
local threshold = LEVELS.debug

local function emit(level, ...)
  if LEVELS[level] < threshold then
    return
  end
  local n = select("#", ...)
  local parts = {}
  for i = 1, n do
    parts[i] = tostring((select(i, ...)))
  end
  sink(level, table.concat(parts, " "))
end

fw.log = {}
for level in pairs(LEVELS) do
  fw.log[level] = function(...)
    emit(level, ...)
  end
end

-- For the host: installs sink(level, message); nil restores the default.
-- Returns the previous sink.
function fw.log.set_sink(fn)
  if fn ~= nil and type(fn) ~= "function" then
    error("bad argument #1 to 'set_sink' (function or nil expected, got " .. type(fn) .. ")", 2)
  end
  local previous = sink
  sink = fn or default_sink
  return previous
end

-- For the host: drops messages below `level` before they are formatted.
function fw.log.set_level(level)
  if not LEVELS[level] then
    error("bad argument #1 to 'set_level' (expected \"debug\", \"info\", \"warn\" or \"error\", got "
      .. tostring(level) .. ")", 2)
  end
  threshold = LEVELS[level]
end

---------------------------------------------------------------------------
-- Host functions

local function load_core()
  local ok, core = pcall(require, "flowwarden.core")
  if not ok then
    -- Absent is fine; a core that exists but fails to load is a host bug.
    if tostring(core):find("module 'flowwarden.core' not found", 1, true) then
      return
    end
    error(core, 0)
  end
  if type(core) ~= "table" then
    return
  end
  for k, v in pairs(core) do
    if k == "log_sink" then
      fw.log.set_sink(v)
    elseif k == "log_level" then
      -- the runtime's --log-level: messages below it are not even formatted
      fw.log.set_level(v)
    elseif k == "uri_check" or k == "admin_check" then
      -- flowwarden.config's, not the script's: it asks the core directly
    elseif k == "secret" then
      -- fw.env's: every value it returns is hidden in the runtime's output
      require("flowwarden.env").register = v
    elseif fw[k] ~= nil then
      error(string.format("flowwarden.core: field %q collides with the Lua library's fw.%s", k, k), 0)
    else
      fw[k] = v
    end
  end
end

load_core()

-- After the core: fw.json uses its null, array, table and constructors.
fw.json = require("flowwarden.json").new(fw)
fw.env = require("flowwarden.env").env

return fw
