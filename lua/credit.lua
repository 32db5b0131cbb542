--[[ credit.lua: puts units a region leased from the global budget into its regional allowance
(multi-region mode; the allowance is the `pool` algorithm in algorithms.lua), on the region's own
Redis, and sets when the region may ask the global Redis again. Preceded by algorithms.lua.

Why one script: replicas of the region spend the allowance concurrently (decide.lua); adding to
it must not lose their writes, and the times must be this Redis' own (the allowance expires on
this Redis' clock, however far the global Redis' clock is).

KEYS[1]  the allowance key; KEYS[2] the region's refill lock for it
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2]  units leased
ARGV[3]  ms the units stay usable (the lease TTL, or the rest of the window they were taken in;
         0 or less: that window has ended here, and the units are dropped)
ARGV[4]  what the global budget had left after the lease; ARGV[5] ms until it resets;
ARGV[6]  ms until the global budget could give one unit ("inf": never; 0 when units were leased)
ARGV[7]  the global Redis' time of the lease (ms): its window
ARGV[8]  window length in ms when the algorithm has windows ("" otherwise): units of another
         window than the new lease's are not kept
ARGV[9]  ms the refill lock is held for (no other replica of the region asks the global Redis
         before; 0 releases it)
ARGV[10] optional, ms until the units become usable: a fixed window's next window, leased ahead of
         its start (ARGV[3] counts from then). They are kept beside the current window's
         allowance, which they replace when their window begins (algorithms.lua pool.decode), and
         so are units of a later lease of that window that land before it begins here.

Returns the units the allowance holds now. --]]

local now = now_ms(ARGV[1])
local impl = ALGORITHMS.pool
local raw = redis.call('GET', KEYS[1])
local state = nil
if raw then state = impl.decode(raw, nil, now) end
local hold = math.floor(tonumber(ARGV[9]))
local function keep_lock()
  if hold > 0 then
    redis.call('SET', KEYS[2], '1', 'PX', hold)
  else
    redis.call('DEL', KEYS[2])
  end
end
if tonumber(ARGV[3]) <= 0 then
  -- Leased in a window that has ended by the time the units got here: spent now, they would be
  -- spent in the next window, whose allowance (perhaps credited already) stays as it is.
  keep_lock()
  if state ~= nil and now < state[2] then return state[1] end
  return 0
end
local units = tonumber(ARGV[2])
local taken = tonumber(ARGV[7])
local period = tonumber(ARGV[8])
local from = tonumber(ARGV[10] or '') or 0
local ttl = math.max(1, math.floor(tonumber(ARGV[3])))
local function same_window(a, b)
  return period == nil or window_start(a, period) == window_start(b, period)
end
local function store(nxt)
  redis.call('SET', KEYS[1], impl.encode(nxt), 'PX', ttl_ms(impl.ttl(nxt, nil, now)))
  keep_lock()
end
if state ~= nil and state[10] ~= nil and same_window(state[10], taken) then
  state[7] = state[7] + units
  store(state)
  return state[7]
end
if from > 0 then
  -- Nothing held yet: an allowance already spent, which the next window's replaces.
  if state == nil then state = { 0, now, 0, now, 0, 0 } end
  state[7], state[8], state[9], state[10] = units, now + from, now + from + ttl, taken
  store(state)
  return units
end
if state ~= nil and now < state[2] and same_window(state[6], taken) then
  units = units + state[1]
end
local retry = tonumber(ARGV[6])
if retry == nil or retry == INF then retry = tonumber(ARGV[5]) end
-- Once these units are spent, no new ones land before the global budget has one and the region
-- asks again: a denial says so (Retry-After), and replicas answer it locally until then; never
-- past the allowance's end (a window's next budget is leased when it starts).
local retry_at = now + math.min(ttl, math.max(retry, hold))
-- 0: the lease brought all that was asked (no hold): the global budget is not short, and a request
-- finding these units spent may wait for the refill under way (RegionalStore.unitsComing).
if hold <= 0 and tonumber(ARGV[2]) > 0 then retry_at = 0 end
local nxt = { units, now + ttl, tonumber(ARGV[4]), now + tonumber(ARGV[5]), retry_at, taken }
if state ~= nil and state[7] ~= nil then nxt[7], nxt[8], nxt[9], nxt[10] = state[7], state[8], state[9], state[10] end
store(nxt)
return units
