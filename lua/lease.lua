--[[ lease.lua: takes up to N units of one limit's budget, for a replica to serve a hot key
locally (a lease). Units are taken before they are served, so a fleet of replicas never admits
more than the limit. Preceded by algorithms.lua when loaded.

Why one script: reading what remains and taking it must not interleave with other requests.

KEYS[1]  counter key
KEYS[2]  optional (multi-region: a region leasing from the global budget): the hash of the
         regions' demand for this counter, field = region, value = "units per second:ms seen"
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2..6]  algorithm (see spec_from), limit, period ms, burst, units wanted
ARGV[7..9]  with KEYS[2]: region, its demand in units per second, ms after which a region's
         demand is stale. A region then gets at most its share of the demand (of the regions
         seen lately) of what remains, at least one unit: leases shrink as the budget runs out, so
         the last units are not stranded in a region that does not need them, and a region whose
         demand rises gets its share at its next lease.
ARGV[10] with KEYS[2], optional: a fixed window's start (ms): units of that window only. The
         window after the current one is leased ahead of its start (its count kept beside the
         current one's: algorithms.lua fixed.take_ahead), so that a region has its units when it
         begins; any other window than these two gets nothing.
ARGV[7]  without KEYS[2], optional: at most this share of what remains, rounded up (a replica
         leasing from its region's allowance leaves the rest to the others, and to requests its
         lease cannot serve, while the region's refill is on the way).
ARGV[8]  without KEYS[2], optional: at least this many units, or none (a lease too small for a
         request serves none of it, and strands units other replicas could use).

Returns { units granted, now, remaining after, reset ms, retry-after ms for one unit ("inf" =
never; 0 when units were granted), and for a regional allowance the ms its units stay usable and
1 when its last refill brought all it asked for (credit.lua), else 0 }.
Unused units go back through refund.lua. --]]

local now = now_ms(ARGV[1])
local s = spec_from(ARGV[2], ARGV[3], ARGV[4], ARGV[5])
local wanted = tonumber(ARGV[6])
local impl = s.impl
local state = read_counter(KEYS[1], s, now)
local ahead = false
local target = nil
if KEYS[2] ~= nil then target = tonumber(ARGV[10] or '') end
if target ~= nil then
  local start = window_start(now, s.period)
  if target == start + s.period and (impl == ALGORITHMS.fixed_window or impl == ALGORITHMS.fixed_window_hash) then
    ahead = true
  elseif target ~= start then
    return { 0, num(now), 0, num(start + s.period - now), num(math.max(1, target - now)) }
  end
end
-- Units of the window starting at `target` leased so far: beside the current window's count, or
-- in that window's hash (window hashes).
local function taken_ahead()
  if impl.windows then return tonumber(redis.call('HGET', window_hash(s, target), KEYS[1]) or '0') or 0 end
  local _, _, left = impl.take_ahead(state, s, 0, now)
  return s.limit - left
end
local remaining
if ahead then
  remaining = math.max(0, s.limit - taken_ahead())
else
  remaining = impl.view(state, s, now)
end
local grant = math.min(wanted, remaining)
if KEYS[2] == nil and ARGV[7] ~= nil then
  grant = math.min(grant, math.ceil(remaining * tonumber(ARGV[7]) - 1e-6))
  local least = tonumber(ARGV[8] or 1)
  if grant < least then grant = math.min(least, remaining) end
  if grant < least then grant = 0 end
end
if KEYS[2] ~= nil and remaining > 0 then
  local rate, stale = tonumber(ARGV[8]), tonumber(ARGV[9])
  redis.call('HSET', KEYS[2], ARGV[7], num(rate) .. ':' .. num(now))
  redis.call('PEXPIRE', KEYS[2], math.ceil(stale * 2))
  local seen = redis.call('HGETALL', KEYS[2])
  local total = 0
  for i = 1, #seen, 2 do
    local r, at = string.match(seen[i + 1], '^([^:]+):(.+)$')
    if now - tonumber(at) <= stale then total = total + tonumber(r) end
  end
  if total > rate and rate >= 0 then
    grant = math.min(grant, math.max(1, math.floor(remaining * rate / total + 1e-6)))
  end
end
if ahead then
  local reset = target + s.period - now
  if grant <= 0 then return { 0, num(now), num(remaining), num(reset), num(reset) } end
  if impl.windows then
    -- The hash's expiry as keep_window would set it; the current window's hash stays.
    local h = window_hash(s, target)
    redis.call('HSET', h, KEYS[1], string.format('%d', s.limit - remaining + grant))
    if redis.call('PTTL', h) == -1 then redis.call('PEXPIRE', h, ttl_ms(target + 2 * s.period - now)) end
  else
    local _, nxt = impl.take_ahead(state, s, grant, now)
    write_counter(KEYS[1], s, nxt, now)
  end
  return { grant, num(now), num(remaining - grant), num(reset), num(0) }
end
local retry = 0
if grant > 0 then
  local allowed, _, nxt = impl.decide(state, s, grant, now)
  if allowed and nxt ~= nil then
    write_counter(KEYS[1], s, nxt, now)
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
local reply = { grant, num(now), num(after), num(reset), num(retry) }
if impl == ALGORITHMS.pool and state ~= nil then
  reply[6] = num(state[2] - now)
  reply[7] = state[5] == 0 and 1 or 0
end
return reply
