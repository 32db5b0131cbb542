import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { ManualClock } from '../../src/clock';
import { counterKey } from '../../src/keys';
import type { Algorithm, LimitMode } from '../../src/model';
import { silentEvents } from '../../src/store/events';
import { MemoryStore } from '../../src/store/memory';
import { RedisStore } from '../../src/store/redis';
import type { LimitCheck, Store } from '../../src/store/store';
import { startCluster, startRedis, startSentinelSet, stopAll } from '../support/redis';
import { storeBehaviour } from '../support/store-behaviour';

// The Redis store against real redis-server processes spawned on free ports: the behavioural
// suite on standalone, Sentinel and Cluster; the same random trace through the memory store and
// the Redis store (explicit time) must give identical answers.

type Topology = { name: string; client: () => Promise<Redis | Cluster>; cluster: boolean };

function ready(c: Redis | Cluster): Promise<Redis | Cluster> {
  return c.status === 'ready' ? Promise.resolve(c) : new Promise((resolve, reject) => (c.once('ready', () => resolve(c)), c.once('error', reject)));
}

const topologies: Topology[] = [];
let standalonePort = 0;
let sentinelPort = 0;
let masterName = '';
let clusterPort = 0;

before(async () => {
  standalonePort = (await startRedis()).port;
  const sentinels = await startSentinelSet();
  sentinelPort = sentinels.sentinel.port;
  masterName = sentinels.masterName;
  clusterPort = (await startCluster()).nodes[0].port;
});
after(() => stopAll());

topologies.push(
  { name: 'standalone', cluster: false, client: () => ready(new Redis({ port: standalonePort, host: '127.0.0.1' })) },
  { name: 'sentinel', cluster: false, client: () => ready(new Redis({ sentinels: [{ host: '127.0.0.1', port: sentinelPort }], name: masterName })) },
  { name: 'cluster', cluster: true, client: () => ready(new Cluster([{ host: '127.0.0.1', port: clusterPort }])) },
);

// Fixed windows as window-hash fields (WINDOW_COUNTERS=hash, the default; a cluster keeps a key
// per counter all the same), and on one Redis also as keys of their own (WINDOW_COUNTERS=keys).
const variants = [
  ...topologies.map((t) => ({ ...t, windowHashes: true })),
  { ...topologies[0], name: 'standalone, WINDOW_COUNTERS=keys', windowHashes: false },
];

for (const t of variants) {
  storeBehaviour(
    `redis ${t.name}`,
    async (clock) =>
      new RedisStore({
        clients: [await t.client()],
        cluster: t.cluster,
        explicitClock: clock,
        events: silentEvents,
        keyPrefix: 'test:',
        windowHashes: t.windowHashes,
      }),
  );
}

const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];
const MODES: LimitMode[] = ['enforce', 'enforce', 'enforce', 'shadow', 'quota'];

// A deterministic random trace: requests of 1-3 limits over a dozen keys spread across slots
// (different first entries → different hash tags), random hits, modes, time steps.
function* trace(seed: number): Generator<{ advance: number; checks: LimitCheck[]; countDeniedHits: boolean }> {
  let s = seed;
  const rnd = () => ((s = (s * 1103515245 + 12345) % 2 ** 31), s / 2 ** 31);
  for (let step = 0; step < 400; step++) {
    const checks: LimitCheck[] = [];
    const n = 1 + Math.floor(rnd() * 3);
    for (let j = 0; j < n; j++) {
      const k = Math.floor(rnd() * 12);
      const algorithm = ALGORITHMS[k % 4];
      const limit = 2 + (k % 5);
      checks.push({
        key: counterKey(
          { domain: 'eq', entries: [{ key: 'tenant', value: `t${k}` }], algorithm, periodMs: 1000 * (1 + (k % 3)) },
          { prefix: `eq${seed}:`, hashTag: 'descriptor' },
        ),
        algorithm,
        limit,
        periodMs: 1000 * (1 + (k % 3)),
        burst: limit + (k % 2),
        hits: Math.floor(rnd() * 3),
        mode: MODES[Math.floor(rnd() * MODES.length)],
      });
    }
    yield { advance: Math.floor(rnd() * 300), checks, countDeniedHits: rnd() < 0.2 };
  }
}

describe('Redis and memory stores give identical answers to the same trace', () => {
  for (const t of variants) {
    test(t.name, async () => {
      const clock = new ManualClock(1_800_000_000_000);
      const memory = new MemoryStore({ clock });
      const redis = new RedisStore({
        clients: [await t.client()],
        cluster: t.cluster,
        explicitClock: clock,
        events: silentEvents,
        keyPrefix: 'test:',
        windowHashes: t.windowHashes,
      });
      let multiSlot = 0;
      try {
        for (const step of trace(t.name.length)) {
          clock.advance(step.advance);
          if (new Set(step.checks.map((c) => calculateSlot(c.key))).size > 1) multiSlot++;
          const opts = { countDeniedHits: step.countDeniedHits };
          // Both say when they decided, on the one clock (Redis TIME is the manual clock here).
          const fromRedis = await redis.decide(step.checks, opts);
          assert.equal(fromRedis.storeTimeMs, clock.now());
          assert.deepEqual(fromRedis, await memory.decide(step.checks, opts), JSON.stringify(step.checks));
        }
        assert.ok(multiSlot > 50, `only ${multiSlot} multi-slot requests`);
      } finally {
        await memory.close();
        await redis.close();
      }
    });
  }
});

describe('Redis Cluster: a request spanning slots is all-or-nothing', () => {
  test('hits consumed in one slot are given back when another slot denies', async () => {
    const client = (await topologies[2].client()) as Cluster;
    const store = new RedisStore({ clients: [client], cluster: true, events: silentEvents, keyPrefix: 'test:' });
    const mk = (tenant: string, limit: number): LimitCheck => ({
      key: counterKey(
        { domain: 'aon', entries: [{ key: 'tenant', value: tenant }], algorithm: 'token_bucket', periodMs: 3_600_000 },
        { prefix: 'x:', hashTag: 'descriptor' },
      ),
      algorithm: 'token_bucket',
      limit,
      periodMs: 3_600_000,
      burst: limit,
      hits: 1,
      mode: 'enforce',
    });
    const roomy = mk('roomy', 100);
    const tight = mk('tight', 1);
    assert.notEqual(calculateSlot(roomy.key), calculateSlot(tight.key));
    try {
      assert.equal((await store.decide([roomy, tight], { countDeniedHits: false })).admitted, true);
      for (let i = 0; i < 5; i++) {
        const d = await store.decide([roomy, tight], { countDeniedHits: false });
        assert.equal(d.admitted, false);
        assert.equal(d.outcomes[0].consumed, false);
        assert.equal(d.outcomes[0].remaining, 99);
      }
      // Refunds go out before the next decision on the same connection; drain() waits for them.
      await store.refunds.drain();
      assert.equal(store.refunds.size, 0);
      const tokens = Number(String(await client.get(roomy.key)).split(':')[0]);
      assert.ok(tokens >= 99 && tokens < 99.01, `roomy bucket holds ${tokens}`);
    } finally {
      await store.close();
    }
  });
});

describe('SCRIPT FLUSH during traffic', () => {
  for (const t of [topologies[0], topologies[2]]) {
    test(`${t.name}: no failed decision`, async () => {
      const client = await t.client();
      const store: Store = new RedisStore({ clients: [client], cluster: t.cluster, events: silentEvents, keyPrefix: 'test:' });
      const flusher = await t.client();
      let flushes = 0;
      const timer = setInterval(() => {
        const nodes = flusher instanceof Cluster ? flusher.nodes('master') : [flusher];
        for (const n of nodes)
          n.script('FLUSH').then(
            () => flushes++,
            () => undefined,
          );
      }, 5);
      let failures = 0;
      const errors: string[] = [];
      try {
        for (let round = 0; round < 60; round++) {
          const batch = Array.from({ length: 20 }, (_, i) =>
            store
              .decide([{ key: `flush:{t${i}}`, algorithm: ALGORITHMS[i % 4], limit: 1e6, periodMs: 60_000, burst: 1e6, hits: 1, mode: 'enforce' }], {
                countDeniedHits: false,
              })
              .catch((err: Error) => (failures++, errors.push(err.message))),
          );
          await Promise.all(batch);
          await new Promise((r) => setTimeout(r, 2));
        }
      } finally {
        clearInterval(timer);
        await store.close();
        await flusher.quit();
      }
      assert.equal(failures, 0, errors.slice(0, 3).join('\n'));
      assert.ok(flushes > 10, `only ${flushes} flushes happened`);
    });
  }
});
