import { Cluster, Redis } from 'ioredis';
import { type Clock, monotonicClock } from '../../src/clock';
import { defaultSettings, redisStackOptions, type Settings } from '../../src/settings';
import { createRedisStack, type RedisStackOptions } from '../../src/store/compose';
import type { StoreEvents } from '../../src/store/events';
import { RedisStore } from '../../src/store/redis';
import type { Store } from '../../src/store/store';

// The production Redis stack (every stage on) over real redis-server processes, with a recording
// event sink, for tests that need to see inside a decision.

export interface Recorded {
  counts: Record<string, number>;
  breaker: string[];
  writeBackErrors: string[];
}

export function recordingEvents(): { events: StoreEvents; seen: Recorded } {
  const seen: Recorded = { counts: {}, breaker: [], writeBackErrors: [] };
  const count = (name: string, n = 1) => (seen.counts[name] = (seen.counts[name] ?? 0) + n);
  const events: StoreEvents = {
    storeCall: () => undefined,
    storeFailure: (kind) => count(`failure:${kind}`),
    ownOverload: () => count('ownOverload'),
    breaker: (from, to, reason) => seen.breaker.push(`${from}->${to}: ${reason}`),
    degraded: (policy) => count(`degraded:${policy}`),
    overLimitCacheHit: () => count('overLimitCacheHit'),
    writeBack: (_entries, hits, error) => {
      if (error === undefined) count('writeBackHits', hits);
      else seen.writeBackErrors.push(error);
    },
    refund: (entries, error) => count(error === undefined ? 'refunded' : 'refundError', entries),
    leaseTaken: (units) => count('leaseTaken', units),
    leaseReturned: (units) => count('leaseReturned', units),
    leaseServed: (hits) => count('leaseServed', hits),
    replicas: () => undefined,
    restored: (n) => count('restored', n),
  };
  return { events, seen };
}

export interface StackOptions {
  port: number;
  cluster?: boolean;
  // A manual clock drives both the stack and the scripts' time (explicit time, tests only).
  manual?: Clock;
  settings?: Partial<Settings>;
  stack?: Partial<RedisStackOptions>;
}

export function redisClient(port: number, cluster = false): Redis | Cluster {
  const common = {
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    retryStrategy: (n: number) => Math.min(50 * n, 500),
  };
  return cluster
    ? new Cluster([{ host: '127.0.0.1', port }], {
        enableOfflineQueue: false,
        clusterRetryStrategy: (n: number) => Math.min(50 * n, 500),
        redisOptions: common,
      })
    : new Redis({ host: '127.0.0.1', port, ...common });
}

export function makeStack(o: StackOptions): { store: Store; redis: RedisStore; seen: Recorded; client: Redis | Cluster } {
  const { events, seen } = recordingEvents();
  const settings = defaultSettings({ store: 'redis', ...o.settings });
  const client = redisClient(o.port, o.cluster);
  const redis = new RedisStore({ clients: [client], cluster: o.cluster ?? false, explicitClock: o.manual, events, keyPrefix: settings.cacheKeyPrefix });
  const options: RedisStackOptions = { ...redisStackOptions(settings), clock: o.manual ?? monotonicClock, ...o.stack };
  return { store: createRedisStack(redis, events, options), redis, seen, client };
}

export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
