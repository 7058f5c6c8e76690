-- The fw.mongo test fake (lua/flowwarden/testing/mongo_fake.lua) under
-- plain Lua, where the runtime's typed values are missing. Its agreement
-- with fw.mongo on the stand-in is tests/integration/test_mongo_fake.py.
package.path = "tests/integration/?.lua;" .. package.path

local fw = require("flowwarden")
local mongo_fake = require("flowwarden.testing.mongo_fake")
local cases = require("mongo_cases")

local function raised(f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return err
end

describe("mongo_fake", function()
  local fake, c
  before_each(function()
    fake = mongo_fake.new { clock = function() return 1714564800123 end }
    c = fake:collection("shop", "orders")
  end)

  it("is a module that a subfolder of lua/flowwarden provides", function()
    assert.is_function(mongo_fake.new)
    assert.equal("Testing.Unsupported", mongo_fake.UNSUPPORTED)
  end)

  it("inserts, finds and counts with fw.mongo's result shapes", function()
    assert.same({ inserted_id = 1 }, c:insert_one({ _id = 1, total = 5 }))
    assert.same({ inserted_ids = { 2, 3 } },
      c:insert_many({ { _id = 2, total = 7 }, { _id = 3, total = 1.5 } }))
    assert.same({ _id = 2, total = 7 }, c:find_one({ total = { ["$gt"] = 5 } }))
    assert.equal(2, c:count({ total = { ["$lt"] = 6 } }))
    assert.is_nil(c:find_one({ total = 99 }))
    local seen = {}
    for doc in c:find({}, { sort = { total = -1 } }) do
      seen[#seen + 1] = doc._id
    end
    assert.same({ 2, 1, 3 }, seen)
  end)

  it("keeps integers and floats apart", function()
    c:insert_one({ _id = 1, n = 2, x = 2.0 })
    local d = c:find_one({ _id = 1 })
    assert.equal("integer", math.type(d.n))
    assert.equal("float", math.type(d.x))
    c:update_one({ _id = 1 }, { ["$inc"] = { n = 0.5 } })
    assert.equal(2.5, c:find_one({}).n)
  end)

  it("copies documents in and out", function()
    local doc = { _id = 1, tags = { "a" } }
    c:insert_one(doc)
    doc.tags[1] = "changed"
    local got = c:find_one({ _id = 1 })
    assert.equal("a", got.tags[1])
    got.tags[1] = "also changed"
    assert.equal("a", c:find_one({ _id = 1 }).tags[1])
  end)

  it("marks arrays, so an empty one stays an array in fw.json", function()
    c:insert_one({ _id = 1, tags = fw.json.decode("[]"), sub = {} })
    assert.equal('{"_id":1,"sub":{},"tags":[]}', fw.json.encode(c:find_one({ _id = 1 })))
  end)

  it("gives a document without _id a new ObjectId on the fake's clock", function()
    local r = c:insert_one({ x = 1 })
    assert.equal("object_id", r.inserted_id.type)
    assert.equal(24, #r.inserted_id.hex)
    assert.equal(1714564800, r.inserted_id.time)
    assert.equal(r.inserted_id, c:find_one({ x = 1 })._id)
    assert.are_not.equal(r.inserted_id, c:insert_one({ x = 2 }).inserted_id)
  end)

  it("raises Mongo.DuplicateKey on a duplicate _id, shaped as fw.mongo's", function()
    c:insert_one({ _id = 1 })
    local err = raised(c.insert_one, c, { _id = 1, x = 2 })
    assert.equal("Mongo.DuplicateKey", err.type)
    assert.equal("fw.mongo: insert_one on shop.orders: E11000 duplicate key error collection: "
      .. "shop.orders index: _id_ dup key: { _id: 1 }", err.message)
    assert.same({ code = 11000, code_name = "DuplicateKey", labels = {},
      write_errors = { { index = 1, code = 11000, message = "E11000 duplicate key error "
        .. "collection: shop.orders index: _id_ dup key: { _id: 1 }" } } }, err.fields)
    assert.equal("Mongo.DuplicateKey: " .. err.message, tostring(err))
  end)

  it("updates with every supported operator and upserts", function()
    c:insert_one({ _id = 1, n = 1, tags = { "a" }, gone = true })
    local r = c:update_one({ _id = 1 }, {
      ["$set"] = { ["sub.x"] = 1 }, ["$unset"] = { gone = "" }, ["$inc"] = { n = 2 },
      ["$push"] = { tags = "b" }, ["$addToSet"] = { set = { ["$each"] = { 1, 1, 2 } } },
      ["$setOnInsert"] = { created = true },
    })
    assert.same({ matched = 1, modified = 1 }, r)
    assert.same({ _id = 1, n = 3, tags = { "a", "b" }, sub = { x = 1 }, set = { 1, 2 } },
      c:find_one({ _id = 1 }))
    r = c:update_many({ kind = "new" }, { ["$setOnInsert"] = { created = true } }, { upsert = true })
    assert.equal(0, r.matched)
    assert.equal("object_id", r.upserted_id.type)
    assert.same({ _id = r.upserted_id, kind = "new", created = true },
      c:find_one({ _id = r.upserted_id }))
  end)

  it("replaces, deletes and finds-and-updates", function()
    c:insert_many({ { _id = 1, v = 1 }, { _id = 2, v = 2 } })
    assert.same({ matched = 1, modified = 1 }, c:replace_one({ _id = 1 }, { w = 9 }))
    assert.same({ _id = 1, w = 9 }, c:find_one({ _id = 1 }))
    assert.same({ _id = 2, v = 2 }, c:find_one_and_update({ _id = 2 }, { ["$inc"] = { v = 1 } }))
    assert.same({ _id = 2, v = 4 }, c:find_one_and_update({ _id = 2 }, { ["$inc"] = { v = 1 } },
      { return_document = "after" }))
    assert.same({ deleted = 1 }, c:delete_one({}))
    assert.same({ deleted = 1 }, c:delete_many({}))
    assert.equal(0, c:count({}))
  end)

  it("keeps each connection apart and checks declared names", function()
    local f = mongo_fake.new { connections = { "audit" } }
    f:collection("a", "x"):insert_one({ _id = 1 })
    local audit = f:collection("a", "x", { connection = "audit" })
    assert.equal(0, audit:count({}))
    local other = f:collection("a", "x", { connection = "nope" })
    local err = raised(other.count, other, {})
    assert.equal("ArgumentError", err.type)
    assert.equal('count: unknown connection "nope" (declare it with fw.connection { name = '
      .. '"nope", uri = ... }, or omit connection to use the run URI)', err.message)
  end)

  it("offers fw.mongo's shape as .api", function()
    local h = fake.api.collection("shop", "orders")
    h:insert_one({ _id = 1 })
    assert.equal(1, c:count({}))
    assert.equal("fw.mongo.collection(shop.orders, connection default)", tostring(h))
    local err = raised(fake.api.collection, "shop.x", "y")
    assert.equal("fw.mongo.collection: database must be a non-empty name without dots or NUL "
      .. "bytes", err.message)
  end)

  it("raises as fw.mongo does outside handlers when told where handlers run", function()
    local inside = false
    local f = mongo_fake.new { in_handler = function() return inside end }
    local h = f:collection("a", "b")
    local err = raised(h.count, h, {})
    assert.matches("fw.mongo is available inside handlers only$", err)
    inside = true
    assert.equal(0, h:count({}))
  end)

  it("rejects bad arguments with fw.mongo's ArgumentErrors", function()
    local err = raised(c.find_one, c, "x")
    assert.equal("ArgumentError", err.type)
    assert.equal("find_one: filter must be a table, got string", err.message)
    err = raised(c.find_one, c, { when = print })
    assert.equal("find_one: filter.when: cannot convert a function to BSON", err.message)
    err = raised(c.find, c, {}, { limt = 1 })
    assert.equal('find: unknown option "limt" (did you mean "limit"?)', err.message)
    err = raised(c.update_one, c, {}, { a = 1 })
    assert.equal("update_one: update must be a table of $-operators or use replace_one",
      err.message)
    err = raised(c.replace_one, c, {}, { ["$set"] = { a = 1 } })
    assert.equal("replace_one: replacement must not contain $-operators", err.message)
    err = raised(c.insert_many, c, {})
    assert.equal("insert_many: docs must be a non-empty array", err.message)
    err = raised(c.insert_one, c, { a = { 1, nil, 3 } })
    assert.equal("insert_one: document.a: table keys are integers but not a sequence 1..n; "
      .. "arrays cannot have holes (use null for a BSON null)", err.message)
    err = raised(c.find_one)
    assert.equal("find_one: call it as a method: coll:find_one(...)", err.message)
  end)

  it("bulk_write: counts what it did; unordered, a refused write is a write error of its op", function()
    c:insert_one({ _id = 1, n = 0 })
    local r = c:bulk_write({
      { insert_one = { _id = 2 } },
      { update_one = { filter = { _id = 1 }, update = { ["$inc"] = { n = 1 } } } },
      { update_one = { filter = { _id = 9 }, update = { ["$set"] = { n = 9 } }, upsert = true } },
      { delete_one = { filter = { _id = 2 } } },
    })
    assert.same({ 1, 1, 1, 1, 1 }, { r.inserted, r.matched, r.modified, r.upserted, r.deleted })
    assert.equal(9, r.upserted_ids[3])
    local err = raised(c.bulk_write, c, {
      { insert_one = { _id = 1 } }, { insert_one = { _id = 3 } }, { insert_one = { _id = 9 } },
    }, { ordered = false })
    assert.equal("Mongo.DuplicateKey", err.type)
    assert.same({ 1, 3 }, { err.fields.write_errors[1].index, err.fields.write_errors[2].index })
    assert.equal(1, c:count({ _id = 3 }))   -- the others were applied
    assert.same({ inserted = 1, matched = 0, modified = 0, deleted = 0, upserted = 0 },
      err.fields.applied)                    -- and say so, as fw.mongo does
    err = raised(c.bulk_write, c, { { insert_one = { _id = 1 } }, { insert_one = { _id = 4 } } })
    assert.equal(1, err.fields.write_errors[1].index)
    assert.equal(0, c:count({ _id = 4 }))   -- ordered: stopped at the first
    err = raised(c.bulk_write, c, { { upsert_one = {} } })
    assert.matches('ops[1]: unknown operation "upsert_one"', err.message, 1, true)
  end)

  it("refuses what it does not support instead of answering wrongly", function()
    c:insert_one({ _id = 1, name = "ann" })
    for _, call in ipairs({
      function() return c:find_one({ name = { ["$regex"] = "^a" } }) end,
      function() return c:count({ ["$expr"] = { ["$eq"] = { 1, 1 } } }) end,
      function() return c:update_one({}, { ["$rename"] = { name = "n" } }) end,
      function() return c:update_one({}, { ["$push"] = { t = { ["$each"] = { 1 }, ["$slice"] = 1 } } }) end,
      function() return c:aggregate({ { ["$group"] = { _id = 1 } } }):to_array() end,
    }) do
      local err = raised(call)
      assert.equal("Testing.Unsupported", err.type)
      assert.matches("is not supported by the test fake", err.message, 1, true)
    end
    assert.equal(1, c:count({}))
  end)

  it("closes cursors like the runtime: early close and close_cursors make reads raise", function()
    c:insert_many({ { _id = 1 }, { _id = 2 } })
    local cur = c:find({})
    assert.equal(1, cur:next()._id)
    fake:close_cursors()
    local err = raised(cur.next, cur)
    assert.equal("fw.mongo: find cursor on shop.orders is closed (a cursor lasts for the handler "
      .. "call that opened it, or until cursor:close())", err.message)
    do
      local scoped <close> = c:find({})
      assert.equal(2, #scoped:to_array())
      assert.is_nil(scoped:next())
    end
    local done = c:find({})
    done:to_array()
    done:close()
    assert.is_nil(done:next())
  end)

  it("supports a small aggregate subset", function()
    c:insert_many({ { _id = 1, v = 3 }, { _id = 2, v = 1 }, { _id = 3, v = 2 } })
    local out = c:aggregate({ { ["$match"] = { v = { ["$gte"] = 2 } } }, { ["$sort"] = { v = 1 } },
      { ["$project"] = { _id = 0, v = 1 } } }):to_array()
    assert.same({ { v = 2 }, { v = 3 } }, out)
    assert.same({ { n = 3 } }, c:aggregate({ { ["$count"] = "n" } }):to_array())
  end)

  it("runs every conformance case to a result or a typed error", function()
    local list = cases.cases(fw)
    assert.is_true(#list > 100)
    for i, case in ipairs(list) do
      local text = cases.run(case, fake:collection("cases", "c" .. i))
      assert.is_nil(text:find("error={lua=", 1, true), case.name .. ": " .. text)
    end
  end)
  it("keeps a transaction's writes on commit and puts every touched collection back on abort",
    function()
      c:insert_one({ _id = 1, n = 1 })
      fake:txn("begin", "s")
      c:update_one({ _id = 1 }, { ["$inc"] = { n = 1 } })
      fake:collection("shop", "new"):insert_one({ _id = "x" })
      assert.equal(2, c:find_one({ _id = 1 }).n, "the transaction reads its own writes")
      fake:txn("abort")
      assert.equal(1, c:find_one({ _id = 1 }).n)
      assert.same({}, fake:documents("shop", "new"))
      fake:txn("begin", "s")
      c:update_one({ _id = 1 }, { ["$inc"] = { n = 5 } })
      fake:txn("commit")
      fake:txn("abort") -- none open: nothing to put back
      assert.equal(6, c:find_one({ _id = 1 }).n)
    end)

  -- The check itself is the runtime's (tests/testing/mongo_check_spec.lua runs it under
  -- `flowwarden test`); here, what the fake hands it and what it makes of its answer.
  it("hands each document to write to check_document, raising its answer as fw.mongo does",
    function()
      local seen = {}
      local checked = mongo_fake.new { check_document = function(v, path)
        seen[#seen + 1] = path
        return v.bad and path .. " has an empty key" or nil
      end }
      local k = checked:collection("shop", "orders")
      k:insert_one({ _id = 1 })
      k:insert_many({ { _id = 2 }, { _id = 3 } })
      k:update_one({ _id = 1 }, { ["$set"] = { a = 1 } })
      k:update_many({}, { ["$set"] = { a = 2 } })
      k:replace_one({ _id = 1 }, { a = 3 })
      k:find_one_and_update({ _id = 1 }, { ["$set"] = { a = 4 } })
      k:bulk_write({ { insert_one = { _id = 4 } },
        { update_one = { filter = {}, update = { ["$set"] = { b = 1 } } } },
        { update_many = { filter = {}, update = { ["$set"] = { b = 2 } } } },
        { replace_one = { filter = { _id = 4 }, replacement = { b = 3 } } },
        { delete_one = { filter = { _id = 9 } } } })
      k:find_one({ _id = 1 })
      k:delete_one({ _id = 9 })
      assert.same({ "document", "docs[1]", "docs[2]", "update", "update", "replacement",
        "update", "ops[1].insert_one", "ops[2].update_one.update", "ops[3].update_many.update",
        "ops[4].replace_one.replacement" }, seen)
      local err = raised(k.insert_many, k, { { _id = 5 }, { _id = 6, bad = true } })
      assert.equal("ArgumentError", err.type)
      assert.equal("insert_many: docs[2] has an empty key", err.message)
      assert.equal(4, k:count({}), "nothing of a refused insert_many is written")
    end)

  it("refuses another connection inside a transaction, naming stream and connection", function()
    fake:txn("begin", "totals")
    local err = raised(function()
      fake:collection("audit", "log", { connection = "audit" }):insert_one({ _id = 1 })
    end)
    fake:txn("abort")
    assert.equal("ArgumentError", err.type)
    assert.matches('insert_one on audit.log: stream "totals" has exactly_once = true, and '
      .. 'connection "audit" cannot join its transaction', err.message, 1, true)
  end)
end)
