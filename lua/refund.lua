--[[ refund.lua: gives back hits that were consumed but must not count: those decide.lua took in
one hash-slot group of a Redis Cluster request that another group then denied (the request stays
all-or-nothing), and lease units a replica did not use. Preceded by algorithms.lua when loaded.

Why one script: the read-modify-write of each counter must not interleave with other requests.

KEYS[i]  counter key of entry i (all in one hash slot; at most MAX_BATCH entries per call)
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2+6(i-1) .. 7+6(i-1)]  entry i: algorithm, limit, period ms, burst, hits, and the Redis time
         in ms of the decision (or lease) that consumed them, which finds the window they went to.
         Per entry, because one batch gathers refunds of many decisions.

Returns the number of counters given back to (a counter that expired meanwhile needs nothing;
hits of a window that has closed since are not given back). --]]

return rewrite_each(KEYS, ARGV, 6, function(impl, state, s, extra, now)
  if state == nil then return nil end
  return impl.refund(state, s, extra[1], extra[2], now)
end)
