--[[
flowwarden.testing: testing handler scripts offline with busted (issue 15;
docs/testing-scripts.md). Available in `flowwarden test` (and `replay`), whose
Lua state has the C core "flowwarden.testing.core" (src/runtime/testing/test_app.c).

  local fwt = require("flowwarden.testing")
  local app = fwt.load("orders.lua", { env = { HOOK_TOKEN = "t" } })
  local r = app:deliver("order-watcher", fwt.insert { _id = 1, total = -5 })
  -- r.outcome, r.attempts, r.delays, r.errors, r.dlq_entry, r.logs

  fwt.load(path, opts)     opts: env (what fw.env sees, nothing else),
                           jitter (false), seed (1), now (ms; 2024-01-01),
                           uri (the run URI, as --uri: its path is the default
                           database; never connected to), mongo (a URI: fw.mongo
                           on that server, not the fake)
  fwt.insert(doc [, fields]) fwt.replace(doc [, fields]) fwt.delete(key [, fields])
  fwt.update(doc, { set =, unset =, full_document = table | true } [, fields])
  fwt.snapshot(doc [, fields]) a document read by an incremental snapshot
                           change events as the server sends them; fields
                           override top-level fields (ns, clusterTime, ...)
  fwt.events_from(path)    the events `flowwarden record` wrote

  app:deliver(stream, event)   app:replay_dlq([opts])   app:dlq([stream])
  app:dlq_sequences([stream])
  app.mongo (the fake)  app.http (stubs, calls)  app.clock  app.metrics
  app.redis (an in-memory Redis: testing/redis_fake.lua)
  app.pg (a recorder of statements with scripted answers: testing/pg_fake.lua)
]]

local core = require("flowwarden.testing.core")
local fw = require("flowwarden")
local duration = require("flowwarden.duration")
local mongo_fake = require("flowwarden.testing.mongo_fake")
local pg_fake = require("flowwarden.testing.pg_fake")
local redis_fake = require("flowwarden.testing.redis_fake")

local M = {}

local EPOCH_S = 1704067200 -- 2024-01-01T00:00:00Z, where event times start

---------------------------------------------------------------------------
-- Change events

local seq = 0

local function shallow_copy(t)
  local out = {}
  for k, v in pairs(t) do
    out[k] = v
  end
  return out
end

-- A resume token shaped like a server's: upper-case hex, in event order.
local function next_event(op, fields)
  seq = seq + 1
  local t, i = EPOCH_S + seq, 1
  local ev = {
    _id = { _data = string.format("82%08X%08X2B042C0100296E5A1004%08X04", t, i, seq) },
    operationType = op,
    clusterTime = fw.timestamp(t, i),
    wallTime = fw.date(t * 1000),
  }
  for k, v in pairs(fields) do
    ev[k] = v
  end
  return ev
end

local function with_overrides(ev, name, overrides)
  if overrides == nil then
    return ev
  end
  if type(overrides) ~= "table" then
    error(string.format("fwt.%s: fields must be a table of event fields to override, got %s",
      name, type(overrides)), 3)
  end
  for k, v in pairs(overrides) do
    ev[k] = v
  end
  return ev
end

local function need_document(name, what, doc)
  if type(doc) ~= "table" then
    error(string.format("fwt.%s: expected %s (a table), got %s", name, what, type(doc)), 3)
  end
end

-- The inserted document, with an ObjectId _id when it has none (as drivers do).
local function with_id(doc)
  if doc._id ~= nil then
    return doc
  end
  local copy = shallow_copy(doc)
  copy._id = fw.object_id()
  return copy
end

function M.insert(doc, overrides)
  need_document("insert", "the inserted document", doc)
  doc = with_id(doc)
  return with_overrides(next_event("insert", { fullDocument = doc, documentKey = { _id = doc._id } }),
    "insert", overrides)
end

function M.replace(doc, overrides)
  need_document("replace", "the replacement document (with its _id)", doc)
  doc = with_id(doc)
  return with_overrides(next_event("replace", { fullDocument = doc, documentKey = { _id = doc._id } }),
    "replace", overrides)
end

-- A document read by an incremental snapshot (issue 28), as the runtime
-- hands it to on_snapshot (else on_insert): an insert's shape with
-- operationType "snapshot".
function M.snapshot(doc, overrides)
  need_document("snapshot", "the snapshotted document", doc)
  doc = with_id(doc)
  return with_overrides(next_event("snapshot", { fullDocument = doc, documentKey = { _id = doc._id } }),
    "snapshot", overrides)
end

function M.delete(key, overrides)
  if key == nil then
    error("fwt.delete: expected the deleted document's key (a table with _id, or the _id), got nil", 2)
  end
  local dk = type(key) == "table" and key or { _id = key }
  if dk._id == nil then
    error("fwt.delete: the key has no _id", 2)
  end
  return with_overrides(next_event("delete", { documentKey = { _id = dk._id } }), "delete", overrides)
end

function M.update(doc, change, overrides)
  need_document("update", "the updated document (or its key)", doc)
  if doc._id == nil then
    error("fwt.update: the document has no _id", 2)
  end
  change = change or {}
  if type(change) ~= "table" then
    error(string.format("fwt.update: expected { set = ..., unset = ..., full_document = ... }, got %s",
      type(change)), 2)
  end
  for k in pairs(change) do
    if k ~= "set" and k ~= "unset" and k ~= "full_document" then
      error(string.format("fwt.update: unknown key %q (expected set, unset, full_document)",
        tostring(k)), 2)
    end
  end
  local removed = fw.array({})
  for i, name in ipairs(change.unset or {}) do
    removed[i] = name
  end
  local ev = {
    documentKey = { _id = doc._id },
    updateDescription = {
      updatedFields = change.set or {},
      removedFields = removed,
      truncatedArrays = fw.array({}),
    },
  }
  local full = change.full_document
  if full == true then
    -- What updateLookup would read: the document with the change applied.
    full = shallow_copy(doc)
    for k, v in pairs(change.set or {}) do
      full[k] = v
    end
    for _, k in ipairs(change.unset or {}) do
      full[k] = nil
    end
  elseif full ~= nil and type(full) ~= "table" then
    error("fwt.update: full_document must be a table or true, got " .. type(full), 2)
  end
  ev.fullDocument = full
  return with_overrides(next_event("update", ev), "update", overrides)
end

function M.events_from(path)
  if type(path) ~= "string" then
    error("fwt.events_from: expected a file name, got " .. type(path), 2)
  end
  return core.events_from(path)
end

---------------------------------------------------------------------------
-- fw.http's stubs

local Http = {}
Http.__index = Http

local function new_http()
  return setmetatable({ stubs = {}, calls = {} }, Http)
end

-- stub(method, url_or_pattern, response | function(req), { times = n })
-- The most recent matching stub answers; one with `times` answers that many
-- requests, then the older ones do. A URL starting with "^" is a Lua pattern.
function Http:stub(method, url, response, opts)
  if type(method) ~= "string" then
    error("app.http:stub: method must be a string such as \"POST\" (or \"*\"), got " .. type(method), 2)
  end
  if type(url) ~= "string" then
    error("app.http:stub: url must be a URL or a Lua pattern starting with ^, got " .. type(url), 2)
  end
  if type(response) ~= "table" and type(response) ~= "function" then
    error("app.http:stub: response must be a table { status, headers, body | json } or a "
      .. "function(request), got " .. type(response), 2)
  end
  opts = opts or {}
  if opts.times ~= nil and (math.type(opts.times) ~= "integer" or opts.times < 1) then
    error("app.http:stub: times must be an integer >= 1", 2)
  end
  table.insert(self.stubs, 1, { method = method:upper(), url = url, response = response,
    left = opts.times })
  return self
end

local function url_matches(stub, url)
  if stub.url:sub(1, 1) == "^" then
    return url:find(stub.url) ~= nil
  end
  return stub.url == url
end

local function header_map(lines)
  local out = {}
  for _, line in ipairs(lines or {}) do
    local name, value = line:match("^([^:;]+)[:;]%s*(.*)$")
    if name then
      out[name:lower()] = value
    end
  end
  return out
end

-- The answer to one request from a handler: { ok = response } or
-- { err = { type, message } }.
function Http:answer(req)
  local call = { method = req.method, url = req.url, headers = header_map(req.headers),
    body = req.body }
  self.calls[#self.calls + 1] = call
  for _, stub in ipairs(self.stubs) do
    if (stub.method == "*" or stub.method == req.method) and url_matches(stub, req.url)
        and (stub.left == nil or stub.left > 0) then
      if stub.left then
        stub.left = stub.left - 1
      end
      local r = stub.response
      if type(r) == "function" then
        r = r(call)
      end
      if type(r) ~= "table" then
        return { err = { type = "RuntimeError",
          message = "app.http stub for " .. req.method .. " " .. req.url .. " returned " .. type(r) } }
      end
      if r.error then
        return { err = { type = r.error, message = r.message or "stubbed failure" } }
      end
      local headers = {}
      for k, v in pairs(r.headers or {}) do
        headers[tostring(k):lower()] = tostring(v)
      end
      local body = r.body or ""
      if r.json ~= nil then
        body = fw.json.encode(r.json)
        headers["content-type"] = headers["content-type"] or "application/json"
      end
      return { ok = { status = r.status or 200, headers = headers, body = body } }
    end
  end
  return { err = { type = "Http.Connect", message = "no stub answers this request (add "
    .. "app.http:stub(\"" .. req.method .. "\", \"" .. req.url .. "\", { status = 200 }))" } }
end

---------------------------------------------------------------------------
-- The app

local App = {}
App.__index = App

local function error_table(e)
  if type(e) == "table" and type(e.type) == "string" then
    local fields = {}
    for k, v in pairs(e.fields or {}) do
      local t = type(v)
      if t == "string" or t == "number" or t == "boolean" or t == "table" then
        fields[k] = v
      end
    end
    return { type = e.type, message = tostring(e.message or ""), fields = fields }
  end
  local msg = tostring(e):gsub("^[^:]+:%d+: ", "")
  return { type = "RuntimeError", message = msg }
end

local function bridge(app)
  return function(channel, args)
    local a = {}
    for i = 1, args.n do
      a[i] = args["a" .. i]
    end
    if channel == "http" then
      return app.http:answer(a[1])
    end
    if channel == "txn" then
      -- exactly_once: "begin" | "commit" | "abort", the stream's name, the connection
      app.mongo:txn(a[1], a[2], a[3])
      return { ok = true }
    end
    if channel == "redis" then
      -- conn, "call" | "pipeline", command and arguments | the commands
      local res, err, index
      if a[2] == "pipeline" then
        res, err, index = app.redis:pipeline(a[1], a[3])
      else
        res, err = app.redis:call(a[1], table.unpack(a, 3, args.n))
      end
      if err then
        err.fields = err.fields or {}
        err.fields.connection = a[1]
        err.message = string.format('fw.redis: connection "%s": %s%s', a[1],
          index and ("command #" .. index .. " of the pipeline: ") or "", err.message)
        return { err = err }
      end
      return { ok = res }
    end
    if channel == "pg" then
      -- conn, kind, sql, params
      local res, err = app.pg:run(a[1], a[2], a[3], a[4])
      if err then
        err.message = string.format('fw.pg: connection "%s": %s', a[1], err.message)
        return { err = err }
      end
      return { ok = res }
    end
    -- mongo: method, db, coll, opts, arguments...
    local method, db, coll, copts = a[1], a[2], a[3], a[4]
    local ok, res = pcall(function()
      local h = app.mongo.api.collection(db, coll, copts)
      return h[method](h, table.unpack(a, 5, args.n))
    end)
    if not ok then
      return { err = error_table(res) }
    end
    if method == "find" or method == "aggregate" then
      return { cursor = res:to_array() }
    end
    return { ok = res }
  end
end

function M.load(path, opts)
  if type(path) ~= "string" then
    error("fwt.load: expected the script's file name, got " .. type(path), 2)
  end
  opts = opts or {}
  if type(opts) ~= "table" then
    error("fwt.load: opts must be a table, got " .. type(opts), 2)
  end
  for k in pairs(opts) do
    if k ~= "env" and k ~= "jitter" and k ~= "seed" and k ~= "now" and k ~= "mongo" and k ~= "uri" then
      error(string.format("fwt.load: unknown option %q (the options are env, jitter, seed, now, uri, mongo)",
        tostring(k)), 2)
    end
  end
  if opts.env ~= nil and type(opts.env) ~= "table" then
    error("fwt.load: opts.env must be a table of name = value strings, got " .. type(opts.env), 2)
  end
  local app = setmetatable({ path = path, http = new_http() }, App)
  local handle = core.load(path, { env = opts.env, jitter = opts.jitter, seed = opts.seed,
    now_ms = opts.now, uri = opts.uri, mongo_uri = opts.mongo, bridge = bridge(app) })
  app.handle = handle
  app.clock = {
    now = function() return core.now(handle) end,
    -- advance("10m") or advance(ms)
    advance = function(_, d)
      local ms = d
      if type(d) == "string" then
        local err
        ms, err = duration.parse(d)
        if not ms then
          error("app.clock:advance: " .. err, 2)
        end
      elseif math.type(d) ~= "integer" or d < 0 then
        error("app.clock:advance: expected a duration such as \"10m\" or milliseconds, got "
          .. tostring(d), 2)
      end
      return core.advance(handle, ms)
    end,
  }
  app.mongo = mongo_fake.new { clock = function() return core.now(handle) end, fw = fw,
    check_document = core.check_document }
  redis_fake.NULL = fw.null
  app.redis = redis_fake.new { clock = function() return core.now(handle) end }
  app.pg = pg_fake.new()
  app.metrics = {
    text = function() return core.metrics_text(handle) end,
    -- value(name [, labels]): the sum of the series of name whose labels
    -- include labels; nil when there is none.
    value = function(_, name, labels)
      local total
      for line in core.metrics_text(handle):gmatch("[^\n]+") do
        local n, lbl, v = line:match("^([%w_:]+)(%b{})%s+(%S+)$")
        if not n then
          n, v = line:match("^([%w_:]+)%s+(%S+)$")
          lbl = ""
        end
        if n == name then
          local match = true
          for k, want in pairs(labels or {}) do
            if not lbl:find(k .. '="' .. tostring(want) .. '"', 1, true) then
              match = false
            end
          end
          if match then
            total = (total or 0) + tonumber(v)
          end
        end
      end
      return total
    end,
  }
  app.streams = core.streams(handle)
  return app
end

local function stream_of(app, name)
  for _, s in ipairs(app.streams) do
    if s.name == name then
      return s
    end
  end
end

-- Issue 30: events through a stream's on_batch as one batch (its retries and
-- bisection on the virtual clock). Returns { outcomes = { "handled" | "dlq" |
-- "skipped" | "lost" | "parked" | "none", ... } (one per event, in order),
-- result = "done" | "stopped", errors, logs, delays }.
function App:deliver_batch(stream, events)
  if type(stream) ~= "string" then
    error("app:deliver_batch: expected the stream's name, got " .. type(stream), 2)
  end
  if type(events) ~= "table" then
    error("app:deliver_batch: expected an array of events, got " .. type(events), 2)
  end
  local s = stream_of(self, stream)
  local list = {}
  for i, event in ipairs(events) do
    if type(event) == "table" and event.ns == nil and s then
      event = shallow_copy(event)
      event.ns = { db = s.database, coll = s.collection }
    end
    list[i] = event
  end
  return core.deliver_batch(self.handle, stream, list)
end

function App:deliver(stream, event)
  if type(stream) ~= "string" then
    error("app:deliver: expected the stream's name, got " .. type(stream), 2)
  end
  if type(event) == "table" and event.ns == nil then
    local s = stream_of(self, stream)
    if s then
      event = shallow_copy(event)
      event.ns = { db = s.database, coll = s.collection }
    end
  end
  return core.deliver(self.handle, stream, event)
end

function App:dlq(stream)
  return core.dlq_entries(self.handle, stream)
end

-- A sequenced DLQ's sequence documents: { streamName, sequenceId, open, next,
-- inflight } each, in the order they were first opened.
function App:dlq_sequences(stream)
  return core.dlq_sequences(self.handle, stream)
end

---------------------------------------------------------------------------
-- Replaying dead letters: dlq_replay.c's life of an entry, on the in-memory
-- store (claims cannot race in one process, but are written as run writes
-- them).

local OPERATIONS = { INSERT = "insert", UPDATE = "update", REPLACE = "replace", DELETE = "delete",
  DROP = "drop", RENAME = "rename", DROP_DATABASE = "dropDatabase", INVALIDATE = "invalidate",
  SNAPSHOT = "snapshot" }
local COPIED = { "clusterTime", "wallTime", "ns", "documentKey", "fullDocument",
  "fullDocumentBeforeChange", "updateDescription", "txnNumber", "lsid" }
local ACTOR = "flowwarden.testing"
local CLAIM_TTL_MS = 5 * 60 * 1000
local HISTORY_MAX = 20

local function push_history(entry, now, action, result)
  local h = {}
  for _, item in ipairs(entry.history or {}) do
    h[#h + 1] = item
  end
  h[#h + 1] = { at = now, action = action, actor = ACTOR, result = result }
  while #h > HISTORY_MAX do
    table.remove(h, 1)
  end
  entry.history = fw.array(h)
end

local function replayable(e, now_ms)
  return e.status == "PENDING" or (e.status == "REPROCESSING" and e.claimedUntil
    and e.claimedUntil.ms < now_ms)
end

local function waiting(e)
  return e.status == "PENDING" or e.status == "REPROCESSING"
end

local function sequence_index(e)
  return math.tointeger(e.sequenceIndex) or 0
end

-- Whether e is the head of its sequence: no earlier entry of it waits.
local function is_head(entries, e)
  for _, o in ipairs(entries) do
    if o.sequenceId == e.sequenceId and waiting(o) and sequence_index(o) < sequence_index(e) then
      return false
    end
  end
  return true
end

-- An entry a sequence replay handled and may go on after.
local DONE = { resolved = true, skipped = true, evicted = true }

-- dlq_replay_sequence.c's fw_dlq_replay_sequence on the in-memory store:
-- the waiting entries by sequenceIndex, the first one not done stops it;
-- when none is left it closes with the protocol's conditional close
-- (dlq_sequence.h), reading again if next moved. Appends each entry's result
-- to out and returns "closed" or "open" and why.
function App:_replay_sequence(stream, seq, no_retry, out)
  local h = self.handle
  local quiet = 0
  while true do
    -- next as it is before the entries are read: the close holds only if
    -- no live event took an index since.
    local st = core.seq_read(h, stream, seq)
    local entries = {}
    for _, e in ipairs(core.dlq_entries(h, stream)) do
      if e.sequenceId == seq and waiting(e) then
        entries[#entries + 1] = e
      end
    end
    table.sort(entries, function(a, b) return sequence_index(a) < sequence_index(b) end)
    local now = core.now(h)
    for _, e in ipairs(entries) do
      local r
      if replayable(e, now) then
        r = self:_replay_entry(e, no_retry)
      else
        r = { id = e._id, stream = stream, status = "busy",
          what = "claimed by " .. tostring(e.claimedBy) .. ": not touched" }
      end
      r.sequence_id, r.sequence_index = seq, sequence_index(e)
      out[#out + 1] = r
      if not DONE[r.status] then
        return "open", string.format("stopped at index %d (%s): it stays head", r.sequence_index,
          r.status)
      end
    end
    if not st.exists or not st.open then
      return "closed", "closed already"
    end
    if st.inflight > 0 then
      -- Nothing else runs while a spec replays: an index left in flight is
      -- one no delivery will give back.
      return "open", "a live event is still being parked behind it; left open (replay it again)"
    end
    if #entries == 0 then
      if core.seq_close(h, stream, seq, st.next) then
        return "closed", "resolved and closed"
      end
      quiet = quiet + 1
      if quiet > 1 then
        return "open", "its sequence document changed while it was being closed; left open"
      end
    end
  end
end

-- app:replay_dlq { stream = name, no_retry = false, ids = { ... }, sequence = id }
-- -> a list of { id, stream, status, what, attempts, error, logs } (status:
-- resolved, skipped, requeued, evicted, no_handler, invalid; on a sequenced
-- DLQ also behind and busy, with sequence_id and sequence_index), oldest
-- clusterTime first, a sequence whole where its head is selected; and
-- .sequences: one { stream, id, state = "closed" | "open", what } per
-- sequence replayed.
function App:replay_dlq(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("app:replay_dlq: opts must be a table, got " .. type(opts), 2)
  end
  for k in pairs(opts) do
    if k ~= "stream" and k ~= "no_retry" and k ~= "ids" and k ~= "sequence" then
      error(string.format("app:replay_dlq: unknown option %q (the options are stream, ids, "
        .. "sequence, no_retry)", tostring(k)), 2)
    end
  end
  if opts.stream and not stream_of(self, opts.stream) then
    error(string.format('app:replay_dlq: unknown stream "%s"', tostring(opts.stream)), 2)
  end
  if opts.sequence ~= nil and type(opts.sequence) ~= "string" then
    error("app:replay_dlq: sequence must be a sequence id as app:dlq() shows it (sequenceId, "
      .. "e.g. '{\"_id\":{\"$numberInt\":\"1\"}}'), got " .. type(opts.sequence), 2)
  end
  local wanted
  if opts.ids then
    wanted = {}
    for _, id in ipairs(opts.ids) do
      wanted[id] = true
    end
  end
  local now = core.now(self.handle)
  local all = core.dlq_entries(self.handle, opts.stream)
  local todo = {}
  for _, e in ipairs(all) do
    if replayable(e, now) and (not wanted or wanted[e._id]) and stream_of(self, e.streamName)
        and (opts.sequence == nil or e.sequenceId == opts.sequence) then
      todo[#todo + 1] = e
    end
  end
  table.sort(todo, function(a, b)
    local ta, tb = a.clusterTime, b.clusterTime
    if ta and tb and (ta.t ~= tb.t or ta.i ~= tb.i) then
      return ta.t < tb.t or (ta.t == tb.t and ta.i < tb.i)
    end
    return a.createdAt.ms < b.createdAt.ms
  end)
  local out = { sequences = {} }
  local function sequence(stream, seq)
    local state, what = self:_replay_sequence(stream, seq, opts.no_retry, out)
    out.sequences[#out.sequences + 1] = { stream = stream, id = seq, state = state, what = what }
  end
  -- A sequence whose entries were all resolved or discarded by hand: nothing
  -- to select, but it still closes (as --sequence does).
  if opts.sequence and #todo == 0 then
    for _, s in ipairs(self.streams) do
      if (not opts.stream or opts.stream == s.name)
          and core.seq_read(self.handle, s.name, opts.sequence).open then
        sequence(s.name, opts.sequence)
      end
    end
  end
  local seen = {}
  for _, e in ipairs(todo) do
    local seq = type(e.sequenceId) == "string" and e.sequenceId or nil
    local key = seq and e.streamName .. "\0" .. seq
    if not seq then
      out[#out + 1] = self:_replay_entry(e, opts.no_retry)
    elseif not seen[key] then
      -- A sequence runs whole, once: its other entries were in it.
      seen[key] = true
      local entries = core.dlq_entries(self.handle, e.streamName)
      if is_head(entries, e) then
        sequence(e.streamName, seq)
      else
        out[#out + 1] = { id = e._id, stream = e.streamName, status = "behind",
          sequence_id = seq, sequence_index = sequence_index(e),
          what = "waits behind an earlier entry of sequence " .. seq .. ", which the filters "
            .. "did not select: not touched (replay the sequence with sequence = ...)" }
      end
    end
  end
  return out
end

function App:_replay_entry(e, no_retry)
  local h = self.handle
  local res = { id = e._id, stream = e.streamName }
  local op = OPERATIONS[e.operationType]
  if type(e.resumeToken) ~= "table" or not op then
    res.status, res.what = "invalid", "cannot be replayed: "
      .. (op and "resumeToken is missing or not a document"
        or string.format("operationType %q is not a change event type", tostring(e.operationType)))
    return res
  end
  local event = { _id = e.resumeToken, operationType = op }
  for _, k in ipairs(COPIED) do
    event[k] = e[k]
  end
  local letter = { id = e._id, cause = { type = e.error and e.error.type or "",
    message = e.error and e.error.message or "" }, diagnostics = e.diagnostics or {},
    enqueued_at = e.createdAt, last_touched = e.lastTouched or e.createdAt,
    reprocess_attempts = e.reprocessAttempts or 0 }
  if type(e.sequenceId) == "string" then
    -- A sequenced DLQ: where the letter stands in its sequence.
    letter.sequence_id, letter.sequence_index = e.sequenceId, sequence_index(e)
  end
  local now = fw.date(core.now(h))
  -- claim
  e.status, e.claimedBy = "REPROCESSING", ACTOR
  e.claimedUntil, e.lastTouched = fw.date(core.now(h) + CLAIM_TTL_MS), now
  core.dlq_put(h, e)

  local r = core.replay_one(h, e.streamName, event, letter, no_retry)
  res.attempts, res.logs, res.delays, res.errors = r.attempts, r.logs, r.delays, r.errors
  now = fw.date(core.now(h))
  e.claimedBy, e.claimedUntil = nil, nil
  e.lastTouched = now
  if r.result == "ok" or r.result == "skipped" then
    e.status, e.resolution, e.resolvedAt = "RESOLVED", r.result == "ok" and "REPLAYED" or "SKIPPED", now
    push_history(e, now, "resolved", r.result == "ok" and "ok" or "skipped")
    res.status = r.result == "ok" and "resolved" or "skipped"
    res.what = r.result == "ok" and string.format("resolved after %d attempt(s)", r.attempts)
      or "skipped by on_error: resolved (SKIPPED)"
  elseif r.result == "failed" then
    local result = r.error.type .. ": " .. r.error.message
    e.status = r.evict and "DISCARDED" or "PENDING"
    e.lastReprocessAt = now
    e.lastReprocessError = { type = r.error.type, message = r.error.message }
    e.reprocessAttempts = (e.reprocessAttempts or 0) + 1
    if r.evict then
      e.discardedAt, e.discardReason = now, "evicted by enqueue policy"
    else
      local d = e.diagnostics or {}
      for k, v in pairs(r.diagnostics or {}) do
        d[k] = v
      end
      e.diagnostics = d
    end
    push_history(e, now, r.evict and "discarded" or "requeued", result)
    res.status = r.evict and "evicted" or "requeued"
    res.error = r.error
    res.what = string.format("%s after %d attempt(s): %s",
      r.evict and "evicted by the enqueue policy" or "failed again, requeued", r.attempts, result)
  else
    -- no handler, an event that cannot be rebuilt, or stopped: the claim is given back
    e.status = "PENDING"
    res.status = r.result == "invalid" and "invalid" or "no_handler"
    res.what = r.result == "invalid" and ("cannot be replayed: " .. tostring(r.why) .. "; left as it is")
      or string.format("the current script has no handler for %s; left PENDING", op)
  end
  core.dlq_put(h, e)
  return res
end

return M
