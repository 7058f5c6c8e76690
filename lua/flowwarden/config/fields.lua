--[[
flowwarden.config.fields: the pieces flowwarden.config validates with. Key
lists, the schema of each settings table (checkpoint, restart, retry, dlq),
text helpers for messages, and field checks.

A field check is check(ctx, path, value) -> true, normalized | false: on
failure it has already recorded a message through ctx:fail(path, ...), so
the caller only decides what to keep. ctx comes from new_ctx(where, subject)
and collects "WHERE: SUBJECT: PATH: what is wrong" lines in ctx.errors.
]]

local duration = require("flowwarden.duration")
local errors = require("flowwarden.errors")

local M = {}

-- Below this a Lua state cannot even load the library and a script.
M.MIN_MEMORY_LIMIT = 1024 * 1024

M.OPERATION_TYPES = {
  "insert", "update", "replace", "delete", "drop", "rename", "dropDatabase", "invalidate",
}
M.HANDLER_KEYS = { "on_insert", "on_update", "on_replace", "on_delete", "on_change", "on_snapshot" }

local STREAM_KEYS = {
  "name", "database", "collection", "operation_types", "pipeline", "full_document",
  "full_document_before_change", "checkpoint", "restart", "retry", "dlq", "timeout",
  "memory_limit", "split_large_events", "oversize", "oversize_threshold", "lanes", "circuit",
  "rate_limit", "partitions", "on_insert",
  "on_update", "on_replace", "on_delete", "on_change", "on_error", "batch", "on_batch",
  "on_snapshot", "snapshot", "exactly_once",
}
local DEFAULTS_KEYS = {
  "database", "uri", "retry", "dlq", "checkpoint", "restart", "timeout", "memory_limit", "state",
  "http", "admin", "ha",
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

-- Optimal string alignment distance (Levenshtein plus swaps of two
-- neighbours), as fw_edit_distance in C: every "did you mean" measures with it.
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

M.distance = distance

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

-- A check for a size string (e.g. "64MB") of min bytes or more, and at most
-- max when given; example names a valid value, min_text / max_text the
-- bounds as the messages spell them.
local function size_between(example, min, min_text, max, max_text)
  return function(ctx, path, v)
    if type(v) ~= "string" then
      ctx:fail(path, 'expected a size string such as "%s", got %s', example, repr(v))
      return false
    end
    local bytes, err = duration.parse_size(v)
    if not bytes then
      ctx:fail(path, "%s", err)
      return false
    end
    if max and (bytes < min or bytes > max) then
      ctx:fail(path, '%s is out of range (from "%s" to "%s")', repr(v), min_text, max_text)
      return false
    elseif bytes < min then
      ctx:fail(path, '%s is too small (minimum "%s")', repr(v), min_text)
      return false
    end
    return true, bytes
  end
end

-- fw.state's bound: at least 1KB (an entry costs 64 bytes of bookkeeping
-- plus its key and string value).
local state_size = size_between("64MB", 1024, "1KB")

-- oversize_threshold: an event size in bytes, from 1KB up to the 16MB
-- (16 MiB) BSON limit a change event can never exceed.
local event_size = size_between("16320KB", 1024, "1KB", 16 * 1024 * 1024, "16MB")

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

-- checkpoint.start_at (issue 28): where in the server's history a stream
-- without a checkpoint starts (startAtOperationTime). An RFC 3339 date
-- ("2026-11-26T10:00:00Z": its whole second, as a Timestamp's t), a
-- Timestamp (fw.timestamp(t, i)) or a table { t = ..., i = ... }; normalized
-- to the integer (t << 32) | i, as the C side reads it.
local UINT32_MAX = 4294967295
local START_AT_EXAMPLE = '"2026-11-26T10:00:00Z", fw.timestamp(t, i) or { t = ..., i = ... }'

local function timestamp_part(ctx, path, v, name, min)
  local n = math.type(v) == "integer" and v or (math.type(v) == "float" and math.tointeger(v))
  if not n or n < min or n > UINT32_MAX then
    ctx:fail(path, "%s must be an integer from %d to %d, got %s", name, min, UINT32_MAX, repr(v))
    return nil
  end
  return n
end

local function start_at(ctx, path, v)
  local t, i
  if type(v) == "string" then
    local ms = require("flowwarden.json_ext").ms_from_iso(v)
    if not ms or ms < 1000 or ms // 1000 > UINT32_MAX then
      ctx:fail(path, "expected an RFC 3339 date such as \"2026-11-26T10:00:00Z\" (with Z or an "
        .. "offset), got %s", repr(v))
      return false
    end
    t, i = ms // 1000, 0
  elseif type(v) == "userdata" and getmetatable(v) == "flowwarden.bson_value"
      and v.type == "timestamp" then
    t, i = v.t, v.i
  elseif type(v) == "table" then
    for k in pairs(v) do
      if k ~= "t" and k ~= "i" then
        ctx:fail(path, "unknown key %s (a Timestamp has t and i)", repr(k))
        return false
      end
    end
    t = timestamp_part(ctx, path, v.t, "t", 1)
    i = t and timestamp_part(ctx, path, v.i == nil and 0 or v.i, "i", 0)
    if not t or not i then
      return false
    end
  else
    ctx:fail(path, "expected %s, got %s", START_AT_EXAMPLE, repr(v))
    return false
  end
  if t == 0 then
    ctx:fail(path, "a Timestamp with t = 0 is not a point in the server's history")
    return false
  end
  return true, (t << 32) | i
end

-- (t, i) of a normalized start_at.
function M.start_at_parts(n)
  return (n >> 32) & UINT32_MAX, n & UINT32_MAX
end

---------------------------------------------------------------------------
-- Tables of settings

-- checkpoint.max_unsaved: a duration, or 0 ("0s", "0ms" or the number 0)
-- for none (the count bound alone).
local function allowance_duration(ctx, path, v)
  if v == 0 then
    return true, 0
  end
  if type(v) == "string" and duration.parse(v) == 0 then
    return true, 0
  end
  return positive_duration(ctx, path, v)
end
local CHECKPOINT = {
  { "save_every", int_min(1) },
  { "max_unsaved", allowance_duration, "max_unsaved_ms" },
  { "save_interval", positive_duration, "save_interval_ms" },
  { "idle_heartbeat", positive_duration, "idle_heartbeat_ms" },
  { "start_position", enum({ "resume", "latest", "snapshot" }) },
  { "on_history_lost", enum({ "fail", "resume_from_now" }) },
  { "mode", enum({ "async", "sync" }) },
  { "start_at", start_at },
}
-- Incremental snapshots (issue 28, flowwarden.snapshot_settings).
local function pause_duration(ctx, path, v)
  if v == "0ms" or v == "0s" then
    return true, 0
  end
  return positive_duration(ctx, path, v)
end
local SNAPSHOT = {
  { "chunk_size", int_min(1) },
  { "pause", pause_duration, "pause_ms" },
  { "read_preference", enum({ "primary", "primaryPreferred", "secondary", "secondaryPreferred",
    "nearest" }) },
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
  -- Issue 29: "deferred" stores a failed event in the DLQ as SCHEDULED and
  -- retries it later from the stream's thread (docs/retry-and-dlq.md).
  { "mode", enum({ "blocking", "deferred" }) },
}
-- A connection name as fw.connection declares it ("default" is the run URI);
-- whether it was declared is checked once every declaration is known.
local function connection_name(ctx, path, v)
  if type(v) ~= "string" or not v:match("^[%a_][%w_%-]*$") then
    ctx:fail(path, 'expected a connection name such as "audit" (letters, digits, _ and -), got %s',
      repr(v))
    return false
  end
  return true, v
end

-- allow_hosts: host names ("hooks.example"), "*.suffix" wildcards or IP
-- addresses, compared case-insensitively.
local function host_list(ctx, path, v)
  if type(v) ~= "table" then
    ctx:fail(path, 'expected an array of host names such as { "hooks.example", "*.internal" }, got %s',
      repr(v))
    return false
  end
  local n, ok = check_array(ctx, path, v, "host names")
  local out = {}
  for i = 1, n do
    local h = v[i]
    if type(h) ~= "string" or h == "" or h:find("[%s/@:?#]") and not h:match("^%[?[%x:]+%]?$") then
      ctx:fail(path .. "[" .. i .. "]", 'expected a host name, "*.domain" or an IP address, got %s',
        repr(h))
      ok = false
    elseif h:find("*", 1, true) and not h:match("^%*%.[^*]+$") then
      ctx:fail(path .. "[" .. i .. "]", 'a wildcard must be a whole first label, as in "*.internal", got %s',
        repr(h))
      ok = false
    else
      out[#out + 1] = h:lower():gsub("^%[(.*)%]$", "%1")
    end
  end
  return ok, out
end

local function enqueue_policy(ctx, path, v)
  if type(v) ~= "function" then
    ctx:fail(path, "expected a function(letter, err) returning fw.dlq.requeue { ... } or "
      .. "fw.dlq.evict(), got %s", repr(v))
    return false
  end
  return true, v
end

-- dlq.reprocess = { every = "10m" | cron = "*/15 * * * *", batch_size = 100,
-- max_attempts = 5 }: automatic replay rounds inside `run` (issue 12).
local REPROCESS = {
  { "every", positive_duration, "every_ms" },
  { "cron", function(ctx, path, v)
      local cron = require("flowwarden.cron")
      local s, err = cron.parse(v)
      if not s then
        ctx:fail(path, "%s", err)
        return false
      end
      if not cron.next(s, os.time()) then
        ctx:fail(path, '"%s" never matches a date', v)
        return false
      end
      return true, v
    end },
  { "batch_size", int_min(1) },
  { "max_attempts", int_min(1) },
}

local function reprocess(ctx, path, v)
  if type(v) ~= "table" then
    ctx:fail(path, 'expected a table such as { every = "10m" } or { cron = "*/15 * * * *" }, got %s',
      repr(v))
    return false
  end
  local before = #ctx.errors
  local out = M.check_table(ctx, path, v, REPROCESS)
  if v.every ~= nil and v.cron ~= nil then
    ctx:fail(path, "set either every or cron, not both")
  elseif v.every == nil and v.cron == nil then
    ctx:fail(path, 'missing every or cron (e.g. every = "10m" or cron = "*/15 * * * *")')
  end
  if #ctx.errors > before then
    return false
  end
  out.batch_size = out.batch_size or 100
  out.max_attempts = out.max_attempts or 5
  return true, out
end

-- dlq.sequence_key = function(ctx) return <a value> end (issue 14): which
-- sequence an event belongs to; the default is the event's documentKey.
local function sequence_key(ctx, path, v)
  if type(v) ~= "function" then
    ctx:fail(path, "expected a function(ctx) returning the event's sequence key "
      .. "(e.g. function(ctx) return ctx:full_document().customer_id end), got %s", repr(v))
    return false
  end
  return true, v
end

local DLQ = {
  { "enabled", boolean },
  { "collection", collection_name },
  { "ttl_days", int_min(0, " (0 = keep forever)") },
  { "include_original_document", boolean },
  { "include_stack_trace", boolean },
  { "write_concern", write_concern },
  { "connection", connection_name },
  { "enqueue_policy", enqueue_policy },
  { "reprocess", reprocess },
  { "sequenced", boolean },
  { "sequence_key", sequence_key },
  { "max_sequences", int_min(1) },
  { "max_sequence_size", int_min(1) },
  -- Issue 15: "memory" keeps entries in the process (tests); lost at exit.
  { "store", enum({ "mongo", "memory" }) },
}

local HTTP = {
  { "allow_hosts", host_list },
}

local STATE = {
  { "max_bytes", state_size },
}

-- High availability (fw.defaults only, issue 17): one leader per stream,
-- holding a lease it renews every lease / 3. Under a second, a renewal's
-- round trip and the safety margin would eat the lease; over an hour, a
-- crashed leader's streams would wait that long for a standby.
M.MIN_LEASE_MS = 1000
M.MAX_LEASE_MS = 60 * 60 * 1000

local function lease_duration(ctx, path, v)
  local ok, ms = positive_duration(ctx, path, v)
  if not ok then
    return false
  end
  if ms < M.MIN_LEASE_MS or ms > M.MAX_LEASE_MS then
    ctx:fail(path, '%s is out of range (from "1s" to "1h"; a crashed holder\'s streams are taken '
      .. 'over within lease + 250 ms, lease + lease / 3 + 250 ms with mode = "shared")', repr(v))
    return false
  end
  return true, ms
end

local HA = {
  { "mode", enum({ "none", "leader", "shared" }) },  -- "shared": issue 31
  { "lease", lease_duration, "lease_ms" },
}

-- The admin endpoint (fw.defaults only). The C host checks the address and
-- the token together (core.admin_check); here only their types.
local ADMIN = {
  { "listen", non_empty_string },
  { "token", non_empty_string },
}

local function key_names(schema)
  local names = {}
  for i, f in ipairs(schema) do
    names[i] = f[1]
  end
  return names
end

-- Reports every key of `t` that is not in `known`, sorted, with a hint.
local function check_unknown_keys(ctx, path, t, known, reported)
  local is_known = {}
  for _, k in ipairs(known) do
    is_known[k] = true
  end
  -- Keys the caller has already reported with a better message.
  for k in pairs(reported or {}) do
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
-- Operation types and pipelines

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

---------------------------------------------------------------------------
-- Exports (flowwarden.config uses these; M.repr and M.suggest are set above)

M.STREAM_KEYS = STREAM_KEYS
M.DEFAULTS_KEYS = DEFAULTS_KEYS
M.CHECKPOINT = CHECKPOINT
M.SNAPSHOT = SNAPSHOT
M.RESTART = RESTART
M.RETRY = RETRY
M.DLQ = DLQ
M.REPROCESS = REPROCESS
M.STATE = STATE
M.ADMIN = ADMIN
M.HA = HA
M.HTTP = HTTP
M.connection_name = connection_name
M.quote = quote
M.join_quoted = join_quoted
M.copy = copy
M.copy_list = copy_list
M.new_ctx = new_ctx
M.join_path = join_path
M.int_min = int_min
M.number_min = number_min
M.boolean = boolean
M.enum = enum
M.positive_duration = positive_duration
M.memory_size = memory_size
M.event_size = event_size
M.state_size = state_size
M.non_empty_string = non_empty_string
M.database_name = database_name
M.collection_name = collection_name
M.write_concern = write_concern
M.check_array = check_array
M.type_list = type_list
M.key_names = key_names
M.check_unknown_keys = check_unknown_keys
M.check_table = check_table
M.merge = merge
M.check_delays = check_delays
M.check_switchable = check_switchable
M.check_subtable = check_subtable
M.check_operation_types = check_operation_types
M.check_pipeline = check_pipeline

return M
