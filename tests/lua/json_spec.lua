-- fw.json without the C host (plain lua5.4 + lua-cjson): the JSON mapping of
-- Lua values, errors, limits, Extended JSON helpers. The typed BSON values
-- are covered in tests/c/test_json.c, which runs in a real host.
local json = require("flowwarden.json").new({})
local ext = require("flowwarden.json_ext")

describe("fw.json.encode", function()
  it("writes scalars, keeping integers and floats apart", function()
    assert.are.equal('[1,2.0,-0.5,"a\\"b/c",true,false,null]',
      json.encode({ 1, 2.0, -0.5, 'a"b/c', true, false, json.null }))
    assert.are.equal("null", json.encode(nil))
    assert.are.equal('{"$numberLong":"9007199254740993"}', json.encode(9007199254740993))
    assert.are.equal('{"$numberDouble":"-Infinity"}', json.encode(-math.huge))
  end)

  it("writes _id first, then keys sorted bytewise", function()
    assert.are.equal('{"_id":1,"B":2,"a":3,"b":{}}', json.encode({ b = {}, a = 3, B = 2, _id = 1 }))
  end)

  it("pretty-prints with two spaces", function()
    assert.are.equal('[\n  1,\n  {\n    "a": []\n  }\n]',
      json.encode({ 1, { a = json.decode("[]") } }, { pretty = true }))
  end)

  it("names the path of what it cannot encode", function()
    assert.has_error(function() json.encode({ a = { { f = print } } }) end,
      "fw.json.encode: cannot encode a function at $.a[1].f")
    assert.has_error(function() json.encode({ [true] = 1 }) end,
      "fw.json.encode: cannot encode a table with a boolean key at $")
    assert.has_error(function() json.encode({ ["odd key"] = { 1, x = 2 } }) end,
      'fw.json.encode: cannot encode a table that mixes string and integer keys at $["odd key"]')
    assert.has_error(function() json.encode({ [2] = "x" }) end,
      "fw.json.encode: cannot encode a sparse array (1 elements, highest index 2; use fw.null "
      .. "for an empty slot) at $")
    assert.has_error(function() json.encode(1, { pretty = 1 }) end,
      "fw.json.encode: pretty must be a boolean, got number")
  end)

  it("stops at 100 levels", function()
    local t = {}
    local inner = t
    for _ = 1, 100 do
      inner.a = {}
      inner = inner.a
    end
    local ok, err = pcall(json.encode, t)
    assert.is_false(ok)
    assert.truthy(err:find("^fw.json.encode: nesting deeper than 100 at %$%.a%.a"))
    inner = t
    for _ = 1, 99 do inner = inner.a end
    inner.a = nil
    assert.is_string(json.encode(t))
  end)
end)

describe("fw.json.decode", function()
  it("reads JSON with integers, floats, null and arrays that stay arrays", function()
    local v = json.decode(' {"a": [1, -2, 3.5, 1e3, null], "b": [], "c": {}, "s": "\\u00e9\\ud83d\\ude00"} ')
    assert.are.equal("integer", math.type(v.a[1]))
    assert.are.equal("float", math.type(v.a[4]))
    assert.are.equal(json.null, v.a[5])
    assert.are.equal("é😀", v.s)
    assert.are.equal('{"a":[1,-2,3.5,1000.0,null],"b":[],"c":{},"s":"é😀"}', json.encode(v))
  end)

  it("reports syntax errors with their position", function()
    local cases = {
      { '{"a" 1}', "fw.json.decode: expected ':' after a key at character 6" },
      { "[01]", "fw.json.decode: invalid number (leading zero) at character 2" },
      { '"a\tb"', "fw.json.decode: control character in a string (escape it, e.g. \\n) at character 3" },
      { "[1] x", "fw.json.decode: unexpected text after the value at character 5" },
      { "", "fw.json.decode: unexpected end of text at character 1" },
      { "nul", "fw.json.decode: invalid literal (expected null) at character 1" },
      { '"\\x"', "fw.json.decode: invalid escape in a string at character 1" },
      { '"\255"', "fw.json.decode: invalid UTF-8 in a string at character 1" },
    }
    for _, c in ipairs(cases) do
      assert.has_error(function() json.decode(c[1]) end, c[2])
    end
    assert.has_error(function() json.decode(5) end, "fw.json.decode: text must be a string, got number")
    assert.has_error(function() json.decode("1", { extnded = true }) end,
      "fw.json.decode: unknown option extnded")
  end)

  it("stops at 100 levels with the path", function()
    local ok, err = pcall(json.decode, '{"x":' .. string.rep("[", 100) .. string.rep("]", 100) .. "}")
    assert.is_false(ok)
    assert.truthy(err:find("^fw.json.decode: nesting deeper than 100 at %$%.x%[1%]%[1%]"))
    assert.is_table(json.decode('{"x":' .. string.rep("[", 99) .. string.rep("]", 99) .. "}"))
  end)

  it("reads $numberInt, $numberLong and $numberDouble without the host", function()
    local v = json.decode('[{"$numberInt":"7"},{"$numberLong":"9007199254740993"},{"$numberDouble":"2"}]',
      { extended = true })
    assert.are.same({ 7, 9007199254740993, 2.0 }, { v[1], v[2], v[3] })
    assert.are.equal("float", math.type(v[3]))
    assert.has_error(function() json.decode('{"a":{"$numberInt":"3000000000"}}', { extended = true }) end,
      "fw.json.decode: invalid $numberInt (expected a string holding a 32-bit integer) at $.a")
  end)
end)

-- Stand-ins for the host's typed values: to_plain reads only their fields.
local function typed(kind, fields)
  fields.type = kind
  return fields
end

describe('fw.json.encode with mode = "plain"', function()
  local plain = { mode = "plain" }

  it("keeps Extended JSON as the default, also when named", function()
    assert.are.equal('{"$numberLong":"9007199254740993"}',
      json.encode(9007199254740993, { mode = "extended" }))
    assert.are.equal('{"$numberLong":"9007199254740993"}', json.encode(9007199254740993))
  end)

  it("writes integers beyond 2^53 as decimal strings, those within as numbers", function()
    assert.are.equal('["9007199254740993",9007199254740992,-9007199254740992,"-9007199254740993"]',
      json.encode({ 9007199254740993, 9007199254740992, -9007199254740992, -9007199254740993 },
        plain))
    assert.are.equal('"9223372036854775807"', json.encode(math.maxinteger, plain))
  end)

  it("writes NaN and the infinities as strings", function()
    assert.are.equal('["NaN","Infinity","-Infinity",1.5]',
      json.encode({ 0 / 0, math.huge, -math.huge, 1.5 }, plain))
  end)

  it("refuses an unknown mode, naming the modes it knows", function()
    assert.has_error(function() json.encode({}, { mode = "relaxed" }) end,
      'fw.json.encode: unknown mode "relaxed" (expected "extended", the default, or "plain")')
    assert.has_error(function() json.encode({}, { mode = true }) end,
      "fw.json.encode: mode must be a string, got boolean")
  end)
end)

describe("flowwarden.json_ext.to_plain", function()
  it("writes an ObjectId as its 24 hex digits", function()
    assert.are.equal("64f1a2b3c4d5e6f7a8b9c0d1",
      ext.to_plain(typed("object_id", { hex = "64f1a2b3c4d5e6f7a8b9c0d1" })))
  end)

  it("writes a date as ISO-8601 UTC with milliseconds, expanded years outside 0000 .. 9999",
    function()
      assert.are.equal("2024-05-01T12:00:00.123Z",
        ext.to_plain(typed("date", { ms = 1714564800123 })))
      assert.are.equal("1969-12-31T23:59:59.999Z", ext.to_plain(typed("date", { ms = -1 })))
      assert.are.equal("0000-01-01T00:00:00.000Z", ext.plain_date(-62167219200000))
      assert.are.equal("-000001-12-31T23:59:59.999Z", ext.plain_date(-62167219200001))
      assert.are.equal("+275760-09-13T00:00:00.000Z", ext.plain_date(8640000000000000))
      assert.are.equal("-271821-04-20T00:00:00.000Z", ext.plain_date(-8640000000000000))
    end)

  it("writes a Decimal128 as its string", function()
    assert.are.equal("19.99", ext.to_plain(typed("decimal128", { string = "19.99" })))
    assert.are.equal("NaN", ext.to_plain(typed("decimal128", { string = "NaN" })))
  end)

  it("writes an Int64 as a number within 2^53, else as a decimal string", function()
    local v = ext.to_plain(typed("int64", { value = 5 }))
    assert.are.equal(5, v)
    assert.are.equal("integer", math.type(v))
    assert.are.equal(9007199254740992, ext.to_plain(typed("int64", { value = 1 << 53 })))
    assert.are.equal("9007199254740993", ext.to_plain(typed("int64", { value = (1 << 53) + 1 })))
    assert.are.equal("-9223372036854775808",
      ext.to_plain(typed("int64", { value = math.mininteger })))
  end)

  it("writes binary as padded base64, whatever its subtype", function()
    assert.are.equal("AQID/w==",
      ext.to_plain(typed("binary", { data = "\1\2\3\255", subtype = 0x80 })))
  end)

  it("writes a timestamp as {t, i}", function()
    assert.are.equal('{"t":1714564800,"i":3}',
      json.encode(ext.to_plain(typed("timestamp", { t = 1714564800, i = 3 }))))
  end)

  it("writes the rare types as strings, objects or null", function()
    assert.are.equal("/^a.c/im", ext.to_plain(typed("regex", { pattern = "^a.c", options = "im" })))
    assert.are.equal("MinKey", ext.to_plain(typed("min_key", {})))
    assert.are.equal("MaxKey", ext.to_plain(typed("max_key", {})))
    assert.are.equal("return 1", ext.to_plain(typed("code", { code = "return 1" })))
    assert.are.equal("legacy", ext.to_plain(typed("symbol", { symbol = "legacy" })))
    assert.are.equal('{"code":"return x","scope":{"x":1}}',
      json.encode(ext.to_plain(typed("code_w_scope", { code = "return x", scope = { x = 1 } }))))
    assert.are.equal('{"ref":"orders","id":"64f1a2b3c4d5e6f7a8b9c0d1"}', json.encode(ext.to_plain(
      typed("db_pointer", { collection = "orders", id = { hex = "64f1a2b3c4d5e6f7a8b9c0d1" } }))))
    assert.are.equal("null", json.encode(ext.to_plain(typed("undefined", {}))))
    assert.is_nil(ext.to_plain(typed("no_such_type", {})))
  end)
end)

describe("flowwarden.json_ext", function()
  it("round-trips base64", function()
    for _, s in ipairs({ "", "f", "fo", "foo", "foob", "\0\255\1" }) do
      assert.are.equal(s, ext.base64_decode(ext.base64_encode(s)))
    end
    assert.are.equal("Zm9vYg==", ext.base64_encode("foob"))
    assert.is_nil(ext.base64_decode("Zm9=Yg=="))
  end)

  it("converts dates both ways, for every year 1970 .. 9999", function()
    assert.are.equal("1970-01-01T00:00:00.000Z", ext.iso_from_ms(0))
    assert.are.equal("9999-12-31T23:59:59.999Z", ext.iso_from_ms(ext.ISO_MAX_MS))
    assert.are.equal("2024-02-29T12:00:00.123Z", ext.iso_from_ms(1709208000123))
    for _, ms in ipairs({ 0, 1, 951782400000, 1709208000123, ext.ISO_MAX_MS }) do
      assert.are.equal(ms, ext.ms_from_iso(ext.iso_from_ms(ms)))
    end
    assert.are.equal(1714564800000, ext.ms_from_iso("2024-05-01T14:00:00+02:00"))
    assert.are.equal(1714564800500, ext.ms_from_iso("2024-05-01T12:00:00.5Z"))
    assert.is_nil(ext.ms_from_iso("2024-13-01T00:00:00Z"))
  end)

  it("counts days right before the year 0 too (the calendar floors)", function()
    local calendar = require("flowwarden.calendar")
    for _, ymd in ipairs({ { -1, 1, 1 }, { -1, 12, 31 }, { -401, 2, 28 }, { 0, 2, 29 },
      { -271821, 4, 20 }, { 1, 1, 1 } }) do
      local days = calendar.days_from_civil(ymd[1], ymd[2], ymd[3])
      assert.are.same(ymd, { calendar.civil_from_days(days) })
    end
    assert.are.equal(-719528, calendar.days_from_civil(0, 1, 1))
    assert.are.equal(-719893, calendar.days_from_civil(-1, 1, 1))
  end)
end)
