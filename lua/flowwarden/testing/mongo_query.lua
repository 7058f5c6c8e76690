--[[
flowwarden.testing.mongo_query: query filters, sort and projection for the
fw.mongo test fake, on the values of flowwarden.testing.mongo_values.

The rules are mongod's (and the stand-in's, tests/standin/fwstandin/query.py):
a path that reaches an array matches when the array or one of its elements
does; $ne, $nin and { $exists = false } negate the whole path test; a
comparison only matches values of the same type order; a null equality also
matches a missing field.

Failures are raised through the `fail` table given to each function:
  fail.server(code, code_name, message)  what the server would answer
  fail.unsupported(what)                  beyond the fake ("$regex")
]]

local V = require("flowwarden.testing.mongo_values")

local M = {}

local MISSING = V.MISSING
local is_array, is_document, compare, rank = V.is_array, V.is_document, V.compare, V.rank

-- Operators MongoDB has and the fake does not: a clear error instead of a
-- wrong answer.
local UNSUPPORTED_FIELD_OPS = {
  ["$regex"] = true, ["$options"] = true, ["$type"] = true, ["$size"] = true, ["$all"] = true,
  ["$elemMatch"] = true, ["$not"] = true, ["$mod"] = true, ["$bitsAllSet"] = true,
  ["$bitsAllClear"] = true, ["$bitsAnySet"] = true, ["$bitsAnyClear"] = true,
  ["$geoWithin"] = true, ["$geoIntersects"] = true, ["$near"] = true, ["$nearSphere"] = true,
  ["$within"] = true, ["$where"] = true,
}
local UNSUPPORTED_TOP_OPS = {
  ["$expr"] = true, ["$where"] = true, ["$text"] = true, ["$jsonSchema"] = true,
  ["$comment"] = true, ["$alwaysTrue"] = true, ["$alwaysFalse"] = true, ["$sampleRate"] = true,
}

local function split(path)
  local parts = {}
  for p in (path .. "."):gmatch("(.-)%.") do
    parts[#parts + 1] = p
  end
  return parts
end
M.split = split

-- An array index component: digits without a leading zero ("0", "12").
local function index_of(part)
  if part:find("^%d+$") and (part == "0" or part:sub(1, 1) ~= "0") then
    return tonumber(part)
  end
  return nil
end
M.index_of = index_of

---------------------------------------------------------------------------
-- Leaf predicates: value (or MISSING) -> boolean

local function eq_pred(rhs)
  if rhs == V.NULL then
    return function(v)
      return v == V.NULL or v == MISSING
    end
  end
  local r = rank(rhs)
  return function(v)
    return v ~= MISSING and rank(v) == r and compare(v, rhs) == 0
  end
end

local CMP = {
  ["$gt"] = function(c) return c > 0 end,
  ["$gte"] = function(c) return c >= 0 end,
  ["$lt"] = function(c) return c < 0 end,
  ["$lte"] = function(c) return c <= 0 end,
}

local function cmp_pred(op, rhs)
  local test = CMP[op]
  local inclusive = op == "$gte" or op == "$lte"
  local kind = V.typed_kind(rhs)
  if kind == "min_key" or kind == "max_key" then
    local lower = kind == "min_key"
    local r = rank(rhs)
    return function(v)
      if v == MISSING then
        return false
      end
      if rank(v) == r then
        return inclusive
      end
      return lower == (op == "$gt" or op == "$gte")
    end
  end
  if rhs == V.NULL then
    if inclusive then
      return function(v) return v == V.NULL or v == MISSING end
    end
    return function() return false end
  end
  local r = rank(rhs)
  return function(v)
    return v ~= MISSING and rank(v) == r and test(compare(v, rhs))
  end
end

local function in_pred(values, op, fail)
  if not is_array(values) then
    fail.server(2, "BadValue", op .. " needs an array")
  end
  local preds = {}
  for i = 1, #values do
    local v = values[i]
    if V.typed_kind(v) == "regex" then
      fail.unsupported("a regular expression in " .. op)
    end
    if is_document(v) then
      local first = V.sorted_keys(v)[1]
      if first and first:sub(1, 1) == "$" then
        fail.server(2, "BadValue", "cannot nest $ under " .. op)
      end
    end
    preds[i] = eq_pred(v)
  end
  return function(v)
    for _, p in ipairs(preds) do
      if p(v) then
        return true
      end
    end
    return false
  end
end

---------------------------------------------------------------------------
-- Nodes: { "leaf", pred, expand } | { "not", node } | { "and", { nodes } }

local function leaf(pred, expand)
  return { "leaf", pred, expand ~= false }
end

-- Does any value the path reaches satisfy pred?
local function path_matcher(parts, pred, expand)
  local n = #parts
  local indexes = {}
  for i, p in ipairs(parts) do
    indexes[i] = index_of(p) or -1
  end
  local function walk(v, i)
    if i > n then
      if pred(v) then
        return true
      end
      if expand and is_array(v) then
        for _, e in ipairs(v) do
          if pred(e) then
            return true
          end
        end
      end
      return false
    end
    if is_document(v) then
      local child = v[parts[i]]
      return walk(child == nil and MISSING or child, i + 1)
    end
    if is_array(v) then
      -- Documents in the array are searched for the field; a numeric
      -- component also selects the element at that offset.
      local part, idx, last = parts[i], indexes[i], i == n
      for j, e in ipairs(v) do
        if is_document(e) then
          local child = e[part]
          if walk(child == nil and MISSING or child, i + 1) then
            return true
          end
        end
        if j - 1 == idx then
          if last then
            if pred(e) then
              return true
            end
          elseif (is_document(e) or is_array(e)) and walk(e, i + 1) then
            return true
          end
        end
      end
      return false
    end
    return pred(MISSING)
  end
  return function(doc)
    return walk(doc, 1)
  end
end

local function doc_matcher(node, parts)
  if node[1] == "leaf" then
    return path_matcher(parts, node[2], node[3])
  elseif node[1] == "not" then
    local inner = doc_matcher(node[2], parts)
    return function(doc) return not inner(doc) end
  end
  local subs = {}
  for i, c in ipairs(node[2]) do
    subs[i] = doc_matcher(c, parts)
  end
  return function(doc)
    for _, m in ipairs(subs) do
      if not m(doc) then
        return false
      end
    end
    return true
  end
end

local function compile_operators(ops, path, fail)
  local nodes = {}
  for _, op in ipairs(V.sorted_keys(ops)) do
    local arg = ops[op]
    if op == "$eq" then
      nodes[#nodes + 1] = leaf(eq_pred(arg))
    elseif op == "$ne" then
      nodes[#nodes + 1] = { "not", leaf(eq_pred(arg)) }
    elseif CMP[op] then
      nodes[#nodes + 1] = leaf(cmp_pred(op, arg))
    elseif op == "$in" then
      nodes[#nodes + 1] = leaf(in_pred(arg, op, fail))
    elseif op == "$nin" then
      nodes[#nodes + 1] = { "not", leaf(in_pred(arg, op, fail)) }
    elseif op == "$exists" then
      local exists = leaf(function(v) return v ~= MISSING end, false)
      nodes[#nodes + 1] = V.truthy(arg) and exists or { "not", exists }
    elseif UNSUPPORTED_FIELD_OPS[op] then
      fail.unsupported(op)
    else
      fail.server(2, "BadValue", "unknown operator: " .. op)
    end
  end
  return #nodes == 1 and nodes[1] or { "and", nodes }
end

local compile

local function field_matcher(path, value, fail)
  local parts = split(path)
  if is_document(value) then
    local first = V.sorted_keys(value)[1]
    if first and first:sub(1, 1) == "$" then
      return doc_matcher(compile_operators(value, path, fail), parts)
    end
  end
  if V.typed_kind(value) == "regex" then
    fail.unsupported("a regular expression as a filter value")
  end
  return doc_matcher(leaf(eq_pred(value)), parts)
end

local function logical_matcher(op, arg, fail)
  if not is_array(arg) then
    fail.server(2, "BadValue", op .. " must be an array")
  end
  if #arg == 0 then
    fail.server(2, "BadValue", "$and/$or/$nor must be a nonempty array")
  end
  local subs = {}
  for i, clause in ipairs(arg) do
    if not is_document(clause) then
      fail.server(2, "BadValue", "$or/$and/$nor entries need to be full objects")
    end
    subs[i] = compile(clause, fail)
  end
  return function(doc)
    for _, m in ipairs(subs) do
      local hit = m(doc)
      if op == "$and" and not hit then
        return false
      elseif op ~= "$and" and hit then
        return op == "$or"
      end
    end
    return op ~= "$or"
  end
end

-- A filter (an internal document) -> function(doc) -> boolean.
function compile(filter, fail)
  local matchers = {}
  for _, key in ipairs(V.sorted_keys(filter)) do
    local value = filter[key]
    if key:sub(1, 1) == "$" then
      if key == "$and" or key == "$or" or key == "$nor" then
        matchers[#matchers + 1] = logical_matcher(key, value, fail)
      elseif UNSUPPORTED_TOP_OPS[key] then
        fail.unsupported(key)
      elseif key == "$not" then
        fail.server(2, "BadValue", "unknown top level operator: $not. If you are trying to "
          .. "negate an entire expression, use $nor.")
      else
        fail.server(2, "BadValue", "unknown top level operator: " .. key .. ". If you have a "
          .. "field name that starts with a '$' symbol, consider using $getField or $setField.")
      end
    else
      matchers[#matchers + 1] = field_matcher(key, value, fail)
    end
  end
  return function(doc)
    for _, m in ipairs(matchers) do
      if not m(doc) then
        return false
      end
    end
    return true
  end
end
M.compile = compile

---------------------------------------------------------------------------
-- Sort: spec is { { "path", 1 | -1 }, ... } with internal values

local EMPTY_ARRAY_KEY = setmetatable({}, { __name = "empty array sort key" })

local function sort_compare(a, b)
  local ea, eb = a == EMPTY_ARRAY_KEY, b == EMPTY_ARRAY_KEY
  if ea or eb then
    if ea and eb then
      return 0
    end
    local other = ea and b or a
    local c = rank(other) > V.RANK_EMPTY_ARRAY and -1 or (rank(other) < V.RANK_EMPTY_ARRAY and 1 or 0)
    return ea and c or -c
  end
  return compare(a, b)
end

local function sort_candidates(value, parts, i, out)
  if i > #parts then
    if is_array(value) then
      if #value == 0 then
        out[#out + 1] = EMPTY_ARRAY_KEY
      end
      for _, e in ipairs(value) do
        out[#out + 1] = e
      end
    else
      out[#out + 1] = (value == nil or value == MISSING) and V.NULL or value
    end
    return
  end
  if is_document(value) then
    sort_candidates(value[parts[i]], parts, i + 1, out)
  elseif is_array(value) then
    local idx = index_of(parts[i])
    if parts[i]:find("^%d+$") then
      idx = tonumber(parts[i])
      sort_candidates(value[idx + 1], parts, i + 1, out)
      return
    end
    if #value == 0 then
      out[#out + 1] = V.NULL
    end
    for _, e in ipairs(value) do
      if is_document(e) then
        sort_candidates(e[parts[i]], parts, i + 1, out)
      else
        out[#out + 1] = V.NULL
      end
    end
  else
    out[#out + 1] = V.NULL
  end
end

local function sort_key(doc, parts, direction)
  local cands = {}
  sort_candidates(doc, parts, 1, cands)
  local best = cands[1]
  for i = 2, #cands do
    local r = sort_compare(cands[i], best)
    if (r < 0 and direction > 0) or (r > 0 and direction < 0) then
      best = cands[i]
    end
  end
  return best
end

-- Validates a sort spec; returns it with its paths split.
function M.parse_sort(spec, fail)
  if #spec == 0 then
    fail.server(15976, "Location15976", "$sort stage must have at least one sort key")
  end
  local fields = {}
  for i, pair in ipairs(spec) do
    local path, direction = pair[1], pair[2]
    if is_document(direction) then
      fail.unsupported("a $meta sort")
    end
    if not V.is_number(direction) or (V.num(direction) ~= 1 and V.num(direction) ~= -1) then
      fail.server(15975, "Location15975",
        "$sort key ordering must be 1 (for ascending) or -1 (for descending)")
    end
    if path == "" or path:find("^%.") or path:find("%.$") or path:find("%.%.") then
      fail.server(40352, "Location40352", "FieldPath cannot be constructed with empty string")
    end
    fields[i] = { split(path), V.num(direction) == 1 and 1 or -1 }
  end
  return fields
end

-- Sorts docs (a list) stably by parsed fields; returns a new list.
function M.sort(docs, fields)
  local keyed = {}
  for i, d in ipairs(docs) do
    local keys = {}
    for j, f in ipairs(fields) do
      keys[j] = sort_key(d, f[1], f[2])
    end
    keyed[i] = { keys, i, d }
  end
  table.sort(keyed, function(x, y)
    for j, f in ipairs(fields) do
      local c = sort_compare(x[1][j], y[1][j])
      if c ~= 0 then
        return c * f[2] < 0
      end
    end
    return x[2] < y[2]
  end)
  local out = {}
  for i, k in ipairs(keyed) do
    out[i] = k[3]
  end
  return out
end

---------------------------------------------------------------------------
-- Projection: inclusion ({ a = 1 }) or exclusion ({ a = 0 }), dotted paths,
-- _id included unless excluded.

-- Parses a projection (an internal document) -> function(doc) -> doc.
function M.compile_projection(spec, fail)
  local keys = V.sorted_keys(spec)
  if #keys == 0 then
    return function(doc) return V.copy(doc) end
  end
  local tree, mode, id_mode = {}, nil, nil
  for _, path in ipairs(keys) do
    local v = spec[path]
    if path:sub(1, 1) == "$" or path:find("%.%$") then
      fail.unsupported("the projection operator in " .. path)
    end
    local include
    if type(v) == "boolean" then
      include = v
    elseif V.is_number(v) then
      include = V.num(v) ~= 0
    else
      fail.unsupported("a projection value other than 0, 1, true or false (" .. path .. ")")
    end
    if path == "_id" then
      id_mode = include
    else
      if mode ~= nil and mode ~= include then
        if include then
          fail.server(31253, "Location31253",
            "Cannot do inclusion on field " .. path .. " in exclusion projection")
        end
        fail.server(31254, "Location31254",
          "Cannot do exclusion on field " .. path .. " in inclusion projection")
      end
      mode = include
      local node = tree
      local parts = split(path)
      for i, p in ipairs(parts) do
        if i == #parts then
          node[p] = true
        else
          if node[p] == true then
            fail.server(31250, "Location31250", "Path collision at " .. path)
          end
          node[p] = node[p] or {}
          node = node[p]
        end
      end
    end
  end
  if mode == nil then
    mode = id_mode -- only _id given: { _id = 0 } excludes it, { _id = 1 } keeps only it
    if mode == false then
      return function(doc)
        local out = V.copy(doc)
        out._id = nil
        return out
      end
    end
  end

  local function include(value, node)
    if is_array(value) then
      local out = V.new_array()
      for _, e in ipairs(value) do
        if is_document(e) or is_array(e) then
          out[#out + 1] = include(e, node)
        end
      end
      return out
    end
    local out = {}
    for k, sub in pairs(node) do
      local v = value[k]
      if v ~= nil then
        if sub == true then
          out[k] = V.copy(v)
        elseif is_document(v) or is_array(v) then
          out[k] = include(v, sub)
        end
      end
    end
    return out
  end
  local function exclude(value, node)
    if is_array(value) then
      local out = V.new_array()
      for i, e in ipairs(value) do
        out[i] = (is_document(e) or is_array(e)) and exclude(e, node) or V.copy(e)
      end
      return out
    end
    local out = {}
    for k, v in pairs(value) do
      local sub = node[k]
      if sub == true then -- luacheck: ignore 542
      elseif sub and (is_document(v) or is_array(v)) then
        out[k] = exclude(v, sub)
      else
        out[k] = V.copy(v)
      end
    end
    return out
  end

  if mode then
    return function(doc)
      local out = include(doc, tree)
      if id_mode ~= false and doc._id ~= nil then
        out._id = V.copy(doc._id)
      end
      return out
    end
  end
  return function(doc)
    local out = exclude(doc, tree)
    if id_mode == false then
      out._id = nil
    end
    return out
  end
end

return M
