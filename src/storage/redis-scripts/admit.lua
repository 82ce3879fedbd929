-- Checks both quotas and the concurrency cap of one organization, reserves tokens and takes a concurrency lease,
-- all in one step across every instance, on Redis's clock.
-- KEYS: state (hash), minutes (hash minute -> tokens), lasts (zset minute -> latest time), leases (zset lease ->
--       expiry), reservations (hash lease -> tokens), ready (the generation: set when the state was rebuilt from the
--       ledger, missing after Redis lost its data)
-- ARGV: mode ("admit" or "peek"), need, 5-hour limit, month limit, max concurrency (-1: none), wanted reservation,
--       lease id, lease milliseconds
-- Returns: {status, now, window used, reserved, reservation, ms until the window is empty, ms to wait, month used,
--           in flight, generation}; status 0 admitted (or peeked), 1 month quota, 2 5-hour quota, 3 concurrency,
--           9 not rebuilt
local state, minutes, lasts, leases, reservations = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now = now_ms()
local generation = redis.call('GET', KEYS[6])
if not generation then return {9, now} end
local five_hours = 18000000

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

local in_flight = redis.call('ZCARD', leases)
local newest = redis.call('ZRANGE', lasts, -1, -1, 'WITHSCORES')
local until_empty = 0
if #newest > 0 then until_empty = tonumber(newest[2]) + five_hours - now end
if ARGV[1] == 'peek' then return {0, now, total, reserved, 0, until_empty, 0, month_used, in_flight, generation} end

local need = tonumber(ARGV[2])
local five_limit, month_limit, max_concurrency = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if month_limit >= 0 and month_used + reserved + need > month_limit then
  return {1, now, total, reserved, 0, until_empty, 0, month_used, in_flight, generation}
end
if five_limit >= 0 and total + reserved + need > five_limit then
  -- Reservations in flight count as usage recorded now: they leave the window 5 hours from now.
  local excess = total + reserved + need - five_limit
  local wait = five_hours
  local freed = 0
  local buckets = redis.call('ZRANGE', lasts, 0, -1, 'WITHSCORES')
  for index = 1, #buckets, 2 do
    freed = freed + tonumber(redis.call('HGET', minutes, buckets[index]) or '0')
    if freed >= excess then
      wait = tonumber(buckets[index + 1]) + five_hours - now
      break
    end
  end
  return {2, now, total, reserved, 0, until_empty, wait, month_used, in_flight, generation}
end
if max_concurrency >= 0 and in_flight >= max_concurrency then
  return {3, now, total, reserved, 0, until_empty, 0, month_used, in_flight, generation}
end

-- Never more than the headroom left, so a worst-case reservation never blocks an organization that has room.
local reservation = 0
if five_limit >= 0 or month_limit >= 0 then
  reservation = tonumber(ARGV[6])
  if five_limit >= 0 then reservation = math.min(reservation, five_limit - total - reserved) end
  if month_limit >= 0 then reservation = math.min(reservation, month_limit - month_used - reserved) end
end
reserved = reserved + reservation
redis.call('HSET', state, 'reserved', reserved)
redis.call('ZADD', leases, now + tonumber(ARGV[8]), ARGV[7])
if reservation > 0 then redis.call('HSET', reservations, ARGV[7], reservation) end
return {0, now, total, reserved, reservation, until_empty, 0, month_used, in_flight + 1, generation}
