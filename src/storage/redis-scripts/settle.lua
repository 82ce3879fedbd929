-- Settles a batch of leases with the same subjects (the organization, and the key when it has caps of its own), each
-- once in each subject: frees its concurrency place and reservation and records what it spent, at Redis's time.
-- A lease settled twice (a retry after a call whose answer was lost) counts once: its first settle took it out of the
-- leases set. A lease that expired before its settle arrived (its instance stalled, or Redis was out of reach) freed
-- its place and reservation then, and moved to the expired set: its settle still counts what it spent, once.
-- KEYS: ready (the generation), then for each subject: state, minutes, lasts, leases, reservations, expired
--       (as admit.lua)
-- ARGV: the generation the leases were admitted in, then for each lease: its id, tokens spent (-1: nothing to record)
-- A lease of an earlier generation is dropped: Redis lost it with its data, and the state was rebuilt from the
-- ledger since, which holds the request's row (committed while Redis was away), so recording it would count it twice.
-- Its place goes too: renew.lua put it back, so that it counted while its request ran. So does its reservation, if a
-- renewal that was moving it into the current generation put that back just before this settle (sent with the lost
-- generation, before the renewal's answer came back).
-- Returns how many leases were settled in the first subject.
-- A lease named twice in one batch counts once, as it would in two.
local ids, spent_by = {}, {}
for index = 2, #ARGV, 2 do
  if not spent_by[ARGV[index]] then ids[#ids + 1] = ARGV[index] end
  spent_by[ARGV[index]] = tonumber(ARGV[index + 1])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  for first = 2, #KEYS, 6 do
    local state, leases, reservations = KEYS[first], KEYS[first + 3], KEYS[first + 4]
    call_chunked('ZREM', leases, ids, 1)
    local freed = 0
    for _, tokens in ipairs(call_chunked('HMGET', reservations, ids, 1)) do freed = freed + tonumber(tokens or '0') end
    if freed > 0 then
      call_chunked('HDEL', reservations, ids, 1)
      local reserved = tonumber(redis.call('HGET', state, 'reserved') or '0') - freed
      if reserved < 0 then reserved = 0 end
      redis.call('HSET', state, 'reserved', reserved)
    end
  end
  return 0
end
local now = now_ms()
local settled_count = 0
for first = 2, #KEYS, 6 do
  local state, minutes, lasts, leases, reservations, expired = KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4], KEYS[first + 5]
  local held = call_chunked('ZMSCORE', leases, ids, 1)
  local late = call_chunked('ZMSCORE', expired, ids, 1)
  local freed, spent, held_ids, late_ids = 0, 0, {}, {}
  for index, id in ipairs(ids) do
    local tokens = spent_by[id]
    if held[index] then
      held_ids[#held_ids + 1] = id
    elseif late[index] then
      late_ids[#late_ids + 1] = id
    else
      tokens = 0
    end
    if tokens > 0 then spent = spent + tokens end
  end
  if #held_ids > 0 then
    for _, tokens in ipairs(call_chunked('HMGET', reservations, held_ids, 1)) do freed = freed + tonumber(tokens or '0') end
    call_chunked('ZREM', leases, held_ids, 1)
    call_chunked('HDEL', reservations, held_ids, 1)
  end
  if #late_ids > 0 then call_chunked('ZREM', expired, late_ids, 1) end
  if first == 2 then settled_count = #held_ids + #late_ids end
  if freed > 0 or spent > 0 then
    local fields = redis.call('HMGET', state, 'reserved', 'total', 'month', 'month_used')
    local reserved = tonumber(fields[1] or '0') - freed
    if reserved < 0 then reserved = 0 end
    local total = tonumber(fields[2] or '0') + spent
    local month = month_of(now)
    local month_used = spent
    if tonumber(fields[3] or '-1') == month then month_used = tonumber(fields[4] or '0') + spent end
    redis.call('HSET', state, 'reserved', reserved, 'total', total, 'month', month, 'month_used', month_used)
    if spent > 0 then
      local minute = math.floor(now / 60000)
      redis.call('HINCRBY', minutes, minute, spent)
      redis.call('ZADD', lasts, 'GT', now, minute)
    end
  end
end
return settled_count
