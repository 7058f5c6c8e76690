-- on_batch under flowwarden test (issue 30): the batch object's methods and
-- misuse, and app:deliver_batch's bisection on the virtual clock: which
-- events reach the DLQ, with which error, after how many calls.
local fwt = require("flowwarden.testing")

local SCRIPT = [[
local fw = require("flowwarden")
calls, kept = {}, nil
fw.stream { name = "s", database = "shop", collection = "orders",
  retry = { max_attempts = 2, initial_delay = "1s", jitter = false }, dlq = true,
  batch = { max_events = 8 },
  on_batch = function(batch)
    local ids = {}
    for i, ctx in batch:events() do
      local d = ctx:full_document()
      ids[#ids + 1] = d._id
      if d.raise then error(fw.error("Boom", "raised by " .. d._id)) end
      if d.mark then batch:fail(i, "marked " .. d._id) end
    end
    calls[#calls + 1] = { n = #batch, ids = ids, attempt = batch:get(1):attempt_number(),
                          text = tostring(batch) }
    if batch:get(1):full_document().keep then kept = { batch = batch, ctx = batch:get(1) } end
    if batch:get(1):full_document().misuse == "get" then batch:get(#batch + 1) end
    if batch:get(1):full_document().misuse == "old" then kept.batch:get(1) end
    if batch:get(1):full_document().misuse == "oldctx" then kept.ctx:full_document() end
  end }
]]

local function load()
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(SCRIPT)
  f:close()
  finally(function() os.remove(path) end)
  return fwt.load(path)
end

local function events(n, extra)
  local list = {}
  for i = 1, n do
    local d = { _id = i }
    for k, v in pairs(extra[i] or {}) do
      d[k] = v
    end
    list[i] = fwt.insert(d)
  end
  return list
end

describe("on_batch", function()
  it("handles a batch whose handler returns: every event handled, no retry", function()
    local app = load()
    local r = app:deliver_batch("s", events(5, {}))
    assert.same({ "handled", "handled", "handled", "handled", "handled" }, r.outcomes)
    assert.equal("done", r.result)
    assert.equal(0, #r.delays)
  end)

  it("isolates a raising event by bisection: it alone reaches the DLQ, with its own error", function()
    local app = load()
    local r = app:deliver_batch("s", events(8, { [6] = { raise = true } }))
    assert.same({ "handled", "handled", "handled", "handled", "handled", "dlq", "handled",
                  "handled" }, r.outcomes)
    local dlq = app:dlq("s")
    assert.equal(1, #dlq)
    assert.same({ 6, "Boom", "raised by 6", 2 }, { dlq[1].documentKey._id, dlq[1].error.type,
                                                   dlq[1].error.message, dlq[1].attempts })
    -- 2 whole-batch attempts, halves {1-4} ok {5-8} raises, {5,6} raises {7,8} ok,
    -- 5 alone ok, 6 alone twice: 1s between the whole batch's attempts and 6's.
    assert.same({ 1, 1 }, r.delays)
  end)

  it("retries events marked with batch:fail alone, then dead-letters each with its error", function()
    local app = load()
    local r = app:deliver_batch("s", events(6, { [2] = { mark = true }, [5] = { mark = true } }))
    assert.same({ "handled", "dlq", "handled", "handled", "dlq", "handled" }, r.outcomes)
    local dlq = app:dlq("s")
    table.sort(dlq, function(a, b) return a.documentKey._id < b.documentKey._id end)
    assert.same({ "marked 2", "marked 5" }, { dlq[1].error.message, dlq[2].error.message })
  end)

  it("with a sequenced DLQ, takes events one at a time: a later event of a failed key is parked", function()
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write([=[
local fw = require("flowwarden")
fw.stream { name = "q", database = "shop", collection = "orders", dlq = { sequenced = true },
  on_batch = function(batch)
    for _, ctx in batch:events() do
      if ctx:full_document().bad then error("bad") end
    end
  end }
]=])
    f:close()
    finally(function() os.remove(path) end)
    local app = fwt.load(path)
    local r = app:deliver_batch("q", { fwt.insert { _id = 1, bad = true }, fwt.insert { _id = 2 },
      fwt.update({ _id = 1 }, { set = { x = 1 } }, { fullDocument = { _id = 1 } }) })
    assert.same({ "dlq", "handled", "parked" }, r.outcomes)
  end)

  it("refuses misuse with a clear error", function()
    local app = load()
    local r = app:deliver_batch("s", events(2, { [1] = { misuse = "get" } }))
    assert.equal("dlq", r.outcomes[1])
    -- raised for the batch, then again for event 1 alone (bisection): a batch of one
    assert.matches("batch:get: index 2 is out of range (the batch has 1 event)",
                   app:dlq("s")[1].error.message, 1, true)
    app:deliver_batch("s", events(2, { [1] = { keep = true } }))
    r = app:deliver("s", fwt.insert { _id = 10, misuse = "old" })
    assert.equal("dlq", r.outcome)
    assert.matches("batch used after its call returned", r.dlq_entry.error.message, 1, true)
    r = app:deliver("s", fwt.insert { _id = 11, misuse = "oldctx" })
    assert.matches("ctx used after its event was handled", r.dlq_entry.error.message, 1, true)
  end)
end)
