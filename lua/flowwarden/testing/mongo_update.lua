--[[
flowwarden.testing.mongo_update: update operators, replacements and upsert
seeds for the fw.mongo test fake, following mongod (and the stand-in,
tests/standin/fwstandin/update.py): every path is checked for conflicts
first, then the operators are applied in path order.

Supported: $set, $unset, $inc, $push (a value or { $each = {...} }),
$addToSet (same), $setOnInsert. Other operators MongoDB has raise
fail.unsupported; unknown ones fail as the server does.
]]

local V = require("flowwarden.testing.mongo_values")
local Q = require("flowwarden.testing.mongo_query")

local M = {}

local MISSING = V.MISSING
local is_array, is_document = V.is_array, V.is_document

local SUPPORTED = {
  ["$set"] = true, ["$unset"] = true, ["$inc"] = true, ["$push"] = true, ["$addToSet"] = true,
  ["$setOnInsert"] = true,
}
local UNSUPPORTED = {
  ["$mul"] = true, ["$min"] = true, ["$max"] = true, ["$rename"] = true, ["$pull"] = true,
  ["$pullAll"] = true, ["$pop"] = true, ["$currentDate"] = true, ["$bit"] = true,
}
-- Operators that set a whole value (mongod's "Updating the path ... to" wording).
local SETS_OBJECT = { ["$set"] = true, ["$setOnInsert"] = true }

local MAX_INT = math.maxinteger

local function split_update_path(path, fail)
  if path == "" then
    fail.server(56, "EmptyFieldName", "An empty update path is not valid.")
  end
  local parts = Q.split(path)
  for _, p in ipairs(parts) do
    if p == "" then
      fail.server(56, "EmptyFieldName", "The update path '" .. path
        .. "' contains an empty field name, which is not allowed.")
    end
    if p == "$" or p:find("^%$%[.*%]$") then
      fail.unsupported("the positional operator in '" .. path .. "'")
    end
    if p:sub(1, 1) == "$" then
      fail.server(52, "DollarPrefixedFieldName", "The dollar ($) prefixed field '" .. p
        .. "' in '" .. path .. "' is not allowed in the context of an update's replacement "
        .. "document. Consider using an aggregation pipeline with $replaceWith.")
    end
  end
  return parts
end

local function parse_each(op, arg, fail)
  if is_document(arg) and arg["$each"] ~= nil then
    for k in pairs(arg) do
      if k ~= "$each" then
        if op == "$push" and (k == "$slice" or k == "$sort" or k == "$position") then
          fail.unsupported(k .. " in $push")
        end
        if op == "$push" then
          fail.server(2, "BadValue", "Unrecognized clause in $push: " .. k)
        end
        fail.server(2, "BadValue", "Found unexpected fields after $each in $addToSet: "
          .. V.fmt_value(arg))
      end
    end
    local each = arg["$each"]
    if not is_array(each) then
      if op == "$push" then
        fail.server(2, "BadValue", "The argument to $each in $push must be an array but it "
          .. "was of type: " .. V.type_name(each))
      end
      fail.server(14, "TypeMismatch", "The argument to $each in $addToSet must be an array "
        .. "but it was of type " .. V.type_name(each))
    end
    local values = {}
    for i = 1, #each do
      values[i] = each[i]
    end
    return values
  end
  return { arg }
end

local function parse_argument(op, path, arg, fail)
  if op == "$inc" then
    if not V.is_number(arg) then
      fail.server(14, "TypeMismatch", "Cannot increment with non-numeric argument: {"
        .. V.fmt_element(path, arg) .. "}")
    end
    if V.typed_kind(arg) == "decimal128" then
      fail.unsupported("$inc with a decimal128")
    end
    return arg
  elseif op == "$push" then
    return parse_each(op, arg, fail)
  elseif op == "$addToSet" then
    local deduped = {}
    for _, v in ipairs(parse_each(op, arg, fail)) do
      local seen = false
      for _, d in ipairs(deduped) do
        seen = seen or V.equal(v, d)
      end
      if not seen then
        deduped[#deduped + 1] = v
      end
    end
    return deduped
  end
  return arg
end

-- mongod 5.0+ order of update paths: names bytewise, array indexes as numbers.
local function path_less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = a[i], b[i]
    if x ~= y then
      if x:find("^%d+$") and y:find("^%d+$") then
        return tonumber(x) < tonumber(y)
      end
      return x < y
    end
  end
  return #a < #b
end

-- Validates an update (an internal document of $-operators) -> list of
-- { parts, op, prepared argument } in the order they apply.
function M.parse(update, fail)
  local ops, tree = {}, {}
  for _, op in ipairs(V.sorted_keys(update)) do
    local operand = update[op]
    if UNSUPPORTED[op] then
      fail.unsupported(op)
    elseif not SUPPORTED[op] then
      fail.server(9, "FailedToParse", "Unknown modifier: " .. op .. ". Expected a valid update "
        .. "modifier or pipeline-style update specified as an array")
    end
    if not is_document(operand) then
      fail.server(9, "FailedToParse", "Modifiers operate on fields but we found type "
        .. V.type_name(operand) .. " instead. For example: {$mod: {<field>: ...}} not {"
        .. V.fmt_element(op, operand) .. "}")
    end
    for _, path in ipairs(V.sorted_keys(operand)) do
      local parts = split_update_path(path, fail)
      local prepared = parse_argument(op, path, operand[path], fail)
      local node = tree
      for i, p in ipairs(parts) do
        local child = node[p]
        local last = i == #parts
        if child ~= nil and (child == true or last) then
          local upto = table.concat(parts, ".", 1, i)
          fail.server(40, "ConflictingUpdateOperators", "Updating the path '" .. path
            .. "' would create a conflict at '" .. upto .. "'")
        end
        if last then
          node[p] = true
        else
          node[p] = node[p] or {}
          node = node[p]
        end
      end
      ops[#ops + 1] = { parts, op, prepared }
    end
  end
  table.sort(ops, function(a, b) return path_less(a[1], b[1]) end)
  return ops
end

-- Where a path lands in doc: the container and key of its deepest existing
-- parent. depth < #parts: parts[depth] is missing (created below it).
local function locate(doc, parts)
  local cur, name = doc, nil
  for i, part in ipairs(parts) do
    local child
    if is_document(cur) then
      child = cur[part]
    elseif is_array(cur) then
      local idx = Q.index_of(part)
      if not idx then
        return { blocked = true, container = cur, key = part, depth = i, parent_name = name }
      end
      child = cur[idx + 1]
    else
      return { blocked = true, container = cur, key = part, depth = i, parent_name = name }
    end
    if child == nil or i == #parts then
      return { container = cur, key = part, value = child == nil and MISSING or child, depth = i,
        parent_name = name }
    end
    cur, name = child, part
  end
end

local function put(container, key, value)
  if is_array(container) then
    local idx = tonumber(key) + 1
    for i = #container + 1, idx - 1 do
      container[i] = V.NULL
    end
    container[idx] = value
  else
    container[key] = value
  end
end

local function id_text(doc)
  return doc._id ~= nil and V.fmt_element("_id", doc._id) or "no id"
end

local Updater = {}
Updater.__index = Updater

function Updater:check_id(op, parts, value, created)
  if parts[1] ~= "_id" or not self.id_immutable then
    return
  end
  local path = table.concat(parts, ".")
  if SETS_OBJECT[op] and (#parts == 1 or created) then
    self.fail.server(66, "ImmutableField", "Updating the path '" .. path .. "' to "
      .. V.fmt_element(parts[#parts], value) .. " would modify the immutable field '_id'")
  end
  self.fail.server(66, "ImmutableField", "Performing an update on the path '" .. path
    .. "' would modify the immutable field '_id'")
end

function Updater:set_value(op, parts, value, loc)
  loc = loc or locate(self.doc, parts)
  if loc.blocked then
    self.fail.server(28, "PathNotViable", "Cannot create field '" .. loc.key .. "' in element {"
      .. V.fmt_element(loc.parent_name, loc.container) .. "}")
  end
  local created = loc.depth < #parts or loc.value == MISSING
  if not created and V.identical(loc.value, value) then
    return
  end
  self:check_id(op, parts, value, created)
  if loc.depth < #parts then
    for i = #parts, loc.depth + 1, -1 do
      value = { [parts[i]] = value }
    end
  end
  put(loc.container, loc.key, value)
end

Updater["$set"] = function(self, parts, op, arg)
  self:set_value(op, parts, V.copy(arg))
end

Updater["$setOnInsert"] = function(self, parts, op, arg)
  if self.is_upsert_insert then
    self:set_value(op, parts, V.copy(arg))
  end
end

Updater["$unset"] = function(self, parts, op)
  local loc = locate(self.doc, parts)
  if loc.blocked or loc.depth < #parts or loc.value == MISSING then
    return
  end
  self:check_id(op, parts, nil, false)
  if is_array(loc.container) then
    loc.container[tonumber(loc.key) + 1] = V.NULL
  else
    loc.container[loc.key] = nil
  end
end

-- a + b for BSON numbers: integers overflow into an error (mongod's int64
-- overflow check), anything with a float is a float.
local function add(a, b)
  if math.type(a) == "integer" and math.type(b) == "integer" then
    local s = a + b
    if (b > 0 and s < a) or (b < 0 and s > a) then
      return nil
    end
    return s
  end
  return a + b
end

Updater["$inc"] = function(self, parts, op, arg)
  local loc = locate(self.doc, parts)
  local current = (loc.blocked or loc.depth < #parts) and MISSING or loc.value
  if current == MISSING then
    return self:set_value(op, parts, arg, loc)
  end
  if not V.is_number(current) then
    self.fail.server(14, "TypeMismatch", "Cannot apply $inc to a value of non-numeric type. {"
      .. id_text(self.doc) .. "} has the field '" .. parts[#parts] .. "' of non-numeric type "
      .. V.type_name(current))
  end
  if type(current) ~= "number" then
    self.fail.unsupported("$inc on a decimal128")
  end
  local value = add(current, arg)
  if value == nil then
    self.fail.server(2, "BadValue", "Failed to apply $inc operations to current value "
      .. "((NumberLong)" .. current .. ") for document {" .. id_text(self.doc) .. "}")
  end
  self:set_value(op, parts, value, loc)
end

local function existing_array(self, parts)
  local loc = locate(self.doc, parts)
  if loc.blocked or loc.depth < #parts or loc.value == MISSING then
    return loc, MISSING
  end
  return loc, loc.value
end

Updater["$push"] = function(self, parts, op, values)
  local loc, current = existing_array(self, parts)
  local new = V.new_array()
  if current == MISSING then
    for _, v in ipairs(values) do
      new[#new + 1] = V.copy(v)
    end
    return self:set_value(op, parts, new, loc)
  end
  if not is_array(current) then
    self.fail.server(2, "BadValue", "The field '" .. table.concat(parts, ".") .. "' must be an "
      .. "array but is of type " .. V.type_name(current) .. " in document {"
      .. id_text(self.doc) .. "}")
  end
  if #values == 0 then
    return
  end
  for _, v in ipairs(current) do
    new[#new + 1] = v
  end
  for _, v in ipairs(values) do
    new[#new + 1] = V.copy(v)
  end
  self:check_id(op, parts, new, false)
  put(loc.container, loc.key, new)
end

Updater["$addToSet"] = function(self, parts, op, values)
  local loc, current = existing_array(self, parts)
  if current == MISSING then
    local new = V.new_array()
    for _, v in ipairs(values) do
      new[#new + 1] = V.copy(v)
    end
    return self:set_value(op, parts, new, loc)
  end
  if not is_array(current) then
    self.fail.server(2, "BadValue", "Cannot apply $addToSet to non-array field. Field named '"
      .. parts[#parts] .. "' has non-array type " .. V.type_name(current))
  end
  local new, added = V.new_array(), false
  for _, v in ipairs(current) do
    new[#new + 1] = v
  end
  for _, v in ipairs(values) do
    local seen = false
    for _, e in ipairs(current) do
      seen = seen or V.equal(v, e)
    end
    if not seen then
      new[#new + 1] = V.copy(v)
      added = true
    end
  end
  if added then
    self:check_id(op, parts, new, false)
    put(loc.container, loc.key, new)
  end
end

-- Applies a parsed update to a copy of doc -> the new document.
function M.apply(doc, ops, fail, is_upsert_insert)
  local self = setmetatable({ doc = V.copy(doc), fail = fail,
    is_upsert_insert = is_upsert_insert, id_immutable = doc._id ~= nil }, Updater)
  for _, o in ipairs(ops) do
    Updater[o[2]](self, o[1], o[2], o[3])
  end
  if is_array(self.doc._id) then
    fail.server(53, "InvalidIdField", "The '_id' value cannot be of type array")
  end
  return self.doc
end

-- A replacement for doc: its contents with doc's _id (code 66 if it changes).
function M.replacement(doc, replacement, fail)
  if replacement._id ~= nil and doc._id ~= nil and not V.equal(replacement._id, doc._id) then
    fail.server(66, "ImmutableField", "After applying the update, the (immutable) field '_id' "
      .. "was found to have been altered to " .. V.fmt_element("_id", replacement._id))
  end
  local new = V.copy(replacement)
  if new._id == nil then
    new._id = doc._id
  end
  return new
end

-- The equality fields of a filter an upsert starts from.
local function equalities(filter, out)
  for _, key in ipairs(V.sorted_keys(filter)) do
    local value = filter[key]
    if key == "$and" or (key == "$or" and is_array(value) and #value == 1) then
      for _, clause in ipairs(value) do
        if is_document(clause) then
          equalities(clause, out)
        end
      end
    elseif key:sub(1, 1) ~= "$" then
      local first = is_document(value) and V.sorted_keys(value)[1]
      if first and first:sub(1, 1) == "$" then
        if value["$eq"] ~= nil then
          out[#out + 1] = { key, value["$eq"] }
        elseif is_array(value["$in"]) and #value["$in"] == 1 then
          out[#out + 1] = { key, value["$in"][1] }
        end
      else
        out[#out + 1] = { key, value }
      end
    end
  end
end

-- The document an upsert starts from.
function M.upsert_seed(filter, fail)
  local pairs_ = {}
  equalities(filter, pairs_)
  local by_path, paths = {}, {}
  for _, p in ipairs(pairs_) do
    if by_path[p[1]] ~= nil then
      fail.server(54, "NotSingleValueField", "cannot infer query fields to set, path '" .. p[1]
        .. "' is matched twice")
    end
    by_path[p[1]] = p[2]
    paths[#paths + 1] = p[1]
  end
  table.sort(paths)
  for _, a in ipairs(paths) do
    for _, b in ipairs(paths) do
      if b:sub(1, #a + 1) == a .. "." then
        fail.server(54, "NotSingleValueField", "cannot infer query fields to set, both paths '"
          .. b .. "' and '" .. a .. "' are matched")
      end
    end
  end
  local seed = {}
  for _, path in ipairs(paths) do
    local node = seed
    local parts = Q.split(path)
    for i = 1, #parts - 1 do
      node[parts[i]] = node[parts[i]] or {}
      node = node[parts[i]]
    end
    node[parts[#parts]] = V.copy(by_path[path])
  end
  return seed
end

M.MAX_INT = MAX_INT

return M
