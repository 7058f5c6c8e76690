--[[
flowwarden.testing.mongo_values: the values of the fw.mongo test fake
(flowwarden.testing.mongo_fake) and MongoDB's rules for them: type order,
comparison, equality, and the messages mongod writes values in.

Inside the fake a value is what fw.mongo would read back from BSON:
  missing         nil (MISSING where a sentinel is needed)
  null            NULL (the fake's null: fw.null, or fw.json.null outside the runtime)
  int32/int64     integer (fw.int64(n) is stored as n, as a BSON round trip gives it)
  double          float
  string, bool    themselves
  document        a plain table (keys are strings)
  array           a table whose metatable is ARRAY (internal), elements 1..n
  other types     the typed value itself (immutable: shared, never copied)

Documents keep no key order: everything that depends on it (comparing two
embedded documents, messages) takes the keys `_id` first, then sorted
bytewise, which is the order a Lua table is written to BSON in.
]]

local M = {}

M.ARRAY = { __name = "flowwarden.testing.mongo_fake.array" }
M.MISSING = setmetatable({}, { __name = "flowwarden.testing.mongo_fake.missing" })

local ARRAY, MISSING = M.ARRAY, M.MISSING

-- Set by mongo_fake.new (one null per fake: fw.null or fw.json.null).
M.NULL = nil

function M.is_array(v)
  return type(v) == "table" and getmetatable(v) == ARRAY
end

function M.is_document(v)
  return type(v) == "table" and getmetatable(v) == nil
end

function M.new_array(t)
  return setmetatable(t or {}, ARRAY)
end

-- The `.type` of a typed value ("object_id", "date", ...), or nil.
function M.typed_kind(v)
  local tv = type(v)
  if tv == "userdata" and getmetatable(v) == "flowwarden.bson_value" then
    return v.type
  end
  if tv == "table" then
    local mt = getmetatable(v)
    if type(mt) == "table" and mt.__fake_typed then
      return v.type
    end
  end
  return nil
end
local typed_kind = M.typed_kind

-- Keys of a document, `_id` first, then bytewise.
function M.sorted_keys(doc)
  local keys = {}
  for k in pairs(doc) do
    keys[#keys + 1] = k
  end
  table.sort(keys, function(a, b)
    if a == "_id" or b == "_id" then
      return a == "_id" and b ~= "_id"
    end
    return a < b
  end)
  return keys
end
local sorted_keys = M.sorted_keys

---------------------------------------------------------------------------
-- Type order (mongod's canonical ranks; numbers share one)

M.RANK_MINKEY, M.RANK_EMPTY_ARRAY, M.RANK_NULL, M.RANK_NUMBER = -1, 0, 5, 10
M.RANK_STRING, M.RANK_OBJECT, M.RANK_ARRAY = 15, 20, 25

local TYPED_RANK = {
  min_key = -1, undefined = 0, decimal128 = 10, symbol = 15, binary = 30, object_id = 35,
  date = 45, timestamp = 47, regex = 50, db_pointer = 55, code = 60, code_w_scope = 65,
  max_key = 100,
}

function M.rank(v)
  if v == nil or v == MISSING or v == M.NULL then
    return 5
  end
  local tv = type(v)
  if tv == "number" then
    return 10
  elseif tv == "string" then
    return 15
  elseif tv == "boolean" then
    return 40
  elseif tv == "table" and getmetatable(v) == nil then
    return 20
  elseif tv == "table" and getmetatable(v) == ARRAY then
    return 25
  end
  local kind = typed_kind(v)
  return kind and TYPED_RANK[kind] or 200
end
local rank = M.rank

-- A number for a numeric value (decimal128 is approximated by a double).
local function num(v)
  if type(v) == "number" then
    return v
  end
  return tonumber(v.string) or (0 / 0)
end
M.num = num

function M.is_number(v)
  return type(v) == "number" or typed_kind(v) == "decimal128"
end

local function cmp(a, b)
  if a < b then
    return -1
  elseif a > b then
    return 1
  end
  return 0
end

local function compare_numbers(a, b)
  a, b = num(a), num(b)
  -- NaN sorts below every number and equals itself, as in mongod.
  local an, bn = a ~= a, b ~= b
  if an or bn then
    return an and bn and 0 or (an and -1 or 1)
  end
  if math.type(a) == "integer" and math.type(b) == "float" then
    return -compare_numbers(b, a)
  end
  if math.type(a) == "float" and math.type(b) == "integer" then
    -- Exact: compare the float with the integer without rounding the integer.
    if a ~= a or a == math.huge then
      return 1
    elseif a == -math.huge then
      return -1
    end
    local fa = math.floor(a)
    local ia = math.tointeger(fa)
    if ia == nil then
      return fa < 0 and -1 or 1
    end
    if ia ~= b then
      return cmp(ia, b)
    end
    return a > fa and 1 or 0
  end
  return cmp(a, b)
end

local compare

local SAME_RANK = {
  [-1] = function() return 0 end,
  [0] = function() return 0 end,
  [5] = function() return 0 end,
  [10] = compare_numbers,
  [15] = function(a, b)
    return cmp(type(a) == "string" and a or a.symbol, type(b) == "string" and b or b.symbol)
  end,
  [20] = function(a, b)
    local ka, kb = sorted_keys(a), sorted_keys(b)
    for i = 1, math.max(#ka, #kb) do
      local x, y = ka[i], kb[i]
      if x == nil or y == nil then
        return x == nil and -1 or 1
      end
      local rx, ry = rank(a[x]), rank(b[y])
      if rx ~= ry then
        return rx < ry and -1 or 1
      end
      local c = cmp(x, y)
      if c ~= 0 then
        return c
      end
      c = compare(a[x], b[y])
      if c ~= 0 then
        return c
      end
    end
    return 0
  end,
  [25] = function(a, b)
    for i = 1, math.min(#a, #b) do
      local c = compare(a[i], b[i])
      if c ~= 0 then
        return c
      end
    end
    return cmp(#a, #b)
  end,
  [30] = function(a, b)
    local c = cmp(#a.data, #b.data)
    if c == 0 then
      c = cmp(a.subtype, b.subtype)
    end
    return c ~= 0 and c or cmp(a.data, b.data)
  end,
  [35] = function(a, b) return cmp(a.hex, b.hex) end,
  [40] = function(a, b) return cmp(a and 1 or 0, b and 1 or 0) end,
  [45] = function(a, b) return cmp(a.ms, b.ms) end,
  [47] = function(a, b)
    local c = cmp(a.t, b.t)
    return c ~= 0 and c or cmp(a.i, b.i)
  end,
  [50] = function(a, b)
    local c = cmp(a.pattern, b.pattern)
    return c ~= 0 and c or cmp(a.options, b.options)
  end,
  [55] = function(a, b)
    local c = cmp(a.collection, b.collection)
    return c ~= 0 and c or cmp(a.id.hex, b.id.hex)
  end,
  [60] = function(a, b) return cmp(a.code, b.code) end,
  [65] = function(a, b) return cmp(a.code, b.code) end,
  [100] = function() return 0 end,
}

-- -1, 0 or 1 under MongoDB's order of BSON values (missing sorts as null).
function compare(a, b)
  local ra, rb = rank(a), rank(b)
  if ra ~= rb then
    return ra < rb and -1 or 1
  end
  local f = SAME_RANK[ra]
  if not f then
    return 0
  end
  return f(a, b)
end
M.compare = compare

-- MongoDB equality: same type order and equal (1 == 1.0).
function M.equal(a, b)
  return compare(a, b) == 0
end

-- Byte-for-byte the same BSON: what makes an update a no-op (1 and 1.0 differ).
local function identical(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then
    return false
  end
  if ta == "number" then
    return math.type(a) == math.type(b) and (a == b or (a ~= a and b ~= b))
  end
  if ta ~= "table" then
    return a == b
  end
  if getmetatable(a) ~= getmetatable(b) then
    return a == b -- typed values of the fallback kind compare with __eq
  end
  if getmetatable(a) == ARRAY then
    if #a ~= #b then
      return false
    end
    for i = 1, #a do
      if not identical(a[i], b[i]) then
        return false
      end
    end
    return true
  end
  if getmetatable(a) ~= nil then
    return a == b
  end
  for k, v in pairs(a) do
    if not identical(v, b[k]) then
      return false
    end
  end
  for k in pairs(b) do
    if a[k] == nil then
      return false
    end
  end
  return true
end
M.identical = identical

-- A deep copy of an internal value (typed values are shared: immutable).
local function copy(v)
  if type(v) ~= "table" then
    return v
  end
  local mt = getmetatable(v)
  if mt ~= nil and mt ~= ARRAY then
    return v
  end
  local t = {}
  for k, x in pairs(v) do
    t[k] = copy(x)
  end
  return setmetatable(t, mt)
end
M.copy = copy

-- Falsy as mongod's $exists reads its argument: false, null and zero.
function M.truthy(v)
  if v == nil or v == false or v == M.NULL or v == MISSING then
    return false
  end
  if M.is_number(v) then
    return num(v) ~= 0
  end
  return true
end

---------------------------------------------------------------------------
-- mongod's names and message formats

-- $type alias of a value, as in "non-numeric type string".
function M.type_name(v)
  if v == nil or v == MISSING then
    return "missing"
  elseif v == M.NULL then
    return "null"
  end
  local tv = type(v)
  if tv == "number" then
    if math.type(v) == "float" then
      return "double"
    end
    return (v >= -2147483648 and v <= 2147483647) and "int" or "long"
  elseif tv == "string" then
    return "string"
  elseif tv == "boolean" then
    return "bool"
  elseif M.is_document(v) then
    return "object"
  elseif M.is_array(v) then
    return "array"
  end
  local names = {
    object_id = "objectId", date = "date", timestamp = "timestamp", decimal128 = "decimal",
    binary = "binData", regex = "regex", min_key = "minKey", max_key = "maxKey",
    code = "javascript", code_w_scope = "javascriptWithScope", symbol = "symbol",
    db_pointer = "dbPointer", undefined = "undefined",
  }
  return names[typed_kind(v)] or "unknown"
end

local function fmt_double(v)
  if v ~= v then
    return "nan.0"
  elseif v == math.huge then
    return "inf.0"
  elseif v == -math.huge then
    return "-inf.0"
  elseif v == math.floor(v) and math.abs(v) < 1e15 then
    return string.format("%d.0", math.tointeger(v))
  end
  return (string.format("%.17g", v))
end

-- A value as mongod's BSONElement::toString writes it in messages.
local function fmt_value(v)
  if v == nil or v == MISSING then
    return "missing"
  elseif v == M.NULL then
    return "null"
  end
  local tv = type(v)
  if tv == "boolean" then
    return tostring(v)
  elseif tv == "number" then
    return math.type(v) == "float" and fmt_double(v) or tostring(v)
  elseif tv == "string" then
    return '"' .. v .. '"'
  elseif M.is_document(v) then
    local keys = sorted_keys(v)
    if #keys == 0 then
      return "{}"
    end
    local parts = {}
    for i, k in ipairs(keys) do
      parts[i] = k .. ": " .. fmt_value(v[k])
    end
    return "{ " .. table.concat(parts, ", ") .. " }"
  elseif M.is_array(v) then
    if #v == 0 then
      return "[]"
    end
    local parts = {}
    for i = 1, #v do
      parts[i] = fmt_value(v[i])
    end
    return "[ " .. table.concat(parts, ", ") .. " ]"
  end
  local kind = typed_kind(v)
  if kind == "object_id" then
    return "ObjectId('" .. v.hex .. "')"
  elseif kind == "date" then
    return "new Date(" .. v.ms .. ")"
  elseif kind == "timestamp" then
    return string.format("Timestamp(%d, %d)", v.t, v.i)
  elseif kind == "decimal128" then
    return 'NumberDecimal("' .. v.string .. '")'
  elseif kind == "regex" then
    return "/" .. v.pattern .. "/" .. v.options
  elseif kind == "binary" then
    return string.format("BinData(%d, %s)", v.subtype, (v.data:gsub(".", function(c)
      return string.format("%02X", c:byte())
    end)))
  elseif kind == "min_key" then
    return "MinKey"
  elseif kind == "max_key" then
    return "MaxKey"
  end
  return tostring(v)
end
M.fmt_value = fmt_value

function M.fmt_element(name, v)
  return name .. ": " .. fmt_value(v)
end

-- A value as the E11000 message writes its dup key ({ _id: 1 }): floats as
-- Python's repr, the stand-in's (and mongod's) shortest round-trip form.
local function fmt_key_value(v)
  if type(v) == "number" and math.type(v) == "float" and v == v and v ~= math.huge
    and v ~= -math.huge then
    for digits = 1, 17 do
      local s = string.format("%." .. digits .. "g", v)
      if tonumber(s) == v then
        if not s:find("[%.eEn]") then
          s = s .. ".0"
        end
        return s
      end
    end
  elseif M.is_document(v) then
    local keys = sorted_keys(v)
    if #keys == 0 then
      return "{}"
    end
    local parts = {}
    for i, k in ipairs(keys) do
      parts[i] = k .. ": " .. fmt_key_value(v[k])
    end
    return "{ " .. table.concat(parts, ", ") .. " }"
  elseif type(v) == "string" then
    return '"' .. v:gsub("\\", "\\\\"):gsub('"', '\\"') .. '"'
  end
  return fmt_value(v)
end
M.fmt_key_value = fmt_key_value

return M
