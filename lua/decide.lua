--[[ decide.lua: decides every limit of a request at once (on Redis Cluster: every limit of one
hash-slot group of a request), for one request or a batch of requests that arrived together (each
decided on its own, in order, as if they had come one after the other). Preceded by
algorithms.lua when loaded.

Why one script: reading all counters, deciding, and writing only when the request is admitted
must happen with no other request in between; with separate reads and writes, concurrent sluice
replicas would each see room and together admit more than the limit. Why batches: Redis' cost per
call (dispatch, TIME, the reply) and the client's are paid once for all the requests of a batch.

KEYS     the counter keys of request 1's limits, then request 2's, ...
ARGV[1]  "1": COUNT_DENIED_HITS (upstream counting: window algorithms count every hit)
ARGV[2]  time in ms, for tests only; "" (always in production) uses redis.call('TIME')
ARGV[3]  "request": apply the whole-request rule (denied if an enforced limit says no, or if it
         has quota limits and all say no); "group": consume unless an enforced limit of this group
         says no. The caller then applies the request rule across groups and gives back what
         consumed groups took (refund.lua) when the request is denied. "peek": decide as
         "request" but write nothing (the explain endpoint).
ARGV[4]  number of requests
then per request: its number of limits n, then per limit: its spec "algorithm:limit:period
         ms:burst:mode" (mode enforce | shadow | quota; one text, parsed once: see spec_of), hits

Returns { now (Redis time in whole microseconds; with an explicit test time, that time in ms as a
string), then per request: admitted (1|0), then per limit: flags (1 allowed + 2 consumed), the
counter's state before this request as stored ("a:b", false when there is none) }; a request
that failed (it wrote nothing) is -1 and the error message instead.
Everything a caller reports (remaining, reset, retry-after, used before) follows from the state
before, the time and the limit by the algorithms' view and decide, which the Node side runs itself
(src/limiter/algorithms mirror this file): computing and formatting them here would spend the one
Redis' CPU on what every replica can do on its own. --]]

local count_denied = ARGV[1] == '1'
local now, now_reply = clock(ARGV[2])
local scope = ARGV[3]
local write = scope ~= 'peek'
local out = { now_reply }
local specs, nexts, raws, allowed, payloads, ttls, befores, unsure = {}, {}, {}, {}, {}, {}, {}, {}

-- The counters of a request's n limits, KEYS[k + 1 ..], as stored (false: none). One MGET reads
-- them all: each redis.call costs Redis about what deciding a limit does. But MGET reads a key of
-- another type as missing, so a missing one is `unsure`: peek reads it again with GET, which fails
-- on another type (WRONGTYPE); a write creates it with NX (see decide_request). unpack's stack
-- bounds one MGET.
local function read_counters(n, k)
  local stored
  if n == 1 or n > 1000 then
    stored = {}
    for i = 1, n do
      stored[i] = redis.call('GET', KEYS[k + i])
      unsure[i] = false
    end
    return stored
  end
  stored = redis.call('MGET', unpack(KEYS, k + 1, k + n))
  for i = 1, n do
    unsure[i] = false
    if not stored[i] then
      if write then unsure[i] = true else stored[i] = redis.call('GET', KEYS[k + i]) end
    end
  end
  return stored
end

-- One request: its n limits are KEYS[k + 1 ..] and ARGV[a ..] (2 fields each). Appends its answer
-- to `out`. Everything that can fail (a key of another type, a bad number) fails before the first
-- write or undoes what it wrote, so a request that fails wrote nothing.
local function decide_request(n, a, k)
  local stored = read_counters(n, k)
  -- Limits of one request that share a key see each other's hits, in request order.
  local working = nil
  if n > 1 then working = {} end
  local admitted = true
  local quota_total, quota_denied = 0, 0
  for i = 1, n do
    local b = a + 2 * (i - 1)
    local key = KEYS[k + i]
    local s = spec_of(ARGV[b])
    local impl = ALGORITHMS[s.alg]
    local state, raw
    if working ~= nil and working[key] ~= nil then
      state = working[key]
      raw = encode_for(impl, state)
      -- An earlier limit of this request writes the key first (NX when it was missing).
      unsure[i] = false
    else
      raw = stored[i]
      state = decode_for(impl, raw, s, now)
    end
    local hits = tonumber(ARGV[b + 1])
    if hits == nil then error('not a number of hits: ' .. tostring(ARGV[b + 1])) end
    local ok, _, nxt = impl.decide(state, s, hits, now)
    specs[i], nexts[i], raws[i], allowed[i], befores[i] = s, nxt, raw, ok, state
    local mode = s.mode
    if mode == 'enforce' then
      if not ok then admitted = false end
    elseif mode == 'quota' then
      quota_total = quota_total + 1
      if not ok then quota_denied = quota_denied + 1 end
    end
    if working ~= nil and (ok or (count_denied and nxt ~= nil)) then working[key] = nxt end
  end
  if scope ~= 'group' and quota_total > 0 and quota_denied == quota_total then admitted = false end

  for i = 1, n do
    local nxt = nexts[i]
    payloads[i] = false
    if write and nxt ~= nil and (count_denied or (admitted and allowed[i])) then
      local s = specs[i]
      local impl = ALGORITHMS[s.alg]
      payloads[i] = encode_for(impl, nxt)
      -- false: the key keeps its expiry (see same_expiry).
      ttls[i] = false
      if impl.same_expiry == nil or not impl.same_expiry(befores[i], nxt) then ttls[i] = state_ttl(impl, nxt, s, now) end
    end
  end
  out[#out + 1] = admitted and 1 or 0
  -- Counters MGET found missing are created first, with NX, which refuses to replace a key of
  -- another type: the request then fails, and the counters it created are deleted again, so that
  -- it wrote nothing.
  for i = 1, n do
    if payloads[i] and unsure[i] and not redis.call('SET', KEYS[k + i], payloads[i], 'PX', ttls[i], 'NX') then
      for j = 1, i - 1 do
        if payloads[j] and unsure[j] then redis.call('DEL', KEYS[k + j]) end
      end
      error({ err = 'WRONGTYPE ' .. KEYS[k + i] .. ' holds a value of another type than a counter' })
    end
  end
  for i = 1, n do
    local flags = 0
    if allowed[i] then flags = 1 end
    if payloads[i] then
      flags = flags + 2
      if unsure[i] then
        -- Created above.
      elseif ttls[i] then
        redis.call('SET', KEYS[k + i], payloads[i], 'PX', ttls[i])
      else
        redis.call('SET', KEYS[k + i], payloads[i], 'KEEPTTL')
      end
    end
    out[#out + 1] = flags
    out[#out + 1] = raws[i] or false
  end
end

-- Each request on its own: one that fails (e.g. WRONGTYPE) is answered with -1 and the error, and
-- the others of the batch are still decided.
local a = 5
local k = 0
for _ = 1, tonumber(ARGV[4]) do
  local n = tonumber(ARGV[a])
  local mark = #out
  local ok, err = pcall(decide_request, n, a + 1, k)
  if not ok then
    for j = #out, mark + 1, -1 do out[j] = nil end
    out[#out + 1] = -1
    if type(err) == 'table' then err = err.err end
    out[#out + 1] = tostring(err)
  end
  a = a + 1 + 2 * n
  k = k + n
end
return out
