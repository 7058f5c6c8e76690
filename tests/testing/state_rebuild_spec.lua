-- A Lua state that reaches its memory_limit is rebuilt from the script
-- (issue 25, section 3), under flowwarden test as under run: the event that
-- failed in the full state runs again on the new one, fw.state is kept, the
-- rebuild is counted; a state that fills up again at once stops the stream.
local fwt = require("flowwarden.testing")

local SCRIPT = [[
local fw = require("flowwarden")
leak = {}
fw.stream { name = "s", database = "shop", collection = "orders", memory_limit = "8MB",
  retry = { max_attempts = 1 }, dlq = true,
  on_insert = function(ctx)
    local doc = ctx:full_document()
    if doc.remember then fw.state.set("remembered", doc.remember) end
    if doc.fill == "always" or (doc.fill == "once" and ctx:attempt_number() == 1) then
      while true do leak[#leak + 1] = string.rep("x", 4096) .. #leak end
    end
    if doc.check then
      assert(#leak == 0, "globals start afresh")
      assert(fw.state.get("remembered") == "kept", "fw.state is kept")
    end
  end }
]]

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

-- The script stays on disk for the test: a rebuild loads it again.
local function load()
  local path = os.tmpname()
  write(path, SCRIPT)
  finally(function() os.remove(path) end)
  return fwt.load(path), path
end

local function logged(r, needle)
  for _, l in ipairs(r.logs) do
    if l.message:find(needle, 1, true) then
      return l
    end
  end
end

describe("a full Lua state", function()
  it("is rebuilt and the event tried again on the new one", function()
    local app = load()
    assert.equal("handled", app:deliver("s", fwt.insert({ _id = 1, remember = "kept" })).outcome)
    local r = app:deliver("s", fwt.insert({ _id = 2, fill = "once" }))
    assert.equal("handled", r.outcome, r.failure)
    assert.equal(2, r.attempts)
    assert.equal(1, #r.errors)
    assert.same({ 1, "MemoryError", "rebuild" }, { r.errors[1].attempt, r.errors[1].type,
                                                    r.errors[1].action })
    assert.truthy(logged(r, "Lua state rebuilt from script version"))
    assert.is_nil(r.dlq_entry)
    assert.equal(1, app.metrics:value("flowwarden_states_rebuilt_total",
                                      { stream = "s", reason = "memory" }))
    assert.equal("handled", app:deliver("s", fwt.insert({ _id = 3, check = true })).outcome)
  end)

  it("is not what a big event alone makes: its values are let go before the state is measured",
     function()
    local app = load()
    -- ctx:full_document() copies the event's 7 MB into the 8 MB state; once
    -- the handler returned, that copy is the event's, not the state's.
    local r = app:deliver("s", fwt.insert({ _id = 1, big = string.rep("x", 7 * 1024 * 1024) }))
    assert.equal("handled", r.outcome)
    assert.equal("handled", app:deliver("s", fwt.insert({ _id = 2 })).outcome)
    assert.equal(0, app.metrics:value("flowwarden_states_rebuilt_total", { stream = "s" }))
  end)

  it("stops the stream when it fills up again at once", function()
    local app = load()
    local r = app:deliver("s", fwt.insert({ _id = 1, fill = "always" }))
    assert.equal("stopped", r.outcome)
    assert.truthy(r.failure:find('the Lua state of stream "s" filled its memory_limit again',
                                 1, true))
    assert.is_nil(r.dlq_entry)
    assert.equal(1, app.metrics:value("flowwarden_states_rebuilt_total", { stream = "s" }))
  end)

  it("is not rebuilt from a script changed on disk since: the stream stops", function()
    local app, path = load()
    write(path, SCRIPT .. "\n-- changed\n")
    local r = app:deliver("s", fwt.insert({ _id = 1, fill = "once" }))
    assert.equal("stopped", r.outcome)
    assert.truthy(r.failure:find("cannot be rebuilt: the script on disk is version", 1, true))
    assert.equal(0, app.metrics:value("flowwarden_states_rebuilt_total", { stream = "s" }))
  end)
end)

-- exactly_once: the call that filled the state wrote before it did; its retry on the new
-- state starts from the store as it was before the call (the fake, as production, applies a
-- call's writes only when it commits).
local EO_SCRIPT = [[
local fw = require("flowwarden")
leak = {}
fw.stream { name = "s", database = "shop", collection = "orders", memory_limit = "8MB",
  exactly_once = true, retry = { max_attempts = 1 }, dlq = true,
  on_insert = function(ctx)
    local doc = ctx:full_document()
    fw.mongo.collection("shop", "totals"):update_one({ _id = doc.customer },
      { ["$inc"] = { orders = 1 } }, { upsert = true })
    if doc.fill == "once" and ctx:attempt_number() == 1 then
      while true do leak[#leak + 1] = string.rep("x", 4096) .. #leak end
    end
  end }
]]

-- The same with on_batch: a call of it is one transaction too.
local EO_BATCH_SCRIPT = [[
local fw = require("flowwarden")
leak = {}
fw.stream { name = "s", database = "shop", collection = "orders", memory_limit = "8MB",
  exactly_once = true, retry = { max_attempts = 1 }, dlq = true,
  on_batch = function(batch)
    for i, ctx in batch:events() do
      local doc = ctx:full_document()
      fw.mongo.collection("shop", "totals"):update_one({ _id = doc.customer },
        { ["$inc"] = { orders = 1 } }, { upsert = true })
      -- once: fw.state outlives the rebuild
      if doc.fill == "once" and not fw.state.get("filled") then
        fw.state.set("filled", true)
        while true do leak[#leak + 1] = string.rep("x", 4096) .. #leak end
      end
      if doc.poison then batch:fail(i, fw.error("Validation", "poison")) end
    end
  end }
]]

local function load_eo(script)
  local path = os.tmpname()
  write(path, script)
  finally(function() os.remove(path) end)
  return fwt.load(path)
end

describe("a full Lua state under exactly_once", function()
  it("is rebuilt and the call tried again from the rolled-back store", function()
    local app = load_eo(EO_SCRIPT)
    local totals = app.mongo:collection("shop", "totals")
    assert.equal("handled", app:deliver("s", fwt.insert({ _id = 1, customer = "c" })).outcome)
    local r = app:deliver("s", fwt.insert({ _id = 2, customer = "c", fill = "once" }))
    assert.equal("handled", r.outcome, r.failure)
    assert.equal(2, r.attempts)
    assert.same({ 1, "MemoryError", "rebuild" }, { r.errors[1].attempt, r.errors[1].type,
                                                    r.errors[1].action })
    assert.same({ _id = "c", orders = 2 }, totals:find_one({ _id = "c" }))
    -- and the next call's writes are its own transaction's, committed
    assert.equal("handled", app:deliver("s", fwt.insert({ _id = 3, customer = "c" })).outcome)
    assert.same({ _id = "c", orders = 3 }, totals:find_one({ _id = "c" }))
  end)
end)

describe("a full Lua state under exactly_once with on_batch", function()
  it("is rebuilt and the batch tried again from the rolled-back store", function()
    local app = load_eo(EO_BATCH_SCRIPT)
    local totals = app.mongo:collection("shop", "totals")
    local r = app:deliver_batch("s", { fwt.insert({ _id = 1, customer = "c" }) })
    assert.same({ "handled" }, r.outcomes)
    r = app:deliver_batch("s", { fwt.insert({ _id = 2, customer = "c" }),
                                 fwt.insert({ _id = 3, customer = "c", fill = "once" }) })
    assert.same({ "handled", "handled" }, r.outcomes)
    assert.truthy(logged(r, "Lua state rebuilt from script version"))
    -- the first try's two $inc were put back: the retry's count once
    assert.same({ _id = "c", orders = 3 }, totals:find_one({ _id = "c" }))
  end)

  it("applies nothing of a call that marks an event failed", function()
    local app = load_eo(EO_BATCH_SCRIPT)
    local totals = app.mongo:collection("shop", "totals")
    local r = app:deliver_batch("s", { fwt.insert({ _id = 1, customer = "c", poison = true }) })
    assert.same({ "dlq" }, r.outcomes)
    assert.is_nil(totals:find_one({ _id = "c" }))
  end)
end)

-- on_batch without exactly_once: a call that fails in the full state is made again at once on
-- the rebuilt state, with the same events, as the next attempt (whatever max_attempts says), as
-- an event's attempt is; an attempt count that started again at 1 would fill the new state too
-- and stop the stream ("filled its memory_limit again").
local BATCH_SCRIPT = [[
local fw = require("flowwarden")
leak = {}
fw.stream { name = "s", database = "shop", collection = "orders", memory_limit = "8MB",
  retry = { max_attempts = MAX_ATTEMPTS, initial_delay = "10ms" }, dlq = true,
  on_batch = function(batch)
    fw.log.info(string.format("call of %d event(s), attempt %d", #batch,
                              batch:get(1):attempt_number()))
    for _, ctx in batch:events() do
      if ctx:full_document().fill == "once" and ctx:attempt_number() == 1 then
        while true do leak[#leak + 1] = string.rep("x", 4096) .. #leak end
      end
    end
  end }
]]

local function calls(r)
  local out = {}
  for _, l in ipairs(r.logs) do
    local n, a = l.message:match("^call of (%d+) event%(s%), attempt (%d+)$")
    if n then out[#out + 1] = n .. "@" .. a end
  end
  return out
end

describe("a full Lua state with on_batch", function()
  for _, max_attempts in ipairs({ 1, 3 }) do
    it("is rebuilt and the batch called again whole, its attempt count carrying on (max_attempts "
       .. max_attempts .. ")", function()
      local app = load_eo((BATCH_SCRIPT:gsub("MAX_ATTEMPTS", max_attempts)))
      local r = app:deliver_batch("s", { fwt.insert({ _id = 1 }),
                                         fwt.insert({ _id = 2, fill = "once" }) })
      assert.same({ "handled", "handled" }, r.outcomes)
      assert.equal("done", r.result)
      assert.same({ "2@1", "2@2" }, calls(r))
      assert.equal(1, #r.errors)
      assert.same({ 1, "MemoryError", "rebuild" }, { r.errors[1].attempt, r.errors[1].type,
                                                      r.errors[1].action })
      assert.truthy(logged(r, "Lua state rebuilt from script version"))
      assert.is_nil(logged(r, "retrying")) -- at once, without the retry's backoff
      assert.equal(1, app.metrics:value("flowwarden_states_rebuilt_total",
                                        { stream = "s", reason = "memory" }))
    end)
  end
end)
