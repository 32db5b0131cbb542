import { Redis } from 'ioredis';
import { counterKey } from '../src/keys';
import { decideArgs, windowBase } from '../src/store/redis';
import type { LimitCheck } from '../src/store/store';
import type { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import type { RedisNode } from '../test/support/redis';
import { redisCpuSeconds } from './cpu';
import { distinctRequest } from './fleet';

// What Redis pays for a decide call on new counters before the script decides anything: a
// function that takes decide's own arguments (bench/peer.ts' request, every key new, as the store
// sends them), reads the counters and creates each with what a new counter stores, where sluice
// keeps it (fixed windows: fields of their window's hash, HMGET + HSET, and the new hash's expiry;
// counters with a key each: MGET, SET PX NX), and answers in decide's shape for new counters
// (admitted, then flags per limit), with nothing in between. The peer section reports it beside
// upstream's INCRBY + EXPIRE.

const LIBRARY = `#!lua name=sluice_bench_floor
redis.register_function('sluice_bench_floor', function(KEYS, ARGV)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local nspecs = tonumber(ARGV[5])
  local groups = tonumber(ARGV[6 + nspecs])
  local g, first = 7 + nspecs, 1
  for _ = 1, groups do
    local period, base = string.match(ARGV[5 + tonumber(ARGV[g])], '^[^:]+:[^:]+:([^:]+):[^:]+:[^:]+:(.*)$')
    period = tonumber(period)
    local last = first + tonumber(ARGV[g + 1]) - 1
    local h = base .. string.format('%d', now - now % period)
    redis.call('HMGET', h, unpack(KEYS, first, last))
    local fields, n = {}, 0
    for i = first, last do
      fields[n + 1], fields[n + 2] = KEYS[i], '1'
      n = n + 2
    end
    redis.call('HSET', h, unpack(fields, 1, n))
    if redis.call('PTTL', h) == -1 then redis.call('PEXPIRE', h, 2 * period) end
    first = last + 1
    g = g + 2
  end
  if first <= #KEYS then
    redis.call('MGET', unpack(KEYS, first))
    for i = first, #KEYS do redis.call('SET', KEYS[i], '1764640000000:1', 'PX', 60000, 'NX') end
  end
  local out, no = { 1 }, 1
  local a = g
  for _ = 1, tonumber(ARGV[4]) do
    local n = tonumber(ARGV[a])
    no = no + 1
    out[no] = 1
    for _ = 1, n do
      no = no + 1
      out[no] = 3
    end
    a = a + 1 + 2 * n
  end
  return out
end)`;

// Calls in flight at once, as a busy sluice replica has (one batch per event-loop turn).
const IN_FLIGHT = 2;

// The i-th distinct request of the template as sluice's limit checks: its descriptors' counters
// (fixed window, one minute, the config's limit), under a prefix of their own.
function checks(template: RateLimitRequest, limitPerMinute: number, i: number): LimitCheck[] {
  return distinctRequest(template, i).descriptors.map((d) => ({
    key: counterKey({ domain: template.domain, entries: d.entries, algorithm: 'fixed_window', periodMs: 60_000 }, { prefix: 'floor:', hashTag: 'descriptor' }),
    algorithm: 'fixed_window',
    limit: limitPerMinute,
    periodMs: 60_000,
    burst: limitPerMinute,
    hits: 1,
    mode: 'enforce',
  }));
}

export interface FloorOptions {
  // bench/peer.ts' request and its config's limit: keys-load sends this request's distinct variants.
  template: RateLimitRequest;
  limitPerMinute: number;
  // Requests per call (sluice's mean in the same run), and how many to measure.
  batchRequests: number;
  requests: number;
  // As sluice's rows keep fixed windows (WINDOW_COUNTERS): fields of window hashes, or keys.
  windowHashes: boolean;
}

// Redis CPU µs per descriptor of `requests` distinct requests, every counter new.
export async function scriptFloor(redis: RedisNode, o: FloorOptions): Promise<number> {
  const { template, limitPerMinute, batchRequests, requests } = o;
  const descriptors = template.descriptors.length;
  const conn = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true });
  await conn.connect();
  try {
    await conn.call('FUNCTION', 'LOAD', 'REPLACE', LIBRARY);
    const batch = Math.max(1, Math.round(batchRequests));
    const windows = o.windowHashes ? windowBase('floor:') : undefined;
    let next = 0;
    const run = async (count: number) => {
      const end = next + count;
      const worker = async () => {
        while (next < end) {
          const first = next;
          next = Math.min(end, next + batch);
          const reqs = [];
          for (let i = first; i < next; i++) {
            const all = checks(template, limitPerMinute, i);
            reqs.push({ all, idx: all.map((_, j) => j) });
          }
          const [numKeys, args] = decideArgs(reqs, false, '', 'request', windows);
          const reply = (await conn.call('FCALL', 'sluice_bench_floor', numKeys, ...args)) as unknown[];
          if (reply.length !== (1 + descriptors) * reqs.length + 1)
            throw new Error(`floor function answered ${reply.length} entries for ${reqs.length} requests`);
        }
      };
      await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
    };
    await run(Math.min(20_000, requests)); // warm-up, as the rows have
    const cpu0 = await redisCpuSeconds(redis);
    await run(requests);
    const cpu1 = await redisCpuSeconds(redis);
    return ((cpu1 - cpu0) * 1e6) / (requests * descriptors);
  } finally {
    await conn.call('FUNCTION', 'DELETE', 'sluice_bench_floor').catch(() => undefined);
    conn.disconnect();
  }
}
