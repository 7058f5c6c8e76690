local config = require("flowwarden.config")

-- Every script gets the same two first lines, so its own code starts at line 3.
local HEADER = "local fw = require('flowwarden')\nlocal h = function() end\n"
local SCRIPT = "/s/bad.lua"
local DEFAULT_NO_RETRY = { "NilError", "TypeError", "ArgumentError", "Mongo.DuplicateKey",
  "Mongo.Invalid", "Mongo.TransactionTooLong", "Mongo.TransactionTooLarge",
  "Mongo.TransactionsUnsupported", "Http.TLS", "Http.Denied", "Http.Status.Permanent",
  "Redis.Error", "Pg.UniqueViolation", "Pg.ForeignKey", "Pg.Syntax", "Pg.Permission" }

local function run(src, opts)
  return config.load_string(HEADER .. src, SCRIPT, opts)
end

local function errors_of(src, opts)
  local cfg, errs = run(src, opts)
  assert.is_nil(cfg, "the script was expected to be rejected")
  return errs
end

local function spec_of(src, opts)
  local cfg, errs = run(src, opts)
  assert.is_nil(errs, errs and table.concat(errs, "\n"))
  return cfg.streams[1], cfg
end

-- The "bad scripts": each one fails with exactly these messages.
local P = SCRIPT .. ":3: "
local S = P .. 'stream "s": '
local BAD = {
  { "a stream without a name",
    "fw.stream { database = 'shop', on_change = h }",
    { P .. 'stream #1: name: missing (every stream needs a unique name, e.g. name = "order-watcher")' } },
  { "a name that is not a string",
    "fw.stream { name = 42, database = 'shop', on_change = h }",
    { P .. "stream #1: name: expected a non-empty string, got 42" } },
  { "an empty name",
    "fw.stream { name = '', database = 'shop', on_change = h }",
    { P .. 'stream #1: name: expected a non-empty string, got ""' } },
  { "a name with a control character",
    "fw.stream { name = 'a\\nb', database = 'shop', on_change = h }",
    { P .. 'stream #1: name: must not contain control characters, got "a\\10b"' } },
  { "a duplicate name",
    "fw.stream { name = 's', database = 'shop', on_change = h }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }",
    { SCRIPT .. ':4: stream "s": name: duplicate stream name (first declared at /s/bad.lua:3)' } },
  { "a misspelt key",
    "fw.stream { name = 's', database = 'shop', on_insrt = h, on_change = h }",
    { S .. 'unknown key "on_insrt" (did you mean "on_insert"?)' } },
  { "a camelCase key",
    "fw.stream { name = 's', database = 'shop', fullDocument = 'required', on_change = h }",
    { S .. 'unknown key "fullDocument" (did you mean "full_document"?)' } },
  { "an unknown key with no close match",
    "fw.stream { name = 's', database = 'shop', color = 'red', on_change = h }",
    { S .. 'unknown key "color" (valid keys: name, database, collection, operation_types, pipeline, '
      .. "full_document, full_document_before_change, checkpoint, restart, retry, dlq, timeout, "
      .. "memory_limit, split_large_events, oversize, oversize_threshold, lanes, circuit, rate_limit, "
      .. "partitions, on_insert, "
      .. "on_update, on_replace, on_delete, on_change, on_error, batch, on_batch, on_snapshot, "
      .. "snapshot, exactly_once)" } },
  { "lanes = 0",
    "fw.stream { name = 's', database = 'shop', lanes = 0, on_change = h }",
    { S .. "lanes: expected an integer from 1 to 64 (Lua states handling events of different keys "
      .. "in parallel), got 0" } },
  { "exactly_once into a Redis connection",
    "fw.connection { name = 'cache', uri = 'redis://127.0.0.1:6379/0' } "
      .. "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'cache' }, "
      .. "on_change = h }",
    { S .. 'exactly_once.connection: connection "cache" is a Redis connection; exactly once runs '
      .. 'into MongoDB (exactly_once = true) or PostgreSQL ({ connection = "a postgresql:// '
      .. 'connection" }); for Redis make the handler\'s writes idempotent (docs/lua-api.md, '
      .. 'fw.redis)' } },
  { "exactly_once into another MongoDB deployment with lanes",
    "fw.connection { name = 'audit', uri = 'mongodb://127.0.0.1:27018/' } "
      .. "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'audit' }, "
      .. "lanes = 2, on_change = h }",
    { S .. "exactly_once: cannot run with lanes = 2: the checkpoint commits with each event's "
      .. "transaction, in the stream's order; use partitions = N instead (each unit has its own "
      .. "checkpoint and commits its own transactions)" } },
  { "exactly_once into an unknown connection",
    "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'rep' }, "
      .. "on_change = h }",
    { S .. 'exactly_once.connection: unknown connection "rep" (declare it with fw.connection '
      .. '{ name = "rep", uri = "mongodb://..." } for another MongoDB deployment, or '
      .. 'uri = "postgresql://..." for PostgreSQL)' } },
  { "exactly_once into PostgreSQL with lanes",
    "fw.connection { name = 'rep', uri = 'postgresql://u@127.0.0.1/r' } "
      .. "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'rep' }, "
      .. "lanes = 2, on_change = h }",
    { S .. "exactly_once: cannot run with lanes = 2: the checkpoint commits with each event's "
      .. "transaction, in the stream's order; use partitions = N instead (each unit has its own "
      .. "checkpoint and commits its own transactions)" } },
  { "lanes = 65",
    "fw.stream { name = 's', database = 'shop', lanes = 65, on_change = h }",
    { S .. "lanes: expected an integer from 1 to 64 (Lua states handling events of different keys "
      .. "in parallel), got 65" } },
  { "lanes = 2.5",
    "fw.stream { name = 's', database = 'shop', lanes = 2.5, on_change = h }",
    { S .. "lanes: expected an integer from 1 to 64 (Lua states handling events of different keys "
      .. "in parallel), got 2.5" } },
  { "partitions = 0",
    "fw.stream { name = 's', database = 'shop', partitions = 0, on_change = h }",
    { S .. "partitions: expected an integer from 1 to 256 (units of the stream, each with its "
      .. "own change stream and checkpoint, keys split by hash), got 0" } },
  { "partitions = 300",
    "fw.stream { name = 's', database = 'shop', partitions = 300, on_change = h }",
    { S .. "partitions: expected an integer from 1 to 256 (units of the stream, each with its "
      .. "own change stream and checkpoint, keys split by hash), got 300" } },
  { "a name of a partition's unit",
    "fw.stream { name = 's#1/2', database = 'shop', on_change = h }",
    { "/s/bad.lua:3: stream #1: name: must not end with #K/N (the names of a partitioned "
      .. 'stream\'s units), got "s#1/2"' } },
  { "a wrong split_large_events",
    "fw.stream { name = 's', database = 'shop', split_large_events = 'yes', on_change = h }",
    { S .. 'split_large_events: expected true or false, got "yes"' } },
  { "a wrong oversize",
    "fw.stream { name = 's', database = 'shop', oversize = 'drop', on_change = h }",
    { S .. 'oversize: invalid value "drop" (expected "fail" or "skip")' } },
  { "an oversize_threshold above 16MB",
    "fw.stream { name = 's', database = 'shop', oversize_threshold = '17MB', on_change = h }",
    { S .. 'oversize_threshold: "17MB" is out of range (from "1KB" to "16MB")' } },
  { "a positional value",
    "fw.stream { 'orders', name = 's', database = 'shop', on_change = h }",
    { S .. 'unexpected entry [1] = "orders" (settings are written as key = value)' } },
  { "no database anywhere",
    "fw.stream { name = 's', on_change = h }",
    { S .. "database: missing (set database in this stream, in fw.defaults { database = ... } or in "
      .. "the URI path, e.g. mongodb://127.0.0.1:27017/shop)" } },
  { "an invalid database name",
    "fw.stream { name = 's', database = 'my.shop', on_change = h }",
    { S .. 'database: invalid database name "my.shop" (at most 63 bytes, without / \\ . " $, spaces or NUL)' } },
  { "an empty collection",
    "fw.stream { name = 's', database = 'shop', collection = '', on_change = h }",
    { S .. 'collection: expected a non-empty string (omit collection to watch the whole database), got ""' } },
  { "a system collection",
    "fw.stream { name = 's', database = 'shop', collection = 'system.profile', on_change = h }",
    { S .. 'collection: "system.profile" is a system collection, which change streams cannot watch' } },
  { "a collection name with $",
    "fw.stream { name = 's', database = 'shop', collection = 'a$b', on_change = h }",
    { S .. 'collection: invalid collection name "a$b" (must not contain $ or NUL)' } },
  { "an unknown operation type",
    "fw.stream { name = 's', database = 'shop', operation_types = { 'insert', 'INSERT', 'upsert' }, on_change = h }",
    { S .. 'operation_types[2]: unknown operation type "INSERT" (did you mean "insert"? expected one of '
      .. "insert, update, replace, delete, drop, rename, dropDatabase, invalidate)",
      S .. 'operation_types[3]: unknown operation type "upsert" (expected one of insert, update, replace, '
      .. "delete, drop, rename, dropDatabase, invalidate)" } },
  { "operation_types given as a string",
    "fw.stream { name = 's', database = 'shop', operation_types = 'insert', on_change = h }",
    { S .. 'operation_types: expected an array of operation type names such as { "insert" }, got "insert"' } },
  { "an empty operation_types",
    "fw.stream { name = 's', database = 'shop', operation_types = {}, on_change = h }",
    { S .. "operation_types: the empty list matches no event (omit operation_types to receive every type)" } },
  { "a duplicate operation type",
    "fw.stream { name = 's', database = 'shop', operation_types = { 'delete', 'delete' }, on_change = h }",
    { S .. 'operation_types[2]: duplicate "delete" (already operation_types[1])' } },
  { "operation_types with a named key",
    "fw.stream { name = 's', database = 'shop', operation_types = { 'insert', x = 'update' }, on_change = h }",
    { S .. 'operation_types: unexpected key "x" (expected an array of operation type names)' } },
  { "a pipeline stage that is not a table",
    "fw.stream { name = 's', database = 'shop', pipeline = { '$match' }, on_change = h }",
    { S .. 'pipeline[1]: expected a stage table such as { ["$match"] = { ... } }, got "$match"' } },
  { "a pipeline stage name without $",
    "fw.stream { name = 's', database = 'shop', pipeline = { { match = {} } }, on_change = h }",
    { S .. 'pipeline[1]: stage name "match" must start with "$", e.g. "$match"' } },
  { "a pipeline stage with two keys",
    "fw.stream { name = 's', database = 'shop', pipeline = { { ['$match'] = {}, ['$project'] = {} } }, on_change = h }",
    { S .. 'pipeline[1]: a stage has exactly one key, its name such as "$match" (found 2: $match, $project)' } },
  { "a pipeline that is not a table",
    "fw.stream { name = 's', database = 'shop', pipeline = 'x', on_change = h }",
    { S .. 'pipeline: expected an array of stages such as { { ["$match"] = { ... } } }, got "x"' } },
  { "a wrong full_document",
    "fw.stream { name = 's', database = 'shop', full_document = 'updatelookup', on_change = h }",
    { S .. 'full_document: invalid value "updatelookup" (did you mean "updateLookup"? expected "default", '
      .. '"updateLookup", "whenAvailable" or "required")' } },
  { "a wrong full_document_before_change",
    "fw.stream { name = 's', database = 'shop', full_document_before_change = true, on_change = h }",
    { S .. 'full_document_before_change: invalid value true (expected "off", "whenAvailable" or "required")' } },
  { "a fractional checkpoint.save_every",
    "fw.stream { name = 's', database = 'shop', checkpoint = { save_every = 1.5 }, on_change = h }",
    { S .. "checkpoint.save_every: expected an integer >= 1, got 1.5" } },
  { "checkpoint.save_every 0",
    "fw.stream { name = 's', database = 'shop', checkpoint = { save_every = 0 }, on_change = h }",
    { S .. "checkpoint.save_every: expected an integer >= 1, got 0" } },
  { "a duration with a spelled-out unit",
    "fw.stream { name = 's', database = 'shop', checkpoint = { save_interval = '5 sec' }, on_change = h }",
    { S .. 'checkpoint.save_interval: invalid duration "5 sec" (expected a number followed by ms, s, m, h, '
      .. 'd or w, e.g. "500ms")' } },
  { "a duration in years",
    "fw.stream { name = 's', database = 'shop', checkpoint = { idle_heartbeat = '1y' }, on_change = h }",
    { S .. 'checkpoint.idle_heartbeat: invalid duration "1y" (expected a number followed by ms, s, m, h, '
      .. 'd or w, e.g. "500ms")' } },
  { "a negative duration",
    "fw.stream { name = 's', database = 'shop', checkpoint = { save_interval = '-1s' }, on_change = h }",
    { S .. 'checkpoint.save_interval: invalid duration "-1s" (expected a number followed by ms, s, m, h, '
      .. 'd or w, e.g. "500ms")' } },
  { "a negative checkpoint.max_unsaved",
    "fw.stream { name = 's', database = 'shop', checkpoint = { max_unsaved = '-100ms' }, on_change = h }",
    { S .. 'checkpoint.max_unsaved: invalid duration "-100ms" (expected a number followed by ms, s, m, h, '
      .. 'd or w, e.g. "500ms")' } },
  { "checkpoint.max_unsaved as words",
    "fw.stream { name = 's', database = 'shop', checkpoint = { max_unsaved = 'soon' }, on_change = h }",
    { S .. 'checkpoint.max_unsaved: invalid duration "soon" (expected a number followed by ms, s, m, h, '
      .. 'd or w, e.g. "500ms")' } },
  { "checkpoint.max_unsaved as a number other than 0",
    "fw.stream { name = 's', database = 'shop', checkpoint = { max_unsaved = 100 }, on_change = h }",
    { S .. 'checkpoint.max_unsaved: expected a duration string, got 100 (a number has no unit: write '
      .. '"100s" or "100ms")' } },
  { "checkpoint.max_unsaved as a table",
    "fw.stream { name = 's', database = 'shop', checkpoint = { max_unsaved = {} }, on_change = h }",
    { S .. 'checkpoint.max_unsaved: expected a duration string such as "30s", got a table' } },
  { "an unknown start_position",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_position = 'earliest' }, on_change = h }",
    { S .. 'checkpoint.start_position: invalid value "earliest" (expected "resume", "latest" or "snapshot")' } },
  { "an unknown on_history_lost",
    "fw.stream { name = 's', database = 'shop', checkpoint = { on_history_lost = 'resume-from-now' }, on_change = h }",
    { S .. 'checkpoint.on_history_lost: invalid value "resume-from-now" (did you mean "resume_from_now"? '
      .. 'expected "fail" or "resume_from_now")' } },
  { "checkpoint given as a number",
    "fw.stream { name = 's', database = 'shop', checkpoint = 5, on_change = h }",
    { S .. "checkpoint: expected a table of checkpoint settings, got 5" } },
  { "an unknown checkpoint key",
    "fw.stream { name = 's', database = 'shop', checkpoint = { every = 5 }, on_change = h }",
    { S .. 'checkpoint: unknown key "every" (valid keys: save_every, max_unsaved, save_interval, '
      .. "idle_heartbeat, start_position, on_history_lost, mode, start_at)" } },
  { "an unknown checkpoint.mode",
    "fw.stream { name = 's', database = 'shop', checkpoint = { mode = 'asynchronous' }, on_change = h }",
    { S .. 'checkpoint.mode: invalid value "asynchronous" (expected "async" or "sync")' } },
  { "checkpoint.start_at as words",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_at = 'yesterday' }, on_change = h }",
    { S .. 'checkpoint.start_at: expected an RFC 3339 date such as "2026-11-26T10:00:00Z" (with Z or an '
      .. 'offset), got "yesterday"' } },
  { "checkpoint.start_at as a number",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_at = 1795600800 }, on_change = h }",
    { S .. 'checkpoint.start_at: expected "2026-11-26T10:00:00Z", fw.timestamp(t, i) or '
      .. "{ t = ..., i = ... }, got 1795600800" } },
  { "checkpoint.start_at with t out of range",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_at = { t = 4294967296, i = 0 } }, on_change = h }",
    { S .. "checkpoint.start_at: t must be an integer from 1 to 4294967295, got 4294967296" } },
  { "checkpoint.start_at with an unknown key",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_at = { t = 5, inc = 1 } }, on_change = h }",
    { S .. 'checkpoint.start_at: unknown key "inc" (a Timestamp has t and i)' } },
  { "checkpoint.start_at with start_position = latest",
    "fw.stream { name = 's', database = 'shop', checkpoint = { start_at = '2026-11-26T10:00:00Z', "
      .. "start_position = 'latest' }, on_change = h }",
    { S .. 'checkpoint.start_at: cannot be used with start_position = "latest", which never reads the '
      .. "checkpoint and starts from now: remove one of them" } },
  { "a negative restart.max_attempts",
    "fw.stream { name = 's', database = 'shop', restart = { max_attempts = -1 }, on_change = h }",
    { S .. "restart.max_attempts: expected an integer >= 0 (0 = unlimited), got -1" } },
  { "restart.max_delay below the default initial_delay",
    "fw.stream { name = 's', database = 'shop', restart = { max_delay = '500ms' }, on_change = h }",
    { S .. 'restart.max_delay: must be >= restart.initial_delay ("1s", the default), got "500ms"' } },
  { "restart.jitter as a string",
    "fw.stream { name = 's', database = 'shop', restart = { jitter = 'no' }, on_change = h }",
    { S .. 'restart.jitter: expected true or false, got "no"' } },
  { "retry.max_attempts 0",
    "fw.stream { name = 's', database = 'shop', retry = { max_attempts = 0 }, on_change = h }",
    { S .. "retry.max_attempts: expected an integer >= 1, got 0" } },
  { "retry.max_attempts as a string",
    "fw.stream { name = 's', database = 'shop', retry = { max_attempts = '3' }, on_change = h }",
    { S .. 'retry.max_attempts: expected an integer >= 1, got "3"' } },
  { "retry.multiplier below 1",
    "fw.stream { name = 's', database = 'shop', retry = { multiplier = 0.5 }, on_change = h }",
    { S .. "retry.multiplier: expected a number >= 1, got 0.5" } },
  { "an infinite retry.multiplier",
    "fw.stream { name = 's', database = 'shop', retry = { multiplier = math.huge }, on_change = h }",
    { S .. "retry.multiplier: expected a number >= 1, got inf" } },
  { "a zero retry.initial_delay",
    "fw.stream { name = 's', database = 'shop', retry = { initial_delay = '0ms' }, on_change = h }",
    { S .. 'retry.initial_delay: must be greater than 0, got "0ms"' } },
  { "a duration written as a bare number",
    "fw.stream { name = 's', database = 'shop', retry = { initial_delay = 500 }, on_change = h }",
    { S .. 'retry.initial_delay: expected a duration string, got 500 (a number has no unit: write "500s" '
      .. 'or "500ms")' } },
  { "retry.max_delay below retry.initial_delay",
    "fw.stream { name = 's', database = 'shop', retry = { initial_delay = '2s', max_delay = '1s' }, on_change = h }",
    { S .. 'retry.max_delay: must be >= retry.initial_delay ("2s"), got "1s"' } },
  { "an unknown retry.mode",
    "fw.stream { name = 's', database = 'shop', retry = { mode = 'deffered' }, dlq = true, on_change = h }",
    { S .. 'retry.mode: invalid value "deffered" (did you mean "deferred"? expected "blocking" or "deferred")' } },
  { "a deferred retry without a dlq",
    "fw.stream { name = 's', database = 'shop', retry = { mode = 'deferred' }, on_change = h }",
    { S .. 'retry.mode: "deferred" needs a dlq: scheduled retries are stored in the stream\'s DLQ '
      .. 'collection (declare dlq = { ... } or use mode = "blocking")' } },
  { "a deferred retry with the in-memory DLQ",
    "fw.stream { name = 's', database = 'shop', retry = { mode = 'deferred' }, dlq = { store = 'memory' }, on_change = h }",
    { S .. 'retry.mode: "deferred" needs a MongoDB DLQ (dlq.store = "memory" loses its scheduled retries when the process ends)' } },
  { "a deferred retry with on_batch",
    "fw.stream { name = 's', database = 'shop', retry = { mode = 'deferred' }, dlq = true, on_batch = h }",
    { S .. 'retry.mode: "deferred" is for per-event handlers: an on_batch call is retried and bisected '
      .. 'in place (use mode = "blocking")' } },
  { "retry given as a string",
    "fw.stream { name = 's', database = 'shop', retry = 'yes', on_change = h }",
    { S .. 'retry: expected true, false or a table of retry settings, got "yes"' } },
  { "a camelCase retry key",
    "fw.stream { name = 's', database = 'shop', retry = { maxAttempts = 5 }, on_change = h }",
    { S .. 'retry: unknown key "maxAttempts" (did you mean "max_attempts"?)' } },
  { "retry_on given as a string",
    "fw.stream { name = 's', database = 'shop', retry = { retry_on = 'Timeout' }, on_change = h }",
    { S .. 'retry.retry_on: expected an array of error type names such as { "Timeout" }, got "Timeout"' } },
  { "an invalid error type in no_retry_on",
    "fw.stream { name = 's', database = 'shop', retry = { no_retry_on = { 'Validation', 'http error' } }, on_change = h }",
    { S .. 'retry.no_retry_on[2]: invalid error type "http error" (expected a dotted name such as "Http.Timeout")' } },
  { "a negative dlq.ttl_days",
    "fw.stream { name = 's', database = 'shop', dlq = { ttl_days = -1 }, on_change = h }",
    { S .. "dlq.ttl_days: expected an integer >= 0 (0 = keep forever), got -1" } },
  { "an unacknowledged dlq.write_concern",
    "fw.stream { name = 's', database = 'shop', dlq = { write_concern = 0 }, on_change = h }",
    { S .. 'dlq.write_concern: 0 (unacknowledged) is not allowed: the checkpoint may only pass an event once '
      .. 'its DLQ insert is acknowledged (use "majority" or an integer >= 1)' } },
  { "a fractional dlq.write_concern",
    "fw.stream { name = 's', database = 'shop', dlq = { write_concern = 1.5 }, on_change = h }",
    { S .. 'dlq.write_concern: expected "majority", a tag set name or an integer >= 1, got 1.5' } },
  { "an empty dlq.collection",
    "fw.stream { name = 's', database = 'shop', dlq = { collection = '' }, on_change = h }",
    { S .. 'dlq.collection: expected a non-empty string, got ""' } },
  { "dlq.include_stack_trace as a string",
    "fw.stream { name = 's', database = 'shop', dlq = { include_stack_trace = 'yes' }, on_change = h }",
    { S .. 'dlq.include_stack_trace: expected true or false, got "yes"' } },
  { "a dlq key from the seed's Java spelling",
    "fw.stream { name = 's', database = 'shop', dlq = { ttlDays = 90 }, on_change = h }",
    { S .. 'dlq: unknown key "ttlDays" (did you mean "ttl_days"?)' } },
  { "dlq given as a number",
    "fw.stream { name = 's', database = 'shop', dlq = 1, on_change = h }",
    { S .. "dlq: expected true, false or a table of dlq settings, got 1" } },
  { "a timeout without a unit",
    "fw.stream { name = 's', database = 'shop', timeout = 30, on_change = h }",
    { S .. 'timeout: expected a duration string, got 30 (a number has no unit: write "30s" or "30ms")' } },
  { "a memory_limit with a space",
    "fw.stream { name = 's', database = 'shop', memory_limit = '256 MB', on_change = h }",
    { S .. 'memory_limit: invalid size "256 MB" (expected an integer followed by B, KB, MB or GB, e.g. "256MB")' } },
  { "a memory_limit too small to run",
    "fw.stream { name = 's', database = 'shop', memory_limit = '64KB', on_change = h }",
    { S .. 'memory_limit: "64KB" is too small (minimum "1MB")' } },
  { "a memory_limit given as a number",
    "fw.stream { name = 's', database = 'shop', memory_limit = 1024, on_change = h }",
    { S .. 'memory_limit: expected a size string such as "256MB", got 1024' } },
  { "no handler",
    "fw.stream { name = 's', database = 'shop' }",
    { S .. "handlers: none declared (define at least one of on_insert, on_update, on_replace, on_delete, "
      .. "on_change, on_snapshot)" } },
  { "a handler that is not a function",
    "fw.stream { name = 's', database = 'shop', on_insert = 'process' }",
    { S .. 'on_insert: expected a function, got "process"' } },
  { "an on_error that is not a function",
    "fw.stream { name = 's', database = 'shop', on_change = h, on_error = 'dlq' }",
    { S .. 'on_error: expected a function(err, ctx), got "dlq"' } },
  { "fw.stream called with a string",
    "fw.stream 'orders'",
    { P .. 'stream #1: expected a table: fw.stream { ... }, got "orders"' } },
  { "fw.stream called as a method",
    "fw:stream { name = 's', database = 'shop', on_change = h }",
    { P .. "stream #1: fw.stream takes one table: write fw.stream { ... } (not fw:stream)" } },
  { "an unknown fw.defaults key",
    "fw.defaults { databse = 'shop' }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: unknown key "databse" (did you mean "database"?)' } },
  { "a state bound that is too small",
    "fw.defaults { state = { max_bytes = '512B' } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: state.max_bytes: "512B" is too small (minimum "1KB")' } },
  { "a state bound that is not a size string",
    "fw.defaults { state = { max_bytes = 1024 } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: state.max_bytes: expected a size string such as "64MB", got 1024' } },
  { "a misspelt state key",
    "fw.defaults { state = { max_byte = '1MB' } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: state: unknown key "max_byte" (did you mean "max_bytes"?)' } },
  { "an unknown ha mode",
    "fw.defaults { ha = { mode = 'leeder' } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: ha.mode: invalid value "leeder" (did you mean "leader"? expected "none", "leader" or "shared")' } },
  { "a lease under a second",
    "fw.defaults { ha = { mode = 'leader', lease = '500ms' } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: ha.lease: "500ms" is out of range (from "1s" to "1h"; a crashed holder\'s streams are '
      .. 'taken over within lease + 250 ms, lease + lease / 3 + 250 ms with mode = "shared")' } },
  { "a lease without a unit",
    "fw.defaults { ha = { mode = 'leader', lease = 10 } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: ha.lease: expected a duration string, got 10 (a number has no unit: write "10s" or "10ms")' } },
  { "ha that is not a table",
    "fw.defaults { ha = 'leader' }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: ha: expected a table of ha settings, got "leader"' } },
  { "a misspelt ha key",
    "fw.defaults { ha = { mode = 'leader', leese = '5s' } }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: ha: unknown key "leese" (did you mean "lease"?)' } },
  { "ha set on a stream",
    "fw.stream { name = 's', database = 'shop', ha = { mode = 'leader' }, on_change = h }",
    { S .. 'ha: is set for the whole script: fw.defaults { ha = { mode = "leader" } } (every stream then '
      .. 'has one leader among the instances running the script)' } },
  { "fw.defaults { retry = true }",
    "fw.defaults { retry = true }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. "defaults: retry: expected a table of retry settings, got true (defaults only hold settings; "
      .. "turn retry on per stream with retry = true)" } },
  { "an invalid fw.defaults database (not repeated for each stream)",
    "fw.defaults { database = 'a b' }\nfw.stream { name = 's', on_change = h }",
    { P .. 'defaults: database: invalid database name "a b" (at most 63 bytes, without / \\ . " $, spaces or NUL)' } },
  { "a defaults uri that is not a MongoDB URI",
    "fw.defaults { uri = 'localhost:27017' }\nfw.stream { name = 's', database = 'shop', on_change = h }",
    { P .. 'defaults: uri: expected a MongoDB connection string starting with mongodb:// or mongodb+srv://, '
      .. 'got "localhost:27017"' } },
  { "fw.defaults called twice",
    "fw.defaults { database = 'a' }\nfw.defaults { database = 'b' }\nfw.stream { name = 's', on_change = h }",
    { SCRIPT .. ":4: defaults: fw.defaults called again (first called at /s/bad.lua:3; merge them into one "
      .. "fw.defaults { ... })" } },
  { "defaults whose retry delays conflict (reported once, at the defaults)",
    "fw.defaults { database = 'shop', retry = { initial_delay = '10s', max_delay = '5s' } }\n"
      .. "fw.stream { name = 'a', retry = true, on_change = h }\n"
      .. "fw.stream { name = 'b', retry = { max_attempts = 5 }, on_change = h }",
    { P .. 'defaults: retry.max_delay: must be >= retry.initial_delay ("10s"), got "5s"' } },
  { "a stream max_delay below the initial_delay from fw.defaults",
    "fw.defaults { database = 'shop', retry = { initial_delay = '10s' } }\n"
      .. "fw.stream { name = 's', retry = { max_delay = '5s' }, on_change = h }",
    { SCRIPT .. ':4: stream "s": retry.max_delay: must be >= retry.initial_delay ("10s", from fw.defaults), '
      .. 'got "5s"' } },
  { "a script that declares no stream",
    "fw.defaults { database = 'shop' }",
    { SCRIPT .. ": no streams declared (declare at least one with fw.stream { name = ..., "
      .. "on_change = function(ctx) ... end })" } },
  { "a syntax error",
    "fw.stream { name = 's' on_change = h }",
    { SCRIPT .. ":3: '}' expected near 'on_change'" } },
  { "a runtime error while loading, after a bad declaration",
    "fw.stream { name = 's', on_change = h }\nlocal x = nil + 1",
    { S .. "database: missing (set database in this stream, in fw.defaults { database = ... } or in "
      .. "the URI path, e.g. mongodb://127.0.0.1:27017/shop)",
      SCRIPT .. ":4: attempt to perform arithmetic on a nil value" } },
  { "a typed error raised while loading",
    "error(fw.error('Config', 'ORDERS_URL is not set'))",
    { SCRIPT .. ":3: Config: ORDERS_URL is not set" } },
}

describe("config: bad scripts", function()
  for _, case in ipairs(BAD) do
    it("rejects " .. case[1], function()
      assert.are.same(case[3], errors_of(case[2], case[4]))
    end)
  end

  it("has at least 20 distinct bad scripts", function()
    assert.is_true(#BAD >= 20)
  end)

  it("reports every error of every stream, in declaration order", function()
    local errs = errors_of([[
fw.stream { name = 'a', database = 'shop', retry = { max_attempts = 0, jitter = 1 }, on_change = h }
fw.defaults { timeout = '1 minute' }
fw.stream { database = 'shop' }
fw.stream { name = 'a', database = 'shop', on_updte = h }]])
    assert.are.same({
      SCRIPT .. ':3: stream "a": retry.max_attempts: expected an integer >= 1, got 0',
      SCRIPT .. ':3: stream "a": retry.jitter: expected true or false, got 1',
      SCRIPT .. ':4: defaults: timeout: invalid duration "1 minute" (expected a number followed by ms, s, '
        .. 'm, h, d or w, e.g. "500ms")',
      SCRIPT .. ':5: stream #2: name: missing (every stream needs a unique name, e.g. name = "order-watcher")',
      SCRIPT .. ":5: stream #2: handlers: none declared (define at least one of on_insert, on_update, "
        .. "on_replace, on_delete, on_change, on_snapshot)",
      SCRIPT .. ':6: stream "a": name: duplicate stream name (first declared at /s/bad.lua:3)',
      SCRIPT .. ':6: stream "a": unknown key "on_updte" (did you mean "on_update"?)',
      SCRIPT .. ':6: stream "a": handlers: none declared (define at least one of on_insert, on_update, '
        .. "on_replace, on_delete, on_change, on_snapshot)",
    }, errs)
  end)

  it("reports the line of each declaration in a multi-line table", function()
    local errs = errors_of("\n\nfw.stream {\n  name = 's',\n  database = 'shop',\n  timeout = '1x',\n"
      .. "  on_change = h,\n}")
    -- The position is the line where the call's arguments start.
    assert.are.same({ SCRIPT .. ':5: stream "s": timeout: invalid duration "1x" (expected a number '
      .. 'followed by ms, s, m, h, d or w, e.g. "500ms")' }, errs)
  end)

  it("reports the call site when fw.stream is tail-called from a helper", function()
    local errs = errors_of("local function watch(n) return fw.stream { name = n, on_change = h } end\n"
      .. "watch('a')")
    assert.are.same({ SCRIPT .. ':4: stream "a": database: missing (set database in this stream, in '
      .. "fw.defaults { database = ... } or in the URI path, e.g. mongodb://127.0.0.1:27017/shop)" }, errs)
  end)

  it("leaves a missing database to run's --uri under check given no URI", function()
    local registry = debug.getregistry()
    registry[config.CHECK_KEY] = true
    finally(function() registry[config.CHECK_KEY] = nil end)
    local spec = spec_of("fw.stream { name = 's', on_change = h }")
    assert.are.same({ config.DATABASE_AT_RUN, "run" }, { spec.database, spec.database_source })
    -- given a URI (--uri, FLOWWARDEN_URI), check says what run would
    local errs = errors_of("fw.stream { name = 's', on_change = h }",
      { uri = "mongodb://127.0.0.1:27017/" })
    assert.truthy(errs[1]:find('stream "s": database: missing', 1, true))
    spec = spec_of("fw.stream { name = 's', on_change = h }",
      { uri = "mongodb://127.0.0.1:27017/shop" })
    assert.are.same({ "shop", "uri" }, { spec.database, spec.database_source })
  end)

  it("reports a script that cannot be opened", function()
    local cfg, errs = config.load_file("/nonexistent/flowwarden.lua")
    assert.is_nil(cfg)
    assert.are.same({ "cannot open /nonexistent/flowwarden.lua: No such file or directory" }, errs)
  end)

  it("refuses declarations once finished", function()
    local cfg = run("fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.is_not_nil(cfg)
    assert.has_error(function()
      config.stream({ name = "late" })
    end, "fw.stream: streams can only be declared while the script loads")
    assert.has_error(function()
      config.finish()
    end, "config.finish: already called (config.reset() starts over)")
  end)

  it("rejects unknown finish options as a host bug", function()
    config.reset()
    assert.has_error(function()
      config.finish({ default_db = "x" })
    end, 'config.finish: bad option default_db = "x"')
  end)
end)

describe("config: effective settings", function()
  it("fills every seed default", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({
      name = "s",
      declared_at = SCRIPT .. ":3",
      database = "shop",
      database_source = "stream",
      pipeline = {},
      full_document = "default",
      full_document_before_change = "off",
      checkpoint = { save_every = 1, save_interval_ms = 5000, idle_heartbeat_ms = 300000,
                     max_unsaved_ms = 100,
                     start_position = "resume", on_history_lost = "fail", mode = "async" },
      restart = { max_attempts = 0, initial_delay_ms = 1000, max_delay_ms = 60000,
                  multiplier = 2.0, jitter = false },
      retry = { enabled = false, max_attempts = 1, initial_delay_ms = 500, max_delay_ms = 30000,
                multiplier = 2.0, jitter = true, mode = "blocking", retry_on = {},
                no_retry_on = DEFAULT_NO_RETRY },
      timeout_ms = 30000,
      memory_limit_bytes = 268435456,
      split_large_events = true,
      oversize = "fail",
      oversize_threshold_bytes = 16 * 1024 * 1024 - 64 * 1024,
      lanes = 1,
      exactly_once = false,
      state = { max_bytes = 64 * 1024 * 1024 },
      ha = { mode = "none", lease_ms = 10000 },
      snapshot = { chunk_size = 1000, pause_ms = 0, read_preference = "primary" },
      handlers = { change = spec.handlers.change },
    }, spec)
    assert.is_function(spec.handlers.change)
    assert.is_nil(spec.dlq)
    assert.is_nil(spec.collection)
    assert.is_nil(spec.operation_types)
    assert.is_nil(spec.on_error)
  end)

  it("reads exactly_once = { connection = <PostgreSQL> } and { connection = \"default\" }", function()
    local spec = spec_of("fw.connection { name = 'rep', uri = 'postgresql://u@127.0.0.1/r' } "
      .. "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'rep' }, "
      .. "on_change = h }")
    assert.same({ true, "rep" }, { spec.exactly_once, spec.exactly_once_pg })
    spec = spec_of("fw.stream { name = 's', database = 'shop', "
      .. "exactly_once = { connection = 'default' }, on_change = h }")
    assert.same({ true }, { spec.exactly_once, spec.exactly_once_pg })
    spec = spec_of("fw.connection { name = 'rep', uri = 'postgresql://u@127.0.0.1/r' } "
      .. "fw.stream { name = 's', database = 'shop', exactly_once = { connection = 'rep' }, "
      .. "on_batch = h }")
    assert.same({ true, "rep" }, { spec.exactly_once, spec.exactly_once_pg })
  end)

  it("gives retry = true the seed's RetryPolicy defaults", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', retry = true, on_change = h }")
    assert.are.same({ enabled = true, max_attempts = 3, initial_delay_ms = 500, max_delay_ms = 30000,
                      multiplier = 2.0, jitter = true, mode = "blocking", retry_on = {},
                      no_retry_on = DEFAULT_NO_RETRY }, spec.retry)
  end)

  it("reads retry.mode = \"deferred\" with the issue's backoff", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = true, on_change = h, "
      .. "retry = { mode = 'deferred', max_attempts = 5, initial_delay = '30s', multiplier = 4, "
      .. "max_delay = '2h' } }")
    assert.are.equal("deferred", spec.retry.mode)
    assert.are.same({ 5, 30000, 7200000, 4.0 }, { spec.retry.max_attempts, spec.retry.initial_delay_ms,
                                                  spec.retry.max_delay_ms, spec.retry.multiplier })
  end)

  it("takes retry.mode from fw.defaults, and keeps blocking without a retry policy", function()
    local _, cfg = spec_of("fw.defaults { database = 'shop', retry = { mode = 'deferred' } }\n"
      .. "fw.stream { name = 'a', dlq = true, retry = { max_attempts = 2 }, on_change = h }\n"
      .. "fw.stream { name = 'b', retry = false, on_change = h }")
    assert.are.equal("deferred", cfg.streams[1].retry.mode)
    assert.are.equal("blocking", cfg.streams[2].retry.mode)
  end)

  it("gives dlq = true the seed's DeadLetterQueue defaults", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = true, on_change = h }")
    assert.are.same({ collection = "_fw_dlq", ttl_days = 30, include_original_document = true,
                      include_stack_trace = true, write_concern = "majority", store = "mongo",
                      sequenced = false, max_sequences = 1024, max_sequence_size = 1024 },
      spec.dlq)
  end)

  it("treats retry = false and dlq = false like absent", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', retry = false, dlq = false, on_change = h }")
    assert.is_false(spec.retry.enabled)
    assert.are.equal(1, spec.retry.max_attempts)
    assert.is_nil(spec.dlq)
  end)

  it("turns the DLQ off with dlq = { enabled = false }", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = { enabled = false }, on_change = h }")
    assert.is_nil(spec.dlq)
  end)

  it("normalizes checkpoint.start_at to (t << 32) | i", function()
    local fields = require("flowwarden.config.fields")
    local date = spec_of([[fw.stream { name = "s", database = "shop",
      checkpoint = { start_at = "2026-11-26T10:00:00.900+01:00" }, on_change = h }]])
    assert.are.same({ 1795683600, 0 }, { fields.start_at_parts(date.checkpoint.start_at) })
    local ts = spec_of([[fw.stream { name = "s", database = "shop",
      checkpoint = { start_at = { t = 4294967295, i = 7 } }, on_change = h }]])
    assert.are.same({ 4294967295, 7 }, { fields.start_at_parts(ts.checkpoint.start_at) })
    local none = spec_of([[fw.stream { name = "s", database = "shop", on_change = h }]])
    assert.is_nil(none.checkpoint.start_at)
  end)

  it("normalizes every setting of a full declaration", function()
    local spec = spec_of([[
fw.stream {
  name = "order-watcher", database = "shop", collection = "orders",
  operation_types = { "insert", "update" },
  pipeline = { { ["$match"] = { ["fullDocument.total"] = { ["$gt"] = 0 } } } },
  full_document = "updateLookup", full_document_before_change = "whenAvailable",
  checkpoint = { save_every = 10, save_interval = "1s", idle_heartbeat = "1m", max_unsaved = "2s",
                 start_position = "latest", on_history_lost = "resume_from_now", mode = "sync" },
  restart = { max_attempts = 5, initial_delay = "2s", max_delay = "1h", multiplier = 3, jitter = true },
  retry = { max_attempts = 5.0, initial_delay = "1.5s", max_delay = "30s", multiplier = 1.5,
            jitter = false, retry_on = { "Timeout", "Http" }, no_retry_on = { "Validation" } },
  dlq = { collection = "orders_dlq", ttl_days = 90, include_original_document = false,
          include_stack_trace = false, write_concern = 2 },
  timeout = "500ms", memory_limit = "1GB",
  on_insert = h, on_update = h, on_replace = h, on_delete = h, on_change = h,
  on_error = function(err, ctx) return fw.SKIP end,
}]])
    assert.are.equal("orders", spec.collection)
    assert.are.same({ "insert", "update" }, spec.operation_types)
    assert.are.equal("table", type(spec.pipeline[1]["$match"]))
    assert.are.equal("updateLookup", spec.full_document)
    assert.are.equal("whenAvailable", spec.full_document_before_change)
    assert.are.same({ save_every = 10, save_interval_ms = 1000, idle_heartbeat_ms = 60000,
                      max_unsaved_ms = 2000, start_position = "latest", on_history_lost = "resume_from_now", mode = "sync" },
                    spec.checkpoint)
    assert.are.same({ max_attempts = 5, initial_delay_ms = 2000, max_delay_ms = 3600000,
                      multiplier = 3.0, jitter = true }, spec.restart)
    assert.are.equal("float", math.type(spec.restart.multiplier))
    assert.are.same({ enabled = true, max_attempts = 5, initial_delay_ms = 1500, max_delay_ms = 30000,
                      multiplier = 1.5, jitter = false, mode = "blocking",
                      retry_on = { "Timeout", "Http" },
                      no_retry_on = { "Validation" } }, spec.retry)
    assert.are.equal("integer", math.type(spec.retry.max_attempts))
    assert.are.same({ collection = "orders_dlq", ttl_days = 90, include_original_document = false,
                      include_stack_trace = false, write_concern = 2, store = "mongo",
                      sequenced = false, max_sequences = 1024, max_sequence_size = 1024 }, spec.dlq)
    assert.are.equal(500, spec.timeout_ms)
    assert.are.equal(1073741824, spec.memory_limit_bytes)
    for _, op in ipairs({ "insert", "update", "replace", "delete", "change" }) do
      assert.is_function(spec.handlers[op])
    end
    assert.is_function(spec.on_error)
  end)

  it("accepts every MongoDB operation type", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', operation_types = { 'insert', "
      .. "'update', 'replace', 'delete', 'drop', 'rename', 'dropDatabase', 'invalidate' }, on_change = h }")
    assert.are.equal(8, #spec.operation_types)
  end)

  it("accepts a write_concern tag set name", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = { write_concern = 'dc2' }, on_change = h }")
    assert.are.equal("dc2", spec.dlq.write_concern)
  end)

  it("keeps streams in declaration order", function()
    local _, cfg = spec_of("fw.stream { name = 'b', database = 'x', on_change = h }\n"
      .. "fw.stream { name = 'a', database = 'x', on_change = h }")
    assert.are.equal("b", cfg.streams[1].name)
    assert.are.equal("a", cfg.streams[2].name)
    assert.are.equal(SCRIPT .. ":4", cfg.streams[2].declared_at)
  end)

  it("returns fresh tables: changing one spec does not change the seed", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', retry = true, on_change = h }")
    table.insert(spec.retry.no_retry_on, "Changed")
    spec.checkpoint.save_every = 99
    spec = spec_of("fw.stream { name = 's', database = 'shop', retry = true, on_change = h }")
    assert.are.same(DEFAULT_NO_RETRY, spec.retry.no_retry_on)
    assert.are.equal(1, spec.checkpoint.save_every)
  end)
end)

describe("config: fw.defaults", function()
  it("merges attribute by attribute: stream > fw.defaults > seed", function()
    local spec = spec_of([[
fw.defaults {
  database = "shop",
  retry = { max_attempts = 3, initial_delay = "1s", multiplier = 2.0, max_delay = "30s", jitter = false },
  dlq = { collection = "all_dlq", ttl_days = 7 },
  checkpoint = { save_every = 100 },
  restart = { max_delay = "5m" },
  timeout = "10s",
  memory_limit = "64MB",
}
fw.stream { name = "s", retry = { max_attempts = 5 }, dlq = { ttl_days = 0 },
            checkpoint = { save_interval = "1s" }, on_change = h }]])
    assert.are.equal("shop", spec.database)
    assert.are.equal("defaults", spec.database_source)
    assert.are.same({ enabled = true, max_attempts = 5, initial_delay_ms = 1000, max_delay_ms = 30000,
                      multiplier = 2.0, jitter = false, mode = "blocking", retry_on = {},
                      no_retry_on = DEFAULT_NO_RETRY }, spec.retry)
    assert.are.same({ collection = "all_dlq", ttl_days = 0, include_original_document = true,
                      include_stack_trace = true, write_concern = "majority", store = "mongo",
                      sequenced = false, max_sequences = 1024, max_sequence_size = 1024 }, spec.dlq)
    assert.are.equal(100, spec.checkpoint.save_every)
    assert.are.equal(1000, spec.checkpoint.save_interval_ms)
    assert.are.equal(300000, spec.restart.max_delay_ms)
    assert.are.equal(1000, spec.restart.initial_delay_ms)
    assert.are.equal(10000, spec.timeout_ms)
    assert.are.equal(64 * 1024 * 1024, spec.memory_limit_bytes)
  end)

  it("takes checkpoint.max_unsaved as a duration, and 0 or \"0s\" for the count bound alone", function()
    assert.are.equal(100, spec_of("fw.stream { name = 's', database = 'shop', on_change = h }")
      .checkpoint.max_unsaved_ms)
    for src, want in pairs({ ["'250ms'"] = 250, ["'1s'"] = 1000, ["'0s'"] = 0, ["'0ms'"] = 0,
                             ["0"] = 0 }) do
      local spec = spec_of("fw.stream { name = 's', database = 'shop', checkpoint = { max_unsaved = "
        .. src .. " }, on_change = h }")
      assert.are.equal(want, spec.checkpoint.max_unsaved_ms, src)
    end
  end)

  it("does not turn retry or a DLQ on for streams that do not ask for them (as the seed's YAML)", function()
    local spec = spec_of("fw.defaults { database = 'shop', retry = { max_attempts = 4 }, dlq = { ttl_days = 1 } }\n"
      .. "fw.stream { name = 's', on_change = h }")
    assert.is_false(spec.retry.enabled)
    assert.are.equal(1, spec.retry.max_attempts)
    assert.is_nil(spec.dlq)
  end)

  it("lets fw.defaults switch the DLQ off for every stream", function()
    local spec = spec_of("fw.defaults { database = 'shop', dlq = { enabled = false } }\n"
      .. "fw.stream { name = 's', dlq = true, on_change = h }")
    assert.is_nil(spec.dlq)
  end)

  it("replaces no_retry_on as a whole, as the seed's annotation attribute does", function()
    local spec = spec_of("fw.defaults { database = 'shop', retry = { no_retry_on = { 'Validation' } } }\n"
      .. "fw.stream { name = 's', retry = true, on_change = h }")
    assert.are.same({ "Validation" }, spec.retry.no_retry_on)
  end)

  it("gives every stream the script's ha settings", function()
    local spec = spec_of("fw.defaults { ha = { mode = 'leader', lease = '3s' } }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({ mode = "leader", lease_ms = 3000 }, spec.ha)
    spec = spec_of("fw.defaults { ha = { mode = 'leader' } }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({ mode = "leader", lease_ms = 10000 }, spec.ha)
  end)

  it("applies even when declared after the streams", function()
    local spec = spec_of("fw.stream { name = 's', on_change = h }\nfw.defaults { database = 'late' }")
    assert.are.equal("late", spec.database)
  end)
end)

describe("config: URI and default database", function()
  it("uses the built-in URI when nothing else is given", function()
    local _, cfg = spec_of("fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.equal("mongodb://127.0.0.1:27017/?replicaSet=rs0", cfg.uri)
    assert.are.equal("default", cfg.uri_source)
    assert.is_nil(cfg.default_database)
  end)

  it("takes the database from the script's uri path", function()
    local spec, cfg = spec_of("fw.defaults { uri = 'mongodb://db1:27017,db2/shop?replicaSet=rs0' }\n"
      .. "fw.stream { name = 's', on_change = h }")
    assert.are.equal("script", cfg.uri_source)
    assert.are.equal("shop", spec.database)
    assert.are.equal("uri", spec.database_source)
  end)

  it("lets the host's uri win over the script's", function()
    local spec, cfg = spec_of("fw.defaults { uri = 'mongodb://db1/shop' }\nfw.stream { name = 's', on_change = h }",
      { uri = "mongodb+srv://user:pw@cluster.example/billing?retryWrites=true" })
    assert.are.equal("option", cfg.uri_source)
    assert.are.equal("mongodb+srv://user:pw@cluster.example/billing?retryWrites=true", cfg.uri)
    assert.are.equal("billing", spec.database)
  end)

  it("uses an explicit default_database from the host", function()
    local spec = spec_of("fw.stream { name = 's', on_change = h }", { default_database = "crm" })
    assert.are.equal("crm", spec.database)
  end)

  it("prefers fw.defaults' database over the URI's, and the stream's over both", function()
    local spec, cfg = spec_of("fw.defaults { database = 'd' }\nfw.stream { name = 's', on_change = h }\n"
      .. "fw.stream { name = 't', database = 'own', on_change = h }", { uri = "mongodb://h/u" })
    assert.are.equal("d", spec.database)
    assert.are.equal("own", cfg.streams[2].database)
  end)

  it("reads the database from URIs", function()
    assert.are.equal("shop", config.uri_database("mongodb://h:1/shop"))
    assert.are.equal("my db", config.uri_database("mongodb://u:p@h/my%20db?w=1"))
    assert.is_nil(config.uri_database("mongodb://h:27017/?replicaSet=rs0"))
    assert.is_nil(config.uri_database("mongodb://h:27017"))
    assert.is_nil(config.uri_database("http://h/shop"))
  end)
end)

describe("config: loading files", function()
  local dir

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir))
  end)

  after_each(function()
    os.execute("rm -rf " .. dir)
  end)

  local function write(name, text)
    local f = assert(io.open(dir .. "/" .. name, "w"))
    f:write(text)
    f:close()
  end

  it("loads a script that requires a module next to it", function()
    write("handlers_fwtest.lua", "return { on_insert = function(ctx) return 'ok' end }\n")
    write("main.lua", "local fw = require('flowwarden')\nlocal hs = require('handlers_fwtest')\n"
      .. "fw.stream { name = 'x', database = 'shop', on_insert = hs.on_insert }\n")
    local cfg, errs = config.load_file(dir .. "/main.lua")
    assert.is_nil(errs)
    assert.are.equal(dir .. "/main.lua:3", cfg.streams[1].declared_at)
    assert.are.equal("ok", cfg.streams[1].handlers.insert())
  end)

  it("reports declarations made in a required module at their own position", function()
    write("streams_fwtest.lua", "local fw = require('flowwarden')\n\nfw.stream { name = 'm', on_change = 1 }\n")
    write("main.lua", "require('streams_fwtest')\n")
    local cfg, errs = config.load_file(dir .. "/main.lua", { default_database = "shop" })
    assert.is_nil(cfg)
    assert.are.same({ dir .. '/streams_fwtest.lua:3: stream "m": on_change: expected a function, got 1' }, errs)
  end)
end)

describe("config.suggest", function()
  it("finds close keys and ignores case, underscores and dashes", function()
    local keys = { "max_attempts", "initial_delay", "max_delay", "jitter" }
    assert.are.equal("max_attempts", config.suggest("maxAttempts", keys))
    assert.are.equal("max_attempts", config.suggest("max_attempt", keys))
    assert.are.equal("jitter", config.suggest("jiter", keys))
    assert.are.equal("initial_delay", config.suggest("inital_delay", keys))
    assert.is_nil(config.suggest("colour", keys))
    assert.is_nil(config.suggest(1, keys))
  end)
end)

describe("config: fw.connection and fw.defaults.http", function()
  local AUDIT = "fw.connection { name = 'audit', uri = 'mongodb://u:pw@10.0.0.1:27017/?replicaSet=rs1' }\n"

  it("lists declared connections in order with their position", function()
    local _, cfg = spec_of(AUDIT .. "fw.connection { name = 'reports', uri = 'mongodb://h2/' }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({
      { name = "audit", uri = "mongodb://u:pw@10.0.0.1:27017/?replicaSet=rs1", kind = "mongodb",
        declared_at = SCRIPT .. ":3" },
      { name = "reports", uri = "mongodb://h2/", kind = "mongodb", declared_at = SCRIPT .. ":4" },
    }, cfg.connections)
  end)

  it("lets a DLQ name a declared connection, and treats \"default\" as the run URI", function()
    local spec = spec_of(AUDIT .. "fw.stream { name = 's', database = 'shop', dlq = { connection = 'audit' }, on_change = h }")
    assert.are.equal("audit", spec.dlq.connection)
    spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = { connection = 'default' }, on_change = h }")
    assert.is_nil(spec.dlq.connection)
  end)

  it("rejects bad connections with messages naming the declaration", function()
    local C = P .. "connection"
    assert.are.same({ C .. ': name: missing (every connection needs a name, e.g. name = "audit")' },
      errors_of("fw.connection { uri = 'mongodb://h/' }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ C .. ' "default": name: "default" is the run URI (--uri or fw.defaults { uri = ... }) and cannot be declared again' },
      errors_of("fw.connection { name = 'default', uri = 'mongodb://h/' }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ C .. ' "a": uri: missing (e.g. uri = fw.env("AUDIT_URI"))' },
      errors_of("fw.connection { name = 'a' }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ C .. ' "a": uri: expected a connection string starting with mongodb://, mongodb+srv://, redis:// or postgresql://, got a string that is not one' },
      errors_of("fw.connection { name = 'a', uri = 'http://secret@h' }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ C .. ' "a": unknown key "url" (did you mean "uri"?)', C .. ' "a": uri: missing (e.g. uri = fw.env("AUDIT_URI"))' },
      errors_of("fw.connection { name = 'a', url = 'mongodb://h/' }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ SCRIPT .. ':4: connection "audit": name: duplicate connection name (first declared at /s/bad.lua:3)' },
      errors_of(AUDIT .. AUDIT .. "fw.stream { name = 's', database = 'shop', on_change = h }"))
  end)

  it("tells Redis and PostgreSQL connections by their scheme", function()
    local _, cfg = spec_of("fw.connection { name = 'cache', uri = 'redis://:pw@127.0.0.1:6380/2' }\n"
      .. "fw.connection { name = 'rep', uri = 'postgresql://u@h:5432/db' }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({ "redis", "postgresql" }, { cfg.connections[1].kind, cfg.connections[2].kind })
    assert.are.same({ uri = "redis://:pw@127.0.0.1:6380/2", host = "127.0.0.1", port = 6380, db = 2,
                      password = "pw" }, config.store_connection("cache", "redis"))
    assert.are.same({ uri = "postgresql://u@h:5432/db" }, config.store_connection("rep", "postgresql"))
    local none, why = config.store_connection("rep", "redis")
    assert.is_nil(none)
    assert.are.equal('connection "rep" is not a Redis connection (its URI starts with postgresql:)', why)
    none, why = config.store_connection("nope", "redis")
    assert.is_nil(none)
    assert.matches('unknown connection "nope"', why, 1, true)
  end)

  it("rejects bad Redis URIs and Redis Cluster, naming the connection and never the URI", function()
    local function bad(uri)
      local errs = errors_of("fw.connection { name = 'cache', uri = '" .. uri .. "' }\n"
        .. "fw.stream { name = 's', database = 'shop', on_change = h }")
      assert.are.equal(1, #errs)
      assert.is_nil(errs[1]:find("SECRET", 1, true), errs[1])
      return errs[1]
    end
    local C = P .. 'connection "cache": uri: invalid Redis URI: '
    local CLUSTER = "Redis Cluster is not supported (fw.redis talks to one server: name one node, "
      .. "or a proxy in front of the cluster)"
    assert.are.equal(C .. CLUSTER, bad("redis+cluster://:SECRET@h1:7000"))
    assert.are.equal(C .. CLUSTER, bad("redis://:SECRET@h1:7000,h2:7001/0"))
    assert.are.equal(C .. CLUSTER, bad("redis://:SECRET@h1:7000/0?cluster=true"))
    assert.are.equal(C .. "invalid port (expected 1 to 65535)", bad("redis://:SECRET@h:99999"))
    assert.are.equal(C .. "the path must be a database number (e.g. redis://host:6379/0)",
      bad("redis://:SECRET@h:6379/x"))
    assert.are.equal(C .. "missing host (e.g. redis://127.0.0.1:6379/0)", bad("redis://:SECRET@/0"))
    assert.matches("TLS", bad("rediss://:SECRET@h:6379"))
  end)

  it("refuses a DLQ on a Redis or PostgreSQL connection", function()
    assert.are.same({ SCRIPT .. ':4: stream "s": dlq.connection: connection "cache" is a Redis connection; a DLQ lives in MongoDB' },
      errors_of("fw.connection { name = 'cache', uri = 'redis://h' }\n"
        .. "fw.stream { name = 's', database = 'shop', dlq = { connection = 'cache' }, on_change = h }"))
  end)

  it("rejects a DLQ on an undeclared connection", function()
    assert.are.same({ S .. 'dlq.connection: unknown connection "audti" (declare it with fw.connection { name = "audti", uri = ... } or omit it to use the run URI)' },
      errors_of("fw.stream { name = 's', database = 'shop', dlq = { connection = 'audti' }, on_change = h }"))
  end)

  it("accepts a sequenced DLQ on the in-memory store, which keeps its sequences too", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', dlq = { sequenced = true, store = 'memory' }, on_change = h }")
    assert.is_true(spec.dlq.sequenced)
    assert.are.equal("memory", spec.dlq.store)
  end)

  it("normalizes http.allow_hosts and rejects malformed entries", function()
    local _, cfg = spec_of("fw.defaults { http = { allow_hosts = { 'Hooks.Example', '*.internal', '[::1]', '127.0.0.1' } } }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({ allow_hosts = { "hooks.example", "*.internal", "::1", "127.0.0.1" } }, cfg.http)
    assert.are.same({ allow_hosts = { "hooks.example", "*.internal", "::1", "127.0.0.1" } }, config.effective_http())
    local D = P .. "defaults: "
    assert.are.same({ D .. 'http.allow_hosts[1]: expected a host name, "*.domain" or an IP address, got "http://x/y"',
                      D .. 'http.allow_hosts[2]: a wildcard must be a whole first label, as in "*.internal", got "a*.b"' },
      errors_of("fw.defaults { http = { allow_hosts = { 'http://x/y', 'a*.b' } } }\n"
        .. "fw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ D .. 'http: unknown key "allow" (valid keys: allow_hosts)' },
      errors_of("fw.defaults { http = { allow = {} } }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
  end)

  it("gives every host when no allow list is set", function()
    spec_of("fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({}, config.effective_http())
  end)

  it("keeps the admin endpoint's listen and token, checking their types", function()
    local _, cfg = spec_of("fw.defaults { admin = { listen = '127.0.0.1:9464', token = 'tok' } }\n"
      .. "fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({ listen = "127.0.0.1:9464", token = "tok" }, cfg.admin)
    _, cfg = spec_of("fw.stream { name = 's', database = 'shop', on_change = h }")
    assert.are.same({}, cfg.admin)
    local D = P .. "defaults: "
    assert.are.same({ D .. "admin.listen: expected a non-empty string, got 9464",
                      D .. 'admin.token: expected a non-empty string, got ""' },
      errors_of("fw.defaults { admin = { listen = 9464, token = '' } }\n"
        .. "fw.stream { name = 's', database = 'shop', on_change = h }"))
    assert.are.same({ D .. 'admin: unknown key "port" (valid keys: listen, token)' },
      errors_of("fw.defaults { admin = { port = 9464 } }\nfw.stream { name = 's', database = 'shop', on_change = h }"))
  end)
end)

describe("config: the default DLQ of send_to_dlq (seed 000)", function()
  it("gives every stream without a dlq the first declared dlq as dlq_fallback", function()
    local _, cfg = spec_of("fw.stream { name = 'plain', database = 'shop', on_change = h }\n"
      .. "fw.stream { name = 'a', database = 'audit', on_change = h,\n"
      .. "  dlq = { collection = 'a_dlq', ttl_days = 7, include_stack_trace = false } }\n"
      .. "fw.stream { name = 'b', database = 'shop', on_change = h, dlq = { collection = 'b_dlq' } }\n"
      .. "fw.stream { name = 'late', database = 'shop', on_change = h }\n")
    local by = {}
    for _, spec in ipairs(cfg.streams) do
      by[spec.name] = spec
    end
    local expected = { collection = "a_dlq", ttl_days = 7, include_original_document = true,
                       include_stack_trace = false, write_concern = "majority",
                       database = "audit", stream = "a" }
    for _, name in ipairs({ "plain", "late" }) do
      assert.is_nil(by[name].dlq)
      for k, v in pairs(expected) do
        assert.are.equal(v, by[name].dlq_fallback[k], name .. ": " .. k)
      end
    end
    assert.is_nil(by.a.dlq_fallback)
    assert.is_nil(by.b.dlq_fallback)
  end)

  it("gives no dlq_fallback when no stream has a dlq", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', on_change = h }\n"
      .. "fw.stream { name = 't', database = 'shop', on_change = h, dlq = false }\n")
    assert.is_nil(spec.dlq_fallback)
  end)
end)

describe("config: partitions (issue 31)", function()
  it("runs a partitioned stream as its units, 0-based, each with the hash $match first", function()
    local _, cfg = spec_of("fw.stream { name = 'o', database = 'x', partitions = 3, on_change = h,\n"
      .. "  pipeline = { { ['$match'] = { a = 1 } } } }\n"
      .. "fw.stream { name = 'p', database = 'x', on_change = h }")
    assert.are.equal(4, #cfg.streams)
    for k = 0, 2 do
      local u = cfg.streams[k + 1]
      assert.are.equal(string.format("o#%d/3", k), u.name)
      assert.are.same({ "o", k, 3 }, { u.stream, u.partition, u.partitions })
      assert.are.same({ ["$match"] = { ["$expr"] = { ["$eq"] = {
        { ["$abs"] = { ["$mod"] = { { ["$toHashedIndexKey"] = "$documentKey._id" }, 3 } } }, k,
      } } } }, u.pipeline[1])
      assert.are.same({ ["$match"] = { a = 1 } }, u.pipeline[2])
      assert.are.equal(1, #u.declared_pipeline)
    end
    assert.are.equal("p", cfg.streams[4].name)
    assert.is_nil(cfg.streams[4].partitions)
  end)

  it("adds no $match for partitions = 1", function()
    local spec = spec_of("fw.stream { name = 'o', database = 'x', partitions = 1, on_change = h }")
    assert.are.equal("o#0/1", spec.name)
    assert.are.same({}, spec.pipeline)
  end)
end)

describe("config: incremental snapshots (issue 28)", function()
  it("reads start_position = \"snapshot\", on_snapshot and the snapshot settings", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', collection = 'c', "
      .. "checkpoint = { start_position = 'snapshot' }, snapshot = { chunk_size = 50, "
      .. "pause = '20ms', read_preference = 'secondaryPreferred' }, on_snapshot = h }")
    assert.are.equal("snapshot", spec.checkpoint.start_position)
    assert.are.same({ chunk_size = 50, pause_ms = 20, read_preference = "secondaryPreferred" },
      spec.snapshot)
    assert.is_function(spec.handlers.snapshot)
  end)

  it("takes a snapshot with exactly_once into MongoDB (its rows commit their progress)", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', collection = 'c', "
      .. "exactly_once = true, checkpoint = { start_position = 'snapshot' }, on_insert = h }")
    assert.same({ true, "snapshot" }, { spec.exactly_once, spec.checkpoint.start_position })
    spec = spec_of("fw.connection { name = 'sink', uri = 'mongodb://127.0.0.1:27018/' } "
      .. "fw.stream { name = 's', database = 'shop', collection = 'c', "
      .. "exactly_once = { connection = 'sink' }, snapshot = { chunk_size = 10 }, on_insert = h }")
    assert.same({ true, "sink", 10 },
      { spec.exactly_once, spec.exactly_once_connection, spec.snapshot.chunk_size })
  end)

  it("refuses a snapshot with exactly_once into PostgreSQL, naming the stream and why", function()
    local want = { S .. 'exactly_once: into PostgreSQL (connection "rep") cannot run with an '
      .. "incremental snapshot yet (a snapshot's row has no resume token, and its progress is "
      .. "not kept in flowwarden_checkpoints): take the snapshot with exactly_once = true or "
      .. "into a MongoDB connection, or without exactly_once" }
    local pg = "fw.connection { name = 'rep', uri = 'postgresql://u@127.0.0.1/r' } "
    assert.are.same(want, errors_of(pg .. "fw.stream { name = 's', database = 'shop', "
      .. "collection = 'c', exactly_once = { connection = 'rep' }, "
      .. "checkpoint = { start_position = 'snapshot' }, on_insert = h }"))
    assert.are.same(want, errors_of(pg .. "fw.stream { name = 's', database = 'shop', "
      .. "collection = 'c', exactly_once = { connection = 'rep' }, snapshot = {}, "
      .. "on_insert = h }"))
  end)

  it("takes a pause of 0ms", function()
    local spec = spec_of("fw.stream { name = 's', database = 'shop', collection = 'c', "
      .. "snapshot = { pause = '0ms' }, on_insert = h }")
    assert.are.equal(0, spec.snapshot.pause_ms)
  end)

  it("rejects a snapshot of a whole database, a chunk_size of 0 and an unknown read preference",
    function()
      assert.are.same({ S .. 'checkpoint.start_position: "snapshot" needs a collection: a '
        .. "database-wide stream cannot take a snapshot (declare one stream per collection to "
        .. "backfill)" },
        errors_of("fw.stream { name = 's', database = 'shop', "
          .. "checkpoint = { start_position = 'snapshot' }, on_insert = h }"))
      assert.are.same({ S .. "snapshot.chunk_size: expected an integer >= 1, got 0" },
        errors_of("fw.stream { name = 's', database = 'shop', collection = 'c', "
          .. "snapshot = { chunk_size = 0 }, on_insert = h }"))
      assert.are.same({ S .. 'snapshot.read_preference: invalid value "secondry" (did you mean '
        .. '"secondary"? expected "primary", "primaryPreferred", "secondary", '
        .. '"secondaryPreferred" or "nearest")' },
        errors_of("fw.stream { name = 's', database = 'shop', collection = 'c', "
          .. "snapshot = { read_preference = 'secondry' }, on_insert = h }"))
    end)
end)
