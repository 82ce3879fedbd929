-- Extends the leases this instance still holds, and puts back those Redis lost with its data (a restart without
-- persistence, a failover): their requests still run, so they still count against their caps.
-- KEYS: the generation (as admit.lua), then for each lease in each of its sets: the set, and where its leases go
--       when they expire (an organization's or key's expired set; a model's slots, which have none, name their own set)
-- ARGV: lease ms, then for each pair of KEYS: the lease id and the generation its settle belongs to
-- A lease that expired (its instance stalled past the lease's life) stays gone: its place and reservation were freed,
-- and its settle counts it from the expired set.
-- An organization's lease of an earlier generation moves into the current one, so that its settle records what its
-- request spent: the state was rebuilt from a ledger that does not hold the request's row (it is written after the
-- settle, which the instance sends after this).
-- Returns {the current generation ("" while there is none), the lease ids moved into it...}.
local current = redis.call('GET', KEYS[1]) or ''
local until_time = now_ms() + tonumber(ARGV[1])
local answer, seen = {current}, {}
for index = 2, #ARGV, 2 do
  local set, expired, id, generation = KEYS[index], KEYS[index + 1], ARGV[index], ARGV[index + 1]
  if expired == set or not redis.call('ZSCORE', expired, id) then
    redis.call('ZADD', set, until_time, id)
    if expired ~= set and current ~= '' and generation ~= current and not seen[id] then
      seen[id] = true
      answer[#answer + 1] = id
    end
  end
end
return answer
