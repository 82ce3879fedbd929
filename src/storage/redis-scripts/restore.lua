-- Replaces an organization's recorded usage with what the ledger holds (rebuild, reset); leases in flight stay.
-- KEYS: state, minutes, lasts
-- ARGV: month, month tokens, then (minute, tokens, latest time) for each minute in the window
redis.call('DEL', KEYS[2], KEYS[3])
local total = 0
for index = 3, #ARGV, 3 do
  redis.call('HINCRBY', KEYS[2], ARGV[index], ARGV[index + 1])
  redis.call('ZADD', KEYS[3], 'GT', ARGV[index + 2], ARGV[index])
  total = total + tonumber(ARGV[index + 1])
end
redis.call('HSET', KEYS[1], 'total', total, 'month', ARGV[1], 'month_used', ARGV[2])
return total
