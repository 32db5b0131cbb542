--[[ decide.lua: decides every limit of one request at once (on Redis Cluster: every limit of
one hash-slot group of the request). Preceded by algorithms.lua when loaded.

Why one script: reading all counters, deciding, and writing only when the request is admitted
must happen with no other request in between; with separate reads and writes, concurrent sluice
replicas would each see room and together admit more than the limit.

KEYS[i]  counter key of limit i
ARGV[1]  "1": COUNT_DENIED_HITS (upstream counting: window algorithms count every hit)
ARGV[2]  time in ms, for tests only; "" (always in production) uses redis.call('TIME')
ARGV[3]  "request": apply the whole-request rule (denied if an enforced limit says no, or if it
         has quota limits and all say no); "group": consume unless an enforced limit of this group
         says no. The caller then applies the request rule across groups and gives back what
         consumed groups took (refund.lua) when the request is denied. "peek": decide as
         "request" but write nothing (the explain endpoint).
ARGV[4+6(i-1) .. 9+6(i-1)]  limit i: algorithm, limit, period ms, burst, hits, mode
         (enforce | shadow | quota)

Returns { admitted (1|0), now, then for each limit: allowed (1|0), consumed (1|0), remaining,
reset ms, retry-after ms ("inf" = never), used before, remaining before, reset before }.
Numbers other than the flags are strings (%.17g): Redis would truncate Lua floats. --]]

local count_denied = ARGV[1] == '1'
local now = now_ms(ARGV[2])
local whole_request = ARGV[3] == 'request' or ARGV[3] == 'peek'
local dry_run = ARGV[3] == 'peek'

local specs, modes, hits = {}, {}, {}
for i = 1, #KEYS do
  local b = 3 + 6 * (i - 1)
  specs[i] = { alg = ARGV[b + 1], limit = tonumber(ARGV[b + 2]), period = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]) }
  hits[i] = tonumber(ARGV[b + 5])
  modes[i] = ARGV[b + 6]
end

-- Limits of one request that share a key see each other's hits, in request order.
local working, before, verdicts = {}, {}, {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local state
  if working[key] ~= nil then state = working[key] else state = decode_state(redis.call('GET', key)) end
  before[i] = state
  local allowed, retry, nxt = ALGORITHMS[specs[i].alg].decide(state, specs[i], hits[i], now)
  verdicts[i] = { allowed = allowed, retry = retry, next = nxt }
  local applies = allowed
  if count_denied then applies = nxt ~= nil end
  if applies then working[key] = nxt end
end

local admitted = true
local quota_total, quota_denied = 0, 0
for i = 1, #KEYS do
  if modes[i] == 'enforce' and not verdicts[i].allowed then admitted = false end
  if modes[i] == 'quota' then
    quota_total = quota_total + 1
    if not verdicts[i].allowed then quota_denied = quota_denied + 1 end
  end
end
if whole_request and quota_total > 0 and quota_denied == quota_total then admitted = false end

local out = { admitted and 1 or 0, num(now) }
for i = 1, #KEYS do
  local v, s = verdicts[i], specs[i]
  local impl = ALGORITHMS[s.alg]
  local consume = not dry_run and v.next ~= nil and (count_denied or (admitted and v.allowed))
  local after = before[i]
  if consume then
    after = v.next
    write_state(KEYS[i], impl, v.next, s, now)
  end
  local remaining, reset = impl.view(after, s, now)
  local remaining0, reset0, used0 = impl.view(before[i], s, now)
  local n = #out
  out[n + 1] = v.allowed and 1 or 0
  out[n + 2] = consume and 1 or 0
  out[n + 3] = num(remaining)
  out[n + 4] = num(reset)
  out[n + 5] = num(v.retry)
  out[n + 6] = num(used0)
  out[n + 7] = num(remaining0)
  out[n + 8] = num(reset0)
end
return out
