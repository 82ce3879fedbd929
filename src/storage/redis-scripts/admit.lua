-- Checks the quotas and the concurrency cap of a request's subjects (its organization, and its key when the key has
-- caps of its own), reserves tokens and takes a concurrency lease in each, all in one step across every instance, on
-- Redis's clock.
-- KEYS: ready (the generation: set when the state was rebuilt from the ledger, missing after Redis lost its data),
--       then for each subject: state (hash), minutes (hash minute -> tokens), lasts (zset minute -> latest time),
--       leases (zset lease -> expiry), reservations (hash lease -> tokens)
-- ARGV: mode ("admit" or "peek"), need, wanted reservation, lease id, lease milliseconds,
--       then for each subject: 5-hour limit, month limit, max concurrency (-1: none)
-- Returns: {status, subject that refused (1 the organization, 2 the key), now, generation, reservation,
--           then for each subject: window used, reserved, ms until the window is empty, ms to wait, month used,
--           in flight}; status 0 admitted (or peeked), 1 month quota, 2 5-hour quota, 3 concurrency, 9 not rebuilt
local now = now_ms()
local generation = redis.call('GET', KEYS[1])
if not generation then return {9, 0, now} end
local five_hours = 18000000
local subjects = (#KEYS - 1) / 5

-- Brings one subject's state up to now: expired leases and minutes that left the window are dropped.
local function load(first)
  local state, minutes, lasts, leases, reservations = KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4]
  -- Leases of instances that died (or of requests that never settled) expire with their reservations.
  local reserved = tonumber(redis.call('HGET', state, 'reserved') or '0')
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  for _, lease in ipairs(expired) do
    reserved = reserved - tonumber(redis.call('HGET', reservations, lease) or '0')
    redis.call('HDEL', reservations, lease)
  end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
  if reserved < 0 then reserved = 0 end
  -- A minute leaves the window 5 hours after the latest usage in it.
  local total = tonumber(redis.call('HGET', state, 'total') or '0')
  local old = redis.call('ZRANGEBYSCORE', lasts, '-inf', now - five_hours)
  for _, minute in ipairs(old) do
    total = total - tonumber(redis.call('HGET', minutes, minute) or '0')
    redis.call('HDEL', minutes, minute)
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', lasts, '-inf', now - five_hours) end
  if total < 0 then total = 0 end
  local month = month_of(now)
  local month_used = 0
  if tonumber(redis.call('HGET', state, 'month') or '-1') == month then month_used = tonumber(redis.call('HGET', state, 'month_used') or '0') end
  redis.call('HSET', state, 'reserved', reserved, 'total', total, 'month', month, 'month_used', month_used)
  local newest = redis.call('ZRANGE', lasts, -1, -1, 'WITHSCORES')
  local until_empty = 0
  if #newest > 0 then until_empty = tonumber(newest[2]) + five_hours - now end
  return { first = first, total = total, reserved = reserved, month_used = month_used, in_flight = redis.call('ZCARD', leases), until_empty = until_empty, wait = 0 }
end

local loaded = {}
for index = 1, subjects do loaded[index] = load(2 + (index - 1) * 5) end

local function reply(status, refused, reservation)
  local values = {status, refused, now, generation, reservation}
  for _, s in ipairs(loaded) do
    for _, value in ipairs({s.total, s.reserved, s.until_empty, s.wait, s.month_used, s.in_flight}) do values[#values + 1] = value end
  end
  return values
end

if ARGV[1] == 'peek' then return reply(0, 0, 0) end

local need = tonumber(ARGV[2])
local limits = {}
for index = 1, subjects do
  local base = 5 + (index - 1) * 3
  limits[index] = { five = tonumber(ARGV[base + 1]), month = tonumber(ARGV[base + 2]), concurrency = tonumber(ARGV[base + 3]) }
end

for index, s in ipairs(loaded) do
  local limit = limits[index]
  if limit.month >= 0 and s.month_used + s.reserved + need > limit.month then return reply(1, index, 0) end
  if limit.five >= 0 and s.total + s.reserved + need > limit.five then
    -- Reservations in flight count as usage recorded now: they leave the window 5 hours from now.
    local excess = s.total + s.reserved + need - limit.five
    s.wait = five_hours
    local freed = 0
    local buckets = redis.call('ZRANGE', KEYS[s.first + 2], 0, -1, 'WITHSCORES')
    for bucket = 1, #buckets, 2 do
      freed = freed + tonumber(redis.call('HGET', KEYS[s.first + 1], buckets[bucket]) or '0')
      if freed >= excess then
        s.wait = tonumber(buckets[bucket + 1]) + five_hours - now
        break
      end
    end
    return reply(2, index, 0)
  end
end
for index, s in ipairs(loaded) do
  if limits[index].concurrency >= 0 and s.in_flight >= limits[index].concurrency then return reply(3, index, 0) end
end

-- Never more than the headroom left, so a worst-case reservation never blocks a subject that has room.
local reservation = 0
for index, s in ipairs(loaded) do
  local limit = limits[index]
  if limit.five >= 0 or limit.month >= 0 then reservation = tonumber(ARGV[3]) end
end
for index, s in ipairs(loaded) do
  local limit = limits[index]
  if limit.five >= 0 then reservation = math.min(reservation, limit.five - s.total - s.reserved) end
  if limit.month >= 0 then reservation = math.min(reservation, limit.month - s.month_used - s.reserved) end
end
for _, s in ipairs(loaded) do
  s.reserved = s.reserved + reservation
  s.in_flight = s.in_flight + 1
  redis.call('HSET', KEYS[s.first], 'reserved', s.reserved)
  redis.call('ZADD', KEYS[s.first + 3], now + tonumber(ARGV[5]), ARGV[4])
  if reservation > 0 then redis.call('HSET', KEYS[s.first + 4], ARGV[4], reservation) end
end
return reply(0, 0, reservation)
