local duration = require("flowwarden.duration")

-- The grammar's cases, shared with the command line's parser
-- (tests/c/test_duration.c): text, a tab, the milliseconds or the message.
local function cases()
  local list = {}
  for line in io.lines("tests/data/durations.txt") do
    if line:sub(1, 1) ~= "#" then
      local text, want = line:match("^(.-)\t(.*)$")
      list[#list + 1] = { text, math.tointeger(tonumber(want)) or want }
    end
  end
  return list
end

describe("duration.parse", function()
  for _, case in ipairs(cases()) do
    if math.type(case[2]) == "integer" then
      it("parses " .. case[1] .. " as " .. case[2] .. " ms", function()
        local ms = duration.parse(case[1])
        assert.are.equal(case[2], ms)
        assert.are.equal("integer", math.type(ms))
      end)
    else
      it("rejects " .. string.format("%q", case[1]), function()
        local ms, err = duration.parse(case[1])
        assert.is_nil(ms)
        assert.are.equal(case[2], err)
      end)
    end
  end

  it("rejects values that are not strings", function()
    local ms, err = duration.parse(30)
    assert.is_nil(ms)
    assert.are.equal('expected a duration string such as "30s", got 30', err)
  end)
end)

describe("duration.format", function()
  local cases = {
    { 0, "0ms" }, { 1, "1ms" }, { 500, "500ms" }, { 1000, "1s" }, { 1500, "1500ms" },
    { 30000, "30s" }, { 60000, "1m" }, { 90000, "90s" }, { 300000, "5m" }, { 3600000, "1h" },
    { 5400000, "90m" },
  }
  for _, case in ipairs(cases) do
    it("formats " .. case[1] .. " ms as " .. case[2], function()
      assert.are.equal(case[2], duration.format(case[1]))
    end)
  end

  it("round-trips through parse", function()
    for _, ms in ipairs({ 1, 999, 1000, 61000, 3600000, 86400000 }) do
      assert.are.equal(ms, duration.parse(duration.format(ms)))
    end
  end)
end)

describe("duration.parse_size", function()
  local valid = {
    { "256MB", 268435456 }, { "64KB", 65536 }, { "1GB", 1073741824 }, { "512B", 512 },
    { "1MB", 1048576 },
  }
  for _, case in ipairs(valid) do
    it("parses " .. case[1], function()
      assert.are.equal(case[2], duration.parse_size(case[1]))
    end)
  end

  local bad = { "256 MB", "256mb", "256M", "1.5GB", "", "MB", "-1MB", "1TB" }
  for _, text in ipairs(bad) do
    it("rejects " .. string.format("%q", text), function()
      local bytes, err = duration.parse_size(text)
      assert.is_nil(bytes)
      assert.are.equal(string.format('invalid size %q (expected an integer followed by B, KB, '
        .. 'MB or GB, e.g. "256MB")', text), err)
    end)
  end

  it("rejects sizes beyond 2^53 bytes", function()
    local bytes, err = duration.parse_size("99999999999GB")
    assert.is_nil(bytes)
    assert.are.equal('invalid size "99999999999GB" (too large)', err)
  end)

  it("formats sizes with the largest exact unit", function()
    assert.are.equal("256MB", duration.format_size(268435456))
    assert.are.equal("1GB", duration.format_size(1073741824))
    assert.are.equal("1536KB", duration.format_size(1572864))
    assert.are.equal("100B", duration.format_size(100))
  end)
end)
