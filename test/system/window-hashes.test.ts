import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import type { Algorithm } from '../../src/model';
import { loadSettings } from '../../src/settings';
import { silentEvents } from '../../src/store/events';
import { RedisStore } from '../../src/store/redis';
import type { LimitCheck } from '../../src/store/store';
import { startRedis, stopAll, type RedisNode } from '../support/redis';

// WINDOW_COUNTERS=hash (the default): fixed windows in sluice's key layout are fields of one hash
// per period and window, `<prefix>{}windows|fixed_window:<period>|<window start>`, which expires
// once; every other counter keeps its own key. Real redis-server, explicit time.

const T0 = 1_700_000_040_000; // 40 s into a minute
const MINUTE = 60_000;

function windowHash(periodMs: number, start: number): string {
  return `w:{}windows|fixed_window:${periodMs}|${start}`;
}

function check(key: string, limit: number, over: Partial<LimitCheck> = {}): LimitCheck {
  const algorithm: Algorithm = over.algorithm ?? 'fixed_window';
  return { key, algorithm, limit, periodMs: MINUTE, burst: limit, hits: 1, mode: 'enforce', ...over };
}

describe('fixed windows kept in window hashes', () => {
  let node: RedisNode;
  let conn: Redis;
  let store: RedisStore;
  const clock = new ManualClock(T0);
  const start = T0 - (T0 % MINUTE);

  before(async () => {
    node = await startRedis();
    conn = new Redis({ port: node.port, host: '127.0.0.1' });
    store = new RedisStore({ clients: [conn], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 'w:', windowHashes: true });
    while (!store.ready()) await new Promise((r) => setTimeout(r, 20));
  });
  after(async () => {
    await store.close();
    conn.disconnect();
    await stopAll();
  });

  test('WINDOW_COUNTERS: hash by default, keys on request, anything else refused', () => {
    assert.equal(loadSettings([], {}).windowCounters, 'hash');
    assert.equal(loadSettings([], { WINDOW_COUNTERS: 'keys' }).windowCounters, 'keys');
    assert.throws(() => loadSettings([], { WINDOW_COUNTERS: 'fields' }), /WINDOW_COUNTERS/);
  });

  test("a request's fixed windows go to their period's hash, other algorithms keep their keys", async () => {
    await conn.flushall();
    clock.set(T0);
    const limits = [
      check('w:{a}|fixed_window:60000', 5),
      check('w:{b}|fixed_window:60000', 5, { hits: 3 }),
      check('w:{a}|fixed_window:1000', 9, { periodMs: 1000 }),
      check('w:{a}|token_bucket:60000', 5, { algorithm: 'token_bucket' }),
    ];
    const d = await store.decide(limits, { countDeniedHits: false });
    assert.equal(d.admitted, true);
    assert.deepEqual(
      d.outcomes.map((o) => o.remaining),
      [4, 2, 8, 4],
    );
    assert.deepEqual(await conn.hgetall(windowHash(MINUTE, start)), { 'w:{a}|fixed_window:60000': '1', 'w:{b}|fixed_window:60000': '3' });
    assert.deepEqual(await conn.hgetall(windowHash(1000, T0 - (T0 % 1000))), { 'w:{a}|fixed_window:1000': '1' });
    assert.equal(await conn.exists('w:{a}|fixed_window:60000', 'w:{b}|fixed_window:60000', 'w:{a}|fixed_window:1000'), 0);
    assert.equal(await conn.type('w:{a}|token_bucket:60000'), 'string');
    // The hash lives until the end of the window after its own: (start + 2 minutes) - now.
    const ttl = await conn.pttl(windowHash(MINUTE, start));
    assert.ok(ttl > 0 && ttl <= start + 2 * MINUTE - T0, `PTTL ${ttl}`);
    // The same counters again: counted on, and the answers say so.
    const again = await store.decide([limits[0], { ...limits[1], hits: 2 }], { countDeniedHits: false });
    assert.deepEqual(
      again.outcomes.map((o) => [o.remaining, o.usedBefore]),
      [
        [3, 1],
        [0, 3],
      ],
    );
    assert.deepEqual(await conn.hgetall(windowHash(MINUTE, start)), { 'w:{a}|fixed_window:60000': '2', 'w:{b}|fixed_window:60000': '5' });
  });

  test('a request denied by any of its limits writes no field', async () => {
    await conn.flushall();
    clock.set(T0);
    const bucket = check('w:{a}|token_bucket:60000', 1, { algorithm: 'token_bucket' });
    assert.equal((await store.decide([bucket], { countDeniedHits: false })).admitted, true);
    const d = await store.decide([check('w:{a}|fixed_window:60000', 5), bucket], { countDeniedHits: false });
    assert.equal(d.admitted, false);
    assert.equal(await conn.exists(windowHash(MINUTE, start)), 0);
    // A batch: the admitted request's field is written, the denied one's is not.
    const [ok, denied] = await Promise.all([
      store.decide([check('w:{c}|fixed_window:60000', 5)], { countDeniedHits: false }),
      store.decide([check('w:{d}|fixed_window:60000', 5), bucket], { countDeniedHits: false }),
    ]);
    assert.deepEqual([ok.admitted, denied.admitted], [true, false]);
    assert.deepEqual(await conn.hgetall(windowHash(MINUTE, start)), { 'w:{c}|fixed_window:60000': '1' });
  });

  test("the next window's first write unlinks the hash of the window before", async () => {
    await conn.flushall();
    clock.set(T0);
    const limit = check('w:{a}|fixed_window:60000', 3);
    for (let i = 0; i < 3; i++) assert.equal((await store.decide([limit], { countDeniedHits: false })).admitted, true);
    assert.equal((await store.decide([limit], { countDeniedHits: false })).admitted, false);
    assert.equal(await conn.hget(windowHash(MINUTE, start), limit.key), '3');
    clock.set(start + MINUTE + 1);
    const next = await store.decide([limit], { countDeniedHits: false });
    assert.deepEqual([next.admitted, next.outcomes[0].remaining], [true, 2]);
    assert.equal(await conn.exists(windowHash(MINUTE, start)), 0);
    assert.equal(await conn.hget(windowHash(MINUTE, start + MINUTE), limit.key), '1');
  });

  test('explain (peek) reads the field and writes nothing', async () => {
    await conn.flushall();
    clock.set(T0);
    const limit = check('w:{a}|fixed_window:60000', 5, { hits: 2 });
    await store.decide([limit], { countDeniedHits: false });
    const peeked = await store.peek([check('w:{a}|fixed_window:60000', 5), check('w:{new}|fixed_window:60000', 5)], { countDeniedHits: false });
    // What the counters hold now (a peek consumes nothing): 2 of 5 used, and a new counter.
    assert.deepEqual(
      peeked.outcomes.map((o) => [o.remaining, o.usedBefore]),
      [
        [3, 2],
        [5, 0],
      ],
    );
    assert.deepEqual(await conn.hgetall(windowHash(MINUTE, start)), { 'w:{a}|fixed_window:60000': '2' });
  });

  test('leases, give-backs, refunds, fallback write-backs and restores change the field', async () => {
    await conn.flushall();
    clock.set(T0);
    const key = 'w:{a}|fixed_window:60000';
    const spec = { key, algorithm: 'fixed_window' as const, limit: 10, periodMs: MINUTE, burst: 10 };
    const count = () => conn.hget(windowHash(MINUTE, start), key);
    const grant = await store.lease(spec, 4);
    assert.deepEqual([grant.granted, grant.remaining], [4, 6]);
    assert.equal(await count(), '4');
    await store.giveBack(spec, 1, grant.takenAtMs);
    assert.equal(await count(), '3');
    await store.absorb([{ ...spec, hits: 2, windowStartMs: T0, ageMs: 0 }]);
    assert.equal(await count(), '5');
    await store.refund([{ ...spec, hits: 1, decidedAtMs: T0 }]);
    assert.equal(await count(), '4');
    // A replica saw 3 remaining: the counter becomes at least that used.
    await store.restore([{ ...spec, remaining: 3, atMs: T0 }]);
    assert.equal(await count(), '7');
    // Hits of a window that has closed are neither refunded nor absorbed into the current one.
    await store.refund([{ ...spec, hits: 5, decidedAtMs: T0 - MINUTE }]);
    await store.absorb([{ ...spec, hits: 5, windowStartMs: T0 - MINUTE, ageMs: 0 }]);
    assert.equal(await count(), '7');
    const decided = await store.decide([check(key, 10, { hits: 3 })], { countDeniedHits: false });
    assert.deepEqual([decided.admitted, decided.outcomes[0].remaining], [true, 0]);
    assert.equal(await count(), '10');
    assert.equal(await conn.exists(key), 0);
  });

  test('a key of another type at the hash name fails only the requests that use it', async () => {
    await conn.flushall();
    clock.set(T0);
    await conn.set(windowHash(MINUTE, start), 'not a hash');
    const [window, bucket] = await Promise.allSettled([
      store.decide([check('w:{a}|fixed_window:60000', 5)], { countDeniedHits: false }),
      store.decide([check('w:{a}|token_bucket:60000', 5, { algorithm: 'token_bucket' })], { countDeniedHits: false }),
    ]);
    assert.equal(window.status, 'rejected');
    assert.match(String((window as PromiseRejectedResult).reason), /WRONGTYPE/);
    assert.equal(bucket.status, 'fulfilled');
    assert.equal((bucket as PromiseFulfilledResult<{ admitted: boolean }>).value.admitted, true);
    assert.equal(await conn.get(windowHash(MINUTE, start)), 'not a hash');
  });

  test('without window hashes (WINDOW_COUNTERS=keys) every counter has its own key', async () => {
    await conn.flushall();
    clock.set(T0);
    const keys = new RedisStore({ clients: [conn], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 'w:', windowHashes: false });
    const d = await keys.decide([check('w:{a}|fixed_window:60000', 5)], { countDeniedHits: false });
    assert.equal(d.admitted, true);
    assert.equal(await conn.get('w:{a}|fixed_window:60000'), `${start}:1`);
    assert.equal(await conn.exists(windowHash(MINUTE, start)), 0);
  });
});
