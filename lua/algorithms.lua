-- algorithms.lua: the four algorithms, shared by every script (the Redis store prepends this file
-- to each script before loading it). view and decide mirror src/algorithms/*.ts operation
-- for operation, so that the Redis and memory stores give identical answers; a change here must be
-- made there too (test/system/store-redis.test.ts runs one trace through both). refund and absorb exist
-- only here: only a shared store gives hits back or takes in a fallback's hits; so does a fixed
-- window's count of the next window (fixed.take_ahead), which only lease.lua writes, on the
-- global Redis of multi-region mode, where no replica decides and nothing reads states back.
--
-- A state is a Lua array of numbers, stored as one string "a:b:c": integers (the windows' starts and
-- counts) with %d, other numbers with %.17g so that doubles round-trip exactly. A limit spec is
-- { alg, limit, period, burst } (period in ms).
--
-- Loaded either as a Redis Function library (Redis >= 7: this file runs once, at FUNCTION LOAD) or
-- in front of each script body for EVALSHA (older servers: it runs on every call). Nothing at the
-- top level may touch a global library (math, string, ...): Redis 7.0 does not offer them while a
-- library loads. Nor may anything here read KEYS or ARGV as globals: functions get them as
-- arguments (see scripts.ts, which wraps each script body as `function (KEYS, ARGV)`).

local EPS = 1e-6
local INF = 1 / 0
-- Longest TTL written (10 years), as MAX_TTL_MS in types.ts: Lua would hand Redis a longer one as
-- "1e+17", which PX rejects after the script's earlier writes were made.
local MAX_TTL = 315360000000

-- A TTL of `t` ms as written: whole, at least 1, at most MAX_TTL, i.e.
-- min(MAX_TTL, max(1, ceil(t))) without library calls (it runs for every counter decide writes). A
-- number: redis.call writes a whole number out as one ("%.17g"), no Lua string to make.
local function ttl_ms(t)
  if not (t > 1) then return 1 end
  if t >= MAX_TTL then return MAX_TTL end
  local fraction = t % 1
  if fraction == 0 then return t end
  return t - fraction + 1
end

local function whole(x)
  if x <= 0 then return 0 end
  return math.floor(x + EPS)
end

local function window_start(now, period)
  return math.floor(now / period) * period
end

local function ceil_pos(x)
  return math.max(0, math.ceil(x))
end

local fixed = {}

-- A fixed window's state is { window start, count }, or, once a region leased units of the next
-- window ahead of its start (lease.lua, multi-region mode), { window start, count, next window's
-- count }: when the next window comes, that count is its own.
local function fixed_count(state, start, period)
  if state == nil then return 0 end
  if state[1] == start then return state[2] end
  if state[1] == start - period then return state[3] or 0 end
  return 0
end

-- The count of the window after the one starting at `start` (units leased ahead into it).
local function fixed_ahead(state, start)
  if state ~= nil and state[1] == start then return state[3] end
  return nil
end

function fixed.view(state, s, now)
  local start = window_start(now, s.period)
  local count = fixed_count(state, start, s.period)
  return math.max(0, s.limit - count), start + s.period - now, count
end

-- Written out (no window_start, fixed_count): it runs for every limit of every request.
function fixed.decide(state, s, hits, now)
  local p, limit = s.period, s.limit
  local start = math.floor(now / p) * p
  local count, ahead = 0, nil
  if state ~= nil then
    local at = state[1]
    if at == start then
      count, ahead = state[2], state[3]
    elseif at == start - p and state[3] ~= nil then
      count = state[3]
    end
  end
  if count + hits <= limit then return true, 0, { start, count + hits, ahead } end
  local retry = INF
  if hits <= limit then retry = start + p - now end
  return false, retry, { start, count + hits, ahead }
end

-- Leases `hits` of the window after the current one, before it starts: true and the new state, or
-- false when that window has fewer left. Returns also what it has left after.
function fixed.take_ahead(state, s, hits, now)
  local start = window_start(now, s.period)
  local count = fixed_count(state, start, s.period)
  local ahead = fixed_ahead(state, start) or 0
  local left = s.limit - ahead
  if hits > left then return false, state, math.max(0, left) end
  return true, { start, count, ahead + hits }, left - hits
end

-- A window's key lives until its window is of no more use (ttl), the same instant for every write
-- within the window: such a write keeps the key's expiry (SET KEEPTTL), which costs Redis less
-- than setting it again. `before` is the state the write replaces (nil: none). Units leased ahead
-- keep the key through the next window.
function fixed.same_expiry(before, nxt)
  return before ~= nil and before[1] == nxt[1] and (before[3] == nil) == (nxt[3] == nil)
end

function fixed.ttl(state, s, now)
  local t = state[1] + s.period - now
  if state[3] ~= nil then t = t + s.period end
  if t > 1 then return t end
  return 1
end

function fixed.refund(state, s, hits, decided_at, now)
  local at = window_start(decided_at, s.period)
  if state[1] == at then
    return { state[1], math.max(0, state[2] - hits), state[3] }
  end
  if state[3] ~= nil and state[1] + s.period == at then
    return { state[1], state[2], math.max(0, state[3] - hits) }
  end
  return state
end

-- absorb(state, s, hits, window, age, now): adds hits a replica's local fallback admitted while
-- Redis was away. Windows take them only while the window they fell in (`window`: its start, Redis
-- time) is still counted. Buckets take only what has not refilled since the last of them was
-- admitted (`age` ms ago), never below empty: hits that old would have been paid back by now.
-- Returns `state` itself when nothing changes (the caller then writes nothing).
function fixed.absorb(state, s, hits, window, age, now)
  local start = window_start(now, s.period)
  if hits <= 0 or window == nil or window_start(window, s.period) ~= start then return state end
  return { start, fixed_count(state, start, s.period) + hits, fixed_ahead(state, start) }
end

local sliding = {}

local function sliding_counts(state, now, period)
  local start = window_start(now, period)
  if state == nil then return start, 0, 0 end
  if state[1] == start then return start, state[2], state[3] end
  if state[1] == start - period then return start, 0, state[2] end
  return start, 0, 0
end

local function sliding_estimate(start, curr, prev, now, period)
  return prev * (1 - (now - start) / period) + curr
end

function sliding.view(state, s, now)
  local start, curr, prev = sliding_counts(state, now, s.period)
  local used = sliding_estimate(start, curr, prev, now, s.period)
  local reset = 0
  if curr > 0 then
    reset = start + 2 * s.period - now
  elseif prev > 0 then
    reset = start + s.period - now
  end
  return whole(s.limit - used), reset, used
end

local function sliding_retry(start, curr, prev, s, hits, now)
  local p = s.period
  if hits > s.limit then return INF end
  if curr + hits <= s.limit then
    local f = 1 - (s.limit - curr - hits) / prev
    return ceil_pos(start + p * f - now)
  end
  local f = 0
  if curr ~= 0 then f = math.max(0, 1 - (s.limit - hits) / curr) end
  return ceil_pos(start + p + p * f - now)
end

function sliding.decide(state, s, hits, now)
  local start, curr, prev = sliding_counts(state, now, s.period)
  local allowed = sliding_estimate(start, curr, prev, now, s.period) + hits <= s.limit + EPS
  local retry = 0
  if not allowed then retry = sliding_retry(start, curr, prev, s, hits, now) end
  return allowed, retry, { start, curr + hits, prev }
end

sliding.same_expiry = fixed.same_expiry

function sliding.ttl(state, s, now)
  return math.max(1, state[1] + 2 * s.period - now)
end

function sliding.refund(state, s, hits, decided_at, now)
  local at = window_start(decided_at, s.period)
  if state[1] == at then return { state[1], math.max(0, state[2] - hits), state[3] } end
  if state[1] == at + s.period then return { state[1], state[2], math.max(0, state[3] - hits) } end
  return state
end

function sliding.absorb(state, s, hits, window, age, now)
  if hits <= 0 or window == nil then return state end
  local start, curr, prev = sliding_counts(state, now, s.period)
  local at = window_start(window, s.period)
  if at == start then return { start, curr + hits, prev } end
  if at == start - s.period then return { start, curr, prev + hits } end
  return state
end

local bucket = {}

local function bucket_rate(s)
  return s.limit / s.period
end

local function bucket_tokens(state, s, now)
  if state == nil then return s.burst end
  local elapsed = math.max(0, now - state[2])
  return math.min(s.burst, state[1] + elapsed * bucket_rate(s))
end

local function bucket_refill_ms(missing, s)
  if missing <= EPS then return 0 end
  local r = bucket_rate(s)
  if r > 0 then return math.ceil((missing - EPS) / r) end
  return INF
end

function bucket.view(state, s, now)
  local tokens = bucket_tokens(state, s, now)
  local full = bucket_refill_ms(s.burst - tokens, s)
  if full == INF then full = s.period end
  return whole(tokens), full, s.burst - tokens
end

function bucket.decide(state, s, hits, now)
  local tokens = bucket_tokens(state, s, now)
  if tokens + EPS >= hits then
    return true, 0, { math.max(0, tokens - hits), now }
  end
  local retry
  if hits > s.burst then retry = INF else retry = bucket_refill_ms(hits - tokens, s) end
  return false, retry, nil
end

-- A bucket that never refills (limit 0) is kept for MAX_TTL: expiring it would refill it.
function bucket.ttl(state, s, now)
  return bucket_refill_ms(s.burst - bucket_tokens(state, s, now), s)
end

function bucket.refund(state, s, hits, decided_at, now)
  return { math.min(s.burst, bucket_tokens(state, s, now) + hits), now }
end

-- The part of `hits` admitted `age` ms ago that the bucket has not refilled since.
local function unrefilled(s, hits, age)
  if s.period <= 0 then return hits end
  return math.max(0, hits - age * s.limit / s.period)
end

-- `debt` (a region's admissions while cut off from the global budget, multi-region): every hit is
-- taken, however old, and the bucket may go below empty, by one burst at most: what was admitted
-- beyond the budget is paid back by admitting that much less afterwards.
function bucket.absorb(state, s, hits, window, age, now, debt)
  local tokens = bucket_tokens(state, s, now)
  if debt then
    if hits <= 0 then return state end
    return { math.max(-s.burst, tokens - hits), now }
  end
  local take = unrefilled(s, hits, age)
  if take <= 0 or tokens <= 0 then return state end
  return { math.max(0, tokens - take), now }
end

local gcra = {}

-- State { debt, at }: the TAT as an offset from the last write (TAT = at + debt), so that adding
-- hits × T never rounds at epoch-ms magnitude (see gcra.ts). A one-number { tat } is still read.
local function gcra_debt(state, now)
  if state == nil then return 0 end
  if #state < 2 then return math.max(0, state[1] - now) end
  return math.max(0, state[1] - math.max(0, now - state[2]))
end

local function gcra_tat(state, now)
  return now + gcra_debt(state, now)
end

function gcra.view(state, s, now)
  if s.limit <= 0 then return 0, s.period, 0 end
  local t = s.period / s.limit
  local debt = gcra_debt(state, now)
  return whole((s.burst * t - debt) / t), math.ceil(debt - EPS), debt / t
end

function gcra.decide(state, s, hits, now)
  if s.limit <= 0 then
    if hits == 0 then return true, 0, state or { 0, now } end
    return false, INF, state or { 0, now }
  end
  local t = s.period / s.limit
  local tolerance = s.burst * t
  local debt = gcra_debt(state, now) + hits * t
  if debt <= tolerance + EPS then return true, 0, { debt, now } end
  local retry
  if hits > s.burst then retry = INF else retry = math.ceil(debt - tolerance - EPS) end
  return false, retry, nil
end

function gcra.ttl(state, s, now)
  return gcra_debt(state, now)
end

function gcra.refund(state, s, hits, decided_at, now)
  if s.limit <= 0 then return state end
  return { math.max(0, gcra_debt(state, now) - hits * s.period / s.limit), now }
end

function gcra.absorb(state, s, hits, window, age, now, debt)
  local take = unrefilled(s, hits, age)
  if debt then take = hits end
  if s.limit <= 0 or take <= 0 then return state end
  local t = s.period / s.limit
  local tat = gcra_tat(state, now)
  -- A debt (see bucket.absorb) may push the TAT one burst beyond empty.
  local most = now + s.burst * t
  if debt then most = most + s.burst * t end
  local nxt = math.min(tat + take * t, most)
  if nxt <= tat then return state end
  return { nxt }
end

-- restore(state, s, remaining, at, now): after Redis lost its data (a restart without
-- persistence), a replica puts back what it last saw: `remaining` whole requests left at Redis time
-- `at`. A counter only ever becomes *more* used by this (the max of what it holds and what was
-- seen), so several replicas restoring their views end at the latest one, and a counter that kept
-- its data is left alone.
function fixed.restore(state, s, remaining, at, now)
  local start = window_start(now, s.period)
  if window_start(at, s.period) ~= start then return state end
  local used = s.limit - remaining
  if used <= fixed_count(state, start, s.period) then return state end
  return { start, used, fixed_ahead(state, start) }
end

function sliding.restore(state, s, remaining, at, now)
  local start, curr, prev = sliding_counts(state, now, s.period)
  local seen = window_start(at, s.period)
  -- The seen estimate mixes both windows; counting all of it in the window it was seen in is the
  -- conservative split.
  local used = s.limit - remaining
  if seen == start and used > curr then return { start, used, prev } end
  if seen == start - s.period and used > prev then return { start, curr, used } end
  return state
end

function bucket.restore(state, s, remaining, at, now)
  local known = math.min(s.burst, remaining + math.max(0, now - at) * bucket_rate(s))
  if known >= bucket_tokens(state, s, now) then return state end
  return { known, now }
end

function gcra.restore(state, s, remaining, at, now)
  if s.limit <= 0 then return state end
  local tat = at + (s.burst - remaining) * s.period / s.limit
  if tat <= gcra_tat(state, now) then return state end
  return { tat }
end

local ALGORITHMS = {
  fixed_window = fixed,
  sliding_window = sliding,
  token_bucket = bucket,
  gcra = gcra,
}

local function decode_state(raw)
  if not raw then return nil end
  local a, b, c = string.match(raw, '^([^:]+):?([^:]*):?([^:]*)$')
  if c ~= nil and c ~= '' then return { tonumber(a), tonumber(b), tonumber(c) } end
  if b ~= nil and b ~= '' then return { tonumber(a), tonumber(b) } end
  return { tonumber(a) }
end

-- x % 1 == 0: x is whole (no library call); false for inf and nan.
local function integral(x)
  return x % 1 == 0 and x > -1e15 and x < 1e15
end

local function encode_number(x)
  if integral(x) then return string.format('%d', x) end
  return string.format('%.17g', x)
end

local function encode_state(state)
  if #state == 2 then
    -- Windows' states are two whole numbers: one format costs Redis less than two and a join.
    local a, b = state[1], state[2]
    if integral(a) and integral(b) then
      return string.format('%d:%d', a, b)
    end
    return encode_number(a) .. ':' .. encode_number(b)
  end
  local parts = {}
  for i = 1, #state do parts[i] = encode_number(state[i]) end
  return table.concat(parts, ':')
end

-- A fixed window's text, as encode_state writes it, made once per small count and window: the
-- new counters of a batch (this window, a count of 1) all store the same text.
local FIXED_TEXTS = {}

function fixed.encode(state)
  local start, count = state[1], state[2]
  if count >= 1 and count <= 16 and count % 1 == 0 and state[3] == nil then
    local made = FIXED_TEXTS[count]
    if made ~= nil and made.start == start then return made.text end
    local text = encode_state(state)
    FIXED_TEXTS[count] = { start = start, text = text }
    return text
  end
  return encode_state(state)
end

-- A fixed window in envoyproxy/ratelimit's layout (KEY_LAYOUT=upstream): the key names its window
-- (keys.ts upstreamKey), and the value is the count alone, an integer that upstream's replicas
-- INCRBY on the same Redis. Decided as a fixed window whose window is the current one. Every write
-- sets the expiry (no same_expiry): the key's window is the process' clock's, not Redis', and a
-- key named for a window Redis has left must live on through Redis' current one.
local fixed_upstream = {
  view = fixed.view, decide = fixed.decide, ttl = fixed.ttl,
  refund = fixed.refund, absorb = fixed.absorb, restore = fixed.restore,
}

function fixed_upstream.decode(raw, s, now)
  local n = tonumber(raw)
  if n == nil then return decode_state(raw) end
  return { window_start(now, s.period), n }
end

function fixed_upstream.encode(state)
  return string.format('%d', state[2])
end

ALGORITHMS.fixed_window_upstream = fixed_upstream

-- A fixed window kept as one field of its window's hash (WINDOW_COUNTERS=hash, on a Redis without
-- Cluster): the hash `<base><window start>` holds every counter of one period's window (field: the
-- counter's key, value: its count), and has one expiry for all of them. Creating a field costs
-- Redis about half of what creating a key with its own expiry costs, and half the memory (see
-- the README). The count's window is the hash's, the current one, so this decides, refunds and
-- absorbs as a fixed window whose state is { window start, count }. `base` comes with the spec
-- (see spec_from and decide.lua's spec_of); writes go through write_counter or decide.lua's flush.
-- The hash's name is made here, from Redis' time, so it is not among a call's KEYS (which name the
-- counters): fine on one Redis. On a Cluster, where a script may touch only its call's slot and one
-- hash per window would put every counter on one slot, each counter keeps its own key.
local fixed_hash = {
  view = fixed.view, decide = fixed.decide, ttl = fixed.ttl,
  refund = fixed.refund, absorb = fixed.absorb, restore = fixed.restore,
  decode = fixed_upstream.decode, encode = fixed_upstream.encode,
  -- The hash's expiry is the window's: a field has none of its own to keep or set.
  same_expiry = function() return true end,
  windows = true,
}

ALGORITHMS.fixed_window_hash = fixed_hash

-- The name of the hash that holds spec `s`'s window starting at `start` (ms).
local function window_hash(s, start)
  return s.base .. string.format('%d', start)
end

-- After fields were created in the hash of the window starting at `start`: a hash just made gets
-- its expiry, until the end of the window after its own, and the hash of the window before it is
-- unlinked. UNLINK frees a big hash off Redis' main thread; expiring frees it on that thread, all
-- its fields at once (unless lazyfree-lazy-expire is on), which would stall every caller for as
-- long. The expiry stays for windows that no write follows. PTTL, not PEXPIRE NX: Redis < 7 has
-- no NX.
local function keep_window(s, start, now)
  local h = window_hash(s, start)
  if redis.call('PTTL', h) == -1 then
    redis.call('PEXPIRE', h, ttl_ms(start + 2 * s.period - now))
    redis.call('UNLINK', window_hash(s, start - s.period))
  end
end

-- A regional allowance (multi-region mode: GLOBAL_REDIS_URL): units this region leased from the
-- global budget (lease.lua on the global Redis), which its replicas spend here. Deciding is
-- spending units: all-or-nothing across a request's limits like any other counter; the global
-- algorithm already ran when the units were leased. State { units, expires, global remaining,
-- reset at, retry at, taken at }: times in this Redis' ms except `taken at` (the global Redis'
-- time of the last lease: its window). A fixed window's next window, leased ahead of its start,
-- follows as { units, from, expires, taken at }: from `from` on, those are the allowance. Written by
-- credit.lua, taken back by reclaim.lua; src/store/region/pool.ts mirrors decode, view and decide.
local pool = {}

local function pool_units(state, now)
  if state == nil or now >= state[2] then return 0 end
  return state[1]
end

local function pool_with(state, units)
  local nxt = { units, state[2], state[3], state[4], state[5], state[6] }
  if state[7] ~= nil then nxt[7], nxt[8], nxt[9], nxt[10] = state[7], state[8], state[9], state[10] end
  return nxt
end

function pool.view(state, s, now)
  local units = pool_units(state, now)
  local reset = 0
  if state ~= nil then reset = math.max(0, state[4] - now) end
  return math.max(0, units), reset, math.max(0, s.limit - units)
end

function pool.decide(state, s, hits, now)
  local units = pool_units(state, now)
  if state ~= nil and units >= hits then return true, 0, pool_with(state, units - hits) end
  -- No allowance yet: a lease may land any moment (the shortest retry there is).
  if state == nil then
    if hits <= 0 then return true, 0, nil end
    return false, 1, nil
  end
  local at = state[5]
  if state[8] ~= nil and state[8] < at then at = state[8] end
  return false, math.max(1, at - now), nil
end

function pool.ttl(state, s, now)
  local t = state[2]
  if state[9] ~= nil and state[9] > t then t = state[9] end
  return t - now
end

-- Units of a decision denied after all (another slot group said no) come back to the allowance.
function pool.refund(state, s, hits, decided_at, now)
  if state == nil or now >= state[2] then return state end
  return pool_with(state, state[1] + hits)
end

-- A regional fallback's hits go to the global budget (RegionalStore.absorb), never here.
function pool.absorb(state, s, hits, window, age, now)
  return state
end

-- An allowance lost with this Redis' data is not put back: its units are lost to the budget
-- (under-admission), and the region leases again.
function pool.restore(state, s, remaining, at, now)
  return state
end

-- The allowance at `now` (nil: as stored): the next window's, leased ahead, once it has begun
-- (the global budget was not short for it: retry at 0).
function pool.decode(raw, s, now)
  local state = {}
  for part in string.gmatch(raw, '[^:]+') do state[#state + 1] = tonumber(part) end
  if #state ~= 6 and #state ~= 10 then error('not a regional allowance: ' .. raw) end
  if state[8] ~= nil and now ~= nil and now >= state[8] then
    return { state[7], state[9], 0, state[9], 0, state[10] }
  end
  return state
end

function pool.encode(state)
  local parts = {}
  for i = 1, #state do parts[i] = encode_number(state[i]) end
  return table.concat(parts, ':')
end

ALGORITHMS.pool = pool

-- A limit's spec from its text "algorithm:limit:period ms:burst:mode" (decide.lua), followed by
-- ":<base>" for a fixed window kept in window hashes (fixed_hash: the base of its hashes' names,
-- which may hold any character, so it comes last), parsed once
-- per text while the library stays loaded (Redis Functions; with EVALSHA every call starts
-- afresh): a config has a few specs, and parsing one per limit and request cost Redis a fifth of
-- a decision. Request-side limit overrides can make more, so the cache is dropped when full.
local SPECS, spec_count = {}, 0

local function spec_of(text)
  local s = SPECS[text]
  if s ~= nil then return s end
  local alg, limit, period, burst, mode, base = string.match(text, '^([^:]+):([^:]+):([^:]+):([^:]+):([^:]+):?(.*)$')
  s = { alg = alg, limit = tonumber(limit), period = tonumber(period), burst = tonumber(burst), mode = mode, impl = ALGORITHMS[alg] }
  if s.impl == nil or s.limit == nil or s.period == nil or s.burst == nil then error('not a limit spec: ' .. text) end
  if s.impl.windows then
    if base == '' then error('not a limit spec (no hash name): ' .. text) end
    s.base = base
  end
  if spec_count >= 10000 then SPECS, spec_count = {}, 0 end
  SPECS[text] = s
  spec_count = spec_count + 1
  return s
end

-- A counter's state from what GET returned (nil: none), and back, as `impl` stores it.
local function decode_for(impl, raw, s, now)
  if impl.decode ~= nil then
    if not raw then return nil end
    return impl.decode(raw, s, now)
  end
  return decode_state(raw)
end

local function encode_for(impl, state)
  if impl.encode ~= nil then return impl.encode(state) end
  return encode_state(state)
end

local function num(x)
  if x == INF then return 'inf' end
  return string.format('%.17g', x)
end

-- Redis' own clock in ms, and the same instant as replies carry it: whole microseconds (Redis
-- truncates Lua numbers in replies to integers), of which ms = us / 1000, one division that the
-- Node side repeats to get the very same double. Tests may pass an explicit time in ms (ARGV),
-- which is used as it is and replied as a string (%.17g); production never passes one.
local function clock(explicit)
  if explicit ~= nil and explicit ~= '' then
    local ms = tonumber(explicit)
    return ms, string.format('%.17g', ms)
  end
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us / 1000, us
end

local function now_ms(explicit)
  local ms = clock(explicit)
  return ms
end

-- How long a counter in `state` must be kept, ms (see ttl_ms).
local function state_ttl_ms(impl, state, s, now)
  return ttl_ms(impl.ttl(state, s, now))
end

-- A spec from the fields the batch scripts and lease.lua get: algorithm, limit, period ms, burst.
-- The algorithm's name may carry the base of its windows' hash names after a '|'
-- ("fixed_window_hash|<base>", see fixed_hash).
local function spec_from(alg, limit, period, burst)
  local s = { alg = alg, limit = tonumber(limit), period = tonumber(period), burst = tonumber(burst) }
  local bar = string.find(alg, '|', 1, true)
  if bar ~= nil then
    s.alg, s.base = string.sub(alg, 1, bar - 1), string.sub(alg, bar + 1)
  end
  s.impl = ALGORITHMS[s.alg]
  if s.impl == nil then error('no algorithm ' .. s.alg) end
  return s
end

-- A counter's state, read where spec `s` keeps it (its own key, or a field of its window's hash).
local function read_counter(key, s, now)
  local impl = s.impl
  if impl.windows then
    return decode_for(impl, redis.call('HGET', window_hash(s, window_start(now, s.period)), key), s, now)
  end
  return decode_for(impl, redis.call('GET', key), s, now)
end

local function write_counter(key, s, state, now)
  local impl = s.impl
  if impl.windows then
    redis.call('HSET', window_hash(s, state[1]), key, impl.encode(state))
    keep_window(s, state[1], now)
    return
  end
  redis.call('SET', key, encode_for(impl, state), 'PX', state_ttl_ms(impl, state, s, now))
end

-- The loop of the batch scripts (absorb, refund, restore): entry i is KEYS[i] and `width` ARGV
-- fields from ARGV[2 + width * (i - 1)], of which the first four are algorithm, limit, period ms
-- and burst. `change(impl, state, s, extra, now)` gets the entry's remaining fields as numbers
-- (`extra[1]`, ...) and returns the new state, or the same (or nil) to leave the counter alone.
-- Returns how many counters changed.
local function rewrite_each(KEYS, ARGV, width, change)
  local now = now_ms(ARGV[1])
  local changed = 0
  for i = 1, #KEYS do
    local b = 1 + width * (i - 1)
    local s = spec_from(ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4])
    local extra = {}
    for j = 5, width do extra[j - 4] = tonumber(ARGV[b + j]) end
    local impl = s.impl
    local state = read_counter(KEYS[i], s, now)
    local nxt = change(impl, state, s, extra, now)
    if nxt ~= nil and nxt ~= state then
      write_counter(KEYS[i], s, nxt, now)
      changed = changed + 1
    end
  end
  return changed
end
