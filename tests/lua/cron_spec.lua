local cron = require("flowwarden.cron")

local function at(text)
  local y, mo, d, h, mi = text:match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+)$")
  return cron.time(tonumber(y), tonumber(mo), tonumber(d), tonumber(h), tonumber(mi))
end

local function next_of(expr, from, n)
  local s = assert(cron.parse(expr))
  local out, t = {}, at(from)
  for i = 1, n or 1 do
    t = cron.next(s, t)
    out[i] = t and cron.format(t) or "none"
  end
  return table.concat(out, " ")
end

describe("cron.format", function()
  it("writes seconds since the epoch as ISO-8601 UTC", function()
    assert.are.equal("1970-01-01T00:00:00Z", cron.format(0))
    assert.are.equal("2024-02-29T23:59:00Z", cron.format(1709251140))
    assert.are.equal("2026-01-15T10:30:00Z", cron.format(1768473000))
    assert.are.equal(1768473000, cron.time(2026, 1, 15, 10, 30))
  end)
end)

describe("cron.next", function()
  it("every 15 minutes, strictly after the given time", function()
    assert.are.equal("2026-01-15T10:45:00Z 2026-01-15T11:00:00Z 2026-01-15T11:15:00Z",
      next_of("*/15 * * * *", "2026-01-15T10:30", 3))
    assert.are.equal("2026-01-15T10:45:00Z", next_of("*/15 * * * *", "2026-01-15T10:31"))
  end)

  it("lists, ranges and ranges with steps", function()
    assert.are.equal("2026-01-15T09:05:00Z 2026-01-15T09:35:00Z 2026-01-15T17:05:00Z",
      next_of("5,35 9-17/8 * * *", "2026-01-15T08:00", 3))
  end)

  it("N/STEP runs from N to the end of the field", function()
    assert.are.equal("2026-01-15T10:50:00Z 2026-01-15T11:10:00Z",
      next_of("10/20 * * * *", "2026-01-15T10:30", 2))
  end)

  it("day of month and month, with names", function()
    assert.are.equal("2026-03-01T00:00:00Z 2026-06-01T00:00:00Z",
      next_of("0 0 1 mar,JUN *", "2026-01-15T10:30", 2))
  end)

  it("day of week alone, 0 and 7 both Sunday", function()
    -- 2026-01-15 is a Thursday
    assert.are.equal("2026-01-18T06:00:00Z 2026-01-25T06:00:00Z",
      next_of("0 6 * * 7", "2026-01-15T10:30", 2))
    assert.are.equal("2026-01-18T06:00:00Z", next_of("0 6 * * sun", "2026-01-15T10:30"))
    assert.are.equal("2026-01-16T06:00:00Z 2026-01-19T06:00:00Z",
      next_of("0 6 * * mon-fri", "2026-01-15T10:30", 2))
  end)

  it("when both day fields are restricted, either one matches", function()
    -- the 20th, or any Monday
    assert.are.equal("2026-01-19T00:00:00Z 2026-01-20T00:00:00Z 2026-01-26T00:00:00Z",
      next_of("0 0 20 * 1", "2026-01-15T10:30", 3))
  end)

  it("when one day field is *, the other alone decides", function()
    assert.are.equal("2026-01-20T00:00:00Z 2026-02-20T00:00:00Z",
      next_of("0 0 20 * *", "2026-01-15T10:30", 2))
    assert.are.equal("2026-01-20T00:00:00Z", next_of("0 0 20 * */1", "2026-01-15T10:30"))
  end)

  it("crosses year ends and finds leap days", function()
    assert.are.equal("2027-01-01T00:00:00Z", next_of("0 0 1 1 *", "2026-12-31T23:59"))
    assert.are.equal("2028-02-29T12:00:00Z", next_of("0 12 29 2 *", "2026-01-15T10:30"))
  end)

  it("returns nil for a date that never comes", function()
    assert.are.equal("none", next_of("0 0 30 2 *", "2026-01-15T10:30"))
  end)

  it("looks 8 x 366 days ahead, not a day more", function()
    -- January 8th on a Sunday (both day fields restricted, */8 counts as
    -- *: both must hold): 1978 is the first after 1970, 2,929 days on.
    assert.are.equal("none", next_of("1 0 8 JAN */8", "1970-01-01T00:00"))
    assert.are.equal("1978-01-08T00:01:00Z", next_of("1 0 8 JAN */8", "1970-01-02T00:00"))
  end)
end)

describe("cron.parse", function()
  local function bad(expr)
    local s, err = cron.parse(expr)
    assert.is_nil(s)
    return err
  end

  it("names the bad field and quotes it", function()
    assert.are.equal('bad minute field "61"', bad("61 * * * *"))
    assert.are.equal('bad hour field "24"', bad("0 24 * * *"))
    assert.are.equal('bad day-of-month field "0"', bad("0 0 0 * *"))
    assert.are.equal('bad month field "13"', bad("0 0 1 13 *"))
    assert.are.equal('bad day-of-week field "8"', bad("0 0 * * 8"))
    assert.are.equal('bad minute field "*/0"', bad("*/0 * * * *"))
    assert.are.equal('bad hour field "5-2"', bad("0 5-2 * * *"))
    assert.are.equal('bad minute field "1,,2"', bad("1,,2 * * * *"))
    assert.are.equal('bad month field "foo"', bad("0 0 1 foo *"))
    assert.are.equal('bad minute field "-1"', bad("-1 * * * *"))
  end)

  it("wants exactly five fields", function()
    assert.are.equal('expected 5 fields (minute hour day-of-month month day-of-week), got 4 in '
      .. '"* * * *"', bad("* * * *"))
    assert.are.equal('expected 5 fields (minute hour day-of-month month day-of-week), got 6 in '
      .. '"0 * * * * *"', bad("0 * * * * *"))
  end)

  it("rejects what is not a string", function()
    assert.matches("expected a cron expression string", bad(15))
  end)
end)
