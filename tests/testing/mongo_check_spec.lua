-- flowwarden test: the fw.mongo fake refuses what fw.mongo's writes refuse
-- before sending (src/bson/bson_check.c: an empty key, a key or a string
-- that is not valid UTF-8), with the same ArgumentError naming the element.
-- The fake runs the runtime's own checker (core.check_document), so these
-- cases pin the paths each write method gives it; the messages are those
-- fw.mongo raises in tests/c/test_mongo_lua.c.
local fwt = require("flowwarden.testing")

local DIR = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

-- Each write method with the document d placed where it checks one, and
-- the path fw.mongo names that document by.
local WRITES = {
  { "insert_one", "insert_one: document", function(c, d) return c:insert_one(d) end },
  { "insert_many", "insert_many: docs[2]", function(c, d)
    return c:insert_many({ { _id = 1 }, d })
  end },
  { "update_one", "update_one: update.$set", function(c, d)
    return c:update_one({}, { ["$set"] = d })
  end },
  { "update_many", "update_many: update.$set", function(c, d)
    return c:update_many({}, { ["$set"] = d })
  end },
  { "replace_one", "replace_one: replacement", function(c, d) return c:replace_one({}, d) end },
  { "find_one_and_update", "find_one_and_update: update.$set", function(c, d)
    return c:find_one_and_update({}, { ["$set"] = d }, { upsert = true })
  end },
  { "bulk_write insert_one", "bulk_write: ops[2].insert_one", function(c, d)
    return c:bulk_write({ { insert_one = { _id = 1 } }, { insert_one = d } })
  end },
  { "bulk_write update_one", "bulk_write: ops[2].update_one.update.$set", function(c, d)
    return c:bulk_write({ { insert_one = { _id = 1 } },
      { update_one = { filter = {}, update = { ["$set"] = d } } } })
  end },
  { "bulk_write update_many", "bulk_write: ops[2].update_many.update.$set", function(c, d)
    return c:bulk_write({ { insert_one = { _id = 1 } },
      { update_many = { filter = {}, update = { ["$set"] = d }, upsert = true } } })
  end },
  { "bulk_write replace_one", "bulk_write: ops[2].replace_one.replacement", function(c, d)
    return c:bulk_write({ { insert_one = { _id = 1 } },
      { replace_one = { filter = {}, replacement = d } } })
  end },
}

-- A document and what follows the method's path in the message.
local BAD = {
  { "an empty key", { [""] = 1 }, " has an empty key" },
  { "a key that is not UTF-8", { ["k\xc3"] = 1 }, " has a key that is not valid UTF-8" },
  { "a string that is not UTF-8", { s = "a\xffb" }, ".s is not valid UTF-8" },
  { "a nested empty key", { a = { b = { [""] = 1 } } }, ".a.b has an empty key" },
  { "a surrogate in a key inside an array", { l = { { ["\xed\xa0\x80"] = 1 } } },
    ".l[1] has a key that is not valid UTF-8" },
  { "a bad string in an array in a document", { l = { "ok", { s = "\xc3\x28" } } },
    ".l[2].s is not valid UTF-8" },
  { "a truncated sequence in an array of arrays", { m = { { "x", "\xe2\x82" } } },
    ".m[1][2] is not valid UTF-8" },
}

local function refused(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected the write to be refused")
  assert.equal("table", type(err), tostring(err))
  return err
end

describe("fw.mongo fake: documents checked before writing", function()
  local app, c
  before_each(function()
    app = fwt.load(DIR .. "mongo_check.lua")
    c = app.mongo:collection("shop", "out")
  end)

  for _, w in ipairs(WRITES) do
    for _, b in ipairs(BAD) do
      it(w[1] .. " refuses " .. b[1] .. ", naming it", function()
        local err = refused(w[3], c, b[2])
        assert.equal("ArgumentError", err.type)
        assert.equal(w[2] .. b[3], err.message)
        -- Refused before anything is written, as fw.mongo raises before sending.
        assert.equal(0, c:count({}))
      end)
    end
  end

  it("gives fw.mongo's messages for fw.mongo's own cases", function()
    local same = {
      { function() c:update_one({}, { ["$set"] = { s = "a\xffb" } }) end,
        "update_one: update.$set.s is not valid UTF-8" },
      { function() c:update_many({}, { ["$set"] = { a = { b = { [""] = 1 } } } }) end,
        "update_many: update.$set.a.b has an empty key" },
      { function() c:replace_one({}, { ["k\xc3"] = 1 }) end,
        "replace_one: replacement has a key that is not valid UTF-8" },
      { function() c:find_one_and_update({}, { ["$set"] = { [""] = 1 } }) end,
        "find_one_and_update: update.$set has an empty key" },
      { function()
          c:bulk_write({ { update_one = { filter = {}, update = { ["$set"] = { l = { "ok",
            { s = "\xc3\x28" } } } } } } })
        end, "bulk_write: ops[1].update_one.update.$set.l[2].s is not valid UTF-8" },
      { function()
          c:bulk_write({ { delete_one = { filter = {} } }, { replace_one = { filter = {},
            replacement = { a = { [""] = 1 } } } } })
        end, "bulk_write: ops[2].replace_one.replacement.a has an empty key" },
      { function() c:insert_one({ s = "\xff" }) end, "insert_one: document.s is not valid UTF-8" },
      { function() c:insert_many({ { _id = 1 }, { a = { [""] = 1 } } }) end,
        "insert_many: docs[2].a has an empty key" },
      { function() c:bulk_write({ { insert_one = { ["k\xc3"] = 1 } } }) end,
        "bulk_write: ops[1].insert_one has a key that is not valid UTF-8" },
    }
    for _, s in ipairs(same) do
      local err = refused(s[1])
      assert.equal("ArgumentError", err.type)
      assert.equal(s[2], err.message)
    end
  end)

  it("keeps its earlier checks first, in fw.mongo's order", function()
    -- docs[1] is no document: named before docs[2]'s key.
    assert.equal("insert_many: docs[1] must be a document",
      refused(c.insert_many, c, { 5, { [""] = 1 } }).message)
    -- A bad string in docs[1] before docs[2] that is no document.
    assert.equal("insert_many: docs[1].s is not valid UTF-8",
      refused(c.insert_many, c, { { s = "\xff" }, 5 }).message)
    -- The operator check before the text check.
    assert.equal("update_one: update must be a table of $-operators or use replace_one",
      refused(c.update_one, c, {}, { [""] = 1 }).message)
    assert.equal("replace_one: replacement must not contain $-operators",
      refused(c.replace_one, c, {}, { ["$set"] = { [""] = 1 } }).message)
    -- Filters are not checked (fw.mongo sends them as they are).
    assert.equal(0, c:update_one({ ["k\xc3"] = 1 }, { ["$set"] = { a = 1 } }).matched)
  end)

  it("asks the runtime's checker, which answers nil or fw.mongo's words", function()
    local core = require("flowwarden.testing.core")
    assert.is_nil(core.check_document({ a = { "x" } }, "document"))
    assert.is_nil(core.check_document(5, "docs[1]")) -- no document: the fake names it
    assert.equal("update.$set.l[2].s is not valid UTF-8",
      core.check_document({ ["$set"] = { l = { "ok", { s = "\xff" } } } }, "update"))
    -- What the fake's conversion would let through, the runtime's still names.
    assert.equal("document.f: cannot convert a function to BSON",
      core.check_document({ f = print }, "document"))
  end)

  it("writes valid UTF-8 and strings holding NUL bytes", function()
    c:insert_one({ _id = 1, s = "caf\xc3\xa9 a\0b", ["\xe2\x82\xac"] = { "\xf0\x9f\x98\x80" } })
    local d = c:find_one({ _id = 1 })
    assert.equal("caf\xc3\xa9 a\0b", d.s)
    assert.equal("\xf0\x9f\x98\x80", d["\xe2\x82\xac"][1])
  end)

  it("refuses a handler's write as fw.mongo does in production", function()
    local cases = {
      { "bad_string", "update_one: update.$set.l[2].s is not valid UTF-8" },
      { "empty_key", "insert_many: docs[2].a has an empty key" },
      { "bad_key", "bulk_write: ops[2].replace_one.replacement has a key that is not valid UTF-8" },
    }
    for i, k in ipairs(cases) do
      local r = app:deliver("s", fwt.insert { _id = i, case = k[1] })
      assert.equal("dlq", r.outcome)
      assert.equal("ArgumentError", r.dlq_entry.error.type)
      assert.equal(k[2], r.dlq_entry.error.message)
    end
    assert.equal(0, c:count({}))
    local r = app:deliver("s", fwt.insert { _id = 9, case = "fine" })
    assert.equal("handled", r.outcome, r.errors[1] and r.errors[1].message)
    assert.equal("caf\xc3\xa9 a\0b", c:find_one({ _id = 3 }).s)
  end)
end)
