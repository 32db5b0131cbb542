import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock';
import type { Algorithm, LimitMode } from '../../src/model';
import type { LimitCheck, Store } from '../../src/store/store';

// One behavioural suite for every Store: the memory store runs it now, the Redis stores will run
// the same cases. `makeStore` gets the clock the store must use.
export type StoreFactory = (clock: ManualClock) => Promise<Store> | Store;

const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];
const T0 = 1_700_000_040_000; // a multiple of every period used below

let keySeq = 0;
function check(algorithm: Algorithm, limit: number, over: Partial<LimitCheck> = {}): LimitCheck {
  return {
    key: `test|${algorithm}|${++keySeq}`,
    algorithm,
    limit,
    periodMs: 60_000,
    burst: limit,
    hits: 1,
    mode: 'enforce' as LimitMode,
    ...over,
  };
}

export function storeBehaviour(name: string, makeStore: StoreFactory): void {
  describe(`store behaviour: ${name}`, () => {
    const withStore = async (fn: (store: Store, clock: ManualClock) => Promise<void>) => {
      const clock = new ManualClock(T0);
      const store = await makeStore(clock);
      try {
        await fn(store, clock);
      } finally {
        await store.close();
      }
    };
    const opts = { countDeniedHits: false };

    for (const algorithm of ALGORITHMS) {
      test(`${algorithm}: admits exactly the limit at one instant`, () =>
        withStore(async (store) => {
          const c = check(algorithm, 5);
          const admitted: boolean[] = [];
          for (let i = 0; i < 8; i++) admitted.push((await store.decide([c], opts)).admitted);
          assert.deepEqual(admitted, [true, true, true, true, true, false, false, false]);
        }));

      test(`${algorithm}: all-or-nothing: a denied request consumes nothing`, () =>
        withStore(async (store) => {
          const roomy = check(algorithm, 10);
          const tight = check(algorithm, 1);
          assert.equal((await store.decide([roomy, tight], opts)).admitted, true);
          const denied = await store.decide([roomy, tight], opts);
          assert.equal(denied.admitted, false);
          assert.deepEqual(
            denied.outcomes.map((o) => [o.allowed, o.consumed]),
            [
              [true, false],
              [false, false],
            ],
          );
          assert.equal(denied.outcomes[0].remaining, 9);
        }));

      test(`${algorithm}: shadow-mode limits report but never block`, () =>
        withStore(async (store) => {
          const shadow = check(algorithm, 1, { mode: 'shadow' });
          const real = check(algorithm, 10);
          await store.decide([shadow, real], opts);
          const d = await store.decide([shadow, real], opts);
          assert.equal(d.admitted, true);
          assert.equal(d.outcomes[0].allowed, false);
          assert.equal(d.outcomes[1].consumed, true);
          assert.equal(d.outcomes[1].remaining, 8);
        }));

      test(`${algorithm}: retry-after on denial, then admitted after waiting it`, () =>
        withStore(async (store, clock) => {
          const c = check(algorithm, 2);
          await store.decide([c], opts);
          await store.decide([c], opts);
          const d = await store.decide([c], opts);
          assert.equal(d.admitted, false);
          const wait = d.outcomes[0].retryAfterMs;
          assert.ok(wait > 0 && Number.isFinite(wait), `retry-after ${wait}`);
          clock.advance(wait);
          assert.equal((await store.decide([c], opts)).admitted, true);
        }));
    }

    test('COUNT_DENIED_HITS counts every hit on windows, as upstream', () =>
      withStore(async (store) => {
        const c = check('fixed_window', 2);
        const other = check('fixed_window', 100);
        const counting = { countDeniedHits: true };
        for (let i = 0; i < 4; i++) await store.decide([c, other], counting);
        const d = await store.decide([c, other], { countDeniedHits: true });
        assert.equal(d.outcomes[1].remaining, 95);
        assert.equal(d.outcomes[0].usedBefore, 4);
      }));

    test('quota mode: the request fails only when every quota limit fails', () =>
      withStore(async (store) => {
        const q1 = check('fixed_window', 1, { mode: 'quota' });
        const q2 = check('fixed_window', 5, { mode: 'quota' });
        await store.decide([q1, q2], opts);
        assert.equal((await store.decide([q1, q2], opts)).admitted, true);
        const alone = check('fixed_window', 1, { mode: 'quota' });
        await store.decide([alone], opts);
        assert.equal((await store.decide([alone], opts)).admitted, false);
      }));

    test('two limits of one request on the same key see each other', () =>
      withStore(async (store) => {
        const c = check('fixed_window', 3, { hits: 2 });
        const d = await store.decide([c, { ...c }], opts);
        assert.equal(d.admitted, false);
        assert.deepEqual(
          d.outcomes.map((o) => o.allowed),
          [true, false],
        );
      }));

    test('hits 0 checks without consuming', () =>
      withStore(async (store) => {
        const c = check('token_bucket', 3);
        const d = await store.decide([{ ...c, hits: 0 }], opts);
        assert.equal(d.outcomes[0].remaining, 3);
        assert.equal((await store.decide([{ ...c, hits: 3 }], opts)).outcomes[0].remaining, 0);
      }));

    test('fixed windows reset at the epoch-aligned boundary', () =>
      withStore(async (store, clock) => {
        const c = check('fixed_window', 1);
        clock.set(T0 + 59_999);
        assert.equal((await store.decide([c], opts)).admitted, true);
        assert.equal((await store.decide([c], opts)).outcomes[0].resetMs, 1);
        clock.set(T0 + 60_000);
        assert.equal((await store.decide([c], opts)).admitted, true);
      }));
  });
}
