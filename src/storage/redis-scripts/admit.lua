-- Checks the quotas and the concurrency cap of a batch of requests with the same subjects (their organization, and
-- their key when the key has caps of its own), and for each one that fits reserves tokens and takes a concurrency
-- lease in every subject: one request after the other, as if each had its own call, all in one atomic step across
-- every instance, on Redis's clock. A batch costs each subject's reads and writes once, however many requests it holds.
-- KEYS: ready (the generation: set when the state was rebuilt from the ledger, missing after Redis lost its data),
--       then for each subject: state (hash), minutes (hash minute -> tokens), lasts (zset minute -> latest time),
--       leases (zset lease -> expiry), reservations (hash lease -> tokens), expired (zset lease -> expiry: leases that
--       expired before they were settled, kept so that their settle still counts what they spent)
-- ARGV: mode ("admit" or "peek"), lease milliseconds, then for each subject: 5-hour limit, month limit, max
--       concurrency, requests per minute (-1: none), then for each request: need, wanted reservation, lease id
-- Returns one answer a request (peek: one): {status, subject that refused (1 the organization, 2 the key), now,
--   generation, reservation, then for each subject: window used, reserved, ms until the window is empty, ms to wait,
--   month used, in flight, what the requests-per-minute bucket holds and since when (-1: never used; see
--   src/modules/admission/request-rate.ts, whose arithmetic this repeats)}; status 0 admitted (or peeked), 1 month
--   quota, 2 5-hour quota, 3 concurrency, 4 requests per minute, 9 not rebuilt
local now = now_ms()
local generation = redis.call('GET', KEYS[1])
local width = 6
local subjects = (#KEYS - 1) / width
local limit_width = 4
local first_request = 3 + subjects * limit_width
if not generation then
  local answers = {}
  for index = first_request, math.max(first_request, #ARGV), 3 do answers[#answers + 1] = {9, 0, now} end
  return answers
end
local five_hours = 18000000
-- A lease that expired unsettled is remembered this long: as long as an instance retries a settle.
local expired_kept_ms = 600000

-- Brings one subject's state up to now: expired leases and minutes that left the window are dropped.
local function load(first)
  local state, minutes, lasts, leases, reservations, expired_set = KEYS[first], KEYS[first + 1], KEYS[first + 2], KEYS[first + 3], KEYS[first + 4], KEYS[first + 5]
  local fields = redis.call('HMGET', state, 'reserved', 'total', 'month', 'month_used', 'requests_held', 'requests_at')
  local reserved = tonumber(fields[1] or '0')
  local total = tonumber(fields[2] or '0')
  -- Leases of instances that died (or of requests that never settled) expire with their reservations.
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'WITHSCORES')
  if #expired > 0 then
    local ids, moved = {}, {}
    for index = 1, #expired, 2 do
      ids[#ids + 1] = expired[index]
      moved[#moved + 1] = expired[index + 1]
      moved[#moved + 1] = expired[index]
    end
    for _, tokens in ipairs(call_chunked('HMGET', reservations, ids, 1)) do reserved = reserved - tonumber(tokens or '0') end
    call_chunked('HDEL', reservations, ids, 1)
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
    call_chunked('ZADD', expired_set, moved, 2)
    redis.call('ZREMRANGEBYSCORE', expired_set, '-inf', now - expired_kept_ms)
  end
  if reserved < 0 then reserved = 0 end
  -- A minute leaves the window 5 hours after the latest usage in it.
  local old = redis.call('ZRANGEBYSCORE', lasts, '-inf', now - five_hours)
  if #old > 0 then
    for _, tokens in ipairs(call_chunked('HMGET', minutes, old, 1)) do total = total - tonumber(tokens or '0') end
    call_chunked('HDEL', minutes, old, 1)
    redis.call('ZREMRANGEBYSCORE', lasts, '-inf', now - five_hours)
  end
  if total < 0 then total = 0 end
  local month = month_of(now)
  local month_used = 0
  if tonumber(fields[3] or '-1') == month then month_used = tonumber(fields[4] or '0') end
  local newest = redis.call('ZRANGE', lasts, -1, -1, 'WITHSCORES')
  local until_empty = 0
  if #newest > 0 then until_empty = tonumber(newest[2]) + five_hours - now end
  return { first = first, total = total, reserved = reserved, month = month, month_used = month_used,
    in_flight = redis.call('ZCARD', leases), until_empty = until_empty, wait = 0, leases = {}, reservations = {},
    requests_held = tonumber(fields[5] or '0'), requests_at = tonumber(fields[6] or '-1'), requests_taken = false }
end

local loaded = {}
for index = 1, subjects do loaded[index] = load(2 + (index - 1) * width) end

local function answer(status, refused, reservation)
  local values = {status, refused, now, generation, reservation}
  for _, s in ipairs(loaded) do
    -- Written as text: a number in a script's answer reaches the client as an integer, its fraction cut off.
    for _, value in ipairs({s.total, s.reserved, s.until_empty, s.wait, s.month_used, s.in_flight,
      string.format('%.17g', s.requests_held), s.requests_at}) do values[#values + 1] = value end
  end
  return values
end

local function save()
  for _, s in ipairs(loaded) do
    redis.call('HSET', KEYS[s.first], 'reserved', s.reserved, 'total', s.total, 'month', s.month, 'month_used', s.month_used)
    if s.requests_taken then
      redis.call('HSET', KEYS[s.first], 'requests_held', string.format('%.17g', s.requests_held), 'requests_at', s.requests_at)
    end
    if #s.leases > 0 then call_chunked('ZADD', KEYS[s.first + 3], s.leases, 2) end
    if #s.reservations > 0 then call_chunked('HSET', KEYS[s.first + 4], s.reservations, 2) end
  end
end

if ARGV[1] == 'peek' then
  save()
  return {answer(0, 0, 0)}
end

local limits = {}
for index = 1, subjects do
  local base = 2 + (index - 1) * limit_width
  limits[index] = { five = tonumber(ARGV[base + 1]), month = tonumber(ARGV[base + 2]), concurrency = tonumber(ARGV[base + 3]),
    per_minute = tonumber(ARGV[base + 4]) }
end
local expiry = now + tonumber(ARGV[2])

-- What a subject's requests-per-minute bucket holds now: full until first used, refilled at its rate, never past a
-- minute's worth.
local function requests_held(s, per_minute)
  if s.requests_at < 0 then return per_minute end
  local elapsed = now - s.requests_at
  if elapsed < 0 then elapsed = 0 end
  return math.min(per_minute, s.requests_held + elapsed * per_minute / 60000)
end
-- A refill falls short of a whole request by a rounding error at most: it still counts as one.
local slack = 1e-6

-- One request: refused (with its status and subject), or admitted with its reservation and lease taken.
local function admit(need, wanted, lease)
  for index, s in ipairs(loaded) do
    local limit = limits[index]
    if limit.month >= 0 and s.month_used + s.reserved + need > limit.month then return answer(1, index, 0) end
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
      local refused = answer(2, index, 0)
      s.wait = 0
      return refused
    end
    if limit.per_minute >= 0 then
      local held = requests_held(s, limit.per_minute)
      if held + slack < 1 then
        s.wait = (1 - held) * 60000 / limit.per_minute
        local refused = answer(4, index, 0)
        s.wait = 0
        return refused
      end
    end
  end
  for index, s in ipairs(loaded) do
    if limits[index].concurrency >= 0 and s.in_flight >= limits[index].concurrency then return answer(3, index, 0) end
  end
  -- Never more than the headroom left, so a worst-case reservation never blocks a subject that has room.
  local reservation = 0
  for index, s in ipairs(loaded) do
    local limit = limits[index]
    if limit.five >= 0 or limit.month >= 0 then reservation = wanted end
  end
  for index, s in ipairs(loaded) do
    local limit = limits[index]
    if limit.five >= 0 then reservation = math.min(reservation, limit.five - s.total - s.reserved) end
    if limit.month >= 0 then reservation = math.min(reservation, limit.month - s.month_used - s.reserved) end
  end
  for index, s in ipairs(loaded) do
    local per_minute = limits[index].per_minute
    if per_minute >= 0 then
      s.requests_held = requests_held(s, per_minute) - 1
      s.requests_at = math.max(s.requests_at, now)
      s.requests_taken = true
    end
    s.reserved = s.reserved + reservation
    s.in_flight = s.in_flight + 1
    s.leases[#s.leases + 1] = expiry
    s.leases[#s.leases + 1] = lease
    if reservation > 0 then
      s.reservations[#s.reservations + 1] = lease
      s.reservations[#s.reservations + 1] = reservation
    end
  end
  return answer(0, 0, reservation)
end

local answers = {}
for index = first_request, #ARGV, 3 do
  answers[#answers + 1] = admit(tonumber(ARGV[index]), tonumber(ARGV[index + 1]), ARGV[index + 2])
end
save()
return answers
