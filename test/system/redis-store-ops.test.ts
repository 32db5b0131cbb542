import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import { createLogger } from '../../src/logger';
import type { Algorithm } from '../../src/model';
import { loadSettings, type Settings, SettingsError } from '../../src/settings';
import { type StoreEvents, silentEvents } from '../../src/store/events';
import { RedisStore, type RedisClient } from '../../src/store/redis';
import { createRedisClients, validateRedisUrl } from '../../src/store/redis/connection';
import type { AbsorbEntry } from '../../src/store/shared';
import type { LimitCheck } from '../../src/store/store';
import { freePort, type RedisNode, scriptCalls, startCluster, startRedis, stopAll } from '../support/redis';

// The Redis store's operations against real redis-server processes: multi-slot denials whose
// refund fails, huge write-backs, a pool with a dead member, absorb semantics, REDIS_URL
// validation, a stalled Redis, and the replica registry / probe / readiness.

const T0 = 1_800_000_000_000; // a multiple of every period used below
const HOUR = 3_600_000;
const MINUTE = 60_000;

let standalone: RedisNode;
let clusterNodes: RedisNode[];
let clusterSeed = 0;
const opened: RedisClient[] = [];

before(async () => {
  standalone = await startRedis();
  const cluster = await startCluster();
  clusterNodes = cluster.nodes;
  clusterSeed = cluster.nodes[0].port;
});
after(async () => {
  for (const c of opened) c.disconnect();
  await stopAll();
});

function ready<T extends RedisClient>(c: T): Promise<T> {
  opened.push(c);
  return c.status === 'ready' ? Promise.resolve(c) : new Promise((resolve, reject) => (c.once('ready', () => resolve(c)), c.once('error', reject)));
}
const standaloneClient = () => ready(new Redis({ port: standalone.port, host: '127.0.0.1' }));
const clusterClient = () => ready(new Cluster([{ host: '127.0.0.1', port: clusterSeed }]));

interface Recorded {
  events: StoreEvents;
  refunds: { entries: number; error?: string }[];
}
function recorder(): Recorded {
  const refunds: Recorded['refunds'] = [];
  return { refunds, events: { ...silentEvents, refund: (entries, error) => refunds.push({ entries, error }) } };
}

function store(clients: RedisClient[], cluster: boolean, over: Partial<ConstructorParameters<typeof RedisStore>[0]> = {}): RedisStore {
  return new RedisStore({ clients, cluster, events: silentEvents, keyPrefix: 'ops:', refunds: { firstRetryMs: 20, maxRetryMs: 100 }, ...over });
}

function check(key: string, algorithm: Algorithm, limit: number, over: Partial<LimitCheck> = {}): LimitCheck {
  return { key, algorithm, limit, periodMs: HOUR, burst: limit, hits: 1, mode: 'enforce', ...over };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, cond: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const count = (raw: string | null) => (raw === null ? 0 : Number(raw.split(':')[1]));

// Keys (hash tags t0, t1, ...) whose slots are served by two different primaries, with the node of
// each.
async function keysOnTwoPrimaries(client: Cluster, prefix: string): Promise<{ a: string; b: string; nodeA: RedisNode; nodeB: RedisNode }> {
  const slots = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
  const owner = (key: string) => slots.find(([lo, hi]) => calculateSlot(key) >= lo && calculateSlot(key) <= hi)![2][1];
  const a = `${prefix}{a}`;
  let b = '';
  for (let i = 0; b === ''; i++) if (owner(`${prefix}{b${i}}`) !== owner(a)) b = `${prefix}{b${i}}`;
  const node = (port: number) => clusterNodes.find((n) => n.port === port)!;
  return { a, b, nodeA: node(owner(a)), nodeB: node(owner(b)) };
}

describe('Redis Cluster: a request spanning slots when giving back fails', () => {
  test('slot B denies, the refund to slot A fails: still denied, and A is given back once the fault clears', async () => {
    const client = await clusterClient();
    const rec = recorder();
    const clock = new ManualClock(T0);
    const s = store([client], true, { events: rec.events, explicitClock: clock });
    const { a, b, nodeA, nodeB } = await keysOnTwoPrimaries(client, 'd3:');
    const roomy = check(a, 'fixed_window', 100);
    const tight = check(b, 'fixed_window', 1);
    try {
      assert.equal((await s.decide([roomy, tight], { countDeniedHits: false })).admitted, true);
      assert.equal(count(await client.get(a)), 1);
      // B answers late (its clients paused, the node itself healthy: no failover), so A has
      // consumed when A's node starts refusing writes; then B denies and A's refund fails.
      await nodeB.cli('CLIENT', 'PAUSE', '1000', 'ALL');
      const pending = s.decide([roomy, tight], { countDeniedHits: false });
      await until('slot A to consume', async () => count(await client.get(a)) === 2);
      assert.equal(await nodeA.cli('CONFIG', 'SET', 'maxmemory', '1'), 'OK');
      let denied: Awaited<typeof pending>;
      try {
        denied = await pending;
      } finally {
        await nodeA.cli('CONFIG', 'SET', 'maxmemory', '0').catch(() => undefined);
      }
      assert.equal(denied.admitted, false);
      assert.deepEqual(
        denied.outcomes.map((o) => [o.allowed, o.consumed, o.remaining]),
        [
          [true, false, 99],
          [false, false, 0],
        ],
      );
      assert.equal(denied.storeTimeMs, T0);
      assert.ok(
        rec.refunds.some((r) => r.error !== undefined && /OOM/.test(r.error)),
        JSON.stringify(rec.refunds),
      );
      await until('the refund queue to empty', () => s.refunds.size === 0);
      assert.equal(count(await client.get(a)), 1);
      assert.equal(count(await client.get(b)), 1);
      assert.ok(rec.refunds.some((r) => r.error === undefined && r.entries === 1));
    } finally {
      await nodeA.cli('CONFIG', 'SET', 'maxmemory', '0').catch(() => undefined);
      await s.close();
    }
  });

  test('slot B fails, slot A consumed: the error is thrown and A is given back', async () => {
    const client = await clusterClient();
    const s = store([client], true, { explicitClock: new ManualClock(T0) });
    const { a, b, nodeB } = await keysOnTwoPrimaries(client, 'd3err:');
    try {
      await nodeB.cli('CONFIG', 'SET', 'maxmemory', '1');
      await assert.rejects(s.decide([check(a, 'fixed_window', 100), check(b, 'fixed_window', 100)], { countDeniedHits: false }), /OOM/);
      await nodeB.cli('CONFIG', 'SET', 'maxmemory', '0');
      await s.refunds.drain();
      assert.equal(count(await client.get(a)), 0);
      assert.equal(await client.get(b), null);
    } finally {
      await nodeB.cli('CONFIG', 'SET', 'maxmemory', '0').catch(() => undefined);
      await s.close();
    }
  });
});

describe('absorb: huge write-backs', () => {
  for (const topology of ['standalone', 'cluster'] as const) {
    for (const n of [12_000, 100_000]) {
      test(`${topology}: ${n} entries, distinct keys, every counter holds its hits`, async () => {
        const client = topology === 'cluster' ? await clusterClient() : await standaloneClient();
        const s = store([client], topology === 'cluster', { explicitClock: new ManualClock(T0) });
        const entries: AbsorbEntry[] = Array.from({ length: n }, (_, i) => ({
          key: `wb:${topology}:${n}:{k${i}}`,
          algorithm: 'fixed_window',
          limit: 1000,
          periodMs: HOUR,
          burst: 1000,
          hits: 1 + (i % 3),
          windowStartMs: T0,
          ageMs: 0,
        }));
        try {
          await s.absorb(entries);
          const wrong: string[] = [];
          for (let i = 0; i < n; i += 5_000) {
            const chunk = entries.slice(i, i + 5_000);
            const values = await Promise.all(chunk.map((e) => client.get(e.key)));
            chunk.forEach((e, j) => {
              if (values[j] !== `${T0}:${e.hits}`) wrong.push(`${e.key}=${values[j]}`);
            });
          }
          assert.deepEqual(wrong.slice(0, 5), []);
        } finally {
          await s.close();
        }
      });
    }
  }
});

describe('absorb semantics', () => {
  const absorb = async (s: RedisStore, e: Partial<AbsorbEntry> & { key: string; algorithm: Algorithm }) =>
    s.absorb([{ limit: 60, periodMs: MINUTE, burst: 60, hits: 60, ageMs: 0, ...e }]);
  const peek = async (s: RedisStore, key: string, algorithm: Algorithm) =>
    (await s.peek([{ key, algorithm, limit: 60, periodMs: MINUTE, burst: 60, hits: 1, mode: 'enforce' }], { countDeniedHits: false })).outcomes[0].remaining;

  test('fixed window: hits of the current window count, of an old window are dropped', async () => {
    const client = await standaloneClient();
    const s = store([client], false, { explicitClock: new ManualClock(T0 + 5_000) });
    try {
      await absorb(s, { key: 'abs:fw:old', algorithm: 'fixed_window', hits: 7, windowStartMs: T0 - MINUTE });
      assert.equal(await client.get('abs:fw:old'), null);
      await absorb(s, { key: 'abs:fw:now', algorithm: 'fixed_window', hits: 7, windowStartMs: T0 });
      assert.equal(await peek(s, 'abs:fw:now', 'fixed_window'), 53);
    } finally {
      await s.close();
    }
  });

  test('sliding window: current and previous window take their hits, older ones are dropped', async () => {
    const client = await standaloneClient();
    const s = store([client], false, { explicitClock: new ManualClock(T0) });
    try {
      await absorb(s, { key: 'abs:sw', algorithm: 'sliding_window', hits: 10, windowStartMs: T0 });
      await absorb(s, { key: 'abs:sw', algorithm: 'sliding_window', hits: 20, windowStartMs: T0 - MINUTE });
      await absorb(s, { key: 'abs:sw', algorithm: 'sliding_window', hits: 40, windowStartMs: T0 - 2 * MINUTE });
      assert.equal(await client.get('abs:sw'), `${T0}:10:20`);
    } finally {
      await s.close();
    }
  });

  test('token bucket: only what has not refilled since is taken', async () => {
    const client = await standaloneClient();
    const s = store([client], false, { explicitClock: new ManualClock(T0) });
    try {
      await absorb(s, { key: 'abs:tb:old', algorithm: 'token_bucket', hits: 60, ageMs: 2 * HOUR });
      assert.equal(await client.get('abs:tb:old'), null);
      assert.equal(await peek(s, 'abs:tb:old', 'token_bucket'), 60);
      await absorb(s, { key: 'abs:tb:now', algorithm: 'token_bucket', hits: 60, ageMs: 0 });
      assert.equal(await peek(s, 'abs:tb:now', 'token_bucket'), 0);
      await absorb(s, { key: 'abs:tb:half', algorithm: 'token_bucket', hits: 60, ageMs: 30_000 });
      assert.equal(await peek(s, 'abs:tb:half', 'token_bucket'), 30);
    } finally {
      await s.close();
    }
  });

  test('gcra: only what has not refilled since, the TAT capped at now + burst', async () => {
    const client = await standaloneClient();
    const s = store([client], false, { explicitClock: new ManualClock(T0) });
    try {
      await absorb(s, { key: 'abs:g:old', algorithm: 'gcra', hits: 60, ageMs: 2 * HOUR });
      assert.equal(await client.get('abs:g:old'), null);
      await absorb(s, { key: 'abs:g:half', algorithm: 'gcra', hits: 60, ageMs: 30_000 });
      assert.equal(await peek(s, 'abs:g:half', 'gcra'), 30);
      await absorb(s, { key: 'abs:g:cap', algorithm: 'gcra', hits: 500, ageMs: 0 });
      assert.equal(Number(await client.get('abs:g:cap')), T0 + MINUTE);
    } finally {
      await s.close();
    }
  });
});

describe('refund: each entry carries its own decision time', () => {
  test('hits of the current window go back, hits of a closed window do not', async () => {
    const client = await standaloneClient();
    const clock = new ManualClock(T0);
    const s = store([client], false, { explicitClock: clock });
    const c = (key: string) => check(key, 'fixed_window', 10, { periodMs: MINUTE, hits: 3 });
    try {
      await s.decide([c('rf:old')], { countDeniedHits: false });
      clock.advance(MINUTE);
      await s.decide([c('rf:old'), c('rf:now')], { countDeniedHits: false });
      await s.refund([
        { ...c('rf:old'), decidedAtMs: T0 },
        { ...c('rf:now'), decidedAtMs: T0 + MINUTE },
      ]);
      assert.equal(await client.get('rf:old'), `${T0 + MINUTE}:3`);
      assert.equal(await client.get('rf:now'), `${T0 + MINUTE}:0`);
    } finally {
      await s.close();
    }
  });
});

describe('connection pool', () => {
  test('one member down: 200 decisions all succeed on the ready one', async () => {
    const dead = new Redis({ port: await freePort(), host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    dead.on('error', () => undefined);
    opened.push(dead);
    const s = store([dead, await standaloneClient()], false);
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 200 }, (_, i) => s.decide([check(`pool:{k${i % 7}}`, 'token_bucket', 1e6)], { countDeniedHits: false })),
      );
      const failures = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
      assert.deepEqual(failures.slice(0, 3), []);
      assert.ok(results.every((r) => r.status === 'fulfilled' && r.value.admitted));
      assert.equal(s.ready(), true);
    } finally {
      await s.close();
    }
  });

  test('no member ready: fails fast, not ready', async () => {
    const dead = new Redis({ port: await freePort(), host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    dead.on('error', () => undefined);
    opened.push(dead);
    const s = store([dead], false);
    try {
      await assert.rejects(s.decide([check('pool:none', 'fixed_window', 5)], { countDeniedHits: false }), /no Redis connection ready/);
      assert.equal(s.connected(), false);
      assert.equal(s.ready(), false);
    } finally {
      await s.close();
    }
  });
});

describe('refund queue', () => {
  test('bounded: beyond maxEntries the oldest are dropped and reported; drain keeps what failed', async () => {
    const dead = new Redis({ port: await freePort(), host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 });
    dead.on('error', () => undefined);
    opened.push(dead);
    const rec = recorder();
    const s = new RedisStore({ clients: [dead], cluster: false, events: rec.events, keyPrefix: 'ops:', refunds: { maxEntries: 300, firstRetryMs: 10_000 } });
    const entry = (i: number) => ({ key: `q:${i}`, algorithm: 'fixed_window' as const, limit: 5, periodMs: MINUTE, burst: 5, hits: 1, decidedAtMs: T0 });
    try {
      s.refunds.add(Array.from({ length: 200 }, (_, i) => entry(i)));
      s.refunds.add(Array.from({ length: 200 }, (_, i) => entry(200 + i)));
      assert.equal(s.refunds.size, 300);
      assert.ok(
        rec.refunds.some((r) => r.entries === 100 && r.error === 'dropped: queue full'),
        JSON.stringify(rec.refunds),
      );
      await assert.rejects(s.refunds.drain(), /300 refund entries not given back: no Redis connection ready/);
      assert.equal(s.refunds.size, 300);
    } finally {
      await s.close();
    }
  });
});

describe('REDIS_URL validation', () => {
  const base = loadSettings([], {});
  const bad: [Settings['redisType'], string, RegExp][] = [
    ['single', '127.0.0.1:63x79', /'127\.0\.0\.1:63x79' is not host:port \(port must be 1\.\.65535\)/],
    ['single', '127.0.0.1:0', /port must be 1\.\.65535/],
    ['single', '127.0.0.1:65536', /port must be 1\.\.65535/],
    ['single', 'localhost:', /port must be 1\.\.65535/],
    ['single', ':6379', /has no host/],
    ['single', '::1:6379', /IPv6 address goes in brackets/],
    ['single', 'redis://:6379', /has no host/],
    ['single', 'redis://', /has no host/],
    ['single', 'redis://127.0.0.1:99999', /port must be 1\.\.65535/],
    ['single', 'redis://127.0.0.1:6379/x', /database 'x'/],
    ['single', 'redis://127.0.0.1:6379/-1', /database '-1'/],
    ['single', 'http://127.0.0.1:6379', /scheme 'http:\/\/'/],
    ['single', 'redis:/127.0.0.1:6379', /is not host:port/],
    ['single', 'a:1,b:2', /needs REDIS_TYPE=sentinel or cluster/],
    ['single', '', /is empty/],
    ['single', '/', /unix socket/],
    ['sentinel', 'mymaster', /no sentinel address/],
    ['sentinel', '127.0.0.1:26379,127.0.0.1:26380', /not a master name/],
    ['sentinel', 'mymaster,127.0.0.1:2637x', /sentinel address '127\.0\.0\.1:2637x'.*port must be/],
    ['sentinel', ',127.0.0.1:26379', /no master name/],
    ['cluster', '127.0.0.1:7000,', /empty entry/],
    ['cluster', '127.0.0.1:7000,127.0.0.1:70000', /node '127\.0\.0\.1:70000'.*port must be/],
    ['cluster', 'http://127.0.0.1:7000', /scheme 'http:\/\/'/],
    ['cluster', 'redis://127.0.0.1:7000/1', /database number/],
  ];
  for (const [redisType, redisUrl, why] of bad) {
    test(`${redisType} '${redisUrl}' is refused`, () => {
      assert.throws(
        () => validateRedisUrl({ ...base, redisType, redisUrl }),
        (err: Error) => err instanceof SettingsError && err.message.startsWith('REDIS_URL: ') && why.test(err.message) && /expected /.test(err.message),
      );
    });
  }

  test('a password never appears in the message', () => {
    assert.throws(
      () => validateRedisUrl({ ...base, redisUrl: 'redis://u:s3cret@127.0.0.1:6379/x' }),
      (err: Error) => !err.message.includes('s3cret'),
    );
  });

  const good: [Settings['redisType'], string][] = [
    ['single', 'redis://127.0.0.1:6379'],
    ['single', 'redis://127.0.0.1'],
    ['single', 'redis://127.0.0.1:6379/'],
    ['single', 'rediss://user:p%40ss@redis.internal:6380/2'],
    ['single', 'redis://[::1]:6379/0'],
    ['single', '127.0.0.1:6379'],
    ['single', 'redis-master_1.svc.cluster.local:6379'],
    ['single', 'localhost'],
    ['single', '[::1]:6379'],
    ['single', '/var/run/redis/redis.sock'],
    ['sentinel', 'mymaster,10.0.0.1:26379,10.0.0.2:26379'],
    ['sentinel', 'mymaster, sentinel-0:26379'],
    ['cluster', '10.0.0.1:7000,10.0.0.2:7000'],
    ['cluster', 'redis://10.0.0.1:7000,rediss://10.0.0.2:7000'],
  ];
  for (const [redisType, redisUrl] of good) {
    test(`${redisType} '${redisUrl}' is accepted`, () => validateRedisUrl({ ...base, redisType, redisUrl }));
  }

  test('createRedisClients refuses a bad REDIS_URL before connecting', () => {
    assert.throws(() => createRedisClients({ ...base, redisUrl: '127.0.0.1:63x79' }, createLogger('silent')), SettingsError);
  });
});

describe('a stalled Redis', () => {
  test('a decision in flight while Redis is stopped longer than REDIS_TIMEOUT gets its real answer', async () => {
    const node = await startRedis();
    const sink = new Writable({ write: (_c, _e, done) => done() });
    const settings: Settings = { ...loadSettings([], {}), redisUrl: `127.0.0.1:${node.port}`, redisTimeoutMs: 100 };
    const { clients, cluster } = createRedisClients(settings, createLogger('info', sink));
    const s = store(clients, cluster);
    await until('the store to be ready', () => s.ready());
    try {
      node.pause();
      const pending = s.decide([check('stall:k', 'fixed_window', 5)], { countDeniedHits: false });
      let settled = false;
      void pending.finally(() => (settled = true)).catch(() => undefined);
      await sleep(500);
      assert.equal(settled, false);
      node.resume();
      const d = await pending;
      assert.equal(d.admitted, true);
      assert.equal(d.outcomes[0].remaining, 4);
      assert.equal(typeof d.storeTimeMs, 'number');
      assert.equal(count(await (clients[0] as Redis).get('stall:k')), 1);
    } finally {
      node.resume();
      await s.close();
      await node.stop();
    }
  });
});

describe('replica registry, probe and readiness', () => {
  test('heartbeat counts live replicas, forgets silent ones, expires the key; leave removes', async () => {
    const client = await standaloneClient();
    const clock = new ManualClock(T0);
    const s = store([client], false, { explicitClock: clock, keyPrefix: 'reg:' });
    try {
      assert.deepEqual(await s.heartbeat('r1', 5_000, 'e1'), { replicas: 1, nowMs: T0, epoch: 'e1' });
      clock.advance(3_000);
      assert.deepEqual(await s.heartbeat('r2', 5_000, 'e2'), { replicas: 2, nowMs: T0 + 3_000, epoch: 'e1' });
      const pttl = await client.pttl('reg:{sluice-fleet}replicas');
      assert.ok(pttl > 9_000 && pttl <= 10_000, `pttl ${pttl}`);
      clock.advance(3_000);
      assert.equal((await s.heartbeat('r2', 5_000, 'e2')).replicas, 1);
      await s.leave('r2');
      assert.equal(await client.zcard('reg:{sluice-fleet}replicas'), 0);
    } finally {
      await s.close();
    }
  });

  test('the data epoch: kept while Redis keeps its data, the proposal of the first heartbeat after a loss', async () => {
    const node = await startRedis();
    const client = await ready(new Redis({ port: node.port, host: '127.0.0.1' }));
    const s = store([client], false, { keyPrefix: 'ep:' });
    try {
      assert.equal((await s.heartbeat('r1', 5_000, 'e1')).epoch, 'e1');
      assert.equal((await s.heartbeat('r2', 5_000, 'e2')).epoch, 'e1');
      assert.equal(await client.pttl('ep:{sluice-fleet}epoch'), -1);
      await client.flushall();
      assert.equal((await s.heartbeat('r2', 5_000, 'e2')).epoch, 'e2');
      assert.equal((await s.heartbeat('r1', 5_000, 'e1')).epoch, 'e2');
    } finally {
      await s.close();
      await node.stop();
    }
  });

  for (const keyPrefix of ['reg2:', 'reg3:{fleet}:']) {
    test(`heartbeat on a cluster, with Redis time (KEY_PREFIX '${keyPrefix}')`, async () => {
      const client = await clusterClient();
      const s = store([client], true, { keyPrefix });
      try {
        const before = Date.now();
        const r = await s.heartbeat('r1', 5_000, 'e1');
        assert.equal(r.replicas, 1);
        assert.equal(r.epoch, 'e1');
        assert.ok(Math.abs(r.nowMs - before) < 5_000, `Redis time ${r.nowMs}, local ${before}`);
      } finally {
        await s.close();
      }
    });
  }

  test('restore goes through in batches, per slot on a cluster', async () => {
    const client = await clusterClient();
    const s = store([client], true, { explicitClock: new ManualClock(T0) });
    const entries = Array.from({ length: 600 }, (_, i) => ({
      key: `rs:{k${i % 300}}:${i}`,
      algorithm: 'fixed_window' as const,
      limit: 10,
      periodMs: MINUTE,
      burst: 10,
      remaining: 3,
      atMs: T0,
    }));
    try {
      await s.restore(entries);
      const values = await Promise.all(entries.map((e) => client.get(e.key)));
      assert.deepEqual([...new Set(values)], [`${T0}:7`]);
    } finally {
      await s.close();
    }
  });

  test('probe writes nothing; ready() flips after a real round trip, and listeners hear it', async () => {
    const client = new Redis({ port: standalone.port, host: '127.0.0.1', lazyConnect: true });
    opened.push(client);
    const s = store([client], false, { keyPrefix: 'probe:' });
    let changes = 0;
    s.onReadyChange(() => changes++);
    try {
      assert.equal(s.ready(), false);
      await client.connect();
      await until('ready', () => s.ready());
      assert.ok(changes >= 1);
      const { nowMs } = await s.probe();
      assert.ok(Math.abs(nowMs - Date.now()) < 5_000);
      assert.equal(await client.exists('probe:{sluice-probe}'), 0);
    } finally {
      await s.close();
    }
  });

  test('a cluster is ready only once every primary connection is up, so the first decision waits on nothing', async () => {
    // As the resilience tests connect: no offline queue anywhere, so a command sent to a node
    // connection still opening fails or waits out ioredis' 100 ms failover retry.
    const common = { enableOfflineQueue: false, maxRetriesPerRequest: 0, autoResendUnfulfilledCommands: false };
    const client = new Cluster([{ host: '127.0.0.1', port: clusterSeed }], { enableOfflineQueue: false, redisOptions: common });
    opened.push(client);
    const calls: { seconds: number; ok: boolean }[] = [];
    const s = store([client], true, { events: { ...silentEvents, storeCall: (op, seconds, ok) => op === 'decide' && calls.push({ seconds, ok }) } });
    try {
      await until('ready', () => s.ready());
      assert.deepEqual(
        client.nodes('master').map((n) => n.status),
        ['ready', 'ready', 'ready'],
      );
      const checks = Array.from({ length: 12 }, (_, i) => check(`warm:{k${i}}`, 'gcra', 100));
      assert.equal(new Set(checks.map((c) => calculateSlot(c.key))).size, 12);
      assert.equal((await s.decide(checks, { countDeniedHits: false })).admitted, true);
      assert.equal(calls.length, 12);
      assert.ok(
        calls.every((c) => c.ok && c.seconds < 0.05),
        JSON.stringify(calls),
      );
    } finally {
      await s.close();
    }
  });

  test('probe goes through every pool connection that is up', async () => {
    const node = await startRedis();
    const clients = [0, 1, 2].map(() => new Redis({ port: node.port, host: '127.0.0.1' }));
    await Promise.all(clients.map((c) => ready(c)));
    const s = store(clients, false);
    try {
      await until('ready', () => s.ready());
      const before = await scriptCalls(node);
      await s.probe();
      assert.equal((await scriptCalls(node)) - before, 3);
    } finally {
      await s.close();
      await node.stop();
    }
  });

  test('lease takes units at Redis time; giveBack returns them to that window', async () => {
    const client = await standaloneClient();
    const s = store([client], false, { explicitClock: new ManualClock(T0 + 1_000) });
    const spec = { key: 'lease:k', algorithm: 'fixed_window' as const, limit: 10, periodMs: MINUTE, burst: 10 };
    try {
      const grant = await s.lease(spec, 4);
      assert.deepEqual(grant, { granted: 4, takenAtMs: T0 + 1_000, remaining: 6, resetMs: MINUTE - 1_000, retryAfterMs: 0 });
      await s.giveBack(spec, 3, grant.takenAtMs);
      assert.equal(await client.get('lease:k'), `${T0}:1`);
    } finally {
      await s.close();
    }
  });
});

describe('script loading: Redis Functions, EVALSHA where there are none', () => {
  const decideTwice = async (s: RedisStore) => {
    const checks = [check('load:a', 'fixed_window', 5), check('load:b', 'gcra', 5)];
    const first = await s.decide(checks, { countDeniedHits: false });
    const second = await s.decide(checks, { countDeniedHits: false });
    assert.equal(first.admitted && second.admitted, true);
    assert.deepEqual(
      second.outcomes.map((o) => o.remaining),
      [3, 3],
    );
  };
  const commandCalls = async (node: RedisNode, command: string) =>
    Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(await node.cli('INFO', 'commandstats'))?.[1] ?? 0);

  test('the library is loaded where it is missing, and again after FUNCTION FLUSH', async () => {
    const node = await startRedis();
    const client = await ready(new Redis({ port: node.port, host: '127.0.0.1' }));
    const s = store([client], false);
    try {
      await decideTwice(s);
      assert.match(await node.cli('FUNCTION', 'LIST'), /sluice_[0-9a-f]{12}/);
      await node.cli('FUNCTION', 'FLUSH');
      await client.del('load:a', 'load:b');
      await decideTwice(s);
      assert.equal(await commandCalls(node, 'evalsha'), 0);
      assert.ok((await commandCalls(node, 'fcall')) >= 4);
    } finally {
      await s.close();
      await node.stop();
    }
  });

  test('a server without Functions (as Redis 6) is served by EVALSHA with the same answers', async () => {
    const node = await startRedis({ args: ['--rename-command', 'FUNCTION', 'sluice-test-no-function', '--rename-command', 'FCALL', 'sluice-test-no-fcall'] });
    const client = await ready(new Redis({ port: node.port, host: '127.0.0.1' }));
    const s = store([client], false);
    try {
      await decideTwice(s);
      assert.ok((await commandCalls(node, 'evalsha')) + (await commandCalls(node, 'eval')) >= 2);
    } finally {
      await s.close();
      await node.stop();
    }
  });
});

describe('requests of one event-loop turn go to Redis as one call, each decided on its own', () => {
  test('in arrival order, all-or-nothing each, as if one after another', async () => {
    const node = await startRedis();
    const client = await ready(new Redis({ port: node.port, host: '127.0.0.1' }));
    const s = store([client], false);
    try {
      await until('ready', () => s.ready());
      const before = await scriptCalls(node);
      // 50 requests in one turn: each wants a:batch (limit 30) and b:batch (limit 20).
      const a = check('a:batch', 'fixed_window', 30);
      const b = check('b:batch', 'fixed_window', 20);
      const decisions = await Promise.all(Array.from({ length: 50 }, () => s.decide([a, b], { countDeniedHits: false })));
      const calls = (await scriptCalls(node)) - before;
      assert.ok(calls < 5, `expected the 50 requests in a few calls, got ${calls}`);
      // The first 20 pass; the rest are denied by b and consume nothing of a (all-or-nothing).
      assert.deepEqual(
        decisions.map((d) => d.admitted),
        Array.from({ length: 50 }, (_, i) => i < 20),
      );
      assert.deepEqual(
        decisions.slice(0, 20).map((d) => d.outcomes[1].remaining),
        Array.from({ length: 20 }, (_, i) => 19 - i),
      );
      for (const d of decisions.slice(20)) {
        assert.deepEqual(
          d.outcomes.map((o) => [o.allowed, o.consumed, o.remaining]),
          [
            [true, false, 10],
            [false, false, 0],
          ],
        );
      }
      assert.equal(count(await client.get('a:batch')), 20);
      assert.equal(count(await client.get('b:batch')), 20);
    } finally {
      await s.close();
      await node.stop();
    }
  });

  test('a request the script cannot decide fails alone, writing nothing; the rest of its batch is decided', async () => {
    const node = await startRedis();
    const client = await ready(new Redis({ port: node.port, host: '127.0.0.1' }));
    const s = store([client], false);
    try {
      await until('ready', () => s.ready());
      // A key holding another type (WRONGTYPE) fails the request that reads it; the script goes on.
      await client.hset('wrongtype:batch', 'f', '1');
      const before = await scriptCalls(node);
      const results = await Promise.allSettled([
        s.decide([check('ok:batch', 'fixed_window', 5)], { countDeniedHits: false }),
        s.decide([check('also-ok:batch', 'fixed_window', 5), check('wrongtype:batch', 'fixed_window', 5)], { countDeniedHits: false }),
        s.decide([check('ok:batch', 'fixed_window', 5)], { countDeniedHits: false }),
      ]);
      assert.equal((await scriptCalls(node)) - before, 1, 'one batch');
      assert.deepEqual(
        results.map((r) => r.status),
        ['fulfilled', 'rejected', 'fulfilled'],
      );
      assert.match(String((results[1] as PromiseRejectedResult).reason), /WRONGTYPE/);
      assert.equal(count(await client.get('ok:batch')), 2);
      assert.equal(await client.get('also-ok:batch'), null, 'the failed request wrote nothing');
    } finally {
      await s.close();
      await node.stop();
    }
  });
});
