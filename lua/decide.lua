--[[ decide.lua: decides every limit of a request at once (on Redis Cluster: every limit of one
hash-slot group of a request), for one request or a batch of requests that arrived together (each
decided on its own, in order, as if they had come one after the other). Preceded by
algorithms.lua when loaded.

Why one script: reading all counters, deciding, and writing only when the request is admitted
must happen with no other request in between; with separate reads and writes, concurrent sluice
replicas would each see room and together admit more than the limit. Why batches: Redis' cost per
call (dispatch, TIME, the reply) and the client's are paid once for all the requests of a batch,
and so are the reads and writes of the counters: one MGET reads every counter of the batch, the
requests are decided in order against the states the earlier ones left (kept here, in Lua), and
each counter written is written once, at the end, with the state and expiry the last request left
it with. Time does not pass inside a script, so this is the same as deciding the requests one by
one: the same answers, the same values and expiries in Redis. On a hot key a batch of 20 requests
costs one read and one write instead of 20 of each.

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
counter's state before this request as stored ("a:b", false when there is none; after an earlier
request of the batch, the text it would have stored) }; a request that failed (it wrote nothing)
is -1 and the error message instead. A request fails when one of its keys holds another type than
a counter, whether it would write that key or not.
Everything a caller reports (remaining, reset, retry-after, used before) follows from the state
before, the time and the limit by the algorithms' view and decide, which the Node side runs itself
(src/limiter/algorithms mirror this file): computing and formatting them here would spend the one
Redis' CPU on what every replica can do on its own. --]]

local count_denied = ARGV[1] == '1'
local now, now_reply = clock(ARGV[2])
local scope = ARGV[3]
local write = scope ~= 'peek'
local requests = tonumber(ARGV[4])

-- Keys whose counters cannot be read or written (a key of another type): key -> error message.
-- Requests that touch one fail, as if they had not been sent; the others are decided.
local bad = {}

-- Every counter of the batch as stored (false: none), read once. MGET reads a key of another type
-- as missing, so a missing key is `unsure`: peek reads it again with GET, which fails on another
-- type (WRONGTYPE); a write creates it with NX at the end (see flush). unpack's stack bounds one
-- MGET (MAX_BATCH keys in a batch).
local stored, unsure = {}, {}
do
  local distinct, seen = {}, {}
  for i = 1, #KEYS do
    local key = KEYS[i]
    if not seen[key] then
      seen[key] = true
      distinct[#distinct + 1] = key
    end
  end
  local function get(key)
    local ok, value = pcall(redis.call, 'GET', key)
    if ok then return value end
    if type(value) == 'table' then value = value.err end
    bad[key] = tostring(value)
    return false
  end
  if #distinct == 1 or #distinct > 1000 then
    for _, key in ipairs(distinct) do stored[key] = get(key) end
  else
    local values = redis.call('MGET', unpack(distinct))
    for j, key in ipairs(distinct) do
      local value = values[j]
      if not value then
        if write then unsure[key] = true else value = get(key) end
      end
      stored[key] = value
    end
  end
end

-- The batch's state so far: per counter written by an earlier request of the batch, its state,
-- algorithm, and the expiry its write sets (a TTL in ms, or false: the key keeps its own, see
-- same_expiry; always a TTL for a key that was missing). `order`: the keys in the order they
-- were first written.
local states, impls, ttls, order
-- Per limit of the request being decided (reused from one request to the next).
local specs, nexts, raws, allowed, befores = {}, {}, {}, {}, {}

-- One request: its n limits are KEYS[k + 1 ..] and ARGV[a ..] (2 fields each). Appends its answer
-- to `out`; what it consumed becomes the batch's state only when it has been decided in full, so a
-- request that fails (a bad number) leaves nothing behind.
local function decide_request(out, n, a, k)
  for i = 1, n do
    local why = bad[KEYS[k + i]]
    if why ~= nil then error({ err = why }) end
  end
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
    local seen = nil
    if working ~= nil then seen = working[key] end
    if seen == nil then seen = states[key] end
    if seen ~= nil then
      state = seen
      raw = encode_for(impl, state)
    else
      raw = stored[key]
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

  out[#out + 1] = admitted and 1 or 0
  for i = 1, n do
    local nxt = nexts[i]
    local flags = 0
    if allowed[i] then flags = 1 end
    if write and nxt ~= nil and (count_denied or (admitted and allowed[i])) then
      flags = flags + 2
      local key = KEYS[k + i]
      local s = specs[i]
      local impl = ALGORITHMS[s.alg]
      if states[key] == nil then order[#order + 1] = key end
      states[key], impls[key] = nxt, impl
      if impl.same_expiry == nil or not impl.same_expiry(befores[i], nxt) then
        ttls[key] = state_ttl(impl, nxt, s, now)
      elseif ttls[key] == nil then
        ttls[key] = false
      end
    end
    out[#out + 1] = flags
    out[#out + 1] = raws[i] or false
  end
end

-- Every request on its own: one that fails (e.g. WRONGTYPE) is answered with -1 and the error, and
-- the others of the batch are still decided.
local function decide_all()
  local out = { now_reply }
  states, impls, ttls, order = {}, {}, {}, {}
  local a = 5
  local k = 0
  for _ = 1, requests do
    local n = tonumber(ARGV[a])
    local mark = #out
    -- A request that fails must not leave its writes in the batch's state either: decide_request
    -- records them only at its end, after everything that can fail.
    local ok, err = pcall(decide_request, out, n, a + 1, k)
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
end

-- Writes the batch's counters: first those MGET found missing, with NX, which refuses to replace a
-- key of another type. Returns the first such key (after deleting what it had created), else nil.
-- A missing counter that was read but not written is looked at too (EXISTS): MGET reads a key of
-- another type as missing, and a request that touches one fails whether it writes it or not.
local function flush()
  for key in pairs(unsure) do
    if states[key] == nil and bad[key] == nil and redis.call('EXISTS', key) == 1 then return key end
  end
  for j, key in ipairs(order) do
    if unsure[key] and not redis.call('SET', key, encode_for(impls[key], states[key]), 'PX', ttls[key], 'NX') then
      for i = 1, j - 1 do
        if unsure[order[i]] then redis.call('DEL', order[i]) end
      end
      return key
    end
  end
  for _, key in ipairs(order) do
    if not unsure[key] then
      local ttl = ttls[key]
      if ttl then
        redis.call('SET', key, encode_for(impls[key], states[key]), 'PX', ttl)
      else
        redis.call('SET', key, encode_for(impls[key], states[key]), 'KEEPTTL')
      end
    end
  end
  return nil
end

-- A key of another type found while writing: the requests that touch it fail, and the batch is
-- decided again without them (nothing else was written yet). Each round finds another bad key.
while true do
  local out = decide_all()
  if not write then return out end
  local failed = flush()
  if failed == nil then return out end
  bad[failed] = 'WRONGTYPE ' .. failed .. ' holds a value of another type than a counter'
end
