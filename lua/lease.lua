--[[ lease.lua: takes up to N units of one limit's budget, for a replica to serve a hot key
locally (a lease). Units are taken before they are served, so a fleet of replicas never admits
more than the limit. Preceded by algorithms.lua when loaded.

Why one script: reading what remains and taking it must not interleave with other requests.

KEYS[1]  counter key
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2..6]  algorithm, limit, period ms, burst, units wanted

Returns { units granted, now, remaining after, reset ms, retry-after ms for one unit ("inf" =
never; 0 when units were granted) }. Unused units go back through refund.lua. --]]

local now = now_ms(ARGV[1])
local s = { alg = ARGV[2], limit = tonumber(ARGV[3]), period = tonumber(ARGV[4]), burst = tonumber(ARGV[5]) }
local wanted = tonumber(ARGV[6])
local impl = ALGORITHMS[s.alg]
local state = decode_for(impl, redis.call('GET', KEYS[1]), s, now)
local remaining = impl.view(state, s, now)
local grant = math.min(wanted, remaining)
local retry = 0
if grant > 0 then
  local allowed, _, nxt = impl.decide(state, s, grant, now)
  if allowed and nxt ~= nil then
    write_state(KEYS[1], impl, nxt, s, now)
    state = nxt
  else
    grant = 0
  end
end
if grant == 0 then
  local _, r = impl.decide(state, s, 1, now)
  retry = r
end
local after, reset = impl.view(state, s, now)
return { grant, num(now), num(after), num(reset), num(retry) }
