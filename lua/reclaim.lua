--[[ reclaim.lua: takes back the units of a regional allowance (multi-region mode) that is about
to expire, for the replica to give them back to the global budget (refund.lua there). An
allowance that a later lease extended is left alone. Preceded by algorithms.lua.

Why one script: the units read must be exactly the units removed, while the region's replicas
keep spending.

KEYS[1]  the allowance key
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2]  ms: an allowance expiring within this is taken back
ARGV[3]  optional, "1" for a window's allowance: spent, with its window's global budget spent too
         (nothing left there at the last lease), it is kept, spent, until the window ends

Returns { units taken back (0 when none), the global Redis' time of its last lease }. --]]

local now = now_ms(ARGV[1])
local raw = redis.call('GET', KEYS[1])
if not raw then return { 0, 0 } end
local impl = ALGORITHMS.pool
local state = impl.decode(raw, nil, now)
if state[2] - now > tonumber(ARGV[2]) then return { 0, 0 } end
-- Spent: nothing to give back, and the allowance, kept until it expires, still says so (a refill
-- meanwhile may extend it); deleted, it would send the key's next request to wait for a lease.
-- A window's whose global budget is spent too says so until the window ends (its reset): a wait
-- for a lease then would bring nothing (a refill, asked in the background, still may).
if state[1] <= 0 then
  if ARGV[3] == '1' and state[7] == nil and state[3] <= 0 and state[4] > state[2] then
    redis.call('PEXPIRE', KEYS[1], ttl_ms(state[4] - now))
  end
  return { 0, 0 }
end
local back = { math.max(0, math.floor(state[1])), num(state[6]) }
if state[7] ~= nil then
  -- The next window's units, leased ahead, stay.
  state[1] = 0
  redis.call('SET', KEYS[1], impl.encode(state), 'PX', ttl_ms(impl.ttl(state, nil, now)))
else
  redis.call('DEL', KEYS[1])
end
return back
