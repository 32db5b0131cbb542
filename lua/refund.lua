--[[ refund.lua: gives back hits that decide.lua consumed in one hash-slot group of a Redis
Cluster request that another group then denied, so the request stays all-or-nothing. Preceded by
algorithms.lua when loaded.

Why one script: the read-modify-write of each counter must not interleave with other requests.

KEYS[i]  counter key of limit i (only limits whose hits were consumed)
ARGV[1]  time in ms when decide.lua ran (its return value `now`), to find the window it wrote
ARGV[2]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[3+5(i-1) .. 7+5(i-1)]  limit i: algorithm, limit, period ms, burst, hits

Returns the number of counters given back to (a counter that expired meanwhile needs nothing). --]]

local decided_at = tonumber(ARGV[1])
local now = now_ms(ARGV[2])
local refunded = 0
for i = 1, #KEYS do
  local b = 2 + 5 * (i - 1)
  local s = { alg = ARGV[b + 1], limit = tonumber(ARGV[b + 2]), period = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]) }
  local hits = tonumber(ARGV[b + 5])
  local state = decode_state(redis.call('GET', KEYS[i]))
  if state then
    local impl = ALGORITHMS[s.alg]
    write_state(KEYS[i], impl, impl.refund(state, s, hits, decided_at, now), s, now)
    refunded = refunded + 1
  end
end
return refunded
