--[[ absorb.lua: writes back hits that a replica admitted from its local fallback while Redis was
unreachable, so the shared counters reflect them once Redis is back. Preceded by
algorithms.lua when loaded.

Why one script: each counter's read-modify-write must not interleave with other requests.

KEYS[i]  counter key of entry i
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2+6(i-1) .. 7+6(i-1)]  entry i: algorithm, limit, period ms, burst, hits, time in ms at which
         the hits were admitted (replica clock)

Returns the number of counters changed (hits of windows that have closed are dropped). --]]

local now = now_ms(ARGV[1])
local changed = 0
for i = 1, #KEYS do
  local b = 1 + 6 * (i - 1)
  local s = { alg = ARGV[b + 1], limit = tonumber(ARGV[b + 2]), period = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]) }
  local hits, at = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local impl = ALGORITHMS[s.alg]
  local state = decode_state(redis.call('GET', KEYS[i]))
  local nxt = impl.absorb(state, s, hits, at, now)
  if nxt ~= nil and nxt ~= state then
    write_state(KEYS[i], impl, nxt, s, now)
    changed = changed + 1
  end
end
return changed
