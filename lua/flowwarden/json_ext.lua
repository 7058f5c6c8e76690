--[[
flowwarden.json_ext: the Extended JSON pieces fw.json needs that are not
JSON itself: base64, ISO-8601 dates and the mapping of MongoDB Extended JSON
v2 wrappers ({"$oid": ...}, {"$date": ...}, ...) to flowwarden's typed
values and back.

to_ejson(v) turns a typed value into the plain table (with an explicit key
order) that relaxed Extended JSON writes for it; to_plain(v) into the plain
JSON value (a string, number or object) that mode = "plain" writes. from_ejson(t, fw) turns a
decoded object into a typed value when it is one of the wrappers, returns
nil when it is an ordinary object, and raises a message (without prefix)
when it is a malformed wrapper.
]]

local M = {}

---------------------------------------------------------------------------
-- base64 (RFC 4648, with padding)

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64_ENC, B64_DEC = {}, {}
for i = 1, 64 do
  B64_ENC[i - 1] = B64:sub(i, i)
  B64_DEC[B64:byte(i)] = i - 1
end

function M.base64_encode(s)
  local out, n = {}, 0
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local v = (a << 16) | ((b or 0) << 8) | (c or 0)
    n = n + 1
    out[n] = B64_ENC[(v >> 18) & 63] .. B64_ENC[(v >> 12) & 63]
      .. (b and B64_ENC[(v >> 6) & 63] or "=") .. (c and B64_ENC[v & 63] or "=")
  end
  return table.concat(out)
end

-- Returns the bytes, or nil when s is not padded base64.
function M.base64_decode(s)
  if #s % 4 ~= 0 then
    return nil
  end
  local out, n = {}, 0
  for i = 1, #s, 4 do
    local c1, c2, c3, c4 = s:byte(i, i + 3)
    local a, b = B64_DEC[c1], B64_DEC[c2]
    local last = i + 3 == #s
    local c = B64_DEC[c3] or (last and c3 == 61 and c4 == 61 and 0) or nil
    local d = B64_DEC[c4] or (last and c4 == 61 and 0) or nil
    if not (a and b and c and d) then
      return nil
    end
    local v = (a << 18) | (b << 12) | (c << 6) | d
    n = n + 1
    if c4 ~= 61 then
      out[n] = string.char((v >> 16) & 255, (v >> 8) & 255, v & 255)
    elseif c3 ~= 61 then
      out[n] = string.char((v >> 16) & 255, (v >> 8) & 255)
    else
      out[n] = string.char((v >> 16) & 255)
    end
  end
  return table.concat(out)
end

---------------------------------------------------------------------------
-- Dates: milliseconds since the epoch <-> ISO-8601 UTC

local calendar = require("flowwarden.calendar")
local days_from_civil, civil_from_days = calendar.days_from_civil, calendar.civil_from_days

-- Relaxed Extended JSON writes dates of years 1970 to 9999 as ISO-8601.
M.ISO_MIN_MS, M.ISO_MAX_MS = 0, 253402300799999

function M.iso_from_ms(ms)
  local days, rest = ms // 86400000, ms % 86400000
  local y, m, d = civil_from_days(days)
  local s = rest // 1000
  return string.format("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d, s // 3600, s // 60 % 60,
    s % 60, rest % 1000)
end

-- "2024-05-01T12:00:00Z", with optional fraction and Z or an offset
-- (+01:00, +0100). Returns ms, or nil.
function M.ms_from_iso(text)
  local y, mo, d, h, mi, s, rest =
    text:match("^(%d%d%d%d)%-(%d%d)%-(%d%d)T(%d%d):(%d%d):(%d%d)(.*)$")
  if not y then
    return nil
  end
  y, mo, d, h, mi, s = tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi), tonumber(s)
  if mo < 1 or mo > 12 or d < 1 or d > 31 or h > 23 or mi > 59 or s > 60 then
    return nil
  end
  local frac = 0
  local f, tz = rest:match("^%.(%d+)(.*)$")
  if f then
    frac = tonumber((f .. "00"):sub(1, 3))
    rest = tz
  end
  local offset
  if rest == "Z" then
    offset = 0
  else
    local sign, oh, om = rest:match("^([+-])(%d%d):?(%d%d)$")
    if not sign then
      return nil
    end
    offset = (tonumber(oh) * 60 + tonumber(om)) * (sign == "+" and 1 or -1)
  end
  local days = days_from_civil(y, mo, d)
  return ((days * 24 + h) * 60 + mi - offset) * 60000 + s * 1000 + frac
end

---------------------------------------------------------------------------
-- Typed values -> relaxed Extended JSON. Each wrapper is a list of
-- { key, value } pairs so its keys come out in the specification's order.

local TWO53 = 1 << 53

-- The metatable of wrappers: a list of { key, value } pairs, written in order.
M.ORDERED = {}

local function wrap(...)
  return setmetatable({ ... }, M.ORDERED)
end
M.wrap = wrap

local function long(i)
  return wrap({ "$numberLong", string.format("%d", i) })
end
M.long = long

-- Returns the wrapper for typed value v, or a plain value (an integer for an
-- int64 that JSON numbers carry exactly), or nil for an unknown type.
function M.to_ejson(v)
  local t = v.type
  if t == "object_id" then
    return wrap({ "$oid", v.hex })
  elseif t == "date" then
    local ms = v.ms
    if ms >= M.ISO_MIN_MS and ms <= M.ISO_MAX_MS then
      return wrap({ "$date", M.iso_from_ms(ms) })
    end
    return wrap({ "$date", long(ms) })
  elseif t == "int64" then
    local i = v.value
    if i > TWO53 or i < -TWO53 then
      return long(i)
    end
    return i
  elseif t == "decimal128" then
    return wrap({ "$numberDecimal", v.string })
  elseif t == "binary" then
    return wrap({ "$binary", wrap({ "base64", M.base64_encode(v.data) },
      { "subType", string.format("%02x", v.subtype) }) })
  elseif t == "timestamp" then
    return wrap({ "$timestamp", wrap({ "t", v.t }, { "i", v.i }) })
  elseif t == "regex" then
    return wrap({ "$regularExpression", wrap({ "pattern", v.pattern }, { "options", v.options }) })
  elseif t == "min_key" then
    return wrap({ "$minKey", 1 })
  elseif t == "max_key" then
    return wrap({ "$maxKey", 1 })
  elseif t == "code" then
    return wrap({ "$code", v.code })
  elseif t == "code_w_scope" then
    return wrap({ "$code", v.code }, { "$scope", v.scope })
  elseif t == "symbol" then
    return wrap({ "$symbol", v.symbol })
  elseif t == "db_pointer" then
    return wrap({ "$dbPointer", wrap({ "$ref", v.collection }, { "$id", wrap({ "$oid", v.id.hex }) }) })
  elseif t == "undefined" then
    return wrap({ "$undefined", true })
  end
  return nil
end

---------------------------------------------------------------------------
-- Typed values -> plain JSON (encode's mode = "plain"): what a consumer that
-- knows nothing of Extended JSON expects. Lossy on purpose: the type is gone.

-- ISO-8601 UTC with milliseconds; years outside 0000 to 9999 in ISO 8601's
-- expanded form, sign and six digits ("+275760-09-13T00:00:00.000Z"), as
-- JavaScript's Date#toISOString writes them.
function M.plain_date(ms)
  local days, rest = ms // 86400000, ms % 86400000
  local y, m, d = civil_from_days(days)
  local s = rest // 1000
  local year = (y >= 0 and y <= 9999) and string.format("%04d", y)
    or string.format("%s%06d", y < 0 and "-" or "+", math.abs(y))
  return string.format("%s-%02d-%02dT%02d:%02d:%02d.%03dZ", year, m, d, s // 3600, s // 60 % 60,
    s % 60, rest % 1000)
end

-- An integer JSON readers keep exactly (|i| <= 2^53) as a number, else its
-- decimal digits as a string.
function M.plain_integer(i)
  if i > TWO53 or i < -TWO53 then
    return string.format("%d", i)
  end
  return i
end

-- Returns the plain JSON value for typed value v, or nil for an unknown type.
function M.to_plain(v)
  local t = v.type
  if t == "object_id" then
    return v.hex
  elseif t == "date" then
    return M.plain_date(v.ms)
  elseif t == "int64" then
    return M.plain_integer(v.value)
  elseif t == "decimal128" then
    return v.string
  elseif t == "binary" then
    return M.base64_encode(v.data)
  elseif t == "timestamp" then
    return wrap({ "t", v.t }, { "i", v.i })
  elseif t == "regex" then
    return "/" .. v.pattern .. "/" .. v.options
  elseif t == "min_key" then
    return "MinKey"
  elseif t == "max_key" then
    return "MaxKey"
  elseif t == "code" then
    return v.code
  elseif t == "code_w_scope" then
    return wrap({ "code", v.code }, { "scope", v.scope })
  elseif t == "symbol" then
    return v.symbol
  elseif t == "db_pointer" then
    return wrap({ "ref", v.collection }, { "id", v.id.hex })
  elseif t == "undefined" then
    return M.PLAIN_NULL
  end
  return nil
end

-- Stands for JSON null in to_plain's results (the encoder writes it as null).
M.PLAIN_NULL = setmetatable({}, { __name = "flowwarden.json_plain_null" })

---------------------------------------------------------------------------
-- Extended JSON (canonical or relaxed) -> typed values

local function keys_of(t)
  local keys, n = {}, 0
  for k in pairs(t) do
    n = n + 1
    keys[k] = true
  end
  return keys, n
end

local function is_typed(v, kind)
  return type(v) == "userdata" and getmetatable(v) == "flowwarden.bson_value" and v.type == kind
end

local function need(fw, name)
  local f = fw[name]
  if not f then
    error(string.format("fw.%s is not available outside the flowwarden runtime", name), 0)
  end
  return f
end

-- An integer from a decimal string or an integer already decoded.
local function int_of(v)
  if type(v) == "string" and v:find("^%-?%d+$") then
    return math.tointeger(tonumber(v))
  elseif math.type(v) == "integer" then
    return v
  elseif is_typed(v, "int64") then
    return v.value
  end
  return nil
end

local function uint32_of(v)
  local i = int_of(v)
  if i and i >= 0 and i <= 0xFFFFFFFF then
    return i
  end
  return nil
end

local function bad(what, expected)
  error(string.format("invalid %s (%s)", what, expected), 0)
end

-- One handler per wrapper: the keys it takes, and the conversion.
local FORMS = {}

FORMS["$oid"] = { { "$oid" }, function(t, fw)
  if type(t["$oid"]) ~= "string" or not t["$oid"]:find("^%x+$") or #t["$oid"] ~= 24 then
    bad("$oid", "expected a string of 24 hexadecimal digits")
  end
  return need(fw, "object_id")(t["$oid"])
end }

FORMS["$date"] = { { "$date" }, function(t, fw)
  local v, ms = t["$date"], nil
  if type(v) == "string" then
    ms = M.ms_from_iso(v)
  else
    ms = int_of(v) -- {"$numberLong": "..."} was decoded to an int64 already
  end
  if not ms then
    bad("$date", 'expected an ISO-8601 string such as "2024-05-01T12:00:00Z" or {"$numberLong": "<ms>"}')
  end
  return need(fw, "date")(ms)
end }

FORMS["$numberInt"] = { { "$numberInt" }, function(t)
  local i = type(t["$numberInt"]) == "string" and int_of(t["$numberInt"])
  if not i or i < -2147483648 or i > 2147483647 then
    bad("$numberInt", "expected a string holding a 32-bit integer")
  end
  return i
end }

FORMS["$numberLong"] = { { "$numberLong" }, function(t, fw)
  local i = type(t["$numberLong"]) == "string" and int_of(t["$numberLong"])
  if not i then
    bad("$numberLong", "expected a string holding a 64-bit integer")
  end
  if fw.int64 then
    return fw.int64(i)
  end
  return i
end }

local SPECIAL_DOUBLES = { Infinity = math.huge, ["-Infinity"] = -math.huge, NaN = 0 / 0 }

FORMS["$numberDouble"] = { { "$numberDouble" }, function(t)
  local s = t["$numberDouble"]
  local x = type(s) == "string" and (SPECIAL_DOUBLES[s] or (s:find("^%-?%d") and tonumber(s)))
  if not x then
    bad("$numberDouble", 'expected a string holding a number, "Infinity", "-Infinity" or "NaN"')
  end
  return x + 0.0
end }

FORMS["$numberDecimal"] = { { "$numberDecimal" }, function(t, fw)
  if type(t["$numberDecimal"]) ~= "string" then
    bad("$numberDecimal", "expected a string")
  end
  return need(fw, "decimal128")(t["$numberDecimal"])
end }

FORMS["$binary"] = { { "$binary" }, function(t, fw)
  local b = t["$binary"]
  local data = type(b) == "table" and type(b.base64) == "string" and M.base64_decode(b.base64)
  local sub = type(b) == "table" and type(b.subType) == "string" and #b.subType <= 2
    and b.subType:find("^%x+$") and tonumber(b.subType, 16)
  local _, n = keys_of(type(b) == "table" and b or {})
  if not (data and sub) or n ~= 2 then
    bad("$binary", 'expected {"base64": "<padded base64>", "subType": "<1 or 2 hex digits>"}')
  end
  return need(fw, "binary")(data, sub)
end }

FORMS["$code"] = { { "$code" }, function(t, fw)
  if type(t["$code"]) ~= "string" then
    bad("$code", "expected a string")
  end
  return need(fw, "code")(t["$code"])
end }

local CODE_W_SCOPE = { { "$code", "$scope" }, function(t, fw)
  if type(t["$code"]) ~= "string" or type(t["$scope"]) ~= "table" then
    bad("$code with $scope", "expected a string and a document")
  end
  return need(fw, "code_w_scope")(t["$code"], t["$scope"])
end }

FORMS["$timestamp"] = { { "$timestamp" }, function(t, fw)
  local ts = t["$timestamp"]
  local ti, ii = type(ts) == "table" and uint32_of(ts.t), type(ts) == "table" and uint32_of(ts.i)
  if not (ti and ii) then
    bad("$timestamp", 'expected {"t": <0 .. 4294967295>, "i": <0 .. 4294967295>}')
  end
  return need(fw, "timestamp")(ti, ii)
end }

FORMS["$regularExpression"] = { { "$regularExpression" }, function(t, fw)
  local r = t["$regularExpression"]
  if type(r) ~= "table" or type(r.pattern) ~= "string" or type(r.options) ~= "string" then
    bad("$regularExpression", 'expected {"pattern": "<string>", "options": "<string>"}')
  end
  return need(fw, "regex")(r.pattern, r.options)
end }

FORMS["$dbPointer"] = { { "$dbPointer" }, function(t, fw)
  local p = t["$dbPointer"]
  if type(p) ~= "table" or type(p["$ref"]) ~= "string" or not is_typed(p["$id"], "object_id") then
    bad("$dbPointer", 'expected {"$ref": "<collection>", "$id": {"$oid": "<24 hex digits>"}}')
  end
  return need(fw, "db_pointer")(p["$ref"], p["$id"].hex)
end }

FORMS["$symbol"] = { { "$symbol" }, function(t, fw)
  if type(t["$symbol"]) ~= "string" then
    bad("$symbol", "expected a string")
  end
  return need(fw, "symbol")(t["$symbol"])
end }

FORMS["$minKey"] = { { "$minKey" }, function(t, fw)
  if t["$minKey"] ~= 1 then
    bad("$minKey", "expected 1")
  end
  return need(fw, "min_key")()
end }

FORMS["$maxKey"] = { { "$maxKey" }, function(t, fw)
  if t["$maxKey"] ~= 1 then
    bad("$maxKey", "expected 1")
  end
  return need(fw, "max_key")()
end }

FORMS["$undefined"] = { { "$undefined" }, function(t, fw)
  if t["$undefined"] ~= true then
    bad("$undefined", "expected true")
  end
  return need(fw, "undefined")()
end }

-- t: a decoded object. Returns the typed value (or number) it stands for,
-- or nil when it is not a wrapper (a query such as {"$gte": 5} stays a
-- table). Only objects whose keys are exactly a wrapper's are converted.
function M.from_ejson(t, fw)
  local keys, n = keys_of(t)
  local form
  if n == 1 then
    form = FORMS[next(keys)]
  elseif n == 2 and keys["$code"] and keys["$scope"] then
    form = CODE_W_SCOPE
  end
  if not form then
    return nil
  end
  return form[2](t, fw)
end

return M
