-- Gives model slots taken while the model had no limit a lease each: KEYS[1] (zset lease -> expiry);
-- ARGV: lease ms, then the lease ids. They are added whatever the limit: their requests are already under way.
local until_time = now_ms() + tonumber(ARGV[1])
for index = 2, #ARGV do
  redis.call('ZADD', KEYS[1], until_time, ARGV[index])
end
return #ARGV - 1
