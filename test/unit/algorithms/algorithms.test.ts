import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ALGORITHM_IMPLS, type LimitSpec, type State } from '../../../src/algorithms';
import { MAX_TTL_MS } from '../../../src/algorithms/types';
import type { Algorithm } from '../../../src/model';

const spec = (algorithm: Algorithm, limit: number, periodMs: number, burst = limit): LimitSpec => ({
  algorithm,
  limit,
  periodMs,
  burst,
});

// Applies hits one by one at `now`, returning how many were allowed and the final state.
function drain(s: LimitSpec, state: State | undefined, now: number, tries: number): { allowed: number; state?: State } {
  const impl = ALGORITHM_IMPLS[s.algorithm];
  let allowed = 0;
  for (let i = 0; i < tries; i++) {
    const v = impl.decide(state, s, 1, now);
    if (v.allowed) {
      allowed++;
      state = v.next;
    }
  }
  return { allowed, state };
}

describe('fixed_window', () => {
  const s = spec('fixed_window', 3, 1000);
  const impl = ALGORITHM_IMPLS.fixed_window;

  test('admits the limit, then denies until the epoch-aligned window ends', () => {
    const { allowed, state } = drain(s, undefined, 10_500, 5);
    assert.equal(allowed, 3);
    const v = impl.decide(state, s, 1, 10_500);
    assert.equal(v.allowed, false);
    assert.equal(v.retryAfterMs, 500);
    assert.equal(impl.decide(state, s, 1, 10_999).allowed, false);
    assert.equal(impl.decide(state, s, 1, 11_000).allowed, true);
  });

  test('view reports remaining and time to the window end', () => {
    const { state } = drain(s, undefined, 10_250, 2);
    assert.deepEqual(impl.view(state, s, 10_250), { remaining: 1, resetMs: 750, used: 2 });
    assert.deepEqual(impl.view(state, s, 11_000), { remaining: 3, resetMs: 1000, used: 0 });
  });

  test('over-limit is count + hits > limit; hits 0 only checks; more hits than the limit never pass', () => {
    assert.equal(impl.decide(undefined, s, 3, 0).allowed, true);
    assert.equal(impl.decide(undefined, s, 4, 0).allowed, false);
    assert.equal(impl.decide(undefined, s, 4, 0).retryAfterMs, Infinity);
    const full: State = [0, 3];
    assert.equal(impl.decide(full, s, 0, 10).allowed, true);
    assert.equal(impl.decide([0, 4], s, 0, 10).allowed, false);
  });

  test('denied hits still produce the counted state (what COUNT_DENIED_HITS writes)', () => {
    const v = impl.decide([0, 3], s, 2, 10);
    assert.deepEqual(v.next, [0, 5]);
  });

  test('a window of 30 s aligns to multiples of 30 s since the epoch', () => {
    const w = spec('fixed_window', 1, 30_000);
    const v = impl.decide(undefined, w, 1, 61_000);
    assert.deepEqual(v.next, [60_000, 1]);
    assert.equal(impl.decide(v.next, w, 1, 61_000).retryAfterMs, 29_000);
  });
});

describe('sliding_window', () => {
  const s = spec('sliding_window', 10, 1000);
  const impl = ALGORITHM_IMPLS.sliding_window;

  test('weights the previous window by the share of the current one still to run', () => {
    const { state: prevFull } = drain(s, undefined, 100, 10);
    assert.equal(impl.view(prevFull, s, 1500).remaining, 5);
    const { allowed, state } = drain(s, prevFull, 1500, 10);
    assert.equal(allowed, 5);
    assert.equal(impl.view(state, s, 1500).remaining, 0);
  });

  test('retry-after is the exact moment the estimate makes room', () => {
    let { state } = drain(s, undefined, 100, 10);
    ({ state } = drain(s, state, 1500, 5));
    const v = impl.decide(state, s, 1, 1500);
    assert.equal(v.allowed, false);
    assert.equal(v.retryAfterMs, 100);
    assert.equal(impl.decide(state, s, 1, 1599).allowed, false);
    assert.equal(impl.decide(state, s, 1, 1600).allowed, true);
  });

  test('no 2x burst across the window edge', () => {
    const { state } = drain(s, undefined, 999, 10);
    assert.equal(drain(s, state, 1000, 20).allowed, 0);
  });

  test('state older than two windows is forgotten', () => {
    const { state } = drain(s, undefined, 100, 10);
    assert.equal(impl.view(state, s, 2000).remaining, 10);
  });
});

describe('token_bucket', () => {
  const impl = ALGORITHM_IMPLS.token_bucket;

  test('burst up to capacity, then one token per period/limit', () => {
    const s = spec('token_bucket', 10, 1000);
    const { allowed, state } = drain(s, undefined, 0, 15);
    assert.equal(allowed, 10);
    const v = impl.decide(state, s, 1, 0);
    assert.equal(v.retryAfterMs, 100);
    assert.equal(impl.decide(state, s, 1, 99).allowed, false);
    assert.equal(impl.decide(state, s, 1, 100).allowed, true);
  });

  test('burst larger than the rate', () => {
    const s = spec('token_bucket', 10, 1000, 25);
    assert.equal(drain(s, undefined, 0, 40).allowed, 25);
  });

  test('refill is capped at the capacity and reset is the time to full', () => {
    const s = spec('token_bucket', 10, 1000);
    const { state } = drain(s, undefined, 0, 4);
    assert.deepEqual(impl.view(state, s, 0), { remaining: 6, resetMs: 400, used: 4 });
    assert.equal(impl.view(state, s, 60_000).remaining, 10);
  });

  test('a clock step backwards never removes tokens', () => {
    const s = spec('token_bucket', 10, 1000);
    const { state } = drain(s, undefined, 5000, 5);
    assert.equal(impl.view(state, s, 4000).remaining, 5);
  });

  test('a denied request takes nothing and hits above the capacity never pass', () => {
    const s = spec('token_bucket', 10, 1000);
    assert.equal(impl.decide([2, 0], s, 3, 0).next, undefined);
    assert.equal(impl.decide(undefined, s, 11, 0).retryAfterMs, Infinity);
  });
});

describe('gcra', () => {
  const impl = ALGORITHM_IMPLS.gcra;

  test('burst requests at once, then one per emission interval', () => {
    const s = spec('gcra', 10, 1000);
    const { allowed, state } = drain(s, undefined, 0, 15);
    assert.equal(allowed, 10);
    assert.equal(impl.decide(state, s, 1, 0).retryAfterMs, 100);
    assert.equal(impl.decide(state, s, 1, 99).allowed, false);
    assert.equal(impl.decide(state, s, 1, 100).allowed, true);
  });

  test('burst 1 paces requests evenly', () => {
    const s = spec('gcra', 10, 1000, 1);
    const { allowed, state } = drain(s, undefined, 0, 3);
    assert.equal(allowed, 1);
    assert.equal(impl.decide(state, s, 1, 0).retryAfterMs, 100);
  });

  test('thirds do not lose a request to rounding', () => {
    const s = spec('gcra', 3, 1000);
    assert.equal(drain(s, undefined, 0, 5).allowed, 3);
    assert.equal(impl.view(undefined, s, 0).remaining, 3);
  });
});

// Exactness of retry-after for every algorithm: after waiting exactly retryAfterMs the same hits
// pass, one millisecond earlier they do not.
describe('retry-after is exact', () => {
  const algorithms: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];
  let seed = 42;
  const rand = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (const algorithm of algorithms) {
    test(algorithm, () => {
      const impl = ALGORITHM_IMPLS[algorithm];
      let checked = 0;
      for (let round = 0; round < 200; round++) {
        const limit = 1 + Math.floor(rand() * 20);
        const s = spec(algorithm, limit, 1000 * (1 + Math.floor(rand() * 5)));
        let state: State | undefined;
        let now = Math.floor(rand() * 100_000);
        for (let i = 0; i < 60; i++) {
          now += Math.floor(rand() * 50);
          const hits = 1 + Math.floor(rand() * 3);
          const v = impl.decide(state, s, hits, now);
          if (v.allowed) {
            state = v.next;
            continue;
          }
          if (!Number.isFinite(v.retryAfterMs)) continue;
          assert.equal(impl.decide(state, s, hits, now + v.retryAfterMs).allowed, true, `${algorithm} at +retry`);
          if (v.retryAfterMs > 1) {
            assert.equal(impl.decide(state, s, hits, now + v.retryAfterMs - 1).allowed, false, `${algorithm} at +retry-1`);
          }
          checked++;
        }
      }
      assert.ok(checked > 50, `only ${checked} denials checked`);
    });
  }
});

// Epoch-ms instants are doubles whose step is 2.4e-4 ms: the continuous algorithms must still admit
// exactly a full burst there, for every per-second limit.
describe('a full burst at an epoch-ms instant', () => {
  const now = 1_700_000_000_123;
  for (const algorithm of ['gcra', 'token_bucket'] as const) {
    test(`${algorithm}: limits 1..200 per second each admit exactly their burst`, () => {
      const wrong: number[] = [];
      for (let limit = 1; limit <= 200; limit++) {
        const s = spec(algorithm, limit, 1000);
        const { allowed, state } = drain(s, undefined, now, limit + 1);
        if (allowed !== limit) wrong.push(limit);
        // One period later exactly the burst is back.
        if (drain(s, state, now + 1000, limit + 1).allowed !== limit) wrong.push(-limit);
      }
      assert.deepEqual(wrong, []);
    });
  }

  test('gcra still reads a one-number [TAT] state', () => {
    const s = spec('gcra', 10, 1000);
    const v = ALGORITHM_IMPLS.gcra.decide([now + 500], s, 1, now);
    assert.equal(v.allowed, true);
    assert.deepEqual(v.next, [600, now]);
    assert.equal(ALGORITHM_IMPLS.gcra.view([now + 500], s, now).remaining, 5);
  });
});

describe('a token bucket with no refill (requests_per_unit: 0)', () => {
  const s = spec('token_bucket', 0, 1000, 3);
  const impl = ALGORITHM_IMPLS.token_bucket;
  test('admits its burst once, then never again, and is kept as long as any counter', () => {
    const { allowed, state } = drain(s, undefined, 0, 5);
    assert.equal(allowed, 3);
    for (const later of [1000, 2000, 86_400_000]) {
      const v = impl.decide(state, s, 1, later);
      assert.equal(v.allowed, false);
      assert.equal(v.retryAfterMs, Infinity);
    }
    assert.equal(impl.ttlMs(state!, s, 0), MAX_TTL_MS);
  });
});

describe('TTLs are clamped', () => {
  test('to MAX_TTL_MS (10 years), whatever the period', () => {
    const now = 1_700_000_000_000;
    for (const algorithm of ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const) {
      const s = spec(algorithm, 1, 2e17, 1);
      const v = ALGORITHM_IMPLS[algorithm].decide(undefined, s, 1, now);
      const ttl = ALGORITHM_IMPLS[algorithm].ttlMs(v.next!, s, now);
      assert.ok(ttl >= 1 && ttl <= MAX_TTL_MS && Number.isInteger(ttl), `${algorithm}: ${ttl}`);
    }
    assert.equal(MAX_TTL_MS, 10 * 365 * 86_400_000);
  });
});
