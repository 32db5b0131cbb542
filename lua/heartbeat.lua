--[[ heartbeat.lua: registers a replica as alive and counts the live ones, so that a fallback can
divide what remains of a limit among the replicas sharing it; and reads Redis' data epoch, so that
a replica notices when Redis lost its data. Preceded by algorithms.lua when loaded (for now_ms).

Why one script: registering, forgetting replicas that stopped heartbeating and counting must use
one Redis time and see no other replica's heartbeat in between; the epoch is read in the same
round trip.

KEYS[1]  the registry (a sorted set: member = replica id, score = Redis time of its last heartbeat)
KEYS[2]  the data epoch (a string, no expiry; same hash slot as KEYS[1])
ARGV[1]  time in ms, for tests only; "" uses redis.call('TIME')
ARGV[2]  replica id
ARGV[3]  ttl ms: a replica whose last heartbeat is older than this no longer counts
ARGV[4]  the epoch this replica proposes, stored only when Redis holds none (after a data loss:
         a restart without persistence, a flush, an eviction)

Returns { live replicas (integer, this one included), now (string, ms), epoch (string) }. The
registry expires 2 * ttl after the last heartbeat of any replica. --]]

local now = now_ms(ARGV[1])
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], num(now), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. num(now - ttl))
redis.call('PEXPIRE', KEYS[1], math.max(1, math.ceil(2 * ttl)))
redis.call('SET', KEYS[2], ARGV[4], 'NX')
return { redis.call('ZCARD', KEYS[1]), num(now), redis.call('GET', KEYS[2]) }
