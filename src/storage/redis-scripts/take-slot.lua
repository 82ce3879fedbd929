-- Takes one of a model's upstream slots, shared by every instance: KEYS[1] (zset lease -> expiry);
-- ARGV: limit, lease id, lease ms. Returns 1 if taken, 0 if all are in use.
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  return 1
end
return 0
