import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import type { Algorithm } from '../../../src/model';
import { MemoryStore } from '../../../src/store/memory';
import type { LimitCheck } from '../../../src/store/store';

// Regression tests for the memory store's key cap (issue 9, item 3): a live counter is never
// forgotten, expired counters make room first, and the work per insert at the cap is bounded.

const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];
const DAY = 86_400_000;
const T0 = 1_700_006_400_000; // a multiple of a day
const opts = { countDeniedHits: false };

function check(key: string, over: Partial<LimitCheck> = {}): LimitCheck {
  return { key, algorithm: 'fixed_window', limit: 1, periodMs: DAY, burst: 1, hits: 1, mode: 'enforce', ...over };
}

const stats = (store: MemoryStore) => (store as unknown as { stats?: Record<string, number> }).stats;

describe('memory store at its key cap', () => {
  for (const algorithm of ALGORITHMS) {
    test(`${algorithm}: an exhausted tenant stays denied after MEMORY_MAX_KEYS distinct keys`, async () => {
      const clock = new ManualClock(T0);
      const store = new MemoryStore({ clock, maxKeys: 1000 });
      const tenant = check('tenant=acme', { algorithm, limit: 5, burst: 5, periodMs: 60_000 });
      for (let i = 0; i < 5; i++) assert.equal(store.decideNow([tenant], opts).admitted, true);
      assert.equal(store.decideNow([tenant], opts).admitted, false);
      for (let i = 0; i < 1000; i++) store.decideNow([check(`flood=${i}`, { algorithm, limit: 5, burst: 5, periodMs: 60_000 })], opts);
      clock.advance(1);
      assert.equal(store.decideNow([tenant], opts).admitted, false);
      assert.equal(store.size, 1000);
      await store.close();
    });
  }

  test('used daily quotas survive waves of new per-second keys (expired ones make room first)', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxKeys: 1000 });
    const quotas = Array.from({ length: 600 }, (_, i) => check(`quota=${i}`));
    for (const q of quotas) assert.equal(store.decideNow([q], opts).admitted, true);
    for (let wave = 0; wave < 10; wave++) {
      for (let i = 0; i < 500; i++) store.decideNow([check(`wave=${wave}|ip=${i}`, { periodMs: 1000, limit: 100, burst: 100 })], opts);
      clock.advance(1000);
      const readmitted = quotas.filter((q) => store.decideNow([q], opts).admitted).length;
      assert.equal(readmitted, 0, `wave ${wave}: ${readmitted} used daily quotas admitted again`);
    }
    // From the second wave on, the previous wave's expired counters made room for the new one.
    assert.ok((stats(store)?.reclaimed ?? 0) >= 9 * 400);
    await store.close();
  });

  test('inserting at the cap does bounded expiry work per key and reclaims expired counters first', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxKeys: 1000 });
    const daily = Array.from({ length: 500 }, (_, i) => check(`daily=${i}`));
    for (const q of daily) store.decideNow([q], opts);
    for (let i = 0; i < 500; i++) store.decideNow([check(`second=${i}`, { periodMs: 1000 })], opts);
    // Rewrites of live keys do not queue more expiry work.
    for (let r = 0; r < 20; r++) for (let i = 0; i < 500; i++) store.decideNow([check(`second=${i}`, { periodMs: 1000, limit: 100 })], opts);
    clock.advance(1000);
    const popsBefore = stats(store)?.expiryPops ?? 0;
    const n = 20_000;
    for (let i = 0; i < n; i++) store.decideNow([check(`new=${i}`)], opts);
    for (const q of daily) assert.equal(store.decideNow([q], opts).admitted, false);
    const after = stats(store);
    assert.ok(after !== undefined, 'the store counts its expiry work');
    assert.equal(after.reclaimed, 500);
    assert.ok(after.expiryPops - popsBefore <= 2 * 500, `expiry entries handled: ${after.expiryPops - popsBefore}`);
    assert.equal(after.overflowDecisions, n - 500);
    assert.equal(store.size, 1000);
    assert.ok(store.overflowBytes > 0 && store.overflowBytes <= 1 << 20);
    await store.close();
  });

  test('one insert at the cap handles a bounded number of expiry entries, however many come due', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxKeys: 1000 });
    const second = (i: number) => check(`second=${i}`, { periodMs: 1000, limit: 100 });
    for (let i = 0; i < 1000; i++) store.decideNow([second(i)], opts);
    clock.advance(1000);
    // Every entry is due; all counters but one were extended into the next window.
    for (let i = 1; i < 1000; i++) store.decideNow([second(i)], opts);
    const pops = store.stats.expiryPops;
    store.decideNow([check('new=0')], opts);
    assert.ok(store.stats.expiryPops - pops <= 32, `expiry entries handled by one insert: ${store.stats.expiryPops - pops}`);
    store.sweep();
    assert.equal(store.stats.reclaimed, 1);
    assert.equal(store.size, 1000);
    for (let i = 1; i < 1000; i++) assert.equal(store.has(`second=${i}`), true);
    await store.close();
  });

  test('expiry queue does not grow with rewrites of the same keys', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxKeys: 100 });
    for (let r = 0; r < 1000; r++) {
      clock.advance(7);
      for (let i = 0; i < 50; i++) store.decideNow([check(`k=${i}`, { algorithm: 'token_bucket', limit: 1e6, burst: 1e6, periodMs: 1000 })], opts);
    }
    const queued = (store as unknown as { expiry: { length: number } }).expiry.length;
    assert.ok(queued <= 2 * store.size + 1024, `queued ${queued}`);
    await store.close();
  });

  test('seeding a key the approximate tier holds never lowers its count', async () => {
    const clock = new ManualClock(T0);
    const store = new MemoryStore({ clock, maxKeys: 1 });
    store.decideNow([check('holder')], opts);
    const c = check('over', { limit: 10, burst: 10 });
    for (let i = 0; i < 10; i++) assert.equal(store.decideNow([c], opts).admitted, true);
    assert.equal(store.decideNow([c], opts).admitted, false);
    assert.equal(store.has('over'), false);
    store.seed(c, [T0, 2]);
    assert.equal(store.decideNow([c], opts).admitted, false);
    await store.close();
  });
});

// The approximate tier may deny what the exact algorithm would admit, never the reverse: every
// request it admits must also be admitted by an exact store that saw exactly the admitted requests.
describe('approximate tier only over-counts', () => {
  for (const algorithm of ALGORITHMS) {
    for (const maxKeys of [0, 8]) {
      test(`${algorithm}, ${maxKeys} exact slots: admitted ⊆ what the exact algorithm admits`, async () => {
        let seed = 42;
        const rand = (n: number) => {
          seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
          return seed % n;
        };
        const clock = new ManualClock(T0);
        // A tiny sketch, so keys collide all the time.
        const bounded = new MemoryStore({ clock, maxKeys, sketchWidth: 16 });
        const exact = new MemoryStore({ clock });
        let admitted = 0;
        let overCounted = 0;
        for (let i = 0; i < 20_000; i++) {
          clock.advance(rand(40));
          const key = `k=${rand(60)}`;
          const periodMs = key.length % 2 === 0 ? 1000 : 3000;
          const c = check(key, { algorithm, limit: 5, burst: 3 + periodMs / 1000, periodMs, hits: 1 + rand(2) });
          const got = bounded.decideNow([c], opts);
          const truth = exact.decideNow([c], opts, !got.admitted);
          if (got.admitted) {
            admitted++;
            assert.equal(truth.admitted, true, `request ${i} (${key}) admitted beyond the exact limit`);
          } else if (truth.admitted) overCounted++;
        }
        assert.ok(admitted > 1000, `admitted ${admitted}`);
        assert.ok((bounded.stats.overflowDecisions ?? 0) > 0);
        void overCounted;
        await bounded.close();
        await exact.close();
      });
    }
  }
});
