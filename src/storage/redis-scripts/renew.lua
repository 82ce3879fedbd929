-- Extends the leases this instance still holds: KEYS[i] is the sorted set of ARGV[i + 1]; ARGV[1] the lease ms.
-- Only leases that still exist are extended (XX): one that expired stays gone.
local now = now_ms()
local until_time = now + tonumber(ARGV[1])
for index = 1, #KEYS do
  redis.call('ZADD', KEYS[index], 'XX', until_time, ARGV[index + 1])
end
return #KEYS
