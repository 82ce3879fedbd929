-- Settles a lease once in each of its subjects (the organization, and the key when it has caps of its own): frees its
-- concurrency place and reservation and records what was spent, at Redis's time.
-- KEYS: settled (a marker that makes a retry harmless), ready (the generation), then for each subject: state,
--       minutes, lasts, leases, reservations (as admit.lua)
-- ARGV: lease id, tokens spent (-1: nothing to record), the generation the lease was admitted in
-- A lease of an earlier generation is dropped: Redis lost it with its data, and the state was rebuilt from the
-- ledger since, which holds the request's row (committed while Redis was away), so recording it would count it twice.
if redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', 600000) then return 0 end
local now = now_ms()
local spent = tonumber(ARGV[2])
for first = 3, #KEYS, 5 do
  local state, minutes, lasts, leases, reservations = KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4]
  redis.call('ZREM', leases, ARGV[1])
  local reservation = redis.call('HGET', reservations, ARGV[1])
  if reservation then
    redis.call('HDEL', reservations, ARGV[1])
    local reserved = tonumber(redis.call('HGET', state, 'reserved') or '0') - tonumber(reservation)
    if reserved < 0 then reserved = 0 end
    redis.call('HSET', state, 'reserved', reserved)
  end
  if spent > 0 then
    local minute = math.floor(now / 60000)
    redis.call('HINCRBY', minutes, minute, spent)
    redis.call('ZADD', lasts, 'GT', now, minute)
    redis.call('HINCRBY', state, 'total', spent)
    local month = month_of(now)
    if tonumber(redis.call('HGET', state, 'month') or '-1') == month then
      redis.call('HINCRBY', state, 'month_used', spent)
    else
      redis.call('HSET', state, 'month', month, 'month_used', spent)
    end
  end
end
return 1
