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

Returns { admitted (1|0), now (Redis time in whole microseconds; with an explicit test time, that
time in ms as a string), then for each limit: flags
(1 allowed + 2 consumed), the counter's state before this request as stored ("a:b", false when
there is none) }. Everything a caller reports (remaining, reset, retry-after, used before) follows
from the state before, the time and the limit by the algorithms' view and decide, which the Node
side runs itself (src/limiter/algorithms mirror this file): computing and formatting them here
would spend the one Redis' CPU on what every replica can do on its own. --]]

local count_denied = ARGV[1] == '1'
local now, now_us = clock(ARGV[2])
local scope = ARGV[3]
local n = #KEYS

-- Limits of one request that share a key see each other's hits, in request order.
local working = nil
if n > 1 then working = {} end
local specs, nexts, raws, allowed = {}, {}, {}, {}
local admitted = true
local quota_total, quota_denied = 0, 0
for i = 1, n do
  local b = 3 + 6 * (i - 1)
  local key = KEYS[i]
  local s = { alg = ARGV[b + 1], limit = tonumber(ARGV[b + 2]), period = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]) }
  local state, raw
  if working ~= nil and working[key] ~= nil then
    state = working[key]
    raw = encode_state(state)
  else
    raw = redis.call('GET', key)
    state = decode_state(raw)
  end
  local ok, _, nxt = ALGORITHMS[s.alg].decide(state, s, tonumber(ARGV[b + 5]), now)
  specs[i], nexts[i], raws[i], allowed[i] = s, nxt, raw, ok
  local mode = ARGV[b + 6]
  if mode == 'enforce' then
    if not ok then admitted = false end
  elseif mode == 'quota' then
    quota_total = quota_total + 1
    if not ok then quota_denied = quota_denied + 1 end
  end
  if working ~= nil and (ok or (count_denied and nxt ~= nil)) then working[key] = nxt end
end
if scope ~= 'group' and quota_total > 0 and quota_denied == quota_total then admitted = false end

local out = { admitted and 1 or 0, now_us }
local write = scope ~= 'peek'
for i = 1, n do
  local nxt = nexts[i]
  local flags = 0
  if allowed[i] then flags = 1 end
  if write and nxt ~= nil and (count_denied or (admitted and allowed[i])) then
    flags = flags + 2
    local s = specs[i]
    write_state(KEYS[i], ALGORITHMS[s.alg], nxt, s, now)
  end
  out[2 * i + 1] = flags
  out[2 * i + 2] = raws[i] or false
end
return out
