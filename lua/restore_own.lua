--[[ restore_own.lua: after Redis lost its data (a restart without persistence, a flush: the epoch
key changed), adds back to each counter the hits one process had put into it itself, so that every
process adding its own makes the fleet's counters what the fleet had admitted, in any order and
interleaved with other processes' write-backs and decisions. Preceded by algorithms.lua when
loaded.

Why one script: each counter's read-modify-write must not interleave with other requests, and
the marker that says "these hits are in" must be written with the hits, so that a retried call
(an earlier one failed part-way: Redis does not undo a script's writes before an error) adds none
twice. The marker is lost with the data it vouches for: after another loss everything is put back
again.

KEYS[2i-1]  counter key of entry i
KEYS[2i]    entry i's marker (same slot as the counter), kept at least 2 periods (60 s at least):
            windows: a hash per process and hash tag, field counter key .. '#' .. window start;
            buckets: one hash per hash tag for the fleet, field counter key, value 'used at'
            (all keys in one hash slot; at most MAX_BATCH entries per call)
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2+7(i-1) .. 8+7(i-1)]  entry i: algorithm, limit, period ms, burst, hits,
         window start in ms (Redis time; windows only, "" for token_bucket and gcra),
         at: Redis time (ms) of the latest of the hits.
         Windows: `hits` are the process' own, added as a fallback's write-back is (the absorb
         functions in algorithms.lua): a fixed window only to the window that is current, a
         sliding window to the current or previous window's count.
         Buckets (token_bucket, gcra): `hits` is the use of the whole fleet that Redis last
         reported to this process, at `at`. A bucket refills once for everyone, so views are not
         added: what the view, refilled to now, exceeds the largest view already put back
         (refilled to now too) is taken from the bucket, never below empty. The bucket thus ends
         as what was written since the loss plus the largest view.

Returns the number of counters changed. --]]

local now = now_ms(ARGV[1])
local changed = 0
local keep = {}
for i = 1, #KEYS / 2 do
  local key, marker = KEYS[2 * i - 1], KEYS[2 * i]
  local b = 1 + 7 * (i - 1)
  local field = key .. '#' .. ARGV[b + 6]
  if ARGV[b + 6] == '' then
    local s = spec_from(ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4])
    local want = unrefilled(s, tonumber(ARGV[b + 5]), math.max(0, now - tonumber(ARGV[b + 7])))
    local have = 0
    local put = redis.call('HGET', marker, key)
    if put then
      local used, at = string.match(put, '^(%S+) (%S+)$')
      have = unrefilled(s, tonumber(used), math.max(0, now - tonumber(at)))
    end
    if want > have then
      local state = read_counter(key, s, now)
      local nxt = s.impl.absorb(state, s, want - have, nil, 0, now)
      if nxt ~= nil and nxt ~= state then
        write_counter(key, s, nxt, now)
        changed = changed + 1
      end
      redis.call('HSET', marker, key, want .. ' ' .. now)
    end
    local hold = 2 * s.period
    if s.limit > 0 and s.burst > s.limit then hold = hold * s.burst / s.limit end
    if (keep[marker] or 0) < hold then keep[marker] = hold end
  elseif redis.call('HEXISTS', marker, field) == 0 then
    local s = spec_from(ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4])
    local state = read_counter(key, s, now)
    local age = math.max(0, now - tonumber(ARGV[b + 7]))
    local nxt = s.impl.absorb(state, s, tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), age, now)
    if nxt ~= nil and nxt ~= state then
      write_counter(key, s, nxt, now)
      changed = changed + 1
    end
    redis.call('HSET', marker, field, '1')
    local hold = 2 * s.period
    if s.limit > 0 and s.burst > s.limit then hold = hold * s.burst / s.limit end
    if (keep[marker] or 0) < hold then keep[marker] = hold end
  end
end
for marker, hold in pairs(keep) do
  local t = ttl_ms(math.max(60000, hold))
  if redis.call('PTTL', marker) < t then redis.call('PEXPIRE', marker, t) end
end
return changed
