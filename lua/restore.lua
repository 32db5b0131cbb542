--[[ restore.lua: puts back what a replica last saw of its counters after Redis lost its data (a
restart without persistence, detected by the epoch key changing), so that hits Redis admitted
before it lost them still count. Preceded by algorithms.lua when loaded.

Why one script: each counter's read-modify-write must not interleave with other requests.

KEYS[i]  counter key of entry i (all in one hash slot; at most MAX_BATCH entries per call)
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2+6(i-1) .. 7+6(i-1)]  entry i: algorithm, limit, period ms, burst, remaining (whole requests
         Redis said were left), time in ms (Redis time) when it said so.
         Each counter becomes the more used of what it holds and what was seen (see the restore
         functions in algorithms.lua); a view of a window that is over changes nothing.

Returns the number of counters changed. --]]

return rewrite_each(KEYS, ARGV, 6, function(impl, state, s, extra, now)
  return impl.restore(state, s, extra[1], extra[2], now)
end)
