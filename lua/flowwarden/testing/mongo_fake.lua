--[[
flowwarden.testing.mongo_fake: an in-memory stand-in for fw.mongo, for
testing handler scripts without a MongoDB (issue 15; docs/testing-scripts.md).

  local fake = require("flowwarden.testing.mongo_fake").new {
    clock = function() return ms end,   -- optional: virtual time for new ObjectIds
    connections = { "audit" },          -- optional: the names fw.connection declared;
                                        -- nil accepts any name
    in_handler = function() return true end,  -- optional: false raises as fw.mongo
                                              -- does outside handlers
    fw = fw,                            -- optional: the flowwarden module (constructors)
    check_document = fn,                -- optional: the runtime's document check
                                        -- (flowwarden.testing passes it; below)
  }
  fake:collection(db, name [, { connection = "..." }])  -- a handle, as fw.mongo.collection
  fake.api                             -- a table shaped like fw.mongo: api.collection(...)
  fake:close_cursors()                 -- what the runtime does after each handler call
  fake:txn("begin", stream [, conn])   -- exactly_once: the call's transaction (below)
  fake:txn("commit") / fake:txn("abort")

A handle has fw.mongo's methods with the same arguments, options, results,
cursors and typed errors (the method files: src/lua_api/mongo_*.c). Values
come back as fw.mongo gives them after a BSON round trip (fw.int64(5) reads
back as 5, fw.array marks arrays, fw.null is null); every document is copied
in and out, so a table changed after insert_one does not change the store.
Each connection is a separate deployment. With check_document (what
`flowwarden test` runs: the runtime's own checker, src/bson/bson_check.c),
writes refuse what fw.mongo refuses before sending: an empty key, a key or
a string that is not valid UTF-8, with fw.mongo's ArgumentError naming the
element; under plain Lua nothing reaches that checker and it is skipped.
What the fake cannot do raises a typed error "Testing.Unsupported" whose
message ends in "is not supported by the test fake", never a different
answer.

exactly_once (issue 39): between txn("begin", stream) and txn("commit") or
txn("abort"), operations on connection "default" (or conn, the MongoDB
connection of exactly_once = { connection = conn }) are one transaction: an
abort puts back every collection they touched as it was at its first touch
(a copy taken then), a commit keeps them; an operation on another connection
raises fw.mongo's ArgumentError naming the stream and the connection. The
fake has one client, so the call sees its own writes, as in production.
]]

local A = require("flowwarden.testing.mongo_args")
local V = require("flowwarden.testing.mongo_values")
local Q = require("flowwarden.testing.mongo_query")
local U = require("flowwarden.testing.mongo_update")

local M = {}

M.UNSUPPORTED = A.UNSUPPORTED

local where_of, raise_typed, arg_error, failer = A.where_of, A.raise_typed, A.arg_error, A.failer
local arg_value, arg_document, arg_update = A.arg_value, A.arg_document, A.arg_update
local arg_replacement, check_opts, opt = A.arg_replacement, A.check_opts, A.opt
local opt_bool, opt_count, opt_sort = A.opt_bool, A.opt_count, A.opt_sort

local is_array, is_document = V.is_array, V.is_document

---------------------------------------------------------------------------
-- ObjectIds the way drivers make them, on the fake's clock

local fallback_oid_mt = {
  __fake_typed = true,
  __name = "flowwarden.testing.object_id",
  __tostring = function(o) return o.hex end,
  __eq = function(a, b) return a.hex == b.hex end,
  __lt = function(a, b) return a.hex < b.hex end,
  __le = function(a, b) return a.hex <= b.hex end,
}

local instances = 0

local function new_oid(self)
  self.oid_counter = (self.oid_counter + 1) % 0x1000000
  local ms = self.clock and self.clock() or os.time() * 1000
  local hex = string.format("%08x%010x%06x", (ms // 1000) & 0xffffffff, self.oid_process,
    self.oid_counter)
  if self.fw.object_id then
    return self.fw.object_id(hex)
  end
  return setmetatable({ type = "object_id", hex = hex, time = (ms // 1000) & 0xffffffff },
    fallback_oid_mt)
end

---------------------------------------------------------------------------
-- Collections

local handle_mt = { __name = "flowwarden.mongo.collection", __metatable = false }
local handles = setmetatable({}, { __mode = "k" })
local methods = {}
handle_mt.__index = methods
handle_mt.__tostring = function(h)
  local d = handles[h]
  return string.format("fw.mongo.collection(%s.%s, connection %s)", d.db, d.coll, d.connection)
end

-- The operation context: names, where it was called from, the store.
local function begin(method, h, level)
  local d = handles[h]
  local op = { method = method, where = where_of(level + 1) }
  if d == nil then
    arg_error(op, "%s: call it as a method: coll:%s(...)", method, method)
  end
  local self = d.fake
  op.db, op.coll, op.connection, op.fake = d.db, d.coll, d.connection, self
  if self.in_handler and not self.in_handler() then
    error((op.where and op.where .. ": " or "") .. "fw.mongo is available inside handlers only",
      0)
  end
  if self.connections and not self.connections[d.connection] then
    arg_error(op, '%s: unknown connection "%s" (declare it with fw.connection { name = "%s", '
      .. "uri = ... }, or omit connection to use the run URI)", method, d.connection,
      d.connection)
  end
  local deployment = self.stores[d.connection]
  if not deployment then
    deployment = {}
    self.stores[d.connection] = deployment
  end
  op.ns = d.db .. "." .. d.coll
  local txn = self.txn_state
  if txn and d.connection ~= txn.connection then
    if txn.connection ~= "default" then
      arg_error(op, 'fw.mongo: %s on %s: stream "%s" has exactly_once = { connection = "%s" }, '
        .. 'and connection "%s" cannot join its transaction (only connection "%s" can): write '
        .. "there from another stream, or drop exactly_once", method, op.ns, txn.stream,
        txn.connection, d.connection, txn.connection)
    end
    arg_error(op, 'fw.mongo: %s on %s: stream "%s" has exactly_once = true, and connection "%s" '
      .. "cannot join its transaction (only the stream's own MongoDB client can): write there "
      .. "from another stream, or drop exactly_once", method, op.ns, txn.stream, d.connection)
  end
  if txn and txn.saved[op.ns] == nil then
    local st = deployment[op.ns]
    local copy = false
    if st then
      copy = { docs = {} }
      for i, doc in ipairs(st.docs) do
        copy.docs[i] = V.copy(doc)
      end
    end
    txn.saved[op.ns] = copy
  end
  op.store = deployment[op.ns]
  op.deployment = deployment
  op.fail = failer(op)
  return self, op
end

-- The collection's documents (a list in natural order), created on write.
local function docs_of(op, create)
  if not op.store and create then
    op.store = { docs = {} }
    op.deployment[op.ns] = op.store
  end
  return op.store and op.store.docs or {}
end

local function matching(op, filter, limit)
  local match = Q.compile(filter, op.fail)
  local out = {}
  for _, d in ipairs(docs_of(op, false)) do
    if match(d) then
      out[#out + 1] = d
      if limit and #out >= limit then
        break
      end
    end
  end
  return out
end

local function find_index(docs, doc)
  for i, d in ipairs(docs) do
    if d == doc then
      return i
    end
  end
end

local function insert_doc(op, doc)
  local docs = docs_of(op, true)
  for _, d in ipairs(docs) do
    if V.equal(d._id, doc._id) then
      op.fail.server(11000, "DuplicateKey", string.format("E11000 duplicate key error "
        .. "collection: %s index: _id_ dup key: { _id: %s }", op.ns, V.fmt_key_value(doc._id)))
    end
  end
  if is_array(doc._id) then
    op.fail.server(53, "InvalidIdField", "The '_id' value cannot be of type array")
  end
  docs[#docs + 1] = doc
end

-- A document with an _id: a new ObjectId first when it has none.
local function with_id(self, doc)
  if doc._id == nil then
    doc._id = new_oid(self)
  end
  return doc
end

-- The read options, checked as arguments (the ArgumentErrors of the call).
local function read_opts(self, op, opts)
  local r = {}
  local p = opt(opts, "projection")
  if p ~= nil then
    r.projection_doc = arg_document(self, op, p, "projection")
  end
  r.sort_spec = opt_sort(self, op, opts)
  r.skip = opt_count(op, opts, "skip", 0)
  r.limit = opt_count(op, opts, "limit", 0)
  opt_count(op, opts, "batch_size", 1)
  return r
end

-- The documents a read returns, in order, projected and copied out. Raises
-- what the server would answer for the filter, sort and projection.
local function select_docs(self, op, filter, ro)
  if ro.projection_doc then
    ro.projection = Q.compile_projection(ro.projection_doc, op.fail)
  end
  if ro.sort_spec then
    ro.sort = Q.parse_sort(ro.sort_spec, op.fail)
  end
  local docs = matching(op, filter)
  if ro.sort then
    docs = Q.sort(docs, ro.sort)
  end
  local out = {}
  local first = ro.skip > 0 and ro.skip + 1 or 1
  local last = ro.limit > 0 and first + ro.limit - 1 or #docs
  for i = first, math.min(last, #docs) do
    local d = docs[i]
    if ro.projection then
      d = ro.projection(d)
    end
    out[#out + 1] = self.export(d)
  end
  return out
end

---------------------------------------------------------------------------
-- Cursors

local cursor_mt = { __name = "flowwarden.mongo.cursor", __metatable = false }
local cursor_methods = {}
local cursors = setmetatable({}, { __mode = "k" })
cursor_mt.__index = cursor_methods

local function check_cursor(c, method, where)
  local st = cursors[c]
  if not st then
    arg_error({ where = where }, "cursor:%s: call it as a method: cursor:%s()", method, method)
  end
  return st
end

local function cursor_next(c, method, where)
  local st = check_cursor(c, method, where)
  if st.closed then
    arg_error({ where = where }, "fw.mongo: %s cursor on %s is closed (a cursor lasts for "
      .. "the handler call that opened it, or until cursor:close())", st.method, st.ns)
  end
  if st.produce then
    -- The server answers the command with the first batch: its errors come
    -- from the first read, as fw.mongo's do.
    local produce = st.produce
    st.produce = nil
    st.op.where = where
    local ok, docs = pcall(produce)
    if not ok then
      st.closed, st.exhausted = false, true
      st.docs = {}
      error(docs, 0)
    end
    st.docs = docs
  end
  if st.pos > #st.docs then
    st.exhausted = true
    return nil
  end
  local d = st.docs[st.pos]
  st.docs[st.pos] = false
  st.pos = st.pos + 1
  return d
end

function cursor_methods.next(c)
  return cursor_next(c, "next", where_of(2))
end

function cursor_methods.to_array(c)
  local out, where = {}, where_of(2)
  while true do
    local d = cursor_next(c, "to_array", where)
    if d == nil then
      return out
    end
    out[#out + 1] = d
  end
end

-- As a native cursor: closing one that has not reported its end (next
-- returning nil) makes the next read raise; closing again does nothing.
function cursor_methods.close(c)
  local st = check_cursor(c, "close", where_of(2))
  if not st.exhausted then
    st.closed = true
  end
  st.exhausted = true
end

cursor_mt.__call = function(c)
  return cursor_next(c, "next", where_of(2))
end
cursor_mt.__close = function(c)
  cursor_methods.close(c)
end
cursor_mt.__tostring = function(c)
  local st = cursors[c]
  return string.format("fw.mongo.cursor(%s on %s%s)", st.method, st.ns,
    (st.closed or st.exhausted) and ", closed" or "")
end

-- A cursor whose documents produce() returns when first read.
local function new_cursor(self, op, produce)
  local c = setmetatable({}, cursor_mt)
  cursors[c] = { method = op.method, ns = op.ns, op = op, produce = produce, docs = {}, pos = 1 }
  self.open_cursors[c] = true
  return c
end

---------------------------------------------------------------------------
-- Reads

local run_pipeline

local FIND_ONE_OPTS = { "projection", "sort", "skip" }
local FIND_OPTS = { "projection", "sort", "skip", "limit", "batch_size" }
local COUNT_OPTS = { "skip", "limit" }

function methods.find_one(h, filter, opts)
  local self, op = begin("find_one", h, 2)
  check_opts(op, opts, FIND_ONE_OPTS)
  filter = arg_document(self, op, filter, "filter")
  local ro = read_opts(self, op, opts)
  ro.limit = 1
  return select_docs(self, op, filter, ro)[1]
end

function methods.find(h, filter, opts)
  local self, op = begin("find", h, 2)
  check_opts(op, opts, FIND_OPTS)
  filter = arg_document(self, op, filter, "filter")
  local ro = read_opts(self, op, opts)
  return new_cursor(self, op, function()
    return select_docs(self, op, filter, ro)
  end)
end

function methods.count(h, filter, opts)
  local self, op = begin("count", h, 2)
  check_opts(op, opts, COUNT_OPTS)
  filter = arg_document(self, op, filter, "filter")
  local ro = read_opts(self, op, opts)
  local n = #matching(op, filter)
  if ro.skip > 0 then
    n = math.max(0, n - ro.skip)
  end
  if ro.limit > 0 then
    n = math.min(n, ro.limit)
  end
  return n
end

-- aggregate: $match, $sort, $skip, $limit, $project (0/1 fields) and $count.
function methods.aggregate(h, pipeline, opts)
  local self, op = begin("aggregate", h, 2)
  check_opts(op, opts, { "batch_size" })
  local stages = arg_value(self, op, pipeline, "pipeline")
  if is_document(stages) and next(stages) == nil then
    stages = V.new_array() -- {} converts to an empty document: taken as an empty array
  end
  if not is_array(stages) then
    arg_error(op, "%s: pipeline must be an array", op.method)
  end
  opt_count(op, opts, "batch_size", 1)
  return new_cursor(self, op, function()
    return run_pipeline(self, op, stages)
  end)
end

-- The documents the aggregate stages give, copied out.
function run_pipeline(self, op, stages)
  local docs = docs_of(op, false)
  local list = {}
  for i, d in ipairs(docs) do
    list[i] = d
  end
  for _, stage in ipairs(stages) do
    if not is_document(stage) then
      op.fail.server(14, "TypeMismatch", "Each element of the 'pipeline' array must be an object")
    end
    local keys = V.sorted_keys(stage)
    if #keys ~= 1 then
      op.fail.server(40323, "Location40323",
        "A pipeline stage specification object must contain exactly one field.")
    end
    local name, arg = keys[1], stage[keys[1]]
    if name == "$match" then
      if not is_document(arg) then
        op.fail.server(15959, "Location15959", "the match filter must be an expression in an "
          .. "object")
      end
      local match = Q.compile(arg, op.fail)
      local kept = {}
      for _, d in ipairs(list) do
        if match(d) then
          kept[#kept + 1] = d
        end
      end
      list = kept
    elseif name == "$sort" then
      if not is_document(arg) then
        op.fail.server(15973, "Location15973", "the $sort key specification must be an object")
      end
      local spec = {}
      for i, k in ipairs(V.sorted_keys(arg)) do
        spec[i] = { k, arg[k] }
      end
      list = Q.sort(list, Q.parse_sort(spec, op.fail))
    elseif name == "$skip" or name == "$limit" then
      if math.type(arg) ~= "integer" or arg < (name == "$skip" and 0 or 1) then
        op.fail.unsupported(name .. " with a value other than a positive integer")
      end
      local kept = {}
      for i, d in ipairs(list) do
        if (name == "$skip" and i > arg) or (name == "$limit" and i <= arg) then
          kept[#kept + 1] = d
        end
      end
      list = kept
    elseif name == "$project" then
      if not is_document(arg) then
        op.fail.server(15969, "Location15969", "$project specification must be an object")
      end
      local project = Q.compile_projection(arg, op.fail)
      for i, d in ipairs(list) do
        list[i] = project(d)
      end
    elseif name == "$count" then
      if type(arg) ~= "string" or arg == "" or arg:sub(1, 1) == "$" or arg:find(".", 1, true) then
        op.fail.unsupported("this $count field name")
      end
      list = #list > 0 and { { [arg] = #list } } or {}
    else
      op.fail.unsupported("the aggregation stage " .. name)
    end
  end
  local out = {}
  for i, d in ipairs(list) do
    out[i] = self.export(d)
  end
  return out
end

---------------------------------------------------------------------------
-- Writes

function methods.insert_one(h, doc, opts)
  local self, op = begin("insert_one", h, 2)
  check_opts(op, opts, {})
  local given = doc
  doc = arg_document(self, op, doc, "document")
  A.check_document(self, op, given, "document")
  doc = with_id(self, doc)
  op.write = true
  insert_doc(op, doc)
  return { inserted_id = self.export(V.copy(doc._id)) }
end

-- libmongoc's message for several write errors: "Multiple write errors: "
-- then each message quoted, comma-separated. applied: what the writes that
-- succeeded did (err.fields.applied, as fw.mongo gives it).
local function raise_write_errors(op, errs, applied)
  local first = errs[1]
  if #errs == 1 then
    first.fields.applied = applied
    error(first, 0)
  end
  local msgs, list = {}, {}
  for i, e in ipairs(errs) do
    local we = e.fields.write_errors[1]
    list[i] = we
    msgs[i] = '"' .. we.message .. '"'
  end
  local last = errs[#errs]
  local fields = { code = last.fields.code, code_name = last.fields.code_name, labels = {},
    write_errors = list, applied = applied }
  raise_typed(op, last.type, string.format("fw.mongo: %s on %s: Multiple write errors: %s",
    op.method, op.ns, table.concat(msgs, ", ")), fields)
end

function methods.insert_many(h, docs, opts)
  local self, op = begin("insert_many", h, 2)
  check_opts(op, opts, { "ordered" })
  local ordered = opt_bool(op, opts, "ordered", true)
  local tv = type(docs)
  if tv ~= "table" and tv ~= "userdata" then
    arg_error(op, "insert_many: docs must be a non-empty array, got %s", tv)
  end
  local list = arg_value(self, op, docs, "docs")
  if not is_array(list) or #list == 0 then
    arg_error(op, "insert_many: docs must be a non-empty array")
  end
  -- Checked one by one, in the order fw.mongo takes them (a view as a table).
  local given = type(docs) == "userdata" and self.fw.table and self.fw.table(docs) or docs
  for i, d in ipairs(list) do
    if not is_document(d) then
      arg_error(op, "insert_many: docs[%d] must be a document", i)
    end
    A.check_document(self, op, given[i], string.format("docs[%d]", i))
    with_id(self, d)
  end
  op.write = true
  local errs, inserted = {}, 0
  for i, d in ipairs(list) do
    op.index = i
    local ok, e = pcall(insert_doc, op, d)
    if not ok then
      errs[#errs + 1] = e
      if ordered then
        break
      end
    else
      inserted = inserted + 1
    end
  end
  if #errs > 0 then
    raise_write_errors(op, errs, { inserted = inserted })
  end
  local ids = {}
  for i, d in ipairs(list) do
    ids[i] = self.export(V.copy(d._id))
  end
  return { inserted_ids = ids }
end

-- The update statement shared by update_one/many, replace_one and
-- find_one_and_update: returns matched, modified, upserted _id or nil,
-- and the documents before and after (the last one touched).
local function apply_update(self, op, filter, update, replacement, multi, upsert, sort)
  local ops = not replacement and U.parse(update, op.fail)
  local docs = matching(op, filter)
  if sort then
    docs = Q.sort(docs, sort)
  end
  if not multi then
    docs = { docs[1] }
  end
  local stored = docs_of(op, false)
  local modified, before, after = 0, nil, nil
  for _, doc in ipairs(docs) do
    local new
    if replacement then
      new = U.replacement(doc, update, op.fail)
    else
      new = U.apply(doc, ops, op.fail, false)
      if not V.equal(new._id, doc._id) or V.rank(new._id) ~= V.rank(doc._id) then
        op.fail.server(66, "ImmutableField", "After applying the update, the (immutable) field "
          .. "'_id' was found to have been altered to _id: " .. V.fmt_key_value(new._id))
      end
    end
    if not V.identical(new, doc) then
      stored[find_index(stored, doc)] = new
      modified = modified + 1
    end
    before, after = doc, new
  end
  if #docs == 0 and upsert then
    local seed = U.upsert_seed(filter, op.fail)
    local new
    if replacement then
      new = V.copy(update)
      if new._id == nil then
        new._id = seed._id
      end
    else
      new = U.apply(seed, ops, op.fail, true)
    end
    with_id(self, new)
    insert_doc(op, new)
    return 0, 0, new._id, nil, new
  end
  return #docs, modified, nil, before, after
end

local UPDATE_OPTS = { "upsert" }

local function update(method, replacement, multi)
  return function(h, filter, upd, opts)
    local self, op = begin(method, h, 2)
    check_opts(op, opts, UPDATE_OPTS)
    local upsert = opt_bool(op, opts, "upsert", false)
    filter = arg_document(self, op, filter, "filter")
    op.write = true
    if replacement then
      upd = arg_replacement(self, op, upd, "replacement")
    else
      upd = arg_update(self, op, upd, "update")
    end
    local matched, modified, upserted = apply_update(self, op, filter, upd, replacement, multi,
      upsert)
    return { matched = matched, modified = modified,
      upserted_id = upserted ~= nil and self.export(V.copy(upserted)) or nil }
  end
end

methods.update_one = update("update_one", false, false)
methods.update_many = update("update_many", false, true)
methods.replace_one = update("replace_one", true, false)

local function delete(method, many)
  return function(h, filter, opts)
    local self, op = begin(method, h, 2)
    check_opts(op, opts, {})
    filter = arg_document(self, op, filter, "filter")
    op.write = true
    local victims = matching(op, filter, not many and 1 or nil)
    local stored = docs_of(op, false)
    for _, d in ipairs(victims) do
      table.remove(stored, find_index(stored, d))
    end
    return { deleted = #victims }
  end
end

methods.delete_one = delete("delete_one", false)
methods.delete_many = delete("delete_many", true)

local FAM_OPTS = { "upsert", "return_document", "sort", "projection" }

function methods.find_one_and_update(h, filter, upd, opts)
  local self, op = begin("find_one_and_update", h, 2)
  check_opts(op, opts, FAM_OPTS)
  local upsert = opt_bool(op, opts, "upsert", false)
  local ret = opt(opts, "return_document")
  if ret ~= nil and ret ~= "before" and ret ~= "after" then
    arg_error(op, 'find_one_and_update: return_document must be "before" or "after"')
  end
  filter = arg_document(self, op, filter, "filter")
  upd = arg_update(self, op, upd, "update")
  local s = opt_sort(self, op, opts)
  local p = opt(opts, "projection")
  local project = p ~= nil and Q.compile_projection(arg_document(self, op, p, "projection"),
    op.fail)
  local sort = s and Q.parse_sort(s, op.fail)
  local _, _, _, before, after = apply_update(self, op, filter, upd, false, false, upsert, sort)
  -- findAndModify reports its errors as a command's, not as write errors.
  local doc = (ret == "after") and after or before
  if doc == nil then
    return nil
  end
  return self.export(project and project(doc) or V.copy(doc))
end

require("flowwarden.testing.mongo_bulk").install(methods, {
  begin = begin, docs_of = docs_of, matching = matching, find_index = find_index,
  insert_doc = insert_doc, with_id = with_id, apply_update = apply_update,
  raise_write_errors = raise_write_errors })

---------------------------------------------------------------------------
-- The fake

local Fake = {}
Fake.__index = Fake

local COLLECTION_OPTS = { "connection" }

-- fake:collection(db, name [, { connection = "..." }]): as fw.mongo.collection.
function Fake:collection(db, name, opts)
  return self.api.collection(db, name, opts)
end

-- Closes the cursors handlers left open, as the runtime does after each
-- handler call (a kept cursor then raises "... is closed").
function Fake:close_cursors()
  for c in pairs(self.open_cursors) do
    cursor_methods.close(c)
  end
  self.open_cursors = setmetatable({}, { __mode = "k" })
end

-- exactly_once: "begin" (a call of stream starts; an open one is aborted
-- first), "commit" or "abort" (see the header).
function Fake:txn(action, stream, connection)
  local txn = self.txn_state
  self.txn_state = nil
  if txn and action ~= "commit" then
    local deployment = self.stores[txn.connection] or {}
    self.stores[txn.connection] = deployment
    for ns, copy in pairs(txn.saved) do
      deployment[ns] = copy or nil
    end
  end
  if action == "begin" then
    self.txn_state = { stream = tostring(stream), saved = {}, connection = connection or "default" }
  end
end

-- Every document of a collection (natural order), as find({}) would return
-- them; for assertions.
function Fake:documents(db, name, connection)
  local dep = self.stores[connection or "default"]
  local store = dep and dep[db .. "." .. name]
  local out = {}
  for i, d in ipairs(store and store.docs or {}) do
    out[i] = self.export(d)
  end
  return out
end

function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then
    error("bad argument #1 to 'mongo_fake.new' (table expected, got " .. type(opts) .. ")", 2)
  end
  for k in pairs(opts) do
    if k ~= "clock" and k ~= "connections" and k ~= "in_handler" and k ~= "fw"
        and k ~= "check_document" then
      error(string.format("mongo_fake.new: unknown option %q (the options are clock, "
        .. "connections, in_handler, fw, check_document)", tostring(k)), 2)
    end
  end
  local fw = opts.fw or require("flowwarden")
  instances = instances + 1
  local self = setmetatable({
    fw = fw,
    clock = opts.clock,
    in_handler = opts.in_handler,
    check_document = opts.check_document,
    stores = {},
    open_cursors = setmetatable({}, { __mode = "k" }),
    oid_counter = 0,
    oid_process = (0xfa4e000000 + instances) & 0xffffffffff,
  }, Fake)
  if opts.connections then
    self.connections = { default = true }
    for _, n in ipairs(opts.connections) do
      self.connections[n] = true
    end
  end
  self.null = fw.null or fw.json.null
  local array_mt = getmetatable(fw.json.decode("[]"))
  self.mark_array = fw.array or function(t) return setmetatable(t, array_mt) end
  V.NULL = self.null
  self.import = A.importer(self)
  self.export = A.exporter(self)

  local api = {}
  function api.collection(db, name, copts)
    local op = { method = "fw.mongo.collection", where = where_of(2) }
    if type(db) ~= "string" then
      arg_error(op, "fw.mongo.collection: database must be a string, got %s", type(db))
    end
    if type(name) ~= "string" then
      arg_error(op, "fw.mongo.collection: name must be a string, got %s", type(name))
    end
    if db == "" or db:find("[%z.]") then
      arg_error(op, "fw.mongo.collection: database must be a non-empty name without dots or NUL "
        .. "bytes")
    end
    if name == "" or name:find("%z") then
      arg_error(op, "fw.mongo.collection: name must be a non-empty string without NUL bytes")
    end
    check_opts(op, copts, COLLECTION_OPTS)
    local connection = opt(copts, "connection")
    if connection ~= nil and (type(connection) ~= "string" or connection == "") then
      arg_error(op, "fw.mongo.collection: connection must be a non-empty string, got %s",
        type(connection))
    end
    local h = setmetatable({}, handle_mt)
    handles[h] = { fake = self, db = db, coll = name, connection = connection or "default" }
    return h
  end
  self.api = api
  return self
end

return M
