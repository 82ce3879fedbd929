-- Extends the leases this instance still holds, and puts back those Redis lost with its data (a restart without
-- persistence, a failover): their requests still run, so they still count against their caps.
-- KEYS: the generation (as admit.lua), then for each lease in each of its sets, four keys: the set; where its leases
--       go when they expire (an organization's or key's expired set); the subject's state and reservations (as
--       admit.lua). A model's slots, which have none of the last three, name their own set in their place.
-- ARGV: lease ms, then for each four KEYS: the lease id, the generation its settle belongs to, and its reservation
-- A lease that expired (its instance stalled past the lease's life) stays gone: its place and reservation were freed,
-- and its settle counts it from the expired set.
-- An organization's lease of an earlier generation moves into the current one, so that its settle records what its
-- request spent: the state was rebuilt from a ledger that does not hold the request's row (it is written after the
-- settle, which the instance sends after this). Its reservation comes back with it, in each of its subjects, unless
-- the subject still holds it (Redis kept its data): the request may still spend it, as admit.lua counted it.
-- Returns {the current generation ("" while there is none), the lease ids moved into it...}.
local current = redis.call('GET', KEYS[1]) or ''
local until_time = now_ms() + tonumber(ARGV[1])
local answer, seen = {current}, {}
local lease = 0
for index = 2, #KEYS, 4 do
  local set, expired, state, reservations = KEYS[index], KEYS[index + 1], KEYS[index + 2], KEYS[index + 3]
  local argument = 2 + lease * 3
  local id, generation, reservation = ARGV[argument], ARGV[argument + 1], tonumber(ARGV[argument + 2])
  lease = lease + 1
  if expired == set or not redis.call('ZSCORE', expired, id) then
    redis.call('ZADD', set, until_time, id)
    if expired ~= set and current ~= '' and generation ~= current then
      if reservation > 0 and redis.call('HSETNX', reservations, id, reservation) == 1 then
        redis.call('HINCRBY', state, 'reserved', reservation)
      end
      if not seen[id] then
        seen[id] = true
        answer[#answer + 1] = id
      end
    end
  end
end
return answer
