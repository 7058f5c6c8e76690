--[[
Table-driven cases for the fw.mongo test fake (lua/flowwarden/testing/mongo_fake.lua):
each one seeds a fresh collection, runs one fw.mongo call and records what
came back (result or typed error) and what the collection holds after. The
same cases run through fw.mongo against the stand-in and through the fake
(tests/integration/test_mongo_fake.py with mongo_fake_conformance.lua), and
through the fake alone under busted (tests/lua/mongo_fake_spec.lua).

  cases(fw) -> { { name =, setup = { docs } | nil, op = "update_one", args = { ... },
                   mask_ids = true | nil }, ... }
  run(case, coll) -> the outcome as canonical text (see canon)
]]

local M = {}

function M.cases(fw)
  local null = fw.null or fw.json.null
  local A = fw.array or function(t) return fw.json.decode("[]") end
  local people = {
    { _id = 1, name = "ann", age = 30, tags = { "a", "b" }, addr = { city = "Oslo", zip = 1 } },
    { _id = 2, name = "bob", age = 25, tags = { "b" }, addr = { city = "Rome" } },
    { _id = 3, name = "cy", age = 35.5, items = { { sku = "x", n = 1 }, { sku = "y", n = 2 } } },
    { _id = 4, name = "dee", nick = null },
    { _id = 5, name = "eve", age = 25, tags = A({}) },
  }
  local list = {
    -- reads: filters
    { name = "equality", setup = people, op = "find", args = { { name = "bob" } } },
    { name = "equality on a nested document", setup = people, op = "find",
      args = { { addr = { city = "Rome" } } } },
    { name = "dotted path", setup = people, op = "find", args = { { ["addr.city"] = "Oslo" } } },
    { name = "dotted path through an array", setup = people, op = "find",
      args = { { ["items.sku"] = "y" } } },
    { name = "array index in a path", setup = people, op = "find", args = { { ["tags.0"] = "b" } } },
    { name = "value matches an array element", setup = people, op = "find",
      args = { { tags = "b" } } },
    { name = "whole array equality", setup = people, op = "find", args = { { tags = { "a", "b" } } } },
    { name = "empty array equality", setup = people, op = "find", args = { { tags = A({}) } } },
    { name = "null matches null and missing", setup = people, op = "find",
      args = { { nick = null } } },
    { name = "integer equals float", setup = people, op = "find", args = { { age = 25.0 } } },
    { name = "$eq", setup = people, op = "find", args = { { age = { ["$eq"] = 25 } } } },
    { name = "$ne excludes arrays holding the value", setup = people, op = "find",
      args = { { tags = { ["$ne"] = "b" } } } },
    { name = "$gt only numbers", setup = people, op = "find", args = { { age = { ["$gt"] = 26 } } } },
    { name = "$gte and $lt", setup = people, op = "find",
      args = { { age = { ["$gte"] = 25, ["$lt"] = 35 } } } },
    { name = "$lte on strings", setup = people, op = "find",
      args = { { name = { ["$lte"] = "bob" } } } },
    { name = "$gt null matches nothing", setup = people, op = "find",
      args = { { nick = { ["$gt"] = null } } } },
    { name = "$gte null matches null and missing", setup = people, op = "count",
      args = { { nick = { ["$gte"] = null } } } },
    { name = "$in", setup = people, op = "find", args = { { age = { ["$in"] = { 25, 35.5 } } } } },
    { name = "$in with null", setup = people, op = "count", args = { { nick = { ["$in"] = { null } } } } },
    { name = "$nin", setup = people, op = "find", args = { { tags = { ["$nin"] = { "a" } } } } },
    { name = "$exists true", setup = people, op = "find", args = { { tags = { ["$exists"] = true } } } },
    { name = "$exists false", setup = people, op = "find", args = { { age = { ["$exists"] = false } } } },
    { name = "$exists on a null field", setup = people, op = "count",
      args = { { nick = { ["$exists"] = true } } } },
    { name = "$and", setup = people, op = "find",
      args = { { ["$and"] = { { age = 25 }, { tags = "b" } } } } },
    { name = "$or", setup = people, op = "find",
      args = { { ["$or"] = { { name = "ann" }, { age = { ["$gt"] = 30 } } } } } },
    { name = "$nor", setup = people, op = "count",
      args = { { ["$nor"] = { { name = "ann" }, { age = 25 } } } } },
    { name = "unknown operator", setup = people, op = "find_one", args = { { age = { ["$foo"] = 1 } } } },
    { name = "unknown top-level operator", setup = people, op = "find_one",
      args = { { ["$bar"] = { 1 } } } },
    { name = "$or must be a non-empty array", setup = people, op = "count",
      args = { { ["$or"] = A({}) } } },
    { name = "$in needs an array", setup = people, op = "find_one",
      args = { { age = { ["$in"] = 5 } } } },

    { name = "$ne null", setup = people, op = "count", args = { { nick = { ["$ne"] = null } } } },
    { name = "$exists through an array", setup = people, op = "count",
      args = { { ["items.n"] = { ["$exists"] = true } } } },
    { name = "comparison through an array", setup = people, op = "find",
      args = { { ["items.n"] = { ["$gt"] = 1 } } } },
    { name = "nested document order matters not in Lua tables", setup = people, op = "count",
      args = { { addr = { zip = 1, city = "Oslo" } } } },

    -- reads: options
    { name = "sort descending", setup = people, op = "find", args = { {}, { sort = { age = -1 } } } },
    { name = "sort by two keys", setup = people, op = "find",
      args = { {}, { sort = { { "age", 1 }, { "name", -1 } } } } },
    { name = "sort by a dotted path", setup = people, op = "find",
      args = { {}, { sort = { ["addr.city"] = 1 } } } },
    { name = "sort by an array field", setup = people, op = "find",
      args = { {}, { sort = { tags = 1 } } } },
    { name = "skip and limit", setup = people, op = "find",
      args = { {}, { sort = { _id = 1 }, skip = 1, limit = 2 } } },
    { name = "limit 0 is no limit", setup = people, op = "count", args = { {}, { limit = 0 } } },
    { name = "count with skip and limit", setup = people, op = "count",
      args = { {}, { skip = 1, limit = 3 } } },
    { name = "inclusion projection", setup = people, op = "find",
      args = { { _id = 1 }, { projection = { name = 1, ["addr.city"] = 1 } } } },
    { name = "exclusion projection without _id", setup = people, op = "find",
      args = { { _id = 3 }, { projection = { _id = 0, items = 0 } } } },
    { name = "projection through an array", setup = people, op = "find_one",
      args = { { _id = 3 }, { projection = { ["items.n"] = 1 } } } },
    { name = "projection mixing inclusion and exclusion", setup = people, op = "find_one",
      args = { {}, { projection = { name = 1, age = 0 } } } },
    { name = "find_one with sort and skip", setup = people, op = "find_one",
      args = { {}, { sort = { name = -1 }, skip = 1 } } },
    { name = "find_one nothing", setup = people, op = "find_one", args = { { name = "zed" } } },
    { name = "bad sort direction", setup = people, op = "find", args = { {}, { sort = { age = 2 } } } },
    { name = "unknown option", setup = people, op = "find", args = { {}, { limt = 1 } } },
    { name = "negative limit", setup = people, op = "find", args = { {}, { limit = -1 } } },
    { name = "filter of the wrong type", setup = people, op = "find_one", args = { "x" } },
    { name = "filter with a function", setup = people, op = "find_one",
      args = { { when = print } } },
    { name = "sort with several keys in one table", setup = people, op = "find",
      args = { {}, { sort = { a = 1, b = 1 } } } },

    -- inserts
    { name = "insert_one", op = "insert_one", args = { { _id = 7, x = 1.5, y = { 1, 2 }, z = null } } },
    { name = "insert_one generates an ObjectId", op = "insert_one", args = { { x = 1 } },
      mask_ids = true },
    { name = "insert_one duplicate _id", setup = people, op = "insert_one", args = { { _id = 2 } } },
    { name = "insert_one duplicate string _id", setup = { { _id = "k" } }, op = "insert_one",
      args = { { _id = "k", v = 1 } } },
    { name = "insert_one duplicate document _id", setup = { { _id = { a = 1, b = "x" } } },
      op = "insert_one", args = { { _id = { a = 1, b = "x" } } } },
    { name = "insert_one duplicate float _id", setup = { { _id = 2.5 } }, op = "insert_one",
      args = { { _id = 2.5 } } },
    { name = "integer and float _id collide", setup = { { _id = 1 } }, op = "insert_one",
      args = { { _id = 1.0 } } },
    { name = "insert_one with an option", op = "insert_one", args = { { _id = 1 }, { x = 1 } } },
    { name = "insert_one with a hole", op = "insert_one", args = { { _id = 1, a = { 1, nil, 3 } } } },
    { name = "insert_many", op = "insert_many", args = { { { _id = 1 }, { _id = 2, v = "b" } } } },
    { name = "insert_many ordered stops at a duplicate", setup = { { _id = 2 } },
      op = "insert_many", args = { { { _id = 1 }, { _id = 2 }, { _id = 3 } } } },
    { name = "insert_many unordered goes on", setup = { { _id = 2 } }, op = "insert_many",
      args = { { { _id = 1 }, { _id = 2 }, { _id = 3 }, { _id = 1 } }, { ordered = false } } },
    { name = "insert_many of nothing", op = "insert_many", args = { {} } },
    { name = "insert_many of a non-document", op = "insert_many", args = { { { _id = 1 }, 5 } } },

    -- updates
    { name = "$set", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { age = 31, ["addr.zip"] = 2, new = true } } } },
    { name = "$set the same value is not a modification", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { age = 30 } } } },
    { name = "$set an integer to an equal float modifies", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { age = 30.0 } } } },
    { name = "$set inside an array of documents", setup = people, op = "update_one",
      args = { { _id = 3 }, { ["$set"] = { ["items.1.n"] = 5, ["items.0.sku"] = "w" } } } },
    { name = "$inc inside an array through a field name", setup = people, op = "update_one",
      args = { { _id = 3 }, { ["$inc"] = { ["items.n"] = 1 } } } },
    { name = "sort over mixed types", setup = { { _id = 1, v = "a" }, { _id = 2, v = 5 },
      { _id = 3 }, { _id = 4, v = null }, { _id = 5, v = { 1 } }, { _id = 6, v = { x = 1 } },
      { _id = 7, v = true } }, op = "find", args = { {}, { sort = { v = 1 } } } },
    { name = "$set creates nested documents", setup = people, op = "update_one",
      args = { { _id = 2 }, { ["$set"] = { ["a.b.c"] = 1 } } } },
    { name = "$set an array element", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { ["tags.1"] = "z", ["tags.3"] = "w" } } } },
    { name = "$set through a scalar", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { ["age.x"] = 1 } } } },
    { name = "$set _id", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { _id = 9 } } } },
    { name = "$unset", setup = people, op = "update_many",
      args = { {}, { ["$unset"] = { tags = "", ["addr.zip"] = 1 } } } },
    { name = "$inc", setup = people, op = "update_many",
      args = { { age = { ["$exists"] = true } }, { ["$inc"] = { age = 1, visits = 2 } } } },
    { name = "$inc by a float", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$inc"] = { age = 0.5 } } } },
    { name = "$inc a string", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$inc"] = { name = 1 } } } },
    { name = "$inc by a string", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$inc"] = { age = "1" } } } },
    { name = "$inc overflow", setup = { { _id = 1, n = math.maxinteger } }, op = "update_one",
      args = { { _id = 1 }, { ["$inc"] = { n = 1 } } } },
    { name = "$push", setup = people, op = "update_many",
      args = { { _id = { ["$in"] = { 1, 4 } } }, { ["$push"] = { tags = "c" } } } },
    { name = "$push $each", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$push"] = { tags = { ["$each"] = { "x", "y" } } } } } },
    { name = "$push to a non-array", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$push"] = { name = "x" } } } },
    { name = "$addToSet", setup = people, op = "update_many",
      args = { {}, { ["$addToSet"] = { tags = "b" } } } },
    { name = "$addToSet $each", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$addToSet"] = { tags = { ["$each"] = { "a", "q", "q" } } } } } },
    { name = "$addToSet to a non-array", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$addToSet"] = { name = "x" } } } },
    { name = "$setOnInsert on a match does nothing", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$setOnInsert"] = { created = 1 } }, { upsert = true } } },
    { name = "upsert with $setOnInsert and $inc", setup = people, op = "update_one",
      args = { { _id = 9, kind = "z" }, { ["$setOnInsert"] = { created = 1 }, ["$inc"] = { n = 1 } },
        { upsert = true } } },
    { name = "upsert seeds from $eq, $and and dotted paths", op = "update_one",
      args = { { ["$and"] = { { _id = { ["$eq"] = 4 } }, { ["a.b"] = 2 } }, n = { ["$gt"] = 1 } },
        { ["$set"] = { x = 1 } }, { upsert = true } } },
    { name = "upsert without _id generates one", op = "update_one",
      args = { { k = 1 }, { ["$set"] = { x = 1 } }, { upsert = true } }, mask_ids = true },
    { name = "update_many counts", setup = people, op = "update_many",
      args = { { age = 25 }, { ["$set"] = { young = true } } } },
    { name = "update_one matches nothing", setup = people, op = "update_one",
      args = { { _id = 99 }, { ["$set"] = { x = 1 } } } },
    { name = "conflicting update paths", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { addr = 1 }, ["$unset"] = { ["addr.city"] = 1 } } } },
    { name = "unknown update operator", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$frob"] = { a = 1 } } } },
    { name = "update operand not a document", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = 5 } } },
    { name = "update without operators", setup = people, op = "update_one",
      args = { { _id = 1 }, { a = 1 } } },
    { name = "update with a bad filter", setup = people, op = "update_many",
      args = { { a = { ["$foo"] = 1 } }, { ["$set"] = { a = 1 } } } },
    { name = "update option upsert not a boolean", setup = people, op = "update_one",
      args = { { _id = 1 }, { ["$set"] = { a = 1 } }, { upsert = 1 } } },

    -- replace
    { name = "replace_one", setup = people, op = "replace_one",
      args = { { name = "bob" }, { name = "rob", age = 26 } } },
    { name = "replace_one with the same _id", setup = people, op = "replace_one",
      args = { { _id = 2 }, { _id = 2, name = "rob" } } },
    { name = "replace_one changing _id", setup = people, op = "replace_one",
      args = { { _id = 2 }, { _id = 3, name = "rob" } } },
    { name = "replace_one upsert", setup = people, op = "replace_one",
      args = { { _id = 8 }, { name = "new" }, { upsert = true } } },
    { name = "replace_one with operators", setup = people, op = "replace_one",
      args = { { _id = 2 }, { ["$set"] = { a = 1 } } } },

    -- deletes
    { name = "delete_one", setup = people, op = "delete_one", args = { { age = 25 } } },
    { name = "delete_many", setup = people, op = "delete_many", args = { { age = { ["$lt"] = 31 } } } },
    { name = "delete_many everything", setup = people, op = "delete_many", args = { {} } },
    { name = "delete_one with an option", setup = people, op = "delete_one",
      args = { {}, { limit = 1 } } },

    -- find_one_and_update
    { name = "find_one_and_update before", setup = people, op = "find_one_and_update",
      args = { { _id = 2 }, { ["$inc"] = { age = 1 } } } },
    { name = "find_one_and_update after with projection", setup = people,
      op = "find_one_and_update",
      args = { { age = 25 }, { ["$set"] = { seen = true } },
        { return_document = "after", sort = { _id = -1 }, projection = { seen = 1 } } } },
    { name = "find_one_and_update no match", setup = people, op = "find_one_and_update",
      args = { { _id = 99 }, { ["$set"] = { a = 1 } } } },
    { name = "find_one_and_update upsert after", setup = people, op = "find_one_and_update",
      args = { { _id = 99 }, { ["$inc"] = { n = 1 } }, { upsert = true, return_document = "after" } } },
    { name = "find_one_and_update upsert before", setup = people, op = "find_one_and_update",
      args = { { _id = 99 }, { ["$inc"] = { n = 1 } }, { upsert = true } } },
    { name = "find_one_and_update server error", setup = people, op = "find_one_and_update",
      args = { { _id = 1 }, { ["$inc"] = { name = 1 } } } },
    { name = "find_one_and_update bad return_document", setup = people,
      op = "find_one_and_update",
      args = { { _id = 1 }, { ["$inc"] = { n = 1 } }, { return_document = "new" } } },

    -- aggregate subset
    { name = "aggregate $match $sort $limit", setup = people, op = "aggregate",
      args = { { { ["$match"] = { age = { ["$gte"] = 25 } } }, { ["$sort"] = { age = -1 } },
        { ["$skip"] = 1 }, { ["$limit"] = 2 }, { ["$project"] = { name = 1, _id = 0 } } } } },
    { name = "aggregate $count", setup = people, op = "aggregate",
      args = { { { ["$match"] = { tags = "b" } }, { ["$count"] = "n" } } } },
    { name = "aggregate of no stages", setup = people, op = "aggregate", args = { {} } },
  }
  if fw.object_id then
    local oid = fw.object_id("64f1a2b3c4d5e6f7a8b9c0d1")
    local typed = {
      { _id = oid, at = fw.date(1714564800000), big = fw.int64(5), d = fw.decimal128("1.5"),
        ts = fw.timestamp(10, 2), bin = fw.binary("\1\2", 0) },
      { _id = fw.object_id("64f1a2b3c4d5e6f7a8b9c0d2"), at = fw.date(1714564900000) },
    }
    list[#list + 1] = { name = "typed values round trip", setup = typed, op = "find", args = { {} } }
    list[#list + 1] = { name = "ObjectId equality", setup = typed, op = "find",
      args = { { _id = oid } } }
    list[#list + 1] = { name = "date comparison", setup = typed, op = "find",
      args = { { at = { ["$gt"] = fw.date(1714564850000) } } } }
    list[#list + 1] = { name = "int64 equals an integer", setup = typed, op = "count",
      args = { { big = 5 } } }
    list[#list + 1] = { name = "duplicate ObjectId", setup = typed, op = "insert_one",
      args = { { _id = oid } } }
    list[#list + 1] = { name = "sort by date", setup = typed, op = "find",
      args = { {}, { sort = { at = -1 } } } }
    list[#list + 1] = { name = "$inc an int64", setup = typed, op = "update_one",
      args = { { _id = oid }, { ["$inc"] = { big = 1 } } } }
  end
  return list
end

---------------------------------------------------------------------------
-- Canonical text of an outcome: key order and the origin of tables (shaped
-- by fw.mongo, plain from the fake) do not matter; types do (1 vs 1.0).

local function canon(v, mask_ids)
  local tv = type(v)
  if tv == "nil" then
    return "nil"
  elseif tv == "boolean" then
    return tostring(v)
  elseif tv == "number" then
    return math.type(v) == "integer" and ("i" .. v) or string.format("f%.17g", v)
  elseif tv == "string" then
    return string.format("%q", v)
  elseif tv == "function" then
    return "function"
  end
  local mt = getmetatable(v)
  if tostring(v) == "null" and (tv == "userdata" or mt == "flowwarden.null") then
    return "null"
  end
  if tv == "userdata" or (type(mt) == "table" and mt.__fake_typed) then
    if v.type == "object_id" and mask_ids then
      return "object_id(*)"
    end
    return (v.type or "userdata") .. "(" .. tostring(v) .. ")"
  end
  local n, keys = 0, {}
  for k in pairs(v) do
    n = n + 1
    keys[#keys + 1] = k
  end
  local arrayish = mt == "flowwarden.array" or (type(mt) == "table" and mt.__name
    == "flowwarden.array") or (n > 0 and n == #v)
  local parts = {}
  if arrayish then
    for i = 1, #v do
      parts[i] = canon(v[i], mask_ids)
    end
    return "[" .. table.concat(parts, ",") .. "]"
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for i, k in ipairs(keys) do
    parts[i] = tostring(k) .. "=" .. canon(v[k], mask_ids)
  end
  return "{" .. table.concat(parts, ",") .. "}"
end
M.canon = canon

-- Runs case on coll (a fresh collection handle of fw.mongo or the fake);
-- returns its outcome as canonical text.
function M.run(case, coll)
  if case.setup then
    local docs = {}
    for i, d in ipairs(case.setup) do
      docs[i] = d
    end
    coll:insert_many(docs)
  end
  local args = case.args
  local ok, result = pcall(function()
    -- No tail calls: a Lua function called in tail position has no caller
    -- line for the error's `where`, fw.mongo's C functions keep it.
    local r = coll[case.op](coll, table.unpack(args, 1, args.n or #args))
    if case.op == "find" or case.op == "aggregate" then
      r = r:to_array()
    end
    return r
  end)
  local out = {}
  if ok then
    out.result = result
  elseif type(result) == "table" then
    out.error = { type = result.type, message = result.message, fields = result.fields,
      where = result.where and result.where:match(":(%d+)$") }
  else
    out.error = { lua = tostring(result) }
  end
  out.after = coll:find({}):to_array()
  return canon(out, case.mask_ids)
end

return M
