--[[
flowwarden.describe: the text `flowwarden check` prints for a valid script.

  describe.text(cfg)      the whole report: URI line, one block per stream,
                          then the warnings (see below); ends with "\n"
  describe.stream(spec)   one block: 'stream "name"' then one setting per
                          line, dotted names in a fixed order, every default
                          filled in
  describe.warnings(cfg)  array of "SCRIPT:LINE: warning: stream \"x\": ..."
                          for settings that are valid but probably not meant
                          (no DLQ, handlers that can never run, ...), then
                          "SCRIPT:LINE: warning: ..." for the script as a whole
                          (send_to_dlq called with no DLQ anywhere, a
                          quoted error type close to a built-in one); the
                          host may also log them when `run` starts
  describe.text(cfg) also returns the number of warnings (check --strict
  fails when there is one)

`cfg` is what flowwarden.config.finish() returns. The output is stable: the
same script always gives the same text, so tests and diffs can rely on it.
]]

local config = require("flowwarden.config")
local partitions = require("flowwarden.config.partitions")
local duration = require("flowwarden.duration")
local errors = require("flowwarden.errors")
local cron = require("flowwarden.cron")
local dlq = require("flowwarden.dlq")
local fields = require("flowwarden.config.fields")

local M = {}

-- Seconds since the epoch, for dlq.reprocess.next_runs (tests replace it).
M.now = os.time

local KEY_WIDTH = 31

local function number_text(x)
  if math.type(x) == "float" and x == math.floor(x) then
    return string.format("%.1f", x)
  end
  return tostring(x)
end

local function list_text(list, empty)
  if not list or #list == 0 then
    return empty
  end
  return table.concat(list, ", ")
end

-- URI options whose values are secrets (lower case).
local SECRET_OPTIONS = { tlscertificatekeyfilepassword = true,
                         sslclientcertificatekeypassword = true,
                         password = true }  -- a PostgreSQL URI's ?password=

-- Hides the password of "mongodb://user:secret@host" as "user:***", as
-- fw_log_redact_uri does: the userinfo runs to the last '@' (a password that
-- is not percent-encoded may hold '/', '?' or '@'), and the values of the
-- secret options are hidden too.
function M.redact_uri(uri)
  local shown = uri:gsub("^(%a[%w%+%.%-]*://)(.*)@", function(scheme, userinfo)
    local user = userinfo:match("^([^:]*):")
    if not user and scheme:find("^redis") then
      return scheme .. "***@"  -- redis://secret@host: a password without a user
    end
    return scheme .. (user and (user .. ":***") or userinfo) .. "@"
  end)
  shown = shown:gsub("([?&])([%w]+)=([^&]*)", function(sep, key, value)
    if SECRET_OPTIONS[key:lower()] then
      return sep .. key .. "=***"
    end
    return sep .. key .. "=" .. value
  end)
  return shown
end

-- Delays before attempts 2..max_attempts, as the seed's formula gives them
-- without jitter: min(initial_delay * multiplier^(n-1), max_delay).
function M.retry_delays_ms(retry)
  local delays = {}
  for n = 1, retry.max_attempts - 1 do
    local d = retry.initial_delay_ms * retry.multiplier ^ (n - 1)
    delays[n] = math.floor(math.min(d, retry.max_delay_ms) + 0.5)
  end
  return delays
end

local function schedule_text(retry)
  local delays = M.retry_delays_ms(retry)
  local shown = {}
  for i = 1, math.min(#delays, 8) do
    shown[i] = duration.format(delays[i])
  end
  local text = table.concat(shown, ", ")
  if #delays > 8 then
    text = text .. string.format(", ... (%d retries)", #delays)
  end
  if retry.jitter then
    text = text .. " (each +/-20% jitter)"
  end
  return text
end

-- Issue 31: a partitioned stream is described once, by its unit 0 (config/partitions.lua).
local function partitions_text(spec)
  local n = spec.partitions
  return string.format("%d (units %s .. %s, 0-based: each its own change stream and checkpoint, "
    .. "keys split by $toHashedIndexKey of documentKey._id, in order per key; MongoDB 7.0+)",
    n, partitions.unit_name(spec.stream, 0, n), partitions.unit_name(spec.stream, n - 1, n))
end

local SOURCE_NOTE = { stream = "", defaults = " (from fw.defaults)", uri = " (from the URI)",
                      run = ": none in the script, and check was given no URI" }

function M.stream(spec)
  local lines = { string.format('stream "%s"', spec.stream or spec.name) }
  local function add(key, value)
    lines[#lines + 1] = string.format("  %-" .. KEY_WIDTH .. "s%s", key, value)
  end
  local ms = duration.format

  add("declared_at", spec.declared_at)
  add("database", spec.database .. SOURCE_NOTE[spec.database_source])
  add("collection", spec.collection or "(whole database)")
  add("operation_types", list_text(spec.operation_types, "(all)"))
  local stages = {}
  for i, stage in ipairs(spec.declared_pipeline or spec.pipeline) do
    stages[i] = tostring(next(stage))
  end
  add("pipeline", #stages == 0 and "(none)"
    or string.format("%d stage%s: %s", #stages, #stages == 1 and "" or "s", table.concat(stages, ", ")))
  add("full_document", spec.full_document)
  add("full_document_before_change", spec.full_document_before_change)
  add("split_large_events", tostring(spec.split_large_events))
  add("lanes", (spec.lanes or 1) == 1 and "1 (events handled one at a time, in order)"
    or string.format("%d (in order per key, keys in parallel)", spec.lanes))
  if spec.partitions then
    add("partitions", partitions_text(spec))
  end
  if spec.exactly_once_pg then
    add("exactly_once", string.format("{ connection = %q }: fw.pg statements on connection %q "
      .. "and the stream's position (in the position table there) commit in one SQL "
      .. "transaction per event (exactly once); fw.mongo writes and fw.pg on another connection "
      .. "fail the call; fw.mongo reads, fw.http, fw.state, fw.redis and dead letters stay at "
      .. "least once", spec.exactly_once_pg, spec.exactly_once_pg))
  elseif spec.exactly_once and spec.exactly_once_connection then
    local c = spec.exactly_once_connection
    add("exactly_once", string.format("{ connection = %q }: fw.mongo reads and writes on "
      .. "connection %q and the stream's checkpoint (in _fw_checkpoints there, database %q) "
      .. "commit in one transaction per %s (exactly once; the events of one source transaction "
      .. "together; a restart resumes from that checkpoint), and so does a dead letter when "
      .. "the DLQ is on that connection; fw.http, fw.state, fw.redis, fw.pg and a DLQ elsewhere "
      .. "stay at least once; fw.mongo on another connection (\"default\" too) fails the call",
      c, c, spec.database, spec.handlers.batch and "call of on_batch" or "event"))
  elseif spec.exactly_once then
    add("exactly_once", "true: fw.mongo reads and writes on the stream's own connection and the "
      .. "checkpoint commit in one transaction per "
      .. (spec.handlers.batch and "call of on_batch" or "event")
      .. " (exactly once; the events of one source transaction together), and so do a dead "
      .. "letter, a replay's or a deferred retry's resolution when the DLQ is on that connection; "
      .. "fw.http, fw.state, fw.redis, fw.pg and a DLQ elsewhere stay at least once; fw.mongo on "
      .. "another connection fails the call")
  end
  if spec.exactly_once and not spec.exactly_once_pg
      and spec.checkpoint.start_position == "snapshot" then
    add("exactly_once.snapshot", "each snapshot row's handler call commits its writes and the "
      .. "snapshot's progress past the row in one transaction (a restart resumes after the last "
      .. "committed row: no row applied twice)")
  end
  add("oversize", spec.oversize)
  add("oversize_threshold", duration.format_size(spec.oversize_threshold_bytes))
  require("flowwarden.config.outage").describe(spec, add)
  local handlers = {}
  for _, key in ipairs(config.HANDLER_KEYS) do
    if spec.handlers[key:sub(4)] then
      handlers[#handlers + 1] = key
    end
  end
  if spec.batch then
    handlers[#handlers + 1] = "on_batch"
    add("batch.max_events", tostring(spec.batch.max_events))
    add("batch.max_wait", ms(spec.batch.max_wait_ms))
  end
  add("handlers", table.concat(handlers, ", "))
  add("on_error", spec.on_error and "declared" or "(none)")
  add("timeout", ms(spec.timeout_ms))
  add("memory_limit", duration.format_size(spec.memory_limit_bytes))
  add("state.max_bytes", duration.format_size(spec.state.max_bytes))
  local ha = spec.ha or { mode = "none" }
  if ha.mode == "leader" or ha.mode == "shared" then
    add("ha.mode", ha.mode == "leader" and "leader (one instance at a time handles this stream)"
      or "shared (the instances share the units, each at most ceil(units / members))")
    -- The take-over bound (docs/operations.md, "Take-over time"): a standby
    -- reads a held lease at least every 250 ms; "shared" also waits for its
    -- next count of the members (every lease / 3) to raise its share.
    local takeover = ha.mode == "shared" and ha.lease_ms + ha.lease_ms // 3 + 250
      or ha.lease_ms + 250
    local clean = ha.mode == "shared" and ha.lease_ms // 3 + 250 or 250
    add("ha.lease", string.format("%s (renewed every %s; a crashed holder's %s taken over within "
      .. "%s, a stopped one's within %s)", ms(ha.lease_ms), ms(ha.lease_ms // 3),
      ha.mode == "shared" and "units are" or "stream is", ms(takeover), ms(clean)))
  else
    add("ha.mode", "none")
  end

  local c = spec.checkpoint
  add("checkpoint.save_every", tostring(c.save_every))
  add("checkpoint.save_interval", ms(c.save_interval_ms))
  add("checkpoint.idle_heartbeat", ms(c.idle_heartbeat_ms))
  add("checkpoint.start_position", c.start_position)
  if c.start_at then
    local t, i = require("flowwarden.config.fields").start_at_parts(c.start_at)
    add("checkpoint.start_at", string.format("%s = Timestamp(%d, %d) (without a checkpoint)",
      require("flowwarden.json_ext").iso_from_ms(t * 1000), t, i))
  end
  add("checkpoint.on_history_lost", c.on_history_lost)
  add("checkpoint.mode", c.mode)
  add("checkpoint.max_unsaved", c.max_unsaved_ms == 0 and "0 (the count bound alone)"
    or ms(c.max_unsaved_ms))
  local snap = spec.snapshot
  add("snapshot.chunk_size", tostring(snap.chunk_size))
  add("snapshot.pause", ms(snap.pause_ms))
  add("snapshot.read_preference", snap.read_preference)

  local r = spec.restart
  add("restart.max_attempts", r.max_attempts == 0 and "0 (unlimited)" or tostring(r.max_attempts))
  add("restart.initial_delay", ms(r.initial_delay_ms))
  add("restart.max_delay", ms(r.max_delay_ms))
  add("restart.multiplier", number_text(r.multiplier))
  add("restart.jitter", tostring(r.jitter))

  local t = spec.retry
  if not t.enabled then
    add("retry", "(none: one attempt per event)")
  else
    add("retry.mode", t.mode == "deferred"
      and "deferred (failed events wait in the DLQ as SCHEDULED; the stream goes on)"
      or "blocking (the stream waits out each retry)")
    add("retry.max_attempts", tostring(t.max_attempts))
    add("retry.initial_delay", ms(t.initial_delay_ms))
    add("retry.max_delay", ms(t.max_delay_ms))
    add("retry.multiplier", number_text(t.multiplier))
    add("retry.jitter", tostring(t.jitter))
    add("retry.retry_on", list_text(t.retry_on, "(any type not in no_retry_on)"))
    add("retry.no_retry_on", list_text(t.no_retry_on, "(none)"))
    if t.max_attempts > 1 then
      add("retry.delays", schedule_text(t))
    end
  end

  local d = spec.dlq
  if not d and spec.dlq_fallback then
    local f = spec.dlq_fallback
    add("dlq", string.format('(none; ctx:send_to_dlq writes to %s.%s, the dlq of stream "%s")',
      f.database, f.collection, f.stream))
  elseif not d then
    add("dlq", "(none)")
  else
    add("dlq.collection", d.collection)
    add("dlq.ttl_days", d.ttl_days == 0 and "0 (keep forever)" or tostring(d.ttl_days))
    add("dlq.include_original_document", tostring(d.include_original_document))
    add("dlq.include_stack_trace", tostring(d.include_stack_trace))
    add("dlq.write_concern", tostring(d.write_concern))
    add("dlq.connection", d.connection or "default")
    if d.store == "memory" then
      add("dlq.store", "memory (entries are kept in the process and lost when it exits: for tests, "
        .. "not for production)")
    end
    if d.enqueue_policy then
      add("dlq.enqueue_policy", "declared")
    end
    if d.sequenced then
      add("dlq.sequenced", string.format("true (key: %s; max_sequences %d, max_sequence_size %d)",
        d.sequence_key and "dlq.sequence_key" or "the documentKey's _id", d.max_sequences,
        d.max_sequence_size))
    end
    local r = d.reprocess
    if r then
      if r.every_ms then
        add("dlq.reprocess.every", ms(r.every_ms))
      else
        add("dlq.reprocess.cron", r.cron .. " (UTC)")
      end
      add("dlq.reprocess.batch_size", tostring(r.batch_size))
      add("dlq.reprocess.max_attempts", tostring(r.max_attempts))
      local runs = {}
      for i, t in ipairs(dlq.next_runs(r, M.now(), 3)) do
        runs[i] = cron.format(t)
      end
      add("dlq.reprocess.next_runs", list_text(runs, "(never)"))
    end
  end
  return table.concat(lines, "\n") .. "\n"
end

-- The built-in error type `name` was most likely meant to be, when it is
-- close to one (fields.suggest: case, or at most two edits) but is not one.
function M.near_builtin_type(name)
  for _, t in ipairs(errors.BUILTIN_TYPES) do
    if t == name then
      return nil
    end
  end
  return fields.suggest(name, errors.BUILTIN_TYPES)
end

local function stream_warnings(cfg, spec, out)
  local function warn(fmt, ...)
    out[#out + 1] = string.format('%s: warning: stream "%s": ' .. fmt, spec.declared_at, spec.stream or spec.name, ...)
  end
  local retry = spec.retry

  if spec.database_source == "run" then
    warn("database: none in the script; run takes it from the path of its --uri "
      .. "(mongodb://127.0.0.1:27017/shop) or FLOWWARDEN_URI, else set database in the stream or "
      .. "in fw.defaults (check --uri URI checks with that URI)")
  end
  if not spec.dlq then
    if retry.enabled then
      warn("no dlq: failed events will be lost after retries")
    else
      warn("no dlq: failed events will be lost on their first failure (no retry either)")
    end
  end
  if not retry.enabled and cfg.defaults.retry then
    warn("no retry: the retry settings in fw.defaults only apply to streams that set retry "
      .. "(retry = true)")
  end
  if not spec.dlq and cfg.defaults.dlq and cfg.defaults.dlq.enabled ~= false then
    warn("no dlq: the dlq settings in fw.defaults only apply to streams that set dlq (dlq = true)")
  end
  -- With "shared", "latest" means the group's start: a take-over resumes from the checkpoint
  -- of the group's run (docs/operations.md).
  if spec.ha and spec.ha.mode == "leader" and spec.checkpoint.start_position == "latest" then
    warn('checkpoint.start_position = "latest" with ha.mode = "leader": a standby taking over '
      .. "starts from now and skips what came since the leader's last event")
  end
  if retry.enabled and retry.max_attempts == 1 then
    warn("retry.max_attempts is 1: events are never retried")
  end
  if retry.enabled then
    for _, entry in ipairs(retry.retry_on) do
      local hit, by = errors.matches(entry, retry.no_retry_on)
      if hit then
        warn("retry.retry_on: %q is also matched by no_retry_on %q, which wins: never retried",
          entry, by)
      end
    end
  end

  local lists = { { "retry.retry_on", retry.enabled and retry.retry_on },
                  { "retry.no_retry_on", retry.enabled and retry.no_retry_on },
                  { "circuit.on", spec.circuit and spec.circuit.on } }
  for _, l in ipairs(lists) do
    for _, entry in ipairs(l[2] or {}) do
      local meant = M.near_builtin_type(entry)
      if meant then
        warn('%s: "%s" is not a built-in error type: did you mean "%s"? (a type nothing '
          .. "raises never matches)", l[1], entry, meant)
      end
    end
  end

  if spec.operation_types then
    local listed = {}
    for _, op in ipairs(spec.operation_types) do
      listed[op] = true
    end
    for _, op in ipairs({ "insert", "update", "replace", "delete" }) do
      if spec.handlers[op] and not listed[op] then
        warn('on_%s never runs: operation_types does not include "%s"', op, op)
      end
    end
    if spec.handlers.change then
      local reaches = false
      for _, op in ipairs(spec.operation_types) do
        reaches = reaches or not spec.handlers[op]
      end
      if not reaches then
        warn("on_change never runs: every type in operation_types has its own handler")
      end
    end
  end
end

-- "SCRIPT:LINE" of the first line of the script file that mentions
-- send_to_dlq, or nil. A textual search, not an analysis: it also finds the
-- name in comments and strings, and misses calls made by required modules
-- (good enough for a warning).
local function send_to_dlq_call(script)
  local f = script and io.open(script, "r")
  if not f then
    return nil
  end
  local n, found = 0, nil
  for line in f:lines() do
    n = n + 1
    if line:find("send_to_dlq", 1, true) then
      found = string.format("%s:%d", script, n)
      break
    end
  end
  f:close()
  return found
end

-- "SCRIPT:LINE: warning: ..." for each quoted dotted name in the script
-- that is close to a built-in error type but is not one, such as the
-- `err.type == "Http.Conect"` of an on_error (a textual search, as
-- send_to_dlq_call: names already warned about in `seen` are skipped, and
-- a type the script raises itself with fw.error is its own).
local function type_literal_warnings(script, seen, out)
  local f = script and io.open(script, "r")
  if not f then
    return
  end
  local text = f:read("a")
  f:close()
  local own = {}
  for name in text:gmatch("fw%.error%s*%(%s*[\"']([%w_.]+)[\"']") do
    own[name] = true
  end
  local n = 0
  for line in (text .. "\n"):gmatch("(.-)\n") do
    n = n + 1
    for _, q in ipairs({ '"', "'" }) do
      for name in line:gmatch(q .. "([%a_][%w_]*%.[%w_.]+)" .. q) do
        local meant = not seen[name] and not own[name] and M.near_builtin_type(name)
        if meant then
          seen[name] = true
          out[#out + 1] = string.format('%s:%d: warning: "%s" is not a built-in error type: '
            .. 'did you mean "%s"?', script, n, name, meant)
        end
      end
    end
  end
end

function M.warnings(cfg)
  local out = {}
  for _, spec in ipairs(cfg.streams) do
    if (spec.partition or 0) == 0 then
      stream_warnings(cfg, spec, out)
    end
  end
  local any_dlq = false
  for _, spec in ipairs(cfg.streams) do
    any_dlq = any_dlq or spec.dlq ~= nil
  end
  local where = not any_dlq and send_to_dlq_call(cfg.script)
  if where then
    out[#out + 1] = string.format("%s: warning: ctx:send_to_dlq is called but no stream has a "
      .. "dlq, so it raises (add dlq = true to a stream; streams without one send to the first "
      .. "declared dlq)", where)
  end
  local seen = {}
  for _, line in ipairs(out) do
    local name = line:match('warning: stream "[^"]*": [%w_.]+: "([^"]+)" is not a built%-in')
    if name then
      seen[name] = true
    end
  end
  type_literal_warnings(cfg.script, seen, out)
  return out
end

local URI_SOURCE = {
  option = "from --uri or FLOWWARDEN_URI",
  script = "from fw.defaults",
  default = "default",
}

function M.text(cfg)
  local parts = { string.format("uri: %s (%s)\n", M.redact_uri(cfg.uri), URI_SOURCE[cfg.uri_source]) }
  for _, c in ipairs(cfg.connections or {}) do
    parts[#parts + 1] = string.format("connection %s: %s\n", c.name, M.redact_uri(c.uri))
  end
  local admin = cfg.admin or {}
  if admin.listen or admin.token then
    parts[#parts + 1] = string.format("admin: %s%s\n", admin.listen or "(off unless run --admin)",
      admin.token and " (token set)" or "")
  end
  local allow = cfg.http and cfg.http.allow_hosts
  if allow then
    parts[#parts + 1] = string.format("http.allow_hosts: %s\n", list_text(allow, "(none: every request is refused)"))
  end
  for _, spec in ipairs(cfg.streams) do
    if (spec.partition or 0) == 0 then
      parts[#parts + 1] = "\n" .. M.stream(spec)
    end
  end
  local warnings = M.warnings(cfg)
  if #warnings > 0 then
    parts[#parts + 1] = "\n" .. table.concat(warnings, "\n") .. "\n"
  end
  return table.concat(parts), #warnings
end

return M
