--[[
flowwarden.testing.mongo_args: what the fw.mongo test fake
(flowwarden.testing.mongo_fake) shares with fw.mongo's C side about
arguments: converting Lua values in (the rules and messages of
src/bson/bson_lua_encode.c), checking arguments and options (those of
src/lua_api/mongo_lua.c), the typed errors (mongo_errors.c) and the values
handed back (what a BSON -> Lua conversion gives).
]]

local errors = require("flowwarden.errors")
local V = require("flowwarden.testing.mongo_values")
local codes = require("flowwarden.testing.mongo_codes")

local M = {}

M.UNSUPPORTED = "Testing.Unsupported"
M.MAX_DEPTH = 128

local is_array, is_document = V.is_array, V.is_document

---------------------------------------------------------------------------
-- Errors

-- "file:line" of the script line level frames above the caller, or nil.
function M.where_of(level)
  local info = debug.getinfo(level + 1, "Sl")
  if info and info.currentline and info.currentline > 0 then
    return (info.source:sub(1, 1) == "@" and info.source:sub(2) or info.short_src)
      .. ":" .. info.currentline
  end
  return nil
end

function M.raise_typed(op, type_name, message, fields)
  local e = errors.new(type_name, message, fields or {})
  e.where = op.where
  error(e, 0)
end

function M.arg_error(op, fmt, ...)
  M.raise_typed(op, "ArgumentError", string.format(fmt, ...))
end

-- The fail table mongo_query / mongo_update raise through, for one operation.
-- A write reports a server error as a write error (its codeName is then the
-- name fw.mongo knows, or none), a command as the command's error.
function M.failer(op)
  local f = {}
  function f.server(code, code_name, message)
    local entry = codes.lookup(code)
    local fields = { code = code, labels = {}, write_errors = {} }
    if op.write then
      fields.code_name = entry and entry.name or nil
      fields.write_errors[1] = { index = op.index or 1, code = code, message = message }
    else
      fields.code_name = code_name
    end
    M.raise_typed(op, entry and entry.type or "Mongo.Command", string.format(
      "fw.mongo: %s on %s.%s: %s", op.method, op.db, op.coll, message), fields)
  end
  function f.unsupported(what)
    M.raise_typed(op, M.UNSUPPORTED, string.format("fw.mongo: %s on %s.%s: %s is not supported "
      .. "by the test fake (test against a MongoDB for it)", op.method, op.db, op.coll, what))
  end
  return f
end

---------------------------------------------------------------------------
-- Lua values in: what fw.mongo's BSON conversion accepts, with its messages

local function key_error(k)
  if type(k) == "number" and math.type(k) == "float" then
    return string.format("table has a float key (%.14g); BSON keys must be strings, or 1..n "
      .. "for an array", k)
  end
  return "table has a " .. type(k) .. " key; BSON keys must be strings, or 1..n for an array"
end

local function path_join(path, key)
  if type(key) == "number" then
    return path .. "[" .. key .. "]"
  end
  if path == "" then
    return key
  end
  return path .. "." .. key
end

-- Converts a Lua value to the fake's internal form (see mongo_values), or
-- returns nil, message.
function M.importer(self)
  local fw, null = self.fw, self.null
  local level, seen = 0, {}
  local import

  local function fail_at(path, what)
    error({ conversion = (path == "" and "(root)" or path) .. ": " .. what }, 0)
  end

  local function import_table(t, path)
    if level >= M.MAX_DEPTH then
      fail_at(path, "nesting deeper than " .. M.MAX_DEPTH .. " levels")
    end
    if seen[t] then
      fail_at(path, "table contains itself (a cycle)")
    end
    seen[t] = true
    level = level + 1
    local mt = getmetatable(t)
    local marked = mt == "flowwarden.array" or (type(mt) == "table" and mt.__name
      == "flowwarden.array")
    local out
    if marked then
      local n = #t
      out = V.new_array()
      for i = 1, n do
        if t[i] == nil then
          fail_at(path_join(path, i), "array element is nil; arrays cannot have holes (use null "
            .. "for a BSON null)")
        end
        out[i] = import(t[i], path_join(path, i))
      end
      for k in pairs(t) do
        if math.type(k) ~= "integer" or k < 1 or k > n then
          if type(k) == "string" then
            fail_at(path, string.format('array has a key outside 1..%d: "%s"', n, k))
          elseif math.type(k) == "integer" then
            fail_at(path, string.format("array has a key outside 1..%d: %d", n, k))
          end
          fail_at(path, key_error(k))
        end
      end
    else
      local n_str, n_int, max, out_of_range = 0, 0, 0, false
      for k in pairs(t) do
        if type(k) == "string" then
          n_str = n_str + 1
        elseif math.type(k) == "integer" then
          if k >= 1 then
            n_int, max = n_int + 1, math.max(max, k)
          else
            out_of_range = true
          end
        else
          fail_at(path, key_error(k))
        end
      end
      if n_str > 0 and (n_int > 0 or out_of_range) then
        fail_at(path, "table mixes string keys and integer keys")
      end
      if n_str > 0 or (n_int == 0 and not out_of_range) then
        out = {}
        for _, k in ipairs(V.sorted_keys(t)) do
          if k:find("\0", 1, true) then
            fail_at(path, "a key contains a NUL byte, which BSON keys cannot hold")
          end
          out[k] = import(t[k], path_join(path, k))
        end
      else
        if out_of_range or max ~= n_int then
          fail_at(path, "table keys are integers but not a sequence 1..n; arrays cannot have "
            .. "holes (use null for a BSON null)")
        end
        out = V.new_array()
        for i = 1, n_int do
          out[i] = import(t[i], path_join(path, i))
        end
      end
    end
    level = level - 1
    seen[t] = nil
    return out
  end

  function import(v, path)
    local tv = type(v)
    if tv == "boolean" or tv == "number" or tv == "string" then
      return v
    elseif v == null then
      return V.NULL
    elseif tv == "table" then
      if V.typed_kind(v) then
        return v
      end
      return import_table(v, path)
    elseif tv == "userdata" then
      local mt = getmetatable(v)
      if mt == "flowwarden.view" and fw.table then
        return import(fw.table(v), path)
      elseif mt == "flowwarden.bson_value" then
        if v.type == "int64" then
          return v.value
        end
        return v
      end
      fail_at(path, "cannot convert a userdata to BSON")
    elseif tv == "nil" then
      fail_at(path, "cannot convert nil to BSON (use null for a BSON null)")
    end
    fail_at(path, "cannot convert a " .. tv .. " to BSON")
  end

  return function(v, path)
    level, seen = 0, {}
    local ok, r = pcall(import, v, path)
    if ok then
      return r
    end
    if type(r) == "table" and r.conversion then
      return nil, r.conversion
    end
    error(r, 0)
  end
end

-- The value of argument `v` (a table or a view), converted, or an
-- ArgumentError as fw_mongo_arg_value raises it.
function M.arg_value(self, op, v, path)
  local tv = type(v)
  if tv ~= "table" and tv ~= "userdata" then
    M.arg_error(op, "%s: %s must be a table, got %s", op.method, path, tv)
  end
  local r, err = self.import(v, path)
  if r == nil then
    M.arg_error(op, "%s: %s", op.method, err)
  end
  return r
end

function M.arg_document(self, op, v, path)
  local r = M.arg_value(self, op, v, path)
  if not is_document(r) then
    M.arg_error(op, "%s: %s must be a document, not an array", op.method, path)
  end
  return r
end

-- What fw.mongo's writes check on each document, update and replacement
-- before sending it (src/bson/bson_check.c: no empty key, keys and strings
-- valid UTF-8): the runtime's own checker, which flowwarden.testing hands
-- the fake (mongo_fake.new's check_document), run on the argument v as
-- given; the ArgumentError fw.mongo raises, "<method>: <where> <problem>".
-- Without the runtime (the fake under plain Lua) there is no checker and
-- nothing is checked.
function M.check_document(self, op, v, path)
  local problem = self.check_document and self.check_document(v, path)
  if problem then
    M.arg_error(op, "%s: %s", op.method, problem)
  end
end

local function is_all_operators(doc)
  local any = false
  for k in pairs(doc) do
    if k:sub(1, 1) ~= "$" then
      return false
    end
    any = true
  end
  return any
end

function M.arg_update(self, op, v, path)
  local tv = type(v)
  local r = (tv == "table" or tv == "userdata") and M.arg_value(self, op, v, path)
  if not (r and is_document(r) and is_all_operators(r)) then
    M.arg_error(op, "%s: %s must be a table of $-operators or use replace_one", op.method, path)
  end
  M.check_document(self, op, v, path)
  return r
end

function M.arg_replacement(self, op, v, path)
  local r = M.arg_document(self, op, v, path)
  for k in pairs(r) do
    if k:sub(1, 1) == "$" then
      M.arg_error(op, "%s: %s must not contain $-operators", op.method, path)
    end
  end
  M.check_document(self, op, v, path)
  return r
end

---------------------------------------------------------------------------
-- Options, checked as fw_mongo_check_opts and the option readers do

-- fw_suggest's rule: the closest name, when it is at most 2 edits away and
-- fewer than half the word's length.
local distance = require("flowwarden.config.fields").distance

local function suggest(word, names)
  local best, best_d
  for _, n in ipairs(names) do
    local d = distance(word, n)
    if best_d == nil or d < best_d then
      best, best_d = n, d
    end
  end
  if best and best_d <= 2 and best_d * 2 < #word then
    return best
  end
  return nil
end

function M.check_opts(op, opts, allowed)
  if opts == nil then
    return
  end
  if type(opts) ~= "table" then
    M.arg_error(op, "%s: options must be a table, got %s", op.method, type(opts))
  end
  for k in pairs(opts) do
    if type(k) ~= "string" then
      M.arg_error(op, "%s: option names must be strings, got %s", op.method, type(k))
    end
    local known = false
    for _, a in ipairs(allowed) do
      known = known or a == k
    end
    if not known then
      local hint = suggest(k, allowed)
      if hint then
        M.arg_error(op, '%s: unknown option "%s" (did you mean "%s"?)', op.method, k, hint)
      elseif #allowed == 0 then
        M.arg_error(op, '%s: unknown option "%s" (%s takes no options)', op.method, k, op.method)
      end
      M.arg_error(op, '%s: unknown option "%s" (the options are %s)', op.method, k,
        table.concat(allowed, ", "))
    end
  end
end

function M.opt(opts, name)
  if type(opts) == "table" then
    return opts[name]
  end
  return nil
end

function M.opt_bool(op, opts, name, default)
  local v = M.opt(opts, name)
  if v == nil then
    return default
  end
  if type(v) ~= "boolean" then
    M.arg_error(op, "%s: %s must be a boolean, got %s", op.method, name, type(v))
  end
  return v
end

-- An integer >= min, or -1 when absent.
function M.opt_count(op, opts, name, min)
  local v = M.opt(opts, name)
  if v == nil then
    return -1
  end
  if math.type(v) ~= "integer" or v < min then
    M.arg_error(op, "%s: %s must be an integer >= %d, got %s", op.method, name, min,
      type(v) == "number" and tostring(v) or type(v))
  end
  return v
end

-- `sort` as a list of { path, direction } (internal values), or nil.
function M.opt_sort(self, op, opts)
  local s = M.opt(opts, "sort")
  if s == nil then
    return nil
  end
  local spec = {}
  if type(s) == "table" and getmetatable(s) == nil and type(rawget(s, 1)) == "table" then
    for i = 1, #s do
      local pair = s[i]
      if type(pair) ~= "table" or type(pair[1]) ~= "string" or pair[2] == nil then
        M.arg_error(op, '%s: sort[%d] must be a pair such as { "total", -1 }', op.method, i)
      end
      local r, err = self.import(pair[2], "sort")
      if r == nil then
        M.arg_error(op, "%s: %s", op.method, err)
      end
      spec[i] = { pair[1], r }
    end
    return spec
  end
  if type(s) == "table" and getmetatable(s) == nil then
    local n = 0
    for _ in pairs(s) do
      n = n + 1
    end
    if n > 1 then
      M.arg_error(op, '%s: sort has several keys but a Lua table keeps no order: write it as '
        .. 'pairs, e.g. { { "a", 1 }, { "b", -1 } }', op.method)
    end
  end
  local doc = M.arg_document(self, op, s, "sort")
  for i, k in ipairs(V.sorted_keys(doc)) do
    spec[i] = { k, doc[k] }
  end
  return spec
end

---------------------------------------------------------------------------
-- Values out: what fw.mongo's BSON -> Lua conversion gives

function M.exporter(self)
  local null, mark_array = self.null, self.mark_array
  local function export(v)
    if v == V.NULL then
      return null
    elseif is_array(v) then
      local t = {}
      for i = 1, #v do
        t[i] = export(v[i])
      end
      return mark_array(t)
    elseif is_document(v) then
      local t = {}
      for k, x in pairs(v) do
        t[k] = export(x)
      end
      return t
    end
    return v
  end
  return export
end

return M
