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
    connections = { { name = "audit", uri = "mongodb://...", declared_at = "SCRIPT:LINE" }, ... },
                                              -- fw.connection declarations, in order
    http = { allow_hosts = { "hooks.example", "*.internal" } | nil },
    admin = { listen = "127.0.0.1:9464" | nil, token = "..." | nil },  -- the admin endpoint
    script = "/path/script.lua" | nil,        -- finish()'s script option
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
    split_large_events = true,                -- append $changeStreamSplitLargeEvent
    oversize = "fail",                        -- | "skip" (without the split stage)
    oversize_threshold_bytes = 16711680,      -- 16 MiB - 64 KiB
    lanes = 1,                                -- 1..64: Lua states handling keys in parallel
    circuit = { on = {...}, open_for_ms, max_open_for_ms, give_up_after_ms } | nil,
    rate_limit = "200/s" | nil,               -- (flowwarden.config.outage, issue 29)
    checkpoint = { save_every = 1, save_interval_ms = 5000,
                   idle_heartbeat_ms = 300000, max_unsaved_ms = 100,
                   start_position = "resume",
                   on_history_lost = "fail",    -- | "latest", | "resume_from_now"
                   mode = "async" },            -- | "sync"
    restart = { max_attempts = 0 (0 = unlimited), initial_delay_ms = 1000,
                max_delay_ms = 60000, multiplier = 2.0, jitter = false },
    retry = { enabled = true | false,         -- false: no retry policy declared,
                                              -- and then max_attempts is 1
              max_attempts = 3, initial_delay_ms = 500, max_delay_ms = 30000,
              multiplier = 2.0, jitter = true,
              mode = "blocking",              -- | "deferred": stored as SCHEDULED in the
                                              -- DLQ, retried later (issue 29); needs a dlq
              retry_on = { "Timeout", ... },  -- {} = every type not in no_retry_on
              no_retry_on = { "NilError", "TypeError", "ArgumentError", "Mongo.DuplicateKey",
                              "Mongo.Invalid", "Mongo.TransactionTooLong",
                              "Mongo.TransactionTooLarge", "Mongo.TransactionsUnsupported",
                              "Http.TLS", "Http.Denied",
                              "Http.Status.Permanent", "Redis.Error", "Pg.UniqueViolation",
                              "Pg.ForeignKey", "Pg.Syntax", "Pg.Permission" } },
    dlq = nil | { collection = "_fw_dlq", ttl_days = 30 (0 = forever),
                  include_original_document = true, include_stack_trace = true,
                  write_concern = "majority" | <integer >= 1>,
                  connection = "audit" | nil,         -- nil: the run URI
                  enqueue_policy = f | nil,           -- f(letter, err), see flowwarden.dlq
                  reprocess = nil | { every_ms = 600000 | nil, cron = "*/15 * * * *" | nil,
                                      batch_size = 100, max_attempts = 5 },
                  sequenced = false,                  -- seed 004's sequenced DLQ (issue 14)
                  store = "mongo" | "memory",         -- memory: kept in the process (issue 15)
                  sequence_key = f | nil,             -- f(ctx); nil: the documentKey
                  max_sequences = 1024, max_sequence_size = 1024 },
    dlq_fallback = nil | { <spec.dlq of the first stream declaring a dlq>,
                           database = "shop", stream = "order-watcher" },
                                              -- only on streams without a dlq, when
                                              -- another stream has one: where
                                              -- ctx:send_to_dlq sends (seed 000)
    timeout_ms = 30000,
    memory_limit_bytes = 268435456,
    state = { max_bytes = 67108864 },         -- fw.state's bound (fw.defaults only)
    ha = { mode = "none" | "leader" | "shared", lease_ms = 10000 },
                                              -- one leader per stream (fw.defaults only)
    snapshot = { chunk_size = 1000, pause_ms = 0, read_preference = "primary" },
    handlers = { insert = f, update = f, replace = f, delete = f, change = f, snapshot = f },
                                              -- only those declared; dispatch
                                              -- handlers[op] or handlers.change
    on_error = f | nil,
  }

  Integers are Lua integers (lua_isinteger), multipliers are floats. The
  tables are fresh copies except pipeline stages and functions.

The key lists, settings schemas and field checks live in
flowwarden.config.fields; this file holds the registry and the rules that
tie fields together (layering, precedence, cross-field checks).
]]

local errors = require("flowwarden.errors")
local fields = require("flowwarden.config.fields")
local partitions = require("flowwarden.config.partitions")

local M = {}

M.DEFAULT_URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"

-- lanes = N at most (issue 16): each lane is a Lua state and a thread.
M.MAX_LANES = 64

-- Seeds 001 (RetryPolicy) and 002 (DeadLetterQueue), issue 3 (checkpoint,
-- restart, change-stream options) and issue 4 (budgets), already normalized.
M.SEED = {
  full_document = "default",
  full_document_before_change = "off",
  checkpoint = {
    save_every = 1, save_interval_ms = 5000, idle_heartbeat_ms = 300000,
    max_unsaved_ms = 100,
    start_position = "resume", on_history_lost = "fail", mode = "async",
  },
  -- Incremental snapshots (issue 28): rows per chunk, the pause between
  -- chunks, where the chunks are read.
  snapshot = { chunk_size = 1000, pause_ms = 0, read_preference = "primary" },
  restart = {
    max_attempts = 0, initial_delay_ms = 1000, max_delay_ms = 60000,
    multiplier = 2.0, jitter = false,
  },
  retry = {
    max_attempts = 3, initial_delay_ms = 500, max_delay_ms = 30000,
    multiplier = 2.0, jitter = true, mode = "blocking",
    retry_on = {},
    -- Seed 001's programming errors, then handler IO failures that cannot
    -- succeed on a retry (issue 11).
    no_retry_on = { "NilError", "TypeError", "ArgumentError", "Mongo.DuplicateKey", "Mongo.Invalid",
                    "Mongo.TransactionTooLong", "Mongo.TransactionTooLarge",
                    "Mongo.TransactionsUnsupported", "Http.TLS", "Http.Denied", "Http.Status.Permanent", "Redis.Error",
                    "Pg.UniqueViolation", "Pg.ForeignKey", "Pg.Syntax", "Pg.Permission" },
  },
  dlq = {
    enabled = true, collection = "_fw_dlq", ttl_days = 30,
    include_original_document = true, include_stack_trace = true,
    write_concern = "majority",
    -- Seed 004's SequencedDeadLetterQueue defaults.
    sequenced = false, max_sequences = 1024, max_sequence_size = 1024,
    store = "mongo",  -- | "memory": seed 004's in-memory variant, for tests only
  },
  timeout_ms = 30000,
  memory_limit_bytes = 256 * 1024 * 1024,
  -- Issue 18: split events over 16 MiB on the server and reassemble them.
  -- Without the split stage, oversize decides; the threshold leaves 64 KiB
  -- under the 16 MiB limit for the getMore reply around the event (cursor
  -- id, ns, postBatchResumeToken, $clusterTime), as MongoDB's own batches do.
  split_large_events = true,
  oversize = "fail",
  oversize_threshold_bytes = 16 * 1024 * 1024 - 64 * 1024,
  state = { max_bytes = 64 * 1024 * 1024 },
  -- Issue 17: "none" keeps every instance handling every event.
  ha = { mode = "none", lease_ms = 10000 },
}

-- Part of this module's interface (describe.lua and the tests use them).
M.MIN_MEMORY_LIMIT = fields.MIN_MEMORY_LIMIT
M.OPERATION_TYPES = fields.OPERATION_TYPES
M.HANDLER_KEYS = fields.HANDLER_KEYS
M.repr = fields.repr
M.suggest = fields.suggest

local STREAM_KEYS = fields.STREAM_KEYS
local DEFAULTS_KEYS = fields.DEFAULTS_KEYS
local CHECKPOINT = fields.CHECKPOINT
local RESTART = fields.RESTART
local RETRY = fields.RETRY
local DLQ = fields.DLQ
local STATE = fields.STATE
local HTTP = fields.HTTP
local ADMIN = fields.ADMIN
local HA = fields.HA
local repr = fields.repr
local new_ctx = fields.new_ctx
local enum = fields.enum
local positive_duration = fields.positive_duration
local memory_size = fields.memory_size
local event_size = fields.event_size
local database_name = fields.database_name
local collection_name = fields.collection_name
local check_unknown_keys = fields.check_unknown_keys
local check_table = fields.check_table
local merge = fields.merge
local check_delays = fields.check_delays
local check_switchable = fields.check_switchable
local check_subtable = fields.check_subtable
local check_operation_types = fields.check_operation_types
local check_pipeline = fields.check_pipeline
local store_uri = require("flowwarden.config.store_uri")

---------------------------------------------------------------------------
-- Registry

local state

function M.reset()
  state = { decls = {}, streams = 0, defaults = nil, finished = false, script = nil }
  M.effective = nil
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

-- fw.connection { name = "audit", uri = "mongodb://..." }: a MongoDB
-- connection for fw.mongo and DLQs, besides "default" (the run URI).
function M.connection(spec, ...)
  if state.finished then
    error("fw.connection: connections can only be declared while the script loads", 2)
  end
  declare("connection", spec, select("#", ...) + 1)
end

-- fw.defaults { ... }
function M.defaults(spec, ...)
  if state.finished then
    error("fw.defaults: defaults can only be set while the script loads", 2)
  end
  declare("defaults", spec, select("#", ...) + 1)
end

local function is_mongodb_uri(v)
  return type(v) == "string" and (v:find("^mongodb://.") or v:find("^mongodb%+srv://.")) ~= nil
end

-- The C host checks a URI with libmongoc's parser (core.uri_check); plain
-- Lua (busted) only checks its scheme.
local function uri_problem(uri)
  local ok, core = pcall(require, "flowwarden.core")
  if ok and type(core) == "table" and core.uri_check then
    local fine, why = core.uri_check(uri)
    if not fine then
      return why or "libmongoc cannot parse it"
    end
  end
  return nil
end

-- The C host checks the admin endpoint's address and token together
-- (core.admin_check: a loopback address, or a token); plain Lua does not.
local function admin_problem(listen, token)
  local ok, core = pcall(require, "flowwarden.core")
  if ok and type(core) == "table" and core.admin_check then
    local fine, why = core.admin_check(listen, token)
    if not fine then
      return why or "invalid admin endpoint settings"
    end
  end
  return nil
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
    if is_mongodb_uri(t.uri) then
      local why = uri_problem(t.uri)
      if why then
        ctx:fail("uri", "invalid MongoDB URI: %s", why)
      else
        out.uri = t.uri
      end
    else
      ctx:fail("uri", "expected a MongoDB connection string starting with mongodb:// or "
        .. "mongodb+srv://, got %s", repr(t.uri))
    end
  end
  for _, sub in ipairs({ { "retry", RETRY }, { "dlq", DLQ }, { "checkpoint", CHECKPOINT },
                         { "restart", RESTART }, { "state", STATE }, { "http", HTTP },
                         { "admin", ADMIN }, { "ha", HA } }) do
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
  if out.admin and out.admin.listen then
    local why = admin_problem(out.admin.listen, out.admin.token)
    if why then
      ctx:fail(nil, "%s", why)
      out.admin = nil
    end
  end
  for _, sub in ipairs({ "retry", "restart" }) do
    if out[sub] then
      local eff, from = merge(M.SEED[sub], out[sub], nil)
      check_delays(ctx, sub, eff, from, "defaults")
    end
  end
  return out, ctx.errors
end

local CONNECTION_KEYS = { "name", "uri" }

local function validate_connection(decl, seen)
  local ctx = new_ctx(decl.where, "connection")
  if not check_call_shape(ctx, decl, "connection") then
    return nil, ctx.errors
  end
  local t = decl.value
  local ok, name = fields.connection_name(ctx, "name", t.name)
  if t.name == nil then
    ctx.errors[#ctx.errors] = nil
    ctx:fail("name", 'missing (every connection needs a name, e.g. name = "audit")')
  elseif ok then
    ctx.subject = string.format('connection "%s"', name)
    if name == "default" then
      ctx:fail("name", '"default" is the run URI (--uri or fw.defaults { uri = ... }) and cannot '
        .. "be declared again")
    elseif seen[name] then
      ctx:fail("name", "duplicate connection name (first declared at %s)", seen[name])
    else
      seen[name] = decl.where
    end
  end
  -- After the name, so these messages can name the connection.
  local named_errors = ctx.errors
  ctx.errors = {}
  check_unknown_keys(ctx, nil, t, CONNECTION_KEYS)
  for _, e in ipairs(ctx.errors) do
    named_errors[#named_errors + 1] = e
  end
  ctx.errors = named_errors
  local kind = store_uri.kind(t.uri)
  if t.uri == nil then
    ctx:fail("uri", 'missing (e.g. uri = fw.env("AUDIT_URI"))')
  elseif not kind then
    ctx:fail("uri", "expected a connection string starting with mongodb://, mongodb+srv://, "
      .. "redis:// or postgresql://, got %s", type(t.uri) == "string"
      and "a string that is not one" or repr(t.uri))
  elseif kind == "mongodb" then
    local why = uri_problem(t.uri)
    if why then
      ctx:fail("uri", "invalid MongoDB URI: %s", why)
    end
  elseif kind == "redis" then
    local _, why = store_uri.parse_redis(t.uri)
    if why then
      ctx:fail("uri", "invalid Redis URI: %s", why)
    end
  else
    local why = store_uri.postgresql_problem(t.uri)
    if why then
      ctx:fail("uri", "invalid PostgreSQL URI: %s", why)
    end
  end
  if #ctx.errors > 0 then
    return nil, ctx.errors
  end
  return { name = name, uri = t.uri, kind = kind, declared_at = decl.where }, ctx.errors
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
  elseif partitions.is_unit_name(name) then
    ctx:fail("name", "must not end with #K/N (the names of a partitioned stream's units), got %s",
      repr(name))
  else
    ctx.subject = string.format('stream "%s"', name)
    spec.name = name
    if seen_names[name] then
      ctx:fail("name", "duplicate stream name (first declared at %s)", seen_names[name])
    else
      seen_names[name] = decl.where
    end
  end

  if t.ha ~= nil then
    -- Not a stream key; said plainly rather than as an unknown key.
    ctx:fail("ha", 'is set for the whole script: fw.defaults { ha = { mode = "leader" } } '
      .. "(every stream then has one leader among the instances running the script)")
  end
  check_unknown_keys(ctx, nil, t, STREAM_KEYS, { ha = true })

  local ok, v
  if t.database ~= nil then
    ok, v = database_name(ctx, "database", t.database)
    spec.database, spec.database_source = v, "stream"
  elseif defaults.database then
    spec.database, spec.database_source = defaults.database, "defaults"
  elseif opts.default_database then
    spec.database, spec.database_source = opts.default_database, "uri"
  elseif opts.database_at_run and not state.invalid_default_database then
    -- `check` given no URI: run's --uri (or FLOWWARDEN_URI) may name it (a warning says so).
    spec.database, spec.database_source = M.DATABASE_AT_RUN, "run"
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
  if spec.checkpoint.start_at and spec.checkpoint.start_position == "latest" then
    ctx:fail("checkpoint.start_at", 'cannot be used with start_position = "latest", which never '
      .. "reads the checkpoint and starts from now: remove one of them")
  end

  own = check_subtable(ctx, "snapshot", t.snapshot, fields.SNAPSHOT, "snapshot")
  spec.snapshot = merge(M.SEED.snapshot, nil, own)
  if spec.checkpoint.start_position == "snapshot" and not spec.collection then
    ctx:fail("checkpoint.start_position", '"snapshot" needs a collection: a database-wide stream '
      .. "cannot take a snapshot (declare one stream per collection to backfill)")
  end

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
    spec.retry.mode = "blocking"
  end

  own = check_switchable(ctx, "dlq", t.dlq, DLQ, "dlq")
  if own then
    local dlq = merge(M.SEED.dlq, defaults.dlq, own)
    -- merge copies tables as lists; reprocess is a table of settings.
    dlq.reprocess = own.reprocess or (defaults.dlq and defaults.dlq.reprocess)
    if dlq.connection and dlq.connection ~= "default" and not opts.connections[dlq.connection] then
      ctx:fail("dlq.connection", "unknown connection %s (declare it with fw.connection { name = %s, "
        .. "uri = ... } or omit it to use the run URI)", repr(dlq.connection), repr(dlq.connection))
    elseif dlq.connection == "default" then
      dlq.connection = nil
    elseif dlq.connection and opts.kinds[dlq.connection]
        and opts.kinds[dlq.connection].kind ~= "mongodb" then
      ctx:fail("dlq.connection", "connection %s is a %s connection; a DLQ lives in MongoDB",
        repr(dlq.connection), opts.kinds[dlq.connection].kind == "redis" and "Redis" or "PostgreSQL")
    end
    if dlq.enabled then
      dlq.enabled = nil
      spec.dlq = dlq
    end
  end

  -- Deferred retries wait in the stream's DLQ (issue 29).
  if spec.retry.mode == "deferred" then
    if not spec.dlq then
      ctx:fail("retry.mode", '"deferred" needs a dlq: scheduled retries are stored in the '
        .. "stream's DLQ collection (declare dlq = { ... } or use mode = \"blocking\")")
    elseif spec.dlq.store == "memory" then
      ctx:fail("retry.mode", '"deferred" needs a MongoDB DLQ (dlq.store = "memory" loses its '
        .. "scheduled retries when the process ends)")
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

  spec.split_large_events = M.SEED.split_large_events
  if t.split_large_events ~= nil then
    ok, v = fields.boolean(ctx, "split_large_events", t.split_large_events)
    if ok then
      spec.split_large_events = v
    end
  end
  spec.oversize = M.SEED.oversize
  if t.oversize ~= nil then
    ok, v = enum({ "fail", "skip" })(ctx, "oversize", t.oversize)
    spec.oversize = ok and v or spec.oversize
  end
  spec.oversize_threshold_bytes = M.SEED.oversize_threshold_bytes
  if t.oversize_threshold ~= nil then
    ok, v = event_size(ctx, "oversize_threshold", t.oversize_threshold)
    spec.oversize_threshold_bytes = ok and v or spec.oversize_threshold_bytes
  end

  -- Issue 16's per-key lanes: one Lua state and thread per lane.
  spec.lanes = 1
  if t.lanes ~= nil then
    local i = math.type(t.lanes) == "integer" and t.lanes
      or (math.type(t.lanes) == "float" and math.tointeger(t.lanes))
    if not i or i < 1 or i > M.MAX_LANES then
      ctx:fail("lanes", "expected an integer from 1 to %d (Lua states handling events of "
        .. "different keys in parallel), got %s", M.MAX_LANES, repr(t.lanes))
    else
      spec.lanes = i
    end
  end

  -- Issue 29: the circuit breaker and the rate limit.
  require("flowwarden.config.outage").check(ctx, t, spec)
  partitions.read(ctx, t, spec, repr)  -- issue 31: spec.partitions, nil when not set

  spec.state = merge(M.SEED.state, defaults.state, nil)
  spec.ha = merge(M.SEED.ha, defaults.ha, nil)

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
  -- Issue 30: on_batch instead of the per-operation handlers.
  any_handler = require("flowwarden.config.batch").check(ctx, t, spec) or any_handler
  if spec.handlers.batch and spec.retry.mode == "deferred" then
    ctx:fail("retry.mode", '"deferred" is for per-event handlers: an on_batch call is retried '
      .. "and bisected in place (use mode = \"blocking\")")
  end
  require("flowwarden.config.exactly_once").check(ctx, t, spec, repr, opts)
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

-- `flowwarden check` sets this registry field to true before it loads a script: given no URI
-- (--uri, FLOWWARDEN_URI), a stream whose database would come from the URI's path is described
-- with M.DATABASE_AT_RUN and a warning instead of failing, as run's --uri may give it.
M.CHECK_KEY = "flowwarden.check"
M.DATABASE_AT_RUN = "(the path of run's --uri)"

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

  local connections, by_name, seen_connections = {}, {}, {}
  for i, decl in ipairs(state.decls) do
    if decl.kind == "connection" then
      local c
      c, per_decl[i] = validate_connection(decl, seen_connections)
      if c then
        connections[#connections + 1] = c
        by_name[c.name] = c
      end
    end
  end

  local cfg = { defaults = defaults, defaults_declared_at = defaults_at, streams = {},
                connections = connections, http = defaults.http or {},
                admin = defaults.admin or {} }
  if opts.uri then
    cfg.uri, cfg.uri_source = opts.uri, "option"
  elseif defaults.uri then
    cfg.uri, cfg.uri_source = defaults.uri, "script"
  else
    cfg.uri, cfg.uri_source = M.DEFAULT_URI, "default"
  end
  cfg.default_database = opts.default_database or M.uri_database(cfg.uri)
  local stream_opts = { default_database = cfg.default_database, connections = seen_connections,
                        kinds = by_name,
                        database_at_run = debug.getregistry()[M.CHECK_KEY] == true
                          and cfg.uri_source ~= "option" }

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

  cfg.streams = partitions.expand(cfg.streams)  -- a partitioned stream runs as its units

  -- Seed 000: the DLQ store is there as soon as any stream declares a DLQ, so
  -- ctx:send_to_dlq works on every stream of the script. A stream without its
  -- own DLQ sends to the first declared one; its failures that exhaust their
  -- retries are still lost, as the seeds say (only send_to_dlq uses it).
  local default_dlq
  for _, spec in ipairs(cfg.streams) do
    if spec.dlq then
      default_dlq = spec
      break
    end
  end
  for _, spec in ipairs(default_dlq and cfg.streams or {}) do
    if not spec.dlq then
      local fallback = {}
      for k, v in pairs(default_dlq.dlq) do
        fallback[k] = v
      end
      fallback.database, fallback.stream = default_dlq.database, default_dlq.name
      spec.dlq_fallback = fallback
    end
  end
  cfg.script = opts.script or state.script

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
  M.effective = cfg
  return cfg
end

-- fw.http's settings from fw.defaults { http = ... } of the script loaded in
-- this state: { allow_hosts = {...} } or {} (every host allowed).
function M.effective_http()
  return M.effective and M.effective.http or {}
end

-- For fw.redis and fw.pg (want = "redis" | "postgresql"): the declared
-- connection `name` of the script loaded in this state, as
-- { uri = ..., host, port, db, user, password } (Redis: the URI's parts) or
-- nil and why (unknown name, or a connection of another kind). The message
-- never holds the URI.
function M.store_connection(name, want)
  local label = want == "redis" and "Redis" or "PostgreSQL"
  for _, c in ipairs(M.effective and M.effective.connections or {}) do
    if c.name == name then
      if c.kind ~= want then
        return nil, string.format('connection "%s" is not a %s connection (its URI starts with '
          .. '%s)', name, label, c.uri:match("^[%w%+]*:") or "?")
      end
      if want == "redis" then
        local parts = assert(store_uri.parse_redis(c.uri))
        parts.uri = c.uri
        return parts
      end
      return { uri = c.uri }
    end
  end
  return nil, string.format('unknown connection "%s" (declare it with fw.connection { name = '
    .. '"%s", uri = "%s://..." })', tostring(name), tostring(name), want)
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
