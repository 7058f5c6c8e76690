--[[
flowwarden.json: fw.json.encode / fw.json.decode.

lua-cjson escapes and unescapes strings; the structure is walked here,
because the mapping must know flowwarden's values (views, typed BSON values,
fw.null, tables marked as arrays), keep integers and floats apart (cjson 2.1
reads every number as a float) and name the path to a bad value.

  encode(value [, { pretty = true, mode = "extended" | "plain" }]) -> text
  decode(text [, { extended = true }]) -> value

Encoding writes relaxed Extended JSON for the values JSON lacks (see
docs/lua-api.md): integers beyond 2^53 and NaN/Infinity as {"$numberLong"} /
{"$numberDouble"} wrappers; mode = "plain" writes plain JSON instead (an
ObjectId as its hex string, a date as an ISO-8601 string, ...). Object keys:
a view keeps its BSON order; a table is written `_id` first, then its other
keys sorted bytewise (as tables go to BSON). Decoding gives plain tables, arrays marked as arrays (fw.array, so []
stays an array), JSON null as fw.null, integers as integers and numbers with
a fraction or exponent as floats.

new(fw) builds the fw.json table for the module table fw (whose
constructors, null, array and table it uses when the C host provided them).
]]

local ext = require("flowwarden.json_ext")

local M = {}

M.MAX_DEPTH = 100
M.MAX_BYTES = 64 * 1024 * 1024

local TWO53 = 1 << 53
local ORDERED = ext.ORDERED
local PLAIN_NULL = ext.PLAIN_NULL
local find, sub, byte, format = string.find, string.sub, string.byte, string.format

local cjson
local function get_cjson()
  cjson = cjson or require("cjson")
  return cjson
end

-- "$", "$.a.b", "$.items[2]", "$[\"odd key\"]"; shortened in the middle
-- beyond 200 characters. Array indices are 1-based, like Lua's.
local function path_string(path, n)
  local parts = { "$" }
  for i = 1, n do
    local k = path[i]
    if math.type(k) == "integer" then
      parts[#parts + 1] = "[" .. k .. "]"
    elseif type(k) == "string" and find(k, "^[%a_][%w_]*$") then
      parts[#parts + 1] = "." .. k
    else
      parts[#parts + 1] = format("[%q]", tostring(k))
    end
  end
  local s = table.concat(parts)
  if #s > 200 then
    s = sub(s, 1, 90) .. "..." .. sub(s, -90)
  end
  return s
end
M.path_string = path_string

local function is_valid_utf8(s)
  return utf8.len(s) ~= nil
end

---------------------------------------------------------------------------
-- Encoding

local function quote(st, s)
  if not find(s, '[%c"\\/\128-\255]') then
    return '"' .. s .. '"' -- nothing to escape or check: the common case
  end
  if not is_valid_utf8(s) then
    st.fail("cannot encode a string that is not valid UTF-8 (carry bytes as fw.binary)")
  end
  -- cjson escapes "/" as "\/"; both are valid JSON, the plain one reads better.
  return (get_cjson().encode(s):gsub("\\/", "/"))
end

local function number_text(x)
  if math.type(x) == "integer" then
    return format("%d", x)
  end
  local s
  for precision = 15, 17 do
    s = format("%." .. precision .. "g", x)
    if tonumber(s) == x then
      break
    end
  end
  if not find(s, "[%.eEn]") then
    s = s .. ".0" -- a float stays a float when read back
  end
  return s
end

local function new_encoder(fw, null, array_mt, pretty, plain)
  local out, n, bytes = {}, 0, 0
  local path, depth = {}, 0
  local seen = {}
  local st = {}
  local indents = {}

  function st.fail(what)
    error("fw.json.encode: " .. what .. " at " .. path_string(path, depth), 0)
  end

  local function put(s)
    n = n + 1
    out[n] = s
    bytes = bytes + #s
    if bytes > M.MAX_BYTES then
      st.fail(format("the text would be larger than the limit of %d bytes", M.MAX_BYTES))
    end
  end

  local function newline(d)
    if pretty then
      local s = indents[d]
      if not s then
        s = "\n" .. string.rep("  ", d)
        indents[d] = s
      end
      put(s)
    end
  end

  local value

  local function open(v, bracket)
    if depth >= M.MAX_DEPTH then
      st.fail(format("nesting deeper than %d", M.MAX_DEPTH))
    end
    if v ~= nil then
      if seen[v] then
        st.fail("a table contains itself")
      end
      seen[v] = true
    end
    put(bracket)
    depth = depth + 1
  end

  local function close(v, bracket, count)
    depth = depth - 1
    if v ~= nil then
      seen[v] = nil
    end
    if count > 0 then
      newline(depth)
    end
    put(bracket)
  end

  -- pairs: list of { key, value }
  local function object(v, pairs_list)
    open(v, "{")
    for i, kv in ipairs(pairs_list) do
      if i > 1 then
        put(",")
      end
      newline(depth)
      path[depth] = kv[1]
      if type(kv[1]) ~= "string" then
        st.fail("cannot encode a " .. type(kv[1]) .. " key")
      end
      put(quote(st, kv[1]))
      put(pretty and ": " or ":")
      value(kv[2])
    end
    close(v, "}", #pairs_list)
  end

  local function array(v, list, count)
    open(v, "[")
    for i = 1, count do
      if i > 1 then
        put(",")
      end
      newline(depth)
      path[depth] = i
      value(list[i])
    end
    close(v, "]", count)
  end

  -- A table's fields: _id first, then the other keys sorted bytewise.
  local function table_object(t)
    local keys, nk, has_id = {}, 0, false
    for k in next, t do
      if k == "_id" then
        has_id = true
      else
        nk = nk + 1
        keys[nk] = k
      end
    end
    table.sort(keys)
    if has_id then
      table.insert(keys, 1, "_id")
      nk = nk + 1
    end
    open(t, "{")
    for i = 1, nk do
      local k = keys[i]
      if i > 1 then
        put(",")
      end
      newline(depth)
      path[depth] = k
      put(quote(st, k))
      put(pretty and ": " or ":")
      value(rawget(t, k))
    end
    close(t, "}", nk)
  end

  -- A table by its raw contents: "array" (keys 1..n), "object" (string
  -- keys, or empty) or a failure naming what is wrong.
  local function classify(t)
    local nint, nstr, max = 0, 0, 0
    for k in next, t do
      local kt = math.type(k)
      if kt == "integer" then
        nint = nint + 1
        if k < 1 then
          st.fail(format("cannot encode a table with key %d (arrays start at 1)", k))
        end
        if k > max then
          max = k
        end
      elseif type(k) == "string" then
        nstr = nstr + 1
      else
        st.fail("cannot encode a table with a " .. (kt or type(k)) .. " key")
      end
    end
    if nint > 0 and nstr > 0 then
      st.fail("cannot encode a table that mixes string and integer keys")
    end
    if nint ~= max then
      st.fail(format("cannot encode a sparse array (%d elements, highest index %d; use fw.null "
        .. "for an empty slot)", nint, max))
    end
    return nint > 0 and "array" or "object", nint
  end

  local function view(v)
    local items, count, is_array = {}, 0, #v > 0
    for k, x in pairs(v) do
      count = count + 1
      items[count] = is_array and x or { k, x }
    end
    if count == 0 then
      is_array = fw.table and getmetatable(fw.table(v)) == "flowwarden.array"
    end
    if is_array then
      array(nil, items, count)
    else
      object(nil, items)
    end
  end

  function value(v)
    local t = type(v)
    if v == nil or v == null or v == PLAIN_NULL then
      put("null")
    elseif t == "string" then
      put(quote(st, v))
    elseif t == "number" then
      if math.type(v) == "integer" and (v > TWO53 or v < -TWO53) then
        value(plain and ext.plain_integer(v) or ext.long(v))
      elseif v ~= v then
        value(plain and "NaN" or ext.wrap({ "$numberDouble", "NaN" }))
      elseif v == math.huge or v == -math.huge then
        local name = v > 0 and "Infinity" or "-Infinity"
        value(plain and name or ext.wrap({ "$numberDouble", name }))
      else
        put(number_text(v))
      end
    elseif t == "boolean" then
      put(v and "true" or "false")
    elseif t == "table" then
      local mt = getmetatable(v)
      if mt == ORDERED then
        object(nil, v)
      elseif mt == "flowwarden.array" or mt == array_mt then
        local kind, count = classify(v)
        if kind ~= "array" and count > 0 then
          st.fail("cannot encode an array with string keys")
        end
        array(v, v, count)
      else
        local kind, count = classify(v)
        if kind == "array" and mt ~= "flowwarden.document" then
          array(v, v, count)
        elseif kind == "array" then
          st.fail("cannot encode a document with integer keys")
        else
          table_object(v)
        end
      end
    elseif t == "userdata" then
      local mt = getmetatable(v)
      if mt == "flowwarden.view" then
        view(v)
      elseif mt == "flowwarden.bson_value" then
        local e
        if plain then
          e = ext.to_plain(v)
        else
          e = ext.to_ejson(v)
        end
        if e == nil then
          st.fail("cannot encode a " .. tostring(v.type) .. " value")
        end
        value(e)
      elseif v == get_cjson().null then
        put("null")
      else
        st.fail("cannot encode a userdata")
      end
    else
      st.fail("cannot encode a " .. t)
    end
  end

  return function(v)
    value(v)
    return table.concat(out)
  end
end

---------------------------------------------------------------------------
-- Decoding

local function new_decoder(text, fw, null, mark_array, extended)
  local pos, len = 1, #text
  local path, depth = {}, 0

  local function fail(what)
    error(format("fw.json.decode: %s at character %d", what, pos), 0)
  end

  local function skip()
    pos = find(text, "[^ \t\r\n]", pos) or len + 1
  end

  local value

  local function string_at()
    local start, p, escaped = pos, pos + 1, false
    local q
    while true do
      q = find(text, '["\\\0-\31]', p)
      if not q then
        fail("unterminated string")
      end
      local c = byte(text, q)
      if c == 34 then
        break
      elseif c == 92 then
        escaped, p = true, q + 2
      else
        pos = q
        fail("control character in a string (escape it, e.g. \\n)")
      end
    end
    local s
    if escaped then
      local ok, r = pcall(get_cjson().decode, sub(text, start, q))
      if not ok or type(r) ~= "string" then
        fail("invalid escape in a string")
      end
      s = r
    else
      s = sub(text, start + 1, q - 1)
    end
    if not is_valid_utf8(s) then
      fail("invalid UTF-8 in a string")
    end
    pos = q + 1
    return s
  end

  local function number_at()
    local s, e = find(text, "^-?%d+", pos)
    if not s then
      fail("invalid number")
    end
    if find(text, "^-?0%d", pos) then
      fail("invalid number (leading zero)")
    end
    local is_float = false
    local fs, fe = find(text, "^%.%d+", e + 1)
    if fs then
      e, is_float = fe, true
    elseif byte(text, e + 1) == 46 then
      fail("invalid number (digits expected after the decimal point)")
    end
    local xs, xe = find(text, "^[eE][-+]?%d+", e + 1)
    if xs then
      e, is_float = xe, true
    elseif find(text, "^[eE]", e + 1) then
      fail("invalid number (digits expected in the exponent)")
    end
    local v = tonumber(sub(text, pos, e))
    pos = e + 1
    if is_float then
      return v + 0.0
    end
    return math.tointeger(v) or v -- beyond 64 bits: a float
  end

  local function enter()
    if depth >= M.MAX_DEPTH then
      error(format("fw.json.decode: nesting deeper than %d at %s", M.MAX_DEPTH,
        path_string(path, depth)), 0)
    end
    depth = depth + 1
    pos = pos + 1
  end

  local function object_at()
    local t, dollar = {}, false
    enter()
    skip()
    if byte(text, pos) == 125 then
      pos = pos + 1
    else
      while true do
        if byte(text, pos) ~= 34 then
          fail("expected a string key")
        end
        local k = string_at()
        skip()
        if byte(text, pos) ~= 58 then
          fail("expected ':' after a key")
        end
        pos = pos + 1
        path[depth] = k
        if byte(k, 1) == 36 then
          dollar = true
        end
        t[k] = value()
        skip()
        local c = byte(text, pos)
        pos = pos + 1
        if c == 125 then
          break
        elseif c ~= 44 then
          pos = pos - 1
          fail("expected ',' or '}'")
        end
        skip()
      end
    end
    depth = depth - 1
    if dollar and extended then
      local ok, r = pcall(ext.from_ejson, t, fw)
      if not ok then
        error(format("fw.json.decode: %s at %s", tostring(r), path_string(path, depth)), 0)
      end
      if r ~= nil then
        return r
      end
    end
    return t
  end

  local function array_at()
    local t, i = {}, 0
    enter()
    skip()
    if byte(text, pos) == 93 then
      pos = pos + 1
    else
      while true do
        i = i + 1
        path[depth] = i
        t[i] = value()
        skip()
        local c = byte(text, pos)
        pos = pos + 1
        if c == 93 then
          break
        elseif c ~= 44 then
          pos = pos - 1
          fail("expected ',' or ']'")
        end
      end
    end
    depth = depth - 1
    return mark_array(t)
  end

  local LITERALS = { [116] = { "true", true }, [102] = { "false", false }, [110] = { "null", null } }

  function value()
    skip()
    local c = byte(text, pos)
    if c == 123 then
      return object_at()
    elseif c == 91 then
      return array_at()
    elseif c == 34 then
      return string_at()
    elseif c == 45 or (c and c >= 48 and c <= 57) then
      return number_at()
    elseif LITERALS[c] then
      local word = LITERALS[c][1]
      if sub(text, pos, pos + #word - 1) ~= word then
        fail("invalid literal (expected " .. word .. ")")
      end
      pos = pos + #word
      return LITERALS[c][2]
    elseif c == nil then
      fail("unexpected end of text")
    end
    if c >= 32 and c < 127 then
      fail(format("unexpected character '%s'", string.char(c)))
    end
    fail(format("unexpected byte %d", c))
  end

  return function()
    local v = value()
    skip()
    if pos <= len then
      fail("unexpected text after the value")
    end
    return v
  end
end

---------------------------------------------------------------------------

-- known: option name -> the type its value must have.
local function check_options(fn, opts, known)
  if opts == nil then
    return {}
  end
  if type(opts) ~= "table" then
    error(format("fw.json.%s: options must be a table, got %s", fn, type(opts)), 3)
  end
  for k, v in pairs(opts) do
    if not known[k] then
      error(format("fw.json.%s: unknown option %s", fn, tostring(k)), 3)
    end
    if type(v) ~= known[k] then
      error(format("fw.json.%s: %s must be a %s, got %s", fn, k, known[k], type(v)), 3)
    end
  end
  return opts
end

-- encode's modes: true for plain JSON.
local MODES = { extended = false, plain = true }

function M.new(fw)
  local json = {}
  -- Outside the runtime there is no fw.null/fw.array: use private stand-ins
  -- that this module recognises.
  local null = fw.null or setmetatable({}, {
    __tostring = function()
      return "null"
    end,
    __metatable = "flowwarden.null",
  })
  local array_mt = { __name = "flowwarden.array" }
  local mark_array = fw.array or function(t)
    return setmetatable(t, array_mt)
  end
  json.null = null

  function json.encode(v, opts)
    opts = check_options("encode", opts, { pretty = "boolean", mode = "string" })
    local plain = MODES[opts.mode or "extended"]
    if plain == nil then
      error(format('fw.json.encode: unknown mode "%s" (expected "extended", the default, or '
        .. '"plain")', opts.mode), 2)
    end
    return new_encoder(fw, null, array_mt, opts.pretty, plain)(v)
  end

  function json.decode(text, opts)
    opts = check_options("decode", opts, { extended = "boolean" })
    if type(text) ~= "string" then
      error("fw.json.decode: text must be a string, got " .. type(text), 2)
    end
    if #text > M.MAX_BYTES then
      error(format("fw.json.decode: text of %d bytes is larger than the limit of %d bytes", #text,
        M.MAX_BYTES), 2)
    end
    return new_decoder(text, fw, null, mark_array, opts.extended)()
  end

  return json
end

return M
