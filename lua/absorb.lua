--[[ absorb.lua: writes back hits that a replica's local fallback admitted while Redis could not
answer, so the shared counters count them once Redis is back. Preceded by algorithms.lua when
loaded.

Why one script: each counter's read-modify-write must not interleave with other requests.

KEYS[i]  counter key of entry i (all in one hash slot; at most MAX_BATCH entries per call)
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2+8(i-1) .. 9+8(i-1)]  entry i: algorithm, limit, period ms, burst, hits,
         window start in ms (Redis time; windows only, "" for token_bucket and gcra),
         age in ms (buckets: how long ago the last of the hits was admitted, measured by the
         replica; ignored by windows), debt ("1": a region's admissions beyond its allowance,
         multi-region: buckets take them all, even below empty, see bucket.absorb; "0" otherwise)
         Fixed window: the hits are added only if their window is the current one. Sliding
         window: added to the current or the previous window's count, whichever they fell in.
         Token bucket and GCRA: only the part not refilled since is taken,
         max(0, hits - age * limit / period): tokens never below 0, the TAT never beyond
         now + burst * period / limit. Anything else is dropped: it no longer counts.

Returns the number of counters changed. --]]

return rewrite_each(KEYS, ARGV, 8, function(impl, state, s, extra, now)
  return impl.absorb(state, s, extra[1], extra[2], extra[3] or 0, now, extra[4] == 1)
end)
