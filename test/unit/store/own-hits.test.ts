import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LimitSpec } from '../../../src/algorithms';
import { OwnHits } from '../../../src/store/stages/own-hits';

// What a replica puts back after Redis lost its data: its own hits of the windows that still count.
const MIN = 60_000;
const fixed: LimitSpec & { key: string } = { key: 'k', algorithm: 'fixed_window', limit: 10, periodMs: MIN, burst: 10 };
const sliding: LimitSpec & { key: string } = { ...fixed, key: 's', algorithm: 'sliding_window' };
const windows = (own: OwnHits, key: string, nowMs: number) =>
  own
    .current(nowMs)
    .filter((e) => e.key === key)
    .map((e) => [e.windowStartMs, e.hits]);

test('hits add up per window; a fixed window counts only while current, a sliding window one more', () => {
  const own = new OwnHits();
  own.add(fixed, 2, 10 * MIN + 5);
  own.add(fixed, 3, 10 * MIN + 9);
  own.add(sliding, 1, 10 * MIN + 5);
  own.add(sliding, 4, 11 * MIN + 1);
  own.add(fixed, 5, 11 * MIN + 1);
  assert.deepEqual(windows(own, 'k', 11 * MIN + 2), [[11 * MIN, 5]]);
  assert.deepEqual(windows(own, 's', 11 * MIN + 2), [
    [10 * MIN, 1],
    [11 * MIN, 4],
  ]);
  // The sliding window's older one counts no more one window later; nothing counts after two.
  assert.deepEqual(windows(own, 's', 12 * MIN), [[11 * MIN, 4]]);
  assert.deepEqual(windows(own, 's', 13 * MIN), []);
  assert.deepEqual(windows(own, 'k', 13 * MIN), []);
});

test('a write-back to the window before the latest lands in it; a jump past the next window forgets the older one', () => {
  const own = new OwnHits();
  own.add(sliding, 4, 11 * MIN + 1);
  // The journal writes back hits of the previous window after the latest was written.
  own.add(sliding, 2, 10 * MIN + 30);
  own.add(sliding, 1, 10 * MIN + 40);
  assert.deepEqual(windows(own, 's', 11 * MIN + 2), [
    [10 * MIN, 3],
    [11 * MIN, 4],
  ]);
  // Older than that: counts nowhere.
  own.add(sliding, 7, 8 * MIN);
  assert.deepEqual(windows(own, 's', 11 * MIN + 2), [
    [10 * MIN, 3],
    [11 * MIN, 4],
  ]);
  own.add(sliding, 6, 14 * MIN);
  assert.deepEqual(windows(own, 's', 14 * MIN + 1), [[14 * MIN, 6]]);
});

test('a counter whose limit changed period starts afresh; buckets and zero hits are not held', () => {
  const own = new OwnHits();
  own.add(fixed, 3, 10 * MIN);
  own.add({ ...fixed, periodMs: 1000 }, 2, 10 * MIN + 1);
  assert.deepEqual(windows(own, 'k', 10 * MIN + 2), [[10 * MIN, 2]]);
  own.add({ ...fixed, key: 'b', algorithm: 'token_bucket' }, 3, 10 * MIN);
  own.add({ ...fixed, key: 'z' }, 0, 10 * MIN);
  assert.deepEqual(
    own.current(10 * MIN + 2).map((e) => e.key),
    ['k'],
  );
});
