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
