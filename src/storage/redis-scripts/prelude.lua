-- Prepended to every script: what they share.
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

-- Runs a variadic command on one key with every value of a list, a thousand at a time: Lua's unpack() has a limit,
-- and a list (the leases of an instance that died) can be longer. Concatenates array answers (HMGET's).
local function call_chunked(command, key, values, step)
  local answers = {}
  local size = 1000 - 1000 % step
  for start = 1, #values, size do
    local answer = redis.call(command, key, unpack(values, start, math.min(start + size - 1, #values)))
    if type(answer) == 'table' then for _, value in ipairs(answer) do answers[#answers + 1] = value end end
  end
  return answers
end
