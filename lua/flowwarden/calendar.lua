--[[
flowwarden.calendar: days since 1970-01-01 of a proleptic Gregorian date and
back, for every year (negative ones too), in integer arithmetic. Used by
fw.json (ISO-8601 dates) and the cron schedules.

  days_from_civil(y, m, d) -> days      civil_from_days(days) -> y, m, d
]]

local M = {}

function M.days_from_civil(y, m, d)
  y = m <= 2 and y - 1 or y
  local era = y // 400 -- Lua's // floors: no correction for negative years
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = (153 * mp + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

function M.civil_from_days(z)
  z = z + 719468
  local era = z // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return m <= 2 and y + 1 or y, m, d
end

return M
