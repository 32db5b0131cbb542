import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import { loadSettings, partitionPolicy, SettingsError } from '../../src/settings';
import { silentEvents } from '../../src/store/events';
import { RedisStore, type StoredCheck } from '../../src/store/redis';
import type { LimitCheck } from '../../src/store/store';
import { type RedisNode, startRedis, stopAll } from '../support/redis';

// The multi-region scripts against a real redis-server, on an explicit clock: a regional
// allowance spent by decide.lua (the `pool` algorithm), filled by credit.lua, taken back by
// reclaim.lua, and leases from the global budget capped by the regions' demand (lease.lua).

const T0 = 1_800_000_000_000;
let node: RedisNode;
let client: Redis;
const clock = new ManualClock(T0);
let redis: RedisStore;

before(async () => {
  node = await startRedis();
  client = new Redis({ port: node.port, host: '127.0.0.1' });
  await new Promise((resolve) => client.once('ready', resolve));
  redis = new RedisStore({ clients: [client], cluster: false, events: silentEvents, keyPrefix: 'mr:', explicitClock: clock });
});
after(async () => {
  await redis.close();
  await stopAll();
});

const pool = (key: string, hits = 1, over: Partial<StoredCheck> = {}): StoredCheck => ({
  key,
  algorithm: 'fixed_window',
  limit: 100,
  periodMs: 60_000,
  burst: 100,
  hits,
  mode: 'enforce',
  layout: 'pool',
  ...over,
});

function credit(key: string, units: number, over: Partial<Parameters<RedisStore['credit']>[0]> = {}): Promise<number> {
  return redis.credit({
    key,
    lockKey: `${key}:lock`,
    units,
    ttlMs: 10_000,
    globalRemaining: 50,
    globalResetMs: 30_000,
    globalRetryMs: 0,
    takenAtMs: T0,
    holdMs: 0,
    ...over,
  });
}

describe('regional allowance (pool)', () => {
  test('a missing allowance denies and says so (held undefined); credited units are spent all-or-nothing', async () => {
    const missing = await redis.decide([pool('p1')], { countDeniedHits: false });
    assert.equal(missing.admitted, false);
    assert.equal(missing.outcomes[0].held, undefined);
    assert.equal(await credit('p1', 10), 10);
    assert.equal(await credit('p1', 5), 15, 'a second lease adds to the first');
    const spent = await redis.decide([pool('p1', 3)], { countDeniedHits: false });
    assert.equal(spent.admitted, true);
    assert.deepEqual([spent.outcomes[0].held, spent.outcomes[0].remaining, spent.outcomes[0].resetMs], [12, 12, 30_000]);
    await credit('p2', 2);
    const both = await redis.decide([pool('p1', 3), pool('p2', 3)], { countDeniedHits: false });
    assert.equal(both.admitted, false);
    assert.deepEqual(
      both.outcomes.map((o) => [o.allowed, o.consumed, o.held]),
      [
        [true, false, 12],
        [false, false, 2],
      ],
    );
  });

  test('units of an ended window are not kept; units past their TTL are not spent', async () => {
    await credit('w1', 10, { windowMs: 60_000 });
    assert.equal(await credit('w1', 4, { windowMs: 60_000, takenAtMs: T0 + 60_000 }), 4);
    await credit('t1', 10, { ttlMs: 1000 });
    clock.advance(1000);
    const late = await redis.decide([pool('t1')], { countDeniedHits: false });
    assert.equal(late.admitted, false);
    assert.equal(late.outcomes[0].held, 0);
    clock.set(T0);
  });

  test('the refill lock: held for holdMs after a credit, released with 0; claim is exclusive', async () => {
    assert.equal(await redis.claim('l1:lock', 5000), true);
    assert.equal(await redis.claim('l1:lock', 5000), false);
    await credit('l1', 1, { holdMs: 0 });
    assert.equal(await client.exists('l1:lock'), 0);
    await credit('l1', 1, { holdMs: 3000 });
    const ttl = await client.pttl('l1:lock');
    assert.ok(ttl > 2000 && ttl <= 3000, `lock ttl ${ttl}`);
  });

  test('reclaim takes back only an allowance about to expire and not spent, with the time of its lease', async () => {
    await credit('r1', 7, { ttlMs: 10_000, takenAtMs: T0 - 5 });
    assert.deepEqual(await redis.reclaim('r1', 1000, true), { units: 0, takenAtMs: 0 });
    clock.advance(9500);
    assert.deepEqual(await redis.reclaim('r1', 1000, true), { units: 7, takenAtMs: T0 - 5 });
    assert.equal(await client.exists('r1'), 0);
    clock.set(T0);
    // A spent allowance has nothing to give back: it stays, still saying so, until it expires.
    await credit('r2', 3, { ttlMs: 10_000 });
    assert.equal((await redis.decide([pool('r2', 3)], { countDeniedHits: false })).admitted, true);
    clock.advance(9500);
    assert.deepEqual(await redis.reclaim('r2', 1000, true), { units: 0, takenAtMs: 0 });
    assert.equal((await redis.decide([pool('r2')], { countDeniedHits: false })).outcomes[0].held, 0);
    clock.set(T0);
  });

  test("reclaim keeps a spent window allowance until its window ends once the window's global budget is spent too", async () => {
    // The last lease took what the global budget had left (0 after it): a request finding the
    // allowance gone at its lease TTL would wait a round trip for an empty lease.
    for (const [key, globalRemaining, window, kept] of [
      ['k1', 0, true, true],
      ['k2', 5, true, false],
      ['k3', 0, false, false],
    ] as const) {
      await credit(key, 3, { ttlMs: 10_000, globalRemaining, globalResetMs: 30_000, windowMs: 60_000 });
      assert.equal((await redis.decide([pool(key, 3)], { countDeniedHits: false })).admitted, true);
      clock.advance(9500);
      assert.deepEqual(await redis.reclaim(key, 1000, window), { units: 0, takenAtMs: 0 });
      const ttl = await client.pttl(key);
      if (kept) assert.ok(ttl > 19_000 && ttl <= 20_500, `${key}: kept ${ttl} ms, until the window's end 20,500 ms away`);
      // (Redis expires keys on its own clock: the allowance's 10 s from the credit, unchanged.)
      else assert.ok(ttl > 0 && ttl <= 10_000, `${key}: kept ${ttl} ms, until the allowance's end`);
      clock.set(T0);
    }
  });

  test('refunds add to an allowance', async () => {
    await credit('f1', 2);
    await redis.refund([{ ...pool('f1'), hits: 3, decidedAtMs: T0 }]);
    const d = await redis.decide([pool('f1', 5)], { countDeniedHits: false });
    assert.equal(d.admitted, true);
    assert.equal(d.outcomes[0].held, 0);
  });
});

describe('leases from the global budget, shared by demand', () => {
  const spec = { key: 'g1', algorithm: 'fixed_window' as const, limit: 100, periodMs: 60_000, burst: 100 };
  const demand = (region: string, rate: number) => ({ key: 'g1:regions', region, rate, staleMs: 6000 });

  test("a region alone gets what it asks for; with another region's demand, its share of what remains", async () => {
    assert.equal((await redis.lease(spec, 40, demand('a', 70))).granted, 40);
    // b's demand is 30 of 100: of the 60 that remain it gets 18, not the 50 it asks for.
    const b = await redis.lease(spec, 50, demand('b', 30));
    assert.equal(b.granted, 18);
    assert.equal(b.remaining, 42);
    // Leases shrink with what remains, and at the end are one unit: the last units are not
    // stranded in a region that does not need them.
    const sequence: [string, number, number][] = [
      ['a', 41, 29],
      ['b', 10, 3],
      ['a', 100, 7],
      ['b', 10, 1],
      ['a', 100, 1],
      ['b', 10, 1],
    ];
    for (const [region, wanted, granted] of sequence) {
      assert.equal((await redis.lease(spec, wanted, demand(region, region === 'a' ? 70 : 30))).granted, granted, `${region} asking ${wanted}`);
    }
    const none = await redis.lease(spec, 10, demand('b', 30));
    assert.equal(none.granted, 0);
    assert.equal(none.retryAfterMs, 60_000);
  });

  test('a region not heard of lately no longer counts', async () => {
    const s2 = { ...spec, key: 'g2' };
    await redis.lease(s2, 1, { ...demand('a', 70), key: 'g2:regions' });
    clock.advance(7000);
    assert.equal((await redis.lease(s2, 50, { ...demand('b', 30), key: 'g2:regions' })).granted, 50);
    clock.set(T0);
  });
});

describe("a fixed window's next window, leased ahead of its start", () => {
  const W = 60_000;
  // T0 is 20 s into its window; the next one starts at NEXT.
  const NEXT = Math.floor(T0 / W) * W + W;
  const spec = (key: string) => ({ key, algorithm: 'fixed_window' as const, limit: 100, periodMs: W, burst: 100 });
  const demand = (key: string, windowStartMs?: number) => ({ key: `${key}:regions`, region: 'a', rate: 10, staleMs: 6000, windowStartMs });
  const check = (key: string, hits = 1): LimitCheck => ({ ...spec(key), hits, mode: 'enforce' });

  for (const layout of ['a key per counter', 'window hashes'] as const) {
    test(`${layout}: the units count in the next window only, and go back to it`, async () => {
      // A store of its own (its close() closes its client) for window hashes.
      const own = layout === 'window hashes' ? new Redis({ port: node.port, host: '127.0.0.1' }) : undefined;
      const store =
        own !== undefined
          ? new RedisStore({ clients: [own], cluster: false, events: silentEvents, keyPrefix: 'mrh:', explicitClock: clock, windowHashes: true })
          : redis;
      if (own !== undefined) await new Promise((resolve) => own.once('ready', resolve));
      const key = `ahead-${layout.length}`;
      try {
        clock.set(NEXT - 300);
        await store.decide([check(key, 30)], { countDeniedHits: false });
        const ahead = await store.lease(spec(key), 80, demand(key, NEXT));
        assert.equal(ahead.granted, 80);
        assert.equal(ahead.remaining, 20, 'what the next window has left');
        // The current window's budget is untouched: 70 left, and its lease takes them.
        assert.equal((await store.lease(spec(key), 100, demand(key, NEXT - W))).granted, 70);
        // A window that is neither the current nor the next gets nothing.
        assert.equal((await store.lease(spec(key), 5, demand(key, NEXT + W))).granted, 0);
        clock.set(NEXT + 10);
        const first = await store.decide([check(key, 21)], { countDeniedHits: false });
        assert.equal(first.admitted, false, 'the next window began with the 80 leased ahead');
        assert.equal((await store.decide([check(key, 20)], { countDeniedHits: false })).admitted, true);
        // Units leased ahead and not used go back to their own window.
        await store.giveBack(spec(key), 30, NEXT);
        assert.equal((await store.decide([check(key, 30)], { countDeniedHits: false })).admitted, true);
        assert.equal((await store.decide([check(key, 1)], { countDeniedHits: false })).admitted, false);
      } finally {
        clock.set(T0);
        if (store !== redis) await store.close();
      }
    });
  }

  test("given back before their window begins, they leave the current window's count alone", async () => {
    clock.set(NEXT - 300);
    await redis.decide([check('ahead-back', 10)], { countDeniedHits: false });
    await redis.lease(spec('ahead-back'), 50, demand('ahead-back', NEXT));
    await redis.giveBack(spec('ahead-back'), 20, NEXT);
    assert.equal((await redis.lease(spec('ahead-back'), 100, demand('ahead-back', NEXT))).granted, 70, 'the next window: 100 − 50 + 20');
    assert.equal((await redis.lease(spec('ahead-back'), 100, demand('ahead-back', NEXT - W))).granted, 90, 'the current window: 100 − 10');
    clock.set(T0);
  });

  test('the allowance: units credited ahead wait beside the current ones, and replace them when their window begins', async () => {
    clock.set(T0);
    // The current window's 5 units, its budget short (no refill for 2 s).
    await credit('n1', 5, { windowMs: W, ttlMs: 2000, holdMs: 5000 });
    assert.equal(await credit('n1', 40, { windowMs: W, ttlMs: 10_000, takenAtMs: NEXT, startsInMs: 1000 }), 40);
    // A later lease of the next window that lands before it begins joins its units.
    assert.equal(await credit('n1', 2, { windowMs: W, ttlMs: 10_000, takenAtMs: NEXT + 5 }), 42);
    const now = await redis.decide([pool('n1', 4)], { countDeniedHits: false });
    assert.equal(now.admitted, true);
    assert.equal(now.outcomes[0].held, 1);
    assert.equal(now.outcomes[0].pendingMs, 1000);
    const dry = await redis.decide([pool('n1', 2)], { countDeniedHits: false });
    assert.equal(dry.admitted, false);
    assert.equal(dry.outcomes[0].retryAfterMs, 1000, 'until the next window begins');
    // The current allowance taken back near its expiry: the next window's stays.
    clock.advance(500);
    assert.deepEqual(await redis.reclaim('n1', 2000, true), { units: 1, takenAtMs: T0 });
    clock.advance(500);
    const next = await redis.decide([pool('n1', 42)], { countDeniedHits: false });
    assert.equal(next.admitted, true);
    assert.equal(next.outcomes[0].pendingMs, undefined);
    assert.ok((await client.pttl('n1')) > 9000, 'the key lives as long as the units leased ahead');
    clock.set(T0);
  });
});

describe("a region's debt to the global budget", () => {
  const bucket = { algorithm: 'token_bucket' as const, limit: 60, periodMs: 60_000, burst: 10 };
  const tokens = async (key: string) => Number((await client.get(key))!.split(':')[0]);

  test('a bucket takes every hit of a debt, below empty by one burst at most; a plain write-back never below empty', async () => {
    await redis.decide([{ key: 'd1', ...bucket, hits: 10, mode: 'enforce' }], { countDeniedHits: false });
    await redis.absorb([{ key: 'd1', ...bucket, hits: 4, ageMs: 0, debt: true }]);
    assert.equal(await tokens('d1'), -4);
    await redis.absorb([{ key: 'd1', ...bucket, hits: 40, ageMs: 120_000, debt: true }]);
    assert.equal(await tokens('d1'), -10);
    await redis.decide([{ key: 'd2', ...bucket, hits: 10, mode: 'enforce' }], { countDeniedHits: false });
    await redis.absorb([{ key: 'd2', ...bucket, hits: 4, ageMs: 0 }]);
    assert.equal(await tokens('d2'), 0);
    // In debt, nothing passes until the bucket has refilled past it.
    const denied = await redis.decide([{ key: 'd1', ...bucket, hits: 1, mode: 'enforce' }], { countDeniedHits: false });
    assert.equal(denied.admitted, false);
    assert.equal(denied.outcomes[0].retryAfterMs, 11_000);
  });
});

describe('multi-region settings', () => {
  const env = (over: Record<string, string>) => loadSettings([], { STORE: 'redis', ...over });

  test('GLOBAL_REDIS_URL needs REGION, STORE=redis and sluice key layout', () => {
    assert.throws(
      () => env({ GLOBAL_REDIS_URL: 'g:6379' }),
      (e: Error) => e instanceof SettingsError && /needs REGION/.test(e.message),
    );
    assert.throws(() => env({ GLOBAL_REDIS_URL: 'g:6379', REGION: 'eu', STORE: 'memory' }), /needs STORE=redis/);
    assert.throws(() => env({ GLOBAL_REDIS_URL: 'g:6379', REGION: 'eu', KEY_LAYOUT: 'upstream' }), /KEY_LAYOUT=upstream/);
    assert.throws(() => env({ GLOBAL_REDIS_URL: 'g:6379', REGION: 'e u' }), /REGION: expected/);
    assert.equal(env({ GLOBAL_REDIS_URL: 'g:6379', REGION: 'eu-west-1' }).region, 'eu-west-1');
  });

  test('partition policies: deny, allow, a share; anything else names the setting', () => {
    assert.deepEqual(partitionPolicy('50%'), { kind: 'share', share: 0.5 });
    assert.deepEqual(partitionPolicy('0.25'), { kind: 'share', share: 0.25 });
    assert.deepEqual(partitionPolicy('ALLOW'), { kind: 'allow' });
    for (const bad of ['0%', '150%', 'maybe', '']) assert.equal(partitionPolicy(bad), undefined, bad);
    assert.throws(() => env({ GLOBAL_PARTITION_POLICY: 'half' }), /GLOBAL_PARTITION_POLICY: expected deny, allow or a share/);
    assert.throws(() => env({ GLOBAL_PARTITION_DOMAIN_POLICIES: 'payments=half' }), /GLOBAL_PARTITION_DOMAIN_POLICIES/);
    assert.deepEqual(env({ GLOBAL_PARTITION_DOMAIN_POLICIES: 'payments=deny,search=50%' }).globalPartitionDomainPolicies, ['payments=deny', 'search=50%']);
  });
});
