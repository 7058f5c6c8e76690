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
end)
