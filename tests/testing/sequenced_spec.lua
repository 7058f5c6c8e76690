-- A sequenced DLQ under flowwarden.testing (issues 14 and 15): a key whose
-- event is dead-lettered parks its later events, app:replay_dlq resolves the
-- sequence in order and closes it, overflow stops the stream.
local fwt = require("flowwarden.testing")

-- Inserts { _id, k, v, bad }: the handler appends v to the read model of key
-- k, and fails for good on bad while shop.flags holds { _id = "broken" } (the
-- spec's switch between the broken and the fixed script). Replayed letters
-- are recorded with their place in the sequence.
local SCRIPT = [[
local fw = require("flowwarden")
local function apply(ctx)
  local doc = ctx:full_document()
  if doc.bad and fw.mongo.collection("shop", "flags"):find_one({ _id = "broken" }) then
    error(fw.error("Validation", "bad value " .. tostring(doc.v)))
  end
  fw.mongo.collection("shop", "model"):update_one({ _id = doc.k }, { ["$push"] = { vs = doc.v } },
    { upsert = true })
  local l = ctx:dead_letter()
  if l then
    fw.mongo.collection("shop", "letters"):insert_one({ v = doc.v, seq = l.sequence_id,
      idx = l.sequence_index })
  end
end
fw.stream { name = "s", database = "shop", collection = "orders", on_insert = apply,
  dlq = { sequenced = true, sequence_key = function(ctx) return ctx:full_document().k end,
          %s } }
]]

local function load(dlq_options)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(string.format(SCRIPT, dlq_options or ""))
  f:close()
  local ok, app = pcall(fwt.load, path)
  os.remove(path)
  assert(ok, app)
  app.mongo:collection("shop", "flags"):insert_one({ _id = "broken" })
  return app
end

local id = 0
local function insert(k, v, bad)
  id = id + 1
  return fwt.insert({ _id = id, k = k, v = v, bad = bad or false })
end

local function model(app, k)
  local doc = app.mongo:collection("shop", "model"):find_one({ _id = k })
  return doc and doc.vs or nil
end

local function vs(list)
  local out = {}
  for i, v in ipairs(list or {}) do
    out[i] = v
  end
  return out
end

describe("a sequenced DLQ in flowwarden.testing", function()
  it("parks a failed key's later events, replays them in order, then handles the key live", function()
    local app = load()
    local r = app:deliver("s", insert("k1", 1, true))
    assert.equal("dlq", r.outcome)
    assert.equal('"k1"', r.dlq_entry.sequenceId)
    assert.equal(0, r.dlq_entry.sequenceIndex)
    assert.equal("Validation", r.dlq_entry.error.type)

    r = app:deliver("s", insert("k1", 2))
    assert.equal("parked", r.outcome)
    assert.equal(0, r.attempts)
    assert.equal('"k1"', r.dlq_entry.sequenceId)
    assert.equal(1, r.dlq_entry.sequenceIndex)
    assert.is_nil(r.dlq_entry.error)
    assert.matches('parked in _fw_dlq behind DLQ sequence "k1" (index 1)', r.logs[1].message, 1, true)
    assert.equal("parked", app:deliver("s", insert("k1", 3)).outcome)

    -- Other keys are not delayed.
    assert.equal("handled", app:deliver("s", insert("k2", 10)).outcome)
    assert.same({ 10 }, vs(model(app, "k2")))
    assert.is_nil(model(app, "k1"))
    assert.same({ { streamName = "s", sequenceId = '"k1"', open = true, next = 3, inflight = 0 } },
      app:dlq_sequences("s"))

    -- Still broken: the head fails again and stops the sequence (requeued).
    local results = app:replay_dlq()
    assert.equal(1, #results)
    assert.equal("requeued", results[1].status)
    assert.equal(0, results[1].sequence_index)
    assert.same({ { stream = "s", id = '"k1"', state = "open",
      what = "stopped at index 0 (requeued): it stays head" } }, results.sequences)
    assert.equal("parked", app:deliver("s", insert("k1", 4)).outcome)

    -- Fixed: the whole sequence in index order, and it closes.
    app.mongo:collection("shop", "flags"):delete_one({ _id = "broken" })
    results = app:replay_dlq()
    assert.equal(4, #results)
    for i, res in ipairs(results) do
      assert.equal("resolved", res.status)
      assert.equal(i - 1, res.sequence_index)
    end
    assert.same({ { stream = "s", id = '"k1"', state = "closed", what = "resolved and closed" } },
      results.sequences)
    assert.same({ 1, 2, 3, 4 }, vs(model(app, "k1")))
    local letters = app.mongo:collection("shop", "letters"):find({}, { sort = { v = 1 } }):to_array()
    assert.equal(4, #letters)
    for i, l in ipairs(letters) do
      assert.equal('"k1"', l.seq)
      assert.equal(i - 1, l.idx)
    end
    assert.is_false(app:dlq_sequences("s")[1].open)
    for _, e in ipairs(app:dlq("s")) do
      assert.equal("RESOLVED", e.status)
    end

    -- Closed: a later event of k1 is handled live.
    r = app:deliver("s", insert("k1", 5))
    assert.equal("handled", r.outcome)
    assert.same({ 1, 2, 3, 4, 5 }, vs(model(app, "k1")))
  end)

  it("goes on past an evicted entry and leaves an entry behind an unselected head alone", function()
    local app = load("enqueue_policy = function() return fw.dlq.evict() end")
    app:deliver("s", insert("k1", 1, true))
    local parked = app:deliver("s", insert("k1", 2)).dlq_entry
    -- Selecting only the second entry touches nothing: its head waits.
    local results = app:replay_dlq { ids = { parked._id } }
    assert.equal(1, #results)
    assert.equal("behind", results[1].status)
    assert.equal(1, results[1].sequence_index)
    assert.equal(0, #results.sequences)
    -- Still broken, evicted: the head is DISCARDED and the sequence goes on.
    results = app:replay_dlq { sequence = '"k1"' }
    assert.equal("evicted", results[1].status)
    assert.equal("resolved", results[2].status)
    assert.equal("closed", results.sequences[1].state)
    assert.same({ 2 }, vs(model(app, "k1")))
  end)

  it("stops the stream when a sequence would open beyond max_sequences", function()
    local app = load("max_sequences = 1")
    assert.equal("dlq", app:deliver("s", insert("k1", 1, true)).outcome)
    local r = app:deliver("s", insert("k2", 1, true))
    assert.equal("stopped", r.outcome)
    assert.equal(1, r.attempts)
    assert.equal("dlq overflow: 1 open sequences (max_sequences 1): the event opening sequence "
      .. '"k2" is not checkpointed: replay or discard open sequences (flowwarden dlq replay), '
      .. "then restart", r.failure)
    assert.equal("STREAM STOPPED: " .. r.failure, r.logs[#r.logs].message)
    assert.is_nil(r.dlq_entry)
    assert.equal(1, #app:dlq("s"))
    -- Once the open sequence is resolved, the same event goes through.
    app.mongo:collection("shop", "flags"):delete_one({ _id = "broken" })
    assert.equal("closed", app:replay_dlq().sequences[1].state)
    assert.equal("handled", app:deliver("s", insert("k2", 1, true)).outcome)
  end)

  it("stops the stream when a sequence would grow beyond max_sequence_size", function()
    local app = load("max_sequence_size = 2")
    app:deliver("s", insert("k1", 1, true))
    assert.equal("parked", app:deliver("s", insert("k1", 2)).outcome)
    local r = app:deliver("s", insert("k1", 3))
    assert.equal("stopped", r.outcome)
    assert.equal(0, r.attempts)
    assert.matches('^dlq overflow: sequence "k1" holds 2 entries %(max_sequence_size 2%)', r.failure)
    assert.equal(2, #app:dlq("s"))
  end)
end)
