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

KEYS     the batch's counter keys, each once (the caller removes repeats, in order of first use),
         those kept in window hashes first (see below)
ARGV[1]  "1": COUNT_DENIED_HITS (upstream counting: window algorithms count every hit)
ARGV[2]  time in ms, for tests only; "" (always in production) uses redis.call('TIME')
ARGV[3]  "request": apply the whole-request rule (denied if an enforced limit says no, or if it
         has quota limits and all say no); "group": consume unless an enforced limit of this group
         says no. The caller then applies the request rule across groups and gives back what
         consumed groups took (refund.lua) when the request is denied. "peek": decide as
         "request" but write nothing (the explain endpoint).
ARGV[4]  number of requests
ARGV[5]  number of limit specs S, then S specs, each "algorithm:limit:period ms:burst:mode" (mode
         enforce | shadow | quota; one text, parsed once: see spec_of), each once
then     number of window-hash groups G, then per group its spec's number and its number of keys:
         the first keys are fixed-window counters kept as fields of their window's hash
         (fixed_window_hash in algorithms.lua), group by group; the others have a key each
then per request: its number of limits n, then per limit: which key and spec, as one number
         (spec - 1) * #KEYS + key (both counted from 1), and its hits

Returns { now (Redis time in whole microseconds; with an explicit test time, that time in ms as a
string), then per request: admitted (1|0), then per limit one entry: its flags (1 allowed + 2
consumed) as a number when the counter had no state before this request, else the flags as one
digit followed by that state as stored ("3" .. "a:b"; after an earlier request of the batch, the
text it would have stored) }; a request that failed (it wrote nothing) is -1 and the error message
instead. One entry per limit, not two: converting the reply is Redis' work per entry. A request
fails when one of its keys holds another type than a counter, whether it would write that key or
not.
Everything a caller reports (remaining, reset, retry-after, used before) follows from the state
before, the time and the limit by the algorithms' view and decide, which the Node side runs itself
(src/algorithms mirror this file): computing and formatting them here would spend the one
Redis' CPU on what every replica can do on its own. --]]

local count_denied = ARGV[1] == '1'
local now, now_reply = clock(ARGV[2])
local scope = ARGV[3]
local write = scope ~= 'peek'
local requests = tonumber(ARGV[4])
local nspecs = tonumber(ARGV[5])
local nkeys = #KEYS

-- Everything below is indexed by a key's position in KEYS (its number, `ki`): arrays, not tables
-- keyed by strings, cost Lua less per counter, and a batch of new counters is mostly that cost.

-- Keys whose counters cannot be read or written (a key of another type): number -> error message.
-- Requests that touch one fail, as if they had not been sent; the others are decided.
local bad = {}

-- The batch's specs, parsed when first used; its hits texts as numbers (a batch has few).
local specs, hits_of = {}, {}
local function spec_at(si)
  local s = specs[si]
  if s ~= nil then return s end
  if si == nil or si < 1 or si > nspecs or si % 1 ~= 0 then error('no limit spec ' .. tostring(si), 0) end
  s = spec_of(ARGV[5 + si])
  specs[si] = s
  return s
end

-- Counters in window hashes: KEYS[1 .. nwin], per group { hash, first key, last key, spec, window
-- start }. One HMGET per group reads them (a field missing is sure to be missing; a key of another
-- type than a hash fails the group's keys), one HSET per group writes them (flush).
local ngroups = tonumber(ARGV[6 + nspecs])
local groups, nwin = {}, 0
local stored = {}
do
  local g = 7 + nspecs
  for gi = 1, ngroups do
    local s = spec_at(tonumber(ARGV[g]))
    if not s.impl.windows then error('not a window-hash spec: ' .. ARGV[5 + tonumber(ARGV[g])]) end
    local first, last = nwin + 1, nwin + tonumber(ARGV[g + 1])
    local start = window_start(now, s.period)
    local h = window_hash(s, start)
    groups[gi] = { h, first, last, s, start }
    -- unpack's stack bounds one HMGET: 1,000 fields each.
    for i = first, last, 1000 do
      local j = i + 999
      if j > last then j = last end
      local ok, got = pcall(redis.call, 'HMGET', h, unpack(KEYS, i, j))
      if type(got) == 'table' and got.err then got = got.err end
      for ki = i, j do
        if ok then
          stored[ki] = got[ki - i + 1]
        else
          stored[ki] = false
          bad[ki] = tostring(got)
        end
      end
    end
    nwin = last
    g = g + 2
  end
end

-- The other counters as stored (false: none), read once. MGET reads a key of another type as
-- missing, so a key it finds missing is unsure: peek reads it again with GET, which fails on
-- another type (WRONGTYPE); a write creates it with NX at the end (see flush). unpack's stack
-- bounds one MGET; one key, or very many, are read with GET, which leaves nothing unsure.
local by_get = nkeys - nwin == 1 or nkeys - nwin > 1000
do
  local function get(ki)
    local ok, value = pcall(redis.call, 'GET', KEYS[ki])
    if ok then return value end
    if type(value) == 'table' then value = value.err end
    bad[ki] = tostring(value)
    return false
  end
  if by_get then
    for ki = nwin + 1, nkeys do stored[ki] = get(ki) end
  elseif nwin < nkeys then
    if nwin == 0 then
      stored = redis.call('MGET', unpack(KEYS))
    else
      local got = redis.call('MGET', unpack(KEYS, nwin + 1))
      for ki = nwin + 1, nkeys do stored[ki] = got[ki - nwin] end
    end
    if not write then
      for ki = nwin + 1, nkeys do
        if not stored[ki] then stored[ki] = get(ki) end
      end
    end
  end
end

-- The batch's state so far: per counter written by an earlier request of the batch, its state,
-- algorithm, and the expiry its write sets (a TTL in ms, or false: the key keeps its own, see
-- same_expiry; always a TTL for a key that was missing). `order`: the counters with keys of their
-- own in the order they were first written (window-hash fields are written group by group).
-- `mine`/`held`: counters the request being decided has already changed (the request's number,
-- and the state), for limits of one request that share a key.
local states, impls, ttls, order, norder, mine, held
-- A limit's answer with a state before it: its flags as one digit, then the state.
local FLAG_TEXT = { [0] = '0', '1', '2', '3' }
-- Per limit of the request being decided (reused from one request to the next).
local kis, sps, hitss, nexts, raws, allowed, befores = {}, {}, {}, {}, {}, {}, {}

-- Request r: its n limits are ARGV[a ..] (2 fields each). Appends its answer to `out` after entry
-- `no` and returns the new count; what it consumed becomes the batch's state only when it has been
-- decided in full, so a request that fails (a bad number) leaves nothing behind.
local function decide_request(out, no, r, n, a)
  for i = 1, n do
    local b = a + 2 * i - 2
    local ref = tonumber(ARGV[b])
    if ref == nil or ref < 1 or ref % 1 ~= 0 then error('not a limit: ' .. tostring(ARGV[b]), 0) end
    local ki = (ref - 1) % nkeys + 1
    local why = bad[ki]
    if why ~= nil then error({ err = why }) end
    local text = ARGV[b + 1]
    local hits = hits_of[text]
    if hits == nil then
      hits = tonumber(text)
      if hits == nil then error('not a number of hits: ' .. tostring(text), 0) end
      hits_of[text] = hits
    end
    local si = (ref - ki) / nkeys + 1
    kis[i], sps[i], hitss[i] = ki, specs[si] or spec_at(si), hits
  end
  local admitted = true
  local quota_total, quota_denied = 0, 0
  for i = 1, n do
    local ki, s = kis[i], sps[i]
    local impl = s.impl
    local state, raw
    local seen = nil
    if mine[ki] == r then seen = held[ki] end
    if seen == nil then seen = states[ki] end
    if seen ~= nil then
      state = seen
      raw = encode_for(impl, state)
    else
      raw = stored[ki]
      if raw then state = decode_for(impl, raw, s, now) end
    end
    local ok, _, nxt = impl.decide(state, s, hitss[i], now)
    nexts[i], raws[i], allowed[i], befores[i] = nxt, raw, ok, state
    local mode = s.mode
    if mode == 'enforce' then
      if not ok then admitted = false end
    elseif mode == 'quota' then
      quota_total = quota_total + 1
      if not ok then quota_denied = quota_denied + 1 end
    end
    if n > 1 and (ok or (count_denied and nxt ~= nil)) then mine[ki], held[ki] = r, nxt end
  end
  if scope ~= 'group' and quota_total > 0 and quota_denied == quota_total then admitted = false end

  no = no + 1
  out[no] = admitted and 1 or 0
  for i = 1, n do
    local nxt = nexts[i]
    local flags = 0
    if allowed[i] then flags = 1 end
    if write and nxt ~= nil and (count_denied or (admitted and allowed[i])) then
      flags = flags + 2
      local ki, s = kis[i], sps[i]
      local impl = s.impl
      if states[ki] == nil and ki > nwin then
        norder = norder + 1
        order[norder] = ki
      end
      states[ki], impls[ki] = nxt, impl
      if impl.same_expiry == nil or not impl.same_expiry(befores[i], nxt) then
        ttls[ki] = state_ttl_ms(impl, nxt, s, now)
      elseif ttls[ki] == nil then
        ttls[ki] = false
      end
    end
    local raw = raws[i]
    if raw then
      out[no + 1] = FLAG_TEXT[flags] .. raw
    else
      out[no + 1] = flags
    end
    no = no + 1
  end
  return no
end

-- Every request on its own: one that fails (e.g. WRONGTYPE) is answered with -1 and the error, and
-- the others of the batch are still decided.
local function decide_all()
  local out = { now_reply }
  local no = 1
  states, impls, ttls, order, norder, mine, held = {}, {}, {}, {}, 0, {}, {}
  local a = 7 + nspecs + 2 * ngroups
  for r = 1, requests do
    local n = tonumber(ARGV[a])
    -- A request that fails must not leave its writes in the batch's state either: decide_request
    -- records them only at its end, after everything that can fail.
    local ok, res = pcall(decide_request, out, no, r, n, a + 1)
    if ok then
      no = res
    else
      for j = no + 1, no + 1 + n do out[j] = nil end
      if type(res) == 'table' then res = res.err end
      out[no + 1] = -1
      out[no + 2] = tostring(res)
      no = no + 2
    end
    a = a + 1 + 2 * n
  end
  return out
end

-- Writes the batch's counters. Those MGET found missing first, with NX, which refuses to replace a
-- key of another type: returns the first such key's number (after deleting what it had created),
-- else nil. A missing counter that was read but not written is looked at too (EXISTS): MGET reads
-- a key of another type as missing, and a request that touches one fails whether it writes it or
-- not. Counters read one by one (by_get) are sure: GET fails on another type.
local function flush()
  if not by_get then
    for ki = nwin + 1, nkeys do
      if stored[ki] == false and states[ki] == nil and bad[ki] == nil and redis.call('EXISTS', KEYS[ki]) == 1 then return ki end
    end
    for j = 1, norder do
      local ki = order[j]
      if stored[ki] == false and not redis.call('SET', KEYS[ki], encode_for(impls[ki], states[ki]), 'PX', ttls[ki], 'NX') then
        for i = 1, j - 1 do
          if stored[order[i]] == false then redis.call('DEL', KEYS[order[i]]) end
        end
        return ki
      end
    end
  end
  for j = 1, norder do
    local ki = order[j]
    if by_get or stored[ki] then
      local ttl = ttls[ki]
      if ttl then
        redis.call('SET', KEYS[ki], encode_for(impls[ki], states[ki]), 'PX', ttl)
      else
        redis.call('SET', KEYS[ki], encode_for(impls[ki], states[ki]), 'KEEPTTL')
      end
    end
  end
  -- Window hashes last, once nothing can fail: one HSET per group (1,000 fields each at most),
  -- and a hash that got new fields may have just been made (keep_window).
  for gi = 1, ngroups do
    local group = groups[gi]
    local h = group[1]
    local fields, n, created = {}, 0, false
    for ki = group[2], group[3] do
      local state = states[ki]
      if state ~= nil then
        fields[n + 1], fields[n + 2] = KEYS[ki], encode_for(impls[ki], state)
        n = n + 2
        if not stored[ki] then created = true end
        if n == 2000 then
          redis.call('HSET', h, unpack(fields, 1, n))
          n = 0
        end
      end
    end
    if n > 0 then redis.call('HSET', h, unpack(fields, 1, n)) end
    if created then keep_window(group[4], group[5], now) end
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
  bad[failed] = 'WRONGTYPE ' .. KEYS[failed] .. ' holds a value of another type than a counter'
end
