-- The UTC calendar month of a time in milliseconds, as year * 12 + month index (as monthOf() in month.ts).
local function month_of(ms)
  local z = math.floor(ms / 86400000) + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local year = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local month = mp < 10 and mp + 3 or mp - 9
  if month <= 2 then year = year + 1 end
  return year * 12 + month - 1
end

local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
