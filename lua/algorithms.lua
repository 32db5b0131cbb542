-- algorithms.lua: the four algorithms, shared by decide.lua and refund.lua (the Redis store
-- prepends this file to each script before loading it). They mirror src/limiter/algorithms/*.ts
-- operation for operation, so that the Redis and memory stores give identical answers; a change
-- here must be made there too (test/store-equivalence.test.ts compares them).
--
-- A state is a Lua array of numbers, stored as one string "a:b:c" with %.17g so that doubles
-- round-trip exactly. A limit spec is { alg, limit, period, burst } (period in ms).

local EPS = 1e-6
local INF = math.huge

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

local function fixed_count(state, start)
  if state ~= nil and state[1] == start then return state[2] end
  return 0
end

function fixed.view(state, s, now)
  local start = window_start(now, s.period)
  local count = fixed_count(state, start)
  return math.max(0, s.limit - count), start + s.period - now, count
end

function fixed.decide(state, s, hits, now)
  local start = window_start(now, s.period)
  local count = fixed_count(state, start)
  local allowed = count + hits <= s.limit
  local retry = 0
  if not allowed then
    if hits <= s.limit then retry = start + s.period - now else retry = INF end
  end
  return allowed, retry, { start, count + hits }
end

function fixed.ttl(state, s, now)
  return math.max(1, state[1] + s.period - now)
end

function fixed.refund(state, s, hits, decided_at, now)
  if state[1] == window_start(decided_at, s.period) then
    return { state[1], math.max(0, state[2] - hits) }
  end
  return state
end

-- absorb(state, s, hits, at, now): adds hits admitted elsewhere (a replica's local fallback while
-- Redis was away) at time `at`. Windows take them only while the window they fell in is still
-- counted; buckets take them now, never below empty.
function fixed.absorb(state, s, hits, at, now)
  local start = window_start(now, s.period)
  if window_start(at, s.period) ~= start then return state end
  return { start, fixed_count(state, start) + hits }
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

function sliding.ttl(state, s, now)
  return math.max(1, state[1] + 2 * s.period - now)
end

function sliding.refund(state, s, hits, decided_at, now)
  local at = window_start(decided_at, s.period)
  if state[1] == at then return { state[1], math.max(0, state[2] - hits), state[3] } end
  if state[1] == at + s.period then return { state[1], state[2], math.max(0, state[3] - hits) } end
  return state
end

function sliding.absorb(state, s, hits, at, now)
  local start, curr, prev = sliding_counts(state, now, s.period)
  local at_start = window_start(at, s.period)
  if at_start == start then return { start, curr + hits, prev } end
  if at_start == start - s.period then return { start, curr, prev + hits } end
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

function bucket.ttl(state, s, now)
  local full = bucket_refill_ms(s.burst - bucket_tokens(state, s, now), s)
  if full == INF then full = s.period end
  return math.max(1, full)
end

function bucket.refund(state, s, hits, decided_at, now)
  return { math.min(s.burst, bucket_tokens(state, s, now) + hits), now }
end

function bucket.absorb(state, s, hits, at, now)
  return { math.max(0, bucket_tokens(state, s, now) - hits), now }
end

local gcra = {}

local function gcra_tat(state, now)
  if state == nil then return now end
  return math.max(state[1], now)
end

function gcra.view(state, s, now)
  if s.limit <= 0 then return 0, s.period, 0 end
  local t = s.period / s.limit
  local debt = gcra_tat(state, now) - now
  return whole((s.burst * t - debt) / t), math.ceil(debt - EPS), debt / t
end

function gcra.decide(state, s, hits, now)
  if s.limit <= 0 then
    if hits == 0 then return true, 0, state or { now } end
    return false, INF, state or { now }
  end
  local t = s.period / s.limit
  local tolerance = s.burst * t
  local new_tat = gcra_tat(state, now) + hits * t
  if new_tat - now <= tolerance + EPS then return true, 0, { new_tat } end
  local retry
  if hits > s.burst then retry = INF else retry = math.ceil(new_tat - tolerance - now - EPS) end
  return false, retry, nil
end

function gcra.ttl(state, s, now)
  return math.max(1, math.ceil(state[1] - now))
end

function gcra.refund(state, s, hits, decided_at, now)
  if s.limit <= 0 then return state end
  return { math.max(now, state[1] - hits * s.period / s.limit) }
end

function gcra.absorb(state, s, hits, at, now)
  if s.limit <= 0 then return state end
  local t = s.period / s.limit
  return { math.min(gcra_tat(state, now) + hits * t, now + s.burst * t) }
end

local ALGORITHMS = {
  fixed_window = fixed,
  sliding_window = sliding,
  token_bucket = bucket,
  gcra = gcra,
}

local function decode_state(raw)
  if not raw then return nil end
  local state = {}
  for part in string.gmatch(raw, '[^:]+') do state[#state + 1] = tonumber(part) end
  return state
end

local function encode_state(state)
  local parts = {}
  for i = 1, #state do parts[i] = string.format('%.17g', state[i]) end
  return table.concat(parts, ':')
end

local function num(x)
  if x == INF then return 'inf' end
  return string.format('%.17g', x)
end

-- Redis' own clock, unless a test passes an explicit time (ARGV). Production never does.
local function now_ms(explicit)
  if explicit ~= nil and explicit ~= '' then return tonumber(explicit) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end

local function write_state(key, impl, state, s, now)
  local ttl = math.ceil(impl.ttl(state, s, now))
  redis.call('SET', key, encode_state(state), 'PX', ttl)
end
