--[[
flowwarden.config: the registry behind fw.stream / fw.defaults, strict
validation, defaults and the effective settings the C host runs.

HOW THE HOST LOADS A SCRIPT (in a fresh lua_State, inside lua_pcall):

  package.preload["flowwarden.core"] = <C value constructors>  -- optional
  local config = require("flowwarden.config")
  local cfg, errs = config.load_file("/path/script.lua",
                                     { uri = <--uri or FLOWWARDEN_URI, or nil> })
  -- or run the script yourself (chunkname "@/path/script.lua"), then
  -- local cfg, errs = config.finish({ uri = ..., script = "/path/script.lua" })

  On success `cfg` is the table below and `errs` is nil; on failure `cfg` is
  nil and `errs` is an array of messages in declaration order, each
  "SCRIPT:LINE: stream \"name\": field: what is wrong" (or "stream #N" when
  the stream has no valid name, or "defaults" for fw.defaults).

  finish() options (all optional):
    uri              the URI from --uri / FLOWWARDEN_URI; wins over the script's
    default_database the database to use when neither the stream nor
                     fw.defaults names one; when absent it is the path of the
                     effective URI ("mongodb://h/shop?..." -> "shop")
    script           the script path, for messages that have no line

THE EFFECTIVE CONFIGURATION (every field always present unless "| nil"):

  cfg = {
    uri = "mongodb://127.0.0.1:27017/?replicaSet=rs0",
    uri_source = "option" | "script" | "default",
    default_database = "shop" | nil,
    defaults = { <the validated fw.defaults, normalized like below, only the
                  keys the script set> },
    defaults_declared_at = "SCRIPT:LINE" | nil,
    streams = { spec, spec, ... },            -- in declaration order
  }

  spec = {
    name = "order-watcher",
    declared_at = "/path/script.lua:12",
    database = "shop",
    database_source = "stream" | "defaults" | "uri",
    collection = "orders" | nil,              -- nil: the whole database
    operation_types = { "insert", "update" } | nil,  -- nil: every type
    pipeline = { stage, ... },                -- the script's own tables; {} when none
    full_document = "default",                -- | "updateLookup" | "whenAvailable" | "required"
    full_document_before_change = "off",      -- | "whenAvailable" | "required"
    checkpoint = { save_every = 1, save_interval_ms = 5000,
                   idle_heartbeat_ms = 300000, start_position = "resume",
                   on_history_lost = "fail" },  -- | "latest", | "resume_from_now"
    restart = { max_attempts = 0 (0 = unlimited), initial_delay_ms = 1000,
                max_delay_ms = 60000, multiplier = 2.0, jitter = false },
    retry = { enabled = true | false,         -- false: no retry policy declared,
                                              -- and then max_attempts is 1
              max_attempts = 3, initial_delay_ms = 500, max_delay_ms = 30000,
              multiplier = 2.0, jitter = true,
              retry_on = { "Timeout", ... },  -- {} = every type not in no_retry_on
              no_retry_on = { "NilError", "TypeError", "ArgumentError" } },
    dlq = nil | { collection = "_fw_dlq", ttl_days = 30 (0 = forever),
                  include_original_document = true, include_stack_trace = true,
                  write_concern = "majority" | <integer >= 1> },
    timeout_ms = 30000,
    memory_limit_bytes = 268435456,
    handlers = { insert = f, update = f, replace = f, delete = f, change = f },
                                              -- only those declared; dispatch
                                              -- handlers[op] or handlers.change
    on_error = f | nil,
  }

  Integers are Lua integers (lua_isinteger), multipliers are floats. The
  tables are fresh copies except pipeline stages and functions.
]]

local duration = require("flowwarden.duration")
local errors = require("flowwarden.errors")

local M = {}

M.DEFAULT_URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"

-- Seeds 001 (RetryPolicy) and 002 (DeadLetterQueue), issue 3 (checkpoint,
-- restart, change-stream options) and issue 4 (budgets), already normalized.
M.SEED = {
  full_document = "default",
  full_document_before_change = "off",
  checkpoint = {
    save_every = 1, save_interval_ms = 5000, idle_heartbeat_ms = 300000,
    start_position = "resume", on_history_lost = "fail",
  },
  restart = {
    max_attempts = 0, initial_delay_ms = 1000, max_delay_ms = 60000,
    multiplier = 2.0, jitter = false,
  },
  retry = {
    max_attempts = 3, initial_delay_ms = 500, max_delay_ms = 30000,
    multiplier = 2.0, jitter = true,
    retry_on = {}, no_retry_on = { "NilError", "TypeError", "ArgumentError" },
  },
  dlq = {
    enabled = true, collection = "_fw_dlq", ttl_days = 30,
    include_original_document = true, include_stack_trace = true,
    write_concern = "majority",
  },
  timeout_ms = 30000,
  memory_limit_bytes = 256 * 1024 * 1024,
}

-- Below this a Lua state cannot even load the library and a script.
M.MIN_MEMORY_LIMIT = 1024 * 1024

M.OPERATION_TYPES = {
  "insert", "update", "replace", "delete", "drop", "rename", "dropDatabase", "invalidate",
}
M.HANDLER_KEYS = { "on_insert", "on_update", "on_replace", "on_delete", "on_change" }

local STREAM_KEYS = {
  "name", "database", "collection", "operation_types", "pipeline", "full_document",
  "full_document_before_change", "checkpoint", "restart", "retry", "dlq", "timeout",
  "memory_limit", "on_insert", "on_update", "on_replace", "on_delete", "on_change", "on_error",
}
local DEFAULTS_KEYS = {
  "database", "uri", "retry", "dlq", "checkpoint", "restart", "timeout", "memory_limit",
}

---------------------------------------------------------------------------
-- Text helpers

local function quote(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' or c == "\\" then
      return "\\" .. c
    end
    return string.format("\\%d", c:byte())
  end) .. '"'
end

-- How a value appears in a message: strings quoted, numbers and booleans as
-- written, anything else by its type.
local function repr(v)
  local t = type(v)
  if t == "string" then
    return quote(v)
  elseif t == "number" or t == "boolean" or t == "nil" then
    return tostring(v)
  end
  return "a " .. t
end
M.repr = repr

local function squash(s)
  return (s:lower():gsub("[_%-%s]", ""))
end

-- Optimal string alignment distance (Levenshtein plus transpositions).
local function distance(a, b)
  local d = {}
  for i = 0, #a do
    d[i] = { [0] = i }
  end
  for j = 0, #b do
    d[0][j] = j
  end
  for i = 1, #a do
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      local v = math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
      if i > 1 and j > 1 and a:byte(i) == b:byte(j - 1) and a:byte(i - 1) == b:byte(j) then
        v = math.min(v, d[i - 2][j - 2] + 1)
      end
      d[i][j] = v
    end
  end
  return d[#a][#b]
end

-- The candidate `word` was most likely meant to be, or nil. Case, "_" and "-"
-- are ignored first, so "maxAttempts" finds "max_attempts".
function M.suggest(word, candidates)
  if type(word) ~= "string" then
    return nil
  end
  local sw = squash(word)
  for _, c in ipairs(candidates) do
    if squash(c) == sw then
      return c
    end
  end
  local best, best_d
  local limit = math.max(1, math.min(2, #word // 4))
  for _, c in ipairs(candidates) do
    local d = distance(word:lower(), c:lower())
    if d <= limit and (not best_d or d < best_d) then
      best, best_d = c, d
    end
  end
  return best
end

local function join_quoted(list, last_sep)
  local q = {}
  for i, v in ipairs(list) do
    q[i] = quote(v)
  end
  if #q <= 1 or not last_sep then
    return table.concat(q, ", ")
  end
  return table.concat(q, ", ", 1, #q - 1) .. " " .. last_sep .. " " .. q[#q]
end

local function copy_list(list)
  local out = {}
  for i, v in ipairs(list) do
    out[i] = v
  end
  return out
end

local function copy(t)
  local out = {}
  for k, v in pairs(t) do
    out[k] = type(v) == "table" and copy_list(v) or v
  end
  return out
end

---------------------------------------------------------------------------
-- Error collection

local Ctx = {}
Ctx.__index = Ctx

local function new_ctx(where, subject)
  return setmetatable({ where = where, subject = subject, errors = {} }, Ctx)
end

function Ctx:fail(path, fmt, ...)
  local text = select("#", ...) > 0 and string.format(fmt, ...) or fmt
  local parts = { self.where, self.subject }
  if path and path ~= "" then
    parts[#parts + 1] = path
  end
  parts[#parts + 1] = text
  self.errors[#self.errors + 1] = table.concat(parts, ": ")
end

local function join_path(prefix, key)
  if prefix == nil or prefix == "" then
    return key
  end
  return prefix .. "." .. key
end

---------------------------------------------------------------------------
-- Field checks: check(ctx, path, value) -> true, normalized | false

local function int_min(min, note)
  note = note or ""
  return function(ctx, path, v)
    local i = math.type(v) == "integer" and v or (math.type(v) == "float" and math.tointeger(v))
    if not i or i < min then
      ctx:fail(path, "expected an integer >= %d%s, got %s", min, note, repr(v))
      return false
    end
    return true, i
  end
end

local function number_min(min)
  return function(ctx, path, v)
    if type(v) ~= "number" or v ~= v or v == math.huge or v < min then
      ctx:fail(path, "expected a number >= %d, got %s", min, repr(v))
      return false
    end
    return true, v + 0.0
  end
end

local function boolean(ctx, path, v)
  if type(v) ~= "boolean" then
    ctx:fail(path, "expected true or false, got %s", repr(v))
    return false
  end
  return true, v
end

local function enum(values)
  return function(ctx, path, v)
    for _, ok in ipairs(values) do
      if v == ok then
        return true, v
      end
    end
    local hint = ""
    local s = M.suggest(v, values)
    if s then
      hint = string.format("did you mean %s? ", quote(s))
    end
    ctx:fail(path, "invalid value %s (%sexpected %s)", repr(v), hint, join_quoted(values, "or"))
    return false
  end
end

local function positive_duration(ctx, path, v)
  if type(v) == "number" then
    ctx:fail(path, 'expected a duration string, got %s (a number has no unit: write "%ss" or "%sms")',
      repr(v), tostring(v), tostring(v))
    return false
  end
  if type(v) ~= "string" then
    ctx:fail(path, 'expected a duration string such as "30s", got %s', repr(v))
    return false
  end
  local ms, err = duration.parse(v)
  if not ms then
    ctx:fail(path, "%s", err)
    return false
  end
  if ms == 0 then
    ctx:fail(path, "must be greater than 0, got %s", repr(v))
    return false
  end
  return true, ms
end

local function memory_size(ctx, path, v)
  if type(v) ~= "string" then
    ctx:fail(path, 'expected a size string such as "256MB", got %s', repr(v))
    return false
  end
  local bytes, err = duration.parse_size(v)
  if not bytes then
    ctx:fail(path, "%s", err)
    return false
  end
  if bytes < M.MIN_MEMORY_LIMIT then
    ctx:fail(path, '%s is too small (minimum "1MB")', repr(v))
    return false
  end
  return true, bytes
end

local function non_empty_string(ctx, path, v)
  if type(v) ~= "string" or v == "" then
    ctx:fail(path, "expected a non-empty string, got %s", repr(v))
    return false
  end
  return true, v
end

local function database_name(ctx, path, v)
  if not non_empty_string(ctx, path, v) then
    return false
  end
  if v:find('[/\\%. "$%z%s]') or #v > 63 then
    ctx:fail(path, 'invalid database name %s (at most 63 bytes, without / \\ . " $, spaces or NUL)',
      repr(v))
    return false
  end
  return true, v
end

local function collection_name(ctx, path, v, omit_hint)
  if type(v) ~= "string" or v == "" then
    ctx:fail(path, "expected a non-empty string%s, got %s", omit_hint or "", repr(v))
    return false
  end
  if v:find("[$%z]") then
    ctx:fail(path, "invalid collection name %s (must not contain $ or NUL)", repr(v))
    return false
  end
  if v:sub(1, 7) == "system." then
    ctx:fail(path, "%s is a system collection, which change streams cannot watch", repr(v))
    return false
  end
  return true, v
end

local function write_concern(ctx, path, v)
  if type(v) == "string" and v ~= "" then
    return true, v
  end
  if math.type(v) == "integer" and v == 0 then
    ctx:fail(path, '0 (unacknowledged) is not allowed: the checkpoint may only pass an event once '
      .. 'its DLQ insert is acknowledged (use "majority" or an integer >= 1)')
    return false
  end
  if math.type(v) == "integer" and v >= 1 then
    return true, v
  end
  ctx:fail(path, 'expected "majority", a tag set name or an integer >= 1, got %s', repr(v))
  return false
end

-- Reports keys of `t` that are not 1..n; returns n.
local function check_array(ctx, path, t, what)
  local n = #t
  local extra = {}
  for k in pairs(t) do
    if math.type(k) ~= "integer" or k < 1 or k > n then
      extra[#extra + 1] = k
    end
  end
  table.sort(extra, function(a, b)
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(extra) do
    ctx:fail(path, "unexpected key %s (expected an array of %s)", repr(k), what)
  end
  return n, #extra == 0
end

local function type_list(ctx, path, v)
  if type(v) ~= "table" then
    ctx:fail(path, 'expected an array of error type names such as { "Timeout" }, got %s', repr(v))
    return false
  end
  local n, ok = check_array(ctx, path, v, "error type names")
  local out = {}
  for i = 1, n do
    local name = v[i]
    if errors.valid_type_name(name) then
      out[#out + 1] = name
    else
      ok = false
      ctx:fail(path .. "[" .. i .. "]",
        'invalid error type %s (expected a dotted name such as "Http.Timeout")', repr(name))
    end
  end
  return ok, out
end

---------------------------------------------------------------------------
-- Tables of settings

local CHECKPOINT = {
  { "save_every", int_min(1) },
  { "save_interval", positive_duration, "save_interval_ms" },
  { "idle_heartbeat", positive_duration, "idle_heartbeat_ms" },
  { "start_position", enum({ "resume", "latest" }) },
  { "on_history_lost", enum({ "fail", "resume_from_now" }) },
}
local RESTART = {
  { "max_attempts", int_min(0, " (0 = unlimited)") },
  { "initial_delay", positive_duration, "initial_delay_ms" },
  { "max_delay", positive_duration, "max_delay_ms" },
  { "multiplier", number_min(1) },
  { "jitter", boolean },
}
local RETRY = {
  { "max_attempts", int_min(1) },
  { "initial_delay", positive_duration, "initial_delay_ms" },
  { "max_delay", positive_duration, "max_delay_ms" },
  { "multiplier", number_min(1) },
  { "jitter", boolean },
  { "retry_on", type_list },
  { "no_retry_on", type_list },
}
local DLQ = {
  { "enabled", boolean },
  { "collection", collection_name },
  { "ttl_days", int_min(0, " (0 = keep forever)") },
  { "include_original_document", boolean },
  { "include_stack_trace", boolean },
  { "write_concern", write_concern },
}

local function key_names(schema)
  local names = {}
  for i, f in ipairs(schema) do
    names[i] = f[1]
  end
  return names
end

-- Reports every key of `t` that is not in `known`, sorted, with a hint.
local function check_unknown_keys(ctx, path, t, known)
  local is_known = {}
  for _, k in ipairs(known) do
    is_known[k] = true
  end
  local named, positional = {}, {}
  for k, v in pairs(t) do
    if type(k) == "string" then
      if not is_known[k] then
        named[#named + 1] = k
      end
    else
      positional[#positional + 1] = { k, v }
    end
  end
  table.sort(named)
  table.sort(positional, function(a, b)
    return tostring(a[1]) < tostring(b[1])
  end)
  for _, k in ipairs(named) do
    local s = M.suggest(k, known)
    if s then
      ctx:fail(path, "unknown key %s (did you mean %s?)", quote(k), quote(s))
    else
      ctx:fail(path, "unknown key %s (valid keys: %s)", quote(k), table.concat(known, ", "))
    end
  end
  for _, kv in ipairs(positional) do
    ctx:fail(path, "unexpected entry [%s] = %s (settings are written as key = value)",
      repr(kv[1]), repr(kv[2]))
  end
end

-- Validates a table of settings against `schema`; returns the normalized
-- values of the keys present (output names per the schema).
local function check_table(ctx, path, t, schema)
  check_unknown_keys(ctx, path, t, key_names(schema))
  local out = {}
  for _, f in ipairs(schema) do
    local key, check, out_key = f[1], f[2], f[3] or f[1]
    local v = t[key]
    if v ~= nil then
      local ok, norm = check(ctx, join_path(path, key), v)
      if ok then
        out[out_key] = norm
      end
    end
  end
  return out
end

-- seed <- defaults <- stream, attribute by attribute. `from` records which
-- layer each value came from, for messages about conflicting values.
local function merge(seed, defaults, own)
  local out, from = copy(seed), {}
  for k in pairs(seed) do
    from[k] = "seed"
  end
  for k, v in pairs(defaults or {}) do
    out[k] = type(v) == "table" and copy_list(v) or v
    from[k] = "defaults"
  end
  for k, v in pairs(own or {}) do
    out[k] = type(v) == "table" and copy_list(v) or v
    from[k] = "stream"
  end
  return out, from
end

local ORIGIN_NOTE = { seed = ", the default", defaults = ", from fw.defaults" }

-- max_delay >= initial_delay, reported by the layer that set one of them.
local function check_delays(ctx, prefix, eff, from, layer)
  if eff.max_delay_ms >= eff.initial_delay_ms then
    return
  end
  if from.max_delay_ms ~= layer and from.initial_delay_ms ~= layer then
    return
  end
  local function note(origin)
    return origin == layer and "" or ORIGIN_NOTE[origin]
  end
  local max_note = note(from.max_delay_ms)
  ctx:fail(prefix .. ".max_delay", 'must be >= %s.initial_delay ("%s"%s), got "%s"%s',
    prefix, duration.format(eff.initial_delay_ms), note(from.initial_delay_ms),
    duration.format(eff.max_delay_ms), max_note ~= "" and (" (" .. max_note:sub(3) .. ")") or "")
end

-- `retry` / `dlq`: true | false | table. Returns false when absent or false,
-- else the validated partial table ({} for true).
local function check_switchable(ctx, path, v, schema, what)
  if v == nil or v == false then
    return false
  end
  if v == true then
    return {}
  end
  if type(v) ~= "table" then
    ctx:fail(path, "expected true, false or a table of %s settings, got %s", what, repr(v))
    return false
  end
  return check_table(ctx, path, v, schema)
end

local function check_subtable(ctx, path, v, schema, what)
  if v == nil then
    return nil
  end
  if type(v) ~= "table" then
    ctx:fail(path, "expected a table of %s settings, got %s", what, repr(v))
    return nil
  end
  return check_table(ctx, path, v, schema)
end

---------------------------------------------------------------------------
-- Registry

local state

function M.reset()
  state = { decls = {}, streams = 0, defaults = nil, finished = false, script = nil }
end
M.reset()

-- "SCRIPT:LINE" of the first Lua frame at or above `level` (counted from the
-- function calling this one). Tail calls drop frames, so walking up finds the
-- call that led to the declaration rather than giving up.
local function caller_position(level)
  level = level + 1
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then
      return "?"
    end
    if info.what ~= "C" and info.currentline and info.currentline > 0 then
      local first = info.source:sub(1, 1)
      local src = (first == "@" or first == "=") and info.source:sub(2) or info.short_src
      return src .. ":" .. info.currentline
    end
    level = level + 1
  end
end

local function declare(kind, value, nargs)
  local where = caller_position(3)
  local decl = { kind = kind, value = value, nargs = nargs, where = where }
  if kind == "stream" then
    state.streams = state.streams + 1
    decl.index = state.streams
  end
  state.decls[#state.decls + 1] = decl
end

-- fw.stream { ... }: records the declaration; everything is checked by finish().
function M.stream(spec, ...)
  if state.finished then
    error("fw.stream: streams can only be declared while the script loads", 2)
  end
  declare("stream", spec, select("#", ...) + 1)
end

-- fw.defaults { ... }
function M.defaults(spec, ...)
  if state.finished then
    error("fw.defaults: defaults can only be set while the script loads", 2)
  end
  declare("defaults", spec, select("#", ...) + 1)
end

local function check_call_shape(ctx, decl, fn)
  if decl.nargs > 1 then
    ctx:fail(nil, "fw.%s takes one table: write fw.%s { ... } (not fw:%s)", fn, fn, fn)
    return false
  end
  if type(decl.value) ~= "table" then
    ctx:fail(nil, "expected a table: fw.%s { ... }, got %s", fn, repr(decl.value))
    return false
  end
  return true
end

local function validate_defaults(decl)
  local ctx = new_ctx(decl.where, "defaults")
  local out = {}
  if not check_call_shape(ctx, decl, "defaults") then
    return out, ctx.errors
  end
  local t = decl.value
  check_unknown_keys(ctx, nil, t, DEFAULTS_KEYS)
  local ok, v
  if t.database ~= nil then
    ok, v = database_name(ctx, "database", t.database)
    out.database = ok and v or nil
    -- Already reported here: streams relying on it should not say "missing".
    state.invalid_default_database = not ok
  end
  if t.uri ~= nil then
    if type(t.uri) == "string" and (t.uri:find("^mongodb://.") or t.uri:find("^mongodb%+srv://.")) then
      out.uri = t.uri
    else
      ctx:fail("uri", "expected a MongoDB connection string starting with mongodb:// or "
        .. "mongodb+srv://, got %s", repr(t.uri))
    end
  end
  for _, sub in ipairs({ { "retry", RETRY }, { "dlq", DLQ }, { "checkpoint", CHECKPOINT },
                         { "restart", RESTART } }) do
    local key = sub[1]
    if t[key] ~= nil and type(t[key]) ~= "table" then
      local hint = ""
      if key == "retry" or key == "dlq" then
        hint = string.format(" (defaults only hold settings; turn %s on per stream with %s = true)",
          key, key)
      end
      ctx:fail(key, "expected a table of %s settings, got %s%s", key, repr(t[key]), hint)
    elseif t[key] ~= nil then
      out[key] = check_table(ctx, key, t[key], sub[2])
    end
  end
  if t.timeout ~= nil then
    ok, v = positive_duration(ctx, "timeout", t.timeout)
    out.timeout_ms = ok and v or nil
  end
  if t.memory_limit ~= nil then
    ok, v = memory_size(ctx, "memory_limit", t.memory_limit)
    out.memory_limit_bytes = ok and v or nil
  end
  for _, sub in ipairs({ "retry", "restart" }) do
    if out[sub] then
      local eff, from = merge(M.SEED[sub], out[sub], nil)
      check_delays(ctx, sub, eff, from, "defaults")
    end
  end
  return out, ctx.errors
end

local function check_operation_types(ctx, v)
  if type(v) ~= "table" then
    ctx:fail("operation_types", 'expected an array of operation type names such as { "insert" }, got %s',
      repr(v))
    return nil
  end
  local n = check_array(ctx, "operation_types", v, "operation type names")
  if n == 0 then
    ctx:fail("operation_types", "the empty list matches no event (omit operation_types to receive "
      .. "every type)")
    return nil
  end
  local out, seen = {}, {}
  for i = 1, n do
    local path = "operation_types[" .. i .. "]"
    local op = v[i]
    local known = false
    for _, name in ipairs(M.OPERATION_TYPES) do
      known = known or op == name
    end
    if not known then
      local s = M.suggest(op, M.OPERATION_TYPES)
      ctx:fail(path, "unknown operation type %s (%sexpected one of %s)", repr(op),
        s and ("did you mean " .. quote(s) .. "? ") or "", table.concat(M.OPERATION_TYPES, ", "))
    elseif seen[op] then
      ctx:fail(path, "duplicate %s (already operation_types[%d])", quote(op), seen[op])
    else
      seen[op] = i
      out[#out + 1] = op
    end
  end
  return out
end

local function check_pipeline(ctx, v)
  if type(v) ~= "table" then
    ctx:fail("pipeline", 'expected an array of stages such as { { ["$match"] = { ... } } }, got %s',
      repr(v))
    return {}
  end
  local n = check_array(ctx, "pipeline", v, "stages")
  for i = 1, n do
    local path = "pipeline[" .. i .. "]"
    local stage = v[i]
    if type(stage) ~= "table" then
      ctx:fail(path, 'expected a stage table such as { ["$match"] = { ... } }, got %s', repr(stage))
    else
      local keys = {}
      for k in pairs(stage) do
        keys[#keys + 1] = tostring(k)
      end
      table.sort(keys)
      if #keys ~= 1 then
        ctx:fail(path, 'a stage has exactly one key, its name such as "$match" (found %d%s)', #keys,
          #keys > 0 and (": " .. table.concat(keys, ", ")) or "")
      elseif type(next(stage)) ~= "string" or keys[1]:sub(1, 1) ~= "$" then
        ctx:fail(path, 'stage name %s must start with "$", e.g. "$match"', repr(next(stage)))
      end
    end
  end
  return v
end

local function validate_stream(decl, defaults, opts, seen_names)
  local ctx = new_ctx(decl.where, string.format("stream #%d", decl.index))
  if not check_call_shape(ctx, decl, "stream") then
    return nil, ctx.errors
  end
  local t = decl.value
  local spec = { declared_at = decl.where }

  local name = t.name
  if name == nil then
    ctx:fail("name", 'missing (every stream needs a unique name, e.g. name = "order-watcher")')
  elseif type(name) ~= "string" or name == "" then
    ctx:fail("name", "expected a non-empty string, got %s", repr(name))
  elseif name:find("%c") then
    ctx:fail("name", "must not contain control characters, got %s", repr(name))
  else
    ctx.subject = string.format('stream "%s"', name)
    spec.name = name
    if seen_names[name] then
      ctx:fail("name", "duplicate stream name (first declared at %s)", seen_names[name])
    else
      seen_names[name] = decl.where
    end
  end

  check_unknown_keys(ctx, nil, t, STREAM_KEYS)

  local ok, v
  if t.database ~= nil then
    ok, v = database_name(ctx, "database", t.database)
    spec.database, spec.database_source = v, "stream"
  elseif defaults.database then
    spec.database, spec.database_source = defaults.database, "defaults"
  elseif opts.default_database then
    spec.database, spec.database_source = opts.default_database, "uri"
  elseif not state.invalid_default_database then
    ctx:fail("database", "missing (set database in this stream, in fw.defaults { database = ... } "
      .. "or in the URI path, e.g. mongodb://127.0.0.1:27017/shop)")
  end

  if t.collection ~= nil then
    ok, v = collection_name(ctx, "collection", t.collection, " (omit collection to watch the whole database)")
    spec.collection = ok and v or nil
  end
  if t.operation_types ~= nil then
    spec.operation_types = check_operation_types(ctx, t.operation_types)
  end
  spec.pipeline = t.pipeline ~= nil and check_pipeline(ctx, t.pipeline) or {}

  spec.full_document = M.SEED.full_document
  if t.full_document ~= nil then
    ok, v = enum({ "default", "updateLookup", "whenAvailable", "required" })(ctx, "full_document",
      t.full_document)
    spec.full_document = ok and v or spec.full_document
  end
  spec.full_document_before_change = M.SEED.full_document_before_change
  if t.full_document_before_change ~= nil then
    ok, v = enum({ "off", "whenAvailable", "required" })(ctx, "full_document_before_change",
      t.full_document_before_change)
    spec.full_document_before_change = ok and v or spec.full_document_before_change
  end

  local own = check_subtable(ctx, "checkpoint", t.checkpoint, CHECKPOINT, "checkpoint")
  spec.checkpoint = merge(M.SEED.checkpoint, defaults.checkpoint, own)

  own = check_subtable(ctx, "restart", t.restart, RESTART, "restart")
  local from
  spec.restart, from = merge(M.SEED.restart, defaults.restart, own)
  check_delays(ctx, "restart", spec.restart, from, "stream")

  own = check_switchable(ctx, "retry", t.retry, RETRY, "retry")
  spec.retry, from = merge(M.SEED.retry, defaults.retry, own or nil)
  if own then
    spec.retry.enabled = true
    check_delays(ctx, "retry", spec.retry, from, "stream")
  else
    spec.retry.enabled = false
    spec.retry.max_attempts = 1
  end

  own = check_switchable(ctx, "dlq", t.dlq, DLQ, "dlq")
  if own then
    local dlq = merge(M.SEED.dlq, defaults.dlq, own)
    if dlq.enabled then
      dlq.enabled = nil
      spec.dlq = dlq
    end
  end

  spec.timeout_ms = defaults.timeout_ms or M.SEED.timeout_ms
  if t.timeout ~= nil then
    ok, v = positive_duration(ctx, "timeout", t.timeout)
    spec.timeout_ms = ok and v or spec.timeout_ms
  end
  spec.memory_limit_bytes = defaults.memory_limit_bytes or M.SEED.memory_limit_bytes
  if t.memory_limit ~= nil then
    ok, v = memory_size(ctx, "memory_limit", t.memory_limit)
    spec.memory_limit_bytes = ok and v or spec.memory_limit_bytes
  end

  spec.handlers = {}
  local any_handler = false
  for _, key in ipairs(M.HANDLER_KEYS) do
    local f = t[key]
    if f ~= nil then
      any_handler = true
      if type(f) == "function" then
        spec.handlers[key:sub(4)] = f
      else
        ctx:fail(key, "expected a function, got %s", repr(f))
      end
    end
  end
  if not any_handler then
    ctx:fail("handlers", "none declared (define at least one of %s)",
      table.concat(M.HANDLER_KEYS, ", "))
  end
  if t.on_error ~= nil then
    if type(t.on_error) == "function" then
      spec.on_error = t.on_error
    else
      ctx:fail("on_error", "expected a function(err, ctx), got %s", repr(t.on_error))
    end
  end

  if #ctx.errors > 0 then
    return nil, ctx.errors
  end
  return spec, ctx.errors
end

-- "shop" from "mongodb://user:pw@h1,h2/shop?replicaSet=rs0", or nil.
function M.uri_database(uri)
  local rest = uri:match("^mongodb%+srv://(.*)$") or uri:match("^mongodb://(.*)$")
  local path = rest and rest:match("^[^/?]*/([^?]*)")
  if not path or path == "" then
    return nil
  end
  return (path:gsub("%%(%x%x)", function(h)
    return string.char(tonumber(h, 16))
  end))
end

local FINISH_OPTIONS = { uri = "string", default_database = "string", script = "string" }

-- Validates everything the script declared; see the top of this file.
-- Declarations are closed afterwards: fw.stream raises from then on.
function M.finish(opts)
  opts = opts or {}
  for k, v in pairs(opts) do
    if FINISH_OPTIONS[k] ~= type(v) then
      error(string.format("config.finish: bad option %s = %s", tostring(k), repr(v)), 2)
    end
  end
  if state.finished then
    error("config.finish: already called (config.reset() starts over)", 2)
  end
  state.finished = true

  local per_decl = {}
  local defaults, defaults_at = {}, nil
  for i, decl in ipairs(state.decls) do
    if decl.kind == "defaults" then
      if defaults_at then
        per_decl[i] = { string.format("%s: defaults: fw.defaults called again (first called at %s; "
          .. "merge them into one fw.defaults { ... })", decl.where, defaults_at) }
      else
        defaults_at = decl.where
        defaults, per_decl[i] = validate_defaults(decl)
      end
    end
  end

  local cfg = { defaults = defaults, defaults_declared_at = defaults_at, streams = {} }
  if opts.uri then
    cfg.uri, cfg.uri_source = opts.uri, "option"
  elseif defaults.uri then
    cfg.uri, cfg.uri_source = defaults.uri, "script"
  else
    cfg.uri, cfg.uri_source = M.DEFAULT_URI, "default"
  end
  cfg.default_database = opts.default_database or M.uri_database(cfg.uri)
  local stream_opts = { default_database = cfg.default_database }

  local seen_names = {}
  for i, decl in ipairs(state.decls) do
    if decl.kind == "stream" then
      local spec
      spec, per_decl[i] = validate_stream(decl, defaults, stream_opts, seen_names)
      if spec then
        cfg.streams[#cfg.streams + 1] = spec
      end
    end
  end

  local errs = {}
  for i = 1, #state.decls do
    for _, e in ipairs(per_decl[i] or {}) do
      errs[#errs + 1] = e
    end
  end
  if state.streams == 0 and not state.load_failed then
    errs[#errs + 1] = string.format("%s: no streams declared (declare at least one with "
      .. "fw.stream { name = ..., on_change = function(ctx) ... end })",
      opts.script or state.script or "script")
  end
  if #errs > 0 then
    return nil, errs
  end
  return cfg
end

-- Runs a compiled script chunk and finishes. A load-time error is reported
-- after the errors of the declarations made before it.
local function run(chunk, script, opts)
  state.script = script
  local ok, err = pcall(chunk)
  -- A script that stopped early may not have reached its fw.stream calls.
  state.load_failed = not ok
  local opts2 = {}
  for k, v in pairs(opts or {}) do
    opts2[k] = v
  end
  opts2.script = opts2.script or script
  local cfg, errs = M.finish(opts2)
  if ok then
    return cfg, errs
  end
  local text
  if type(err) == "string" then
    text = err
  else
    local c = errors.classify(err)
    text = string.format("%s: %s", c.where or script, errors.format({ type = c.type, message = c.message }))
  end
  if not text:find("^[^\n]-:%d+: ") then
    text = script .. ": " .. text
  end
  errs = errs or {}
  errs[#errs + 1] = text
  return nil, errs
end

-- Loads and runs the script at `path` in this Lua state, then finish(opts).
-- Modules next to the script can be required. Returns cfg, or nil and errors.
function M.load_file(path, opts)
  M.reset()
  local dir = path:match("^(.*)/[^/]*$") or "."
  local entry = dir .. "/?.lua;" .. dir .. "/?/init.lua;"
  if package.path:sub(1, #entry) ~= entry then
    package.path = entry .. package.path
  end
  local chunk, err = loadfile(path, "t")
  if not chunk then
    return nil, { err }
  end
  return run(chunk, path, opts)
end

-- Same as load_file for a script held in a string; `chunkname` names it in
-- messages (a leading "@" is stripped, as Lua does for files).
function M.load_string(source, chunkname, opts)
  M.reset()
  local chunk, err = load(source, "@" .. chunkname:gsub("^@", ""), "t")
  if not chunk then
    return nil, { err }
  end
  return run(chunk, (chunkname:gsub("^@", "")), opts)
end

return M
