local config = require("flowwarden.config")
local describe_mod = require("flowwarden.describe")

local SCRIPT = "/s/orders.lua"

local function load(src, opts)
  local cfg, errs = config.load_string("local fw = require('flowwarden')\nlocal h = function() end\n" .. src,
    SCRIPT, opts)
  assert.is_nil(errs, errs and table.concat(errs, "\n"))
  return cfg
end

describe("describe.text", function()
  it("prints every effective setting, one stream per block, then the warnings", function()
    local cfg = load([[
fw.defaults { database = "shop", retry = { max_attempts = 4 } }
fw.stream {
  name = "order-watcher",
  collection = "orders",
  operation_types = { "insert", "update" },
  pipeline = { { ["$match"] = { ["fullDocument.total"] = { ["$gt"] = 0 } } }, { ["$project"] = { x = 1 } } },
  full_document = "updateLookup",
  retry = { initial_delay = "1s", retry_on = { "Http" } },
  dlq = { collection = "orders_dlq", ttl_days = 0 },
  on_insert = h, on_update = h,
  on_error = function() return fw.DLQ end,
}
fw.stream { name = "audit", database = "logs", checkpoint = { save_every = 50 }, on_change = h }
]])
    assert.are.equal([[
uri: mongodb://127.0.0.1:27017/?replicaSet=rs0 (default)

stream "order-watcher"
  declared_at                    /s/orders.lua:4
  database                       shop (from fw.defaults)
  collection                     orders
  operation_types                insert, update
  pipeline                       2 stages: $match, $project
  full_document                  updateLookup
  full_document_before_change    off
  split_large_events             true
  lanes                          1 (events handled one at a time, in order)
  oversize                       fail
  oversize_threshold             16320KB
  handlers                       on_insert, on_update
  on_error                       declared
  timeout                        30s
  memory_limit                   256MB
  state.max_bytes                64MB
  ha.mode                        none
  checkpoint.save_every          1
  checkpoint.save_interval       5s
  checkpoint.idle_heartbeat      5m
  checkpoint.start_position      resume
  checkpoint.on_history_lost     fail
  checkpoint.mode                async
  checkpoint.max_unsaved         100ms
  snapshot.chunk_size            1000
  snapshot.pause                 0ms
  snapshot.read_preference       primary
  restart.max_attempts           0 (unlimited)
  restart.initial_delay          1s
  restart.max_delay              1m
  restart.multiplier             2.0
  restart.jitter                 false
  retry.mode                     blocking (the stream waits out each retry)
  retry.max_attempts             4
  retry.initial_delay            1s
  retry.max_delay                30s
  retry.multiplier               2.0
  retry.jitter                   true
  retry.retry_on                 Http
  retry.no_retry_on              NilError, TypeError, ArgumentError, Mongo.DuplicateKey, Mongo.Invalid, Mongo.TransactionTooLong, Mongo.TransactionTooLarge, Mongo.TransactionsUnsupported, Http.TLS, Http.Denied, Http.Status.Permanent, Redis.Error, Pg.UniqueViolation, Pg.ForeignKey, Pg.Syntax, Pg.Permission
  retry.delays                   1s, 2s, 4s (each +/-20% jitter)
  dlq.collection                 orders_dlq
  dlq.ttl_days                   0 (keep forever)
  dlq.include_original_document  true
  dlq.include_stack_trace        true
  dlq.write_concern              majority
  dlq.connection                 default

stream "audit"
  declared_at                    /s/orders.lua:15
  database                       logs
  collection                     (whole database)
  operation_types                (all)
  pipeline                       (none)
  full_document                  default
  full_document_before_change    off
  split_large_events             true
  lanes                          1 (events handled one at a time, in order)
  oversize                       fail
  oversize_threshold             16320KB
  handlers                       on_change
  on_error                       (none)
  timeout                        30s
  memory_limit                   256MB
  state.max_bytes                64MB
  ha.mode                        none
  checkpoint.save_every          50
  checkpoint.save_interval       5s
  checkpoint.idle_heartbeat      5m
  checkpoint.start_position      resume
  checkpoint.on_history_lost     fail
  checkpoint.mode                async
  checkpoint.max_unsaved         100ms
  snapshot.chunk_size            1000
  snapshot.pause                 0ms
  snapshot.read_preference       primary
  restart.max_attempts           0 (unlimited)
  restart.initial_delay          1s
  restart.max_delay              1m
  restart.multiplier             2.0
  restart.jitter                 false
  retry                          (none: one attempt per event)
  dlq                            (none; ctx:send_to_dlq writes to shop.orders_dlq, the dlq of stream "order-watcher")

/s/orders.lua:15: warning: stream "audit": no dlq: failed events will be lost on their first failure (no retry either)
/s/orders.lua:15: warning: stream "audit": no retry: the retry settings in fw.defaults only apply to streams that set retry (retry = true)
]], describe_mod.text(cfg))
  end)

  it("has no warning section when there is nothing to warn about", function()
    local cfg = load("fw.stream { name = 's', database = 'shop', retry = true, dlq = true, on_change = h }")
    local text = describe_mod.text(cfg)
    assert.is_nil(text:find("warning", 1, true))
    assert.are.equal("\n", text:sub(-1))
  end)

  it("says a snapshot's rows are exactly once with exactly_once and a snapshot at start", function()
    local text = describe_mod.text(load([[
fw.stream { name = "a", database = "shop", collection = "c", exactly_once = true,
  checkpoint = { start_position = "snapshot" }, on_insert = h }
fw.stream { name = "b", database = "shop", collection = "c", exactly_once = true, on_insert = h }
]]))
    assert.truthy(text:find("  exactly_once.snapshot          each snapshot row's handler call "
      .. "commits its writes and the snapshot's progress past the row in one transaction (a "
      .. "restart resumes after the last committed row: no row applied twice)\n", 1, true))
    local _, n = text:gsub("exactly_once.snapshot", "")
    assert.are.equal(1, n)
  end)

  it("warns about start_position = latest with ha.mode = leader only (shared: the group's start)", function()
    local function text_for(mode)
      return describe_mod.text(load("fw.defaults { ha = { mode = '" .. mode .. "' } }\n"
        .. "fw.stream { name = 's', database = 'shop', retry = true, dlq = true,\n"
        .. "  checkpoint = { start_position = 'latest' }, on_change = h }"))
    end
    assert.truthy(text_for("leader"):find('start_position = "latest" with ha.mode = "leader"', 1, true))
    assert.is_nil(text_for("shared"):find("warning", 1, true))
  end)

  it("prints checkpoint.start_at as a date and its Timestamp, only when set", function()
    local text = describe_mod.text(load([[
fw.stream { name = "a", database = "shop", checkpoint = { start_at = "2026-11-26T10:00:00Z" }, on_change = h }
fw.stream { name = "b", database = "shop", checkpoint = { start_at = { t = 1795687200, i = 9 } }, on_change = h }
fw.stream { name = "c", database = "shop", on_change = h }
]]))
    assert.truthy(text:find("  checkpoint.start_at            2026-11-26T10:00:00.000Z = "
      .. "Timestamp(1795687200, 0) (without a checkpoint)\n", 1, true))
    assert.truthy(text:find("Timestamp(1795687200, 9)", 1, true))
    local _, n = text:gsub("checkpoint.start_at", "")
    assert.are.equal(2, n)
  end)

  it("names where the URI came from and hides its password", function()
    local cfg = load("fw.defaults { uri = 'mongodb://app:s3cret@db1,db2/shop?replicaSet=rs0' }\n"
      .. "fw.stream { name = 's', retry = true, dlq = true, on_change = h }")
    local first = describe_mod.text(cfg):match("^[^\n]*")
    assert.are.equal("uri: mongodb://app:***@db1,db2/shop?replicaSet=rs0 (from fw.defaults)", first)
    assert.matches("  database                       shop (from the URI)", describe_mod.text(cfg), 1, true)
    cfg = load("fw.stream { name = 's', database = 'x', retry = true, dlq = true, on_change = h }",
      { uri = "mongodb+srv://cluster.example/" })
    first = describe_mod.text(cfg):match("^[^\n]*")
    assert.are.equal("uri: mongodb+srv://cluster.example/ (from --uri or FLOWWARDEN_URI)", first)
  end)

  it("prints a partitioned stream once, by its name, with its partitions and declared stages", function()
    local cfg = load("fw.stream { name = 'o', database = 'x', partitions = 4, dlq = true, retry = true,\n"
      .. "  on_change = h, pipeline = { { ['$project'] = { a = 1 } } } }")
    local text = describe_mod.text(cfg)
    local _, blocks = text:gsub('\nstream "', "")
    assert.are.equal(1, blocks)
    assert.matches('\nstream "o"\n', text, 1, true)
    assert.matches("  pipeline                       1 stage: $project\n", text, 1, true)
    assert.matches("  partitions                     4 (units o#0/4 .. o#3/4, 0-based", text, 1, true)
  end)

  it("says what ha.mode = \"shared\" does", function()
    local cfg = load("fw.defaults { ha = { mode = 'shared', lease = '2s' } }\n"
      .. "fw.stream { name = 's', database = 'x', dlq = true, retry = true, on_change = h }")
    assert.matches("  ha.mode                        shared (the instances share the units, each at most "
      .. "ceil(units / members))\n", describe_mod.text(cfg), 1, true)
  end)

  it("shortens a long retry schedule", function()
    local cfg = load("fw.stream { name = 's', database = 'x', dlq = true, on_change = h,\n"
      .. "  retry = { max_attempts = 12, jitter = false } }")
    assert.matches("  retry.delays                   500ms, 1s, 2s, 4s, 8s, 16s, 30s, 30s, ... (11 retries)\n",
      describe_mod.text(cfg), 1, true)
  end)
end)

describe("describe.retry_delays_ms", function()
  it("reproduces the seed's delay table exactly (defaults, jitter off)", function()
    local spec = load("fw.stream { name = 's', database = 'x', retry = { max_attempts = 9, jitter = false }, "
      .. "on_change = h }").streams[1]
    assert.are.same({ 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000 },
      describe_mod.retry_delays_ms(spec.retry))
  end)

  it("has no delay for a single attempt", function()
    assert.are.same({}, describe_mod.retry_delays_ms({ max_attempts = 1, initial_delay_ms = 500,
      max_delay_ms = 30000, multiplier = 2.0 }))
  end)
end)

describe("describe.warnings", function()
  local function warnings(src)
    return describe_mod.warnings(load(src))
  end

  it("warns that a stream with retry but no DLQ loses events after retries", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": no dlq: failed events will be lost after retries' },
      warnings("fw.stream { name = 'x', database = 'd', retry = true, on_change = h }"))
  end)

  it("warns that a stream with neither loses events on the first failure", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": no dlq: failed events will be lost on their first '
      .. "failure (no retry either)" },
      warnings("fw.stream { name = 'x', database = 'd', on_change = h }"))
  end)

  it("warns when fw.defaults' dlq settings do not reach a stream", function()
    assert.are.same({
      SCRIPT .. ':4: warning: stream "x": no dlq: failed events will be lost after retries',
      SCRIPT .. ':4: warning: stream "x": no dlq: the dlq settings in fw.defaults only apply to streams that '
        .. "set dlq (dlq = true)",
    }, warnings("fw.defaults { dlq = { ttl_days = 7 } }\n"
      .. "fw.stream { name = 'x', database = 'd', retry = true, on_change = h }"))
  end)

  it("warns about a handler that operation_types keeps from ever running", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": on_delete never runs: operation_types does not '
      .. 'include "delete"' },
      warnings("fw.stream { name = 'x', database = 'd', retry = true, dlq = true,\n"
        .. "  operation_types = { 'insert' }, on_insert = h, on_delete = h }"))
  end)

  it("warns about an on_change that every listed type bypasses", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": on_change never runs: every type in operation_types '
      .. "has its own handler" },
      warnings("fw.stream { name = 'x', database = 'd', retry = true, dlq = true,\n"
        .. "  operation_types = { 'insert' }, on_insert = h, on_change = h }"))
    assert.are.same({}, warnings("fw.stream { name = 'x', database = 'd', retry = true, dlq = true,\n"
      .. "  operation_types = { 'insert', 'drop' }, on_insert = h, on_change = h }"))
  end)

  it("warns about retry_on entries that no_retry_on always overrides", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": retry.retry_on: "Http.BadRequest" is also matched '
      .. 'by no_retry_on "Http", which wins: never retried' },
      warnings("fw.stream { name = 'x', database = 'd', dlq = true, on_change = h,\n"
        .. "  retry = { retry_on = { 'Timeout', 'Http.BadRequest' }, no_retry_on = { 'Http' } } }"))
  end)

  it("warns about a retry policy of a single attempt", function()
    assert.are.same({ SCRIPT .. ':3: warning: stream "x": retry.max_attempts is 1: events are never retried' },
      warnings("fw.stream { name = 'x', database = 'd', dlq = true, retry = { max_attempts = 1 }, on_change = h }"))
  end)
end)

describe("describe.warnings about send_to_dlq", function()
  local path

  before_each(function()
    path = os.tmpname()
  end)

  after_each(function()
    os.remove(path)
  end)

  local function warnings_of_file(text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
    local cfg, errs = config.load_file(path)
    assert.is_nil(errs, errs and table.concat(errs, "\n"))
    return describe_mod.warnings(cfg)
  end

  it("warns when the script calls send_to_dlq and no stream has a dlq", function()
    local w = warnings_of_file("local fw = require('flowwarden')\n"
      .. "fw.stream { name = 'x', database = 'd', on_insert = function(ctx)\n"
      .. "  ctx:send_to_dlq('bad') end }\n")
    assert.are.equal(path .. ":3: warning: ctx:send_to_dlq is called but no stream has a dlq, so it "
      .. "raises (add dlq = true to a stream; streams without one send to the first declared dlq)",
      w[#w])
  end)

  it("does not warn when any stream has a dlq, nor when nothing calls send_to_dlq", function()
    local w = warnings_of_file("local fw = require('flowwarden')\n"
      .. "fw.stream { name = 'x', database = 'd', on_insert = function(ctx)\n"
      .. "  ctx:send_to_dlq('bad') end }\n"
      .. "fw.stream { name = 'y', database = 'd', dlq = true, on_change = function() end }\n")
    for _, line in ipairs(w) do
      assert.is_nil(line:find("send_to_dlq", 1, true), line)
    end
    w = warnings_of_file("local fw = require('flowwarden')\n"
      .. "fw.stream { name = 'x', database = 'd', on_insert = function(ctx) end }\n")
    for _, line in ipairs(w) do
      assert.is_nil(line:find("send_to_dlq", 1, true), line)
    end
  end)
end)

describe("describe.redact_uri", function()
  it("hides passwords only", function()
    assert.are.equal("mongodb://u:***@h/db", describe_mod.redact_uri("mongodb://u:p%40ss@h/db"))
    assert.are.equal("mongodb://u@h/db", describe_mod.redact_uri("mongodb://u@h/db"))
    assert.are.equal("mongodb://h:27017/?replicaSet=rs0", describe_mod.redact_uri("mongodb://h:27017/?replicaSet=rs0"))
  end)
  it("hides the passwords of Redis and PostgreSQL URIs", function()
    assert.are.equal("redis://:***@h:6379/0", describe_mod.redact_uri("redis://:pw-x@h:6379/0"))
    assert.are.equal("redis://***@h:6379/0", describe_mod.redact_uri("redis://pw-x@h:6379/0"))
    assert.are.equal("redis://app:***@h/1", describe_mod.redact_uri("redis://app:pw-x@h/1"))
    assert.are.equal("postgresql://u:***@h/db?password=***&sslmode=require",
      describe_mod.redact_uri("postgresql://u:pw-x@h/db?password=pw-y&sslmode=require"))
  end)
  it("hides a password that is not percent-encoded (it printed in full)", function()
    assert.are.equal("mongodb://writer:***@127.0.0.1:1/shop",
                     describe_mod.redact_uri("mongodb://writer:Pa/ss0rd@127.0.0.1:1/shop"))
    assert.are.equal("mongodb://writer:***@h/shop?replicaSet=rs0",
                     describe_mod.redact_uri("mongodb://writer:a@b/c?d@h/shop?replicaSet=rs0"))
  end)
  it("hides the values of secret options", function()
    assert.are.equal("mongodb://h/?tls=true&tlsCertificateKeyFilePassword=***&w=1",
                     describe_mod.redact_uri("mongodb://h/?tls=true&tlsCertificateKeyFilePassword=k&w=1"))
  end)
end)
