import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import { AutoLeases } from '../../../src/store/stages/lease-policy';
import type { LimitCheck } from '../../../src/store/store';

// Which keys are hot (automatic leases): a key is hot once this replica saw `threshold` requests
// for it within a second. Most keys never are; they are counted in a sketch first and exactly
// only once the sketch says they may be, which makes a key hot late by a quarter of the threshold
// at most and never early, however many keys share its cells.
const check = (key: string): LimitCheck => ({ key, algorithm: 'fixed_window', limit: 1000, periodMs: 60_000, burst: 1000, hits: 1, mode: 'enforce' });

function policy(threshold: number) {
  const clock = new ManualClock(1_000_000);
  const leases = new AutoLeases({ clock, autoThreshold: threshold, autoShare: 0.1, ttlMs: 5000, budgetMs: () => 10 });
  // Requests for `key`, one by one: how many of them were answered with a lease size.
  const ask = (key: string, n: number) => Array.from({ length: n }, () => leases.size(check(key))).filter((s) => s > 0).length;
  return { clock, leases, ask };
}

test('a key is hot from its threshold-th request in a second, a quarter of the threshold later at most', () => {
  const { clock, leases, ask } = policy(8);
  assert.equal(ask('a', 7), 0);
  assert.equal(leases.leased(check('a')), false);
  // The 8th may still be counted short (by at most 2 here); by the 10th the key is hot.
  assert.ok(ask('a', 3) >= 1);
  assert.equal(leases.leased(check('a')), true);
  assert.equal(leases.size(check('a')), 100);
  // Hot for 10 s, then counted afresh.
  clock.advance(10_001);
  assert.equal(leases.leased(check('a')), false);
  assert.equal(ask('b', 7), 0);
});

test('many keys in a second make none of them hot early: counted exactly once they may be', () => {
  const { clock, leases, ask } = policy(8);
  // 20,000 distinct keys, once each: every cell of the sketch says more than a quarter of 8.
  for (let i = 0; i < 20_000; i++) assert.equal(leases.size(check(`cold-${i}`)), 0);
  // A key whose cells others raised is counted exactly from its first request: 7 are not hot, the
  // 8th is.
  assert.equal(ask('x', 7), 0);
  assert.equal(ask('x', 1), 1);
  // A new second starts the sketch again; requests counted in the last one do not carry over.
  clock.advance(1000);
  assert.equal(ask('y', 7), 0);
  for (let i = 0; i < 20_000; i++) assert.equal(leases.size(check(`cold-${i}`)), 0);
});

test('a threshold of 0 leases nothing', () => {
  const { ask } = policy(0);
  assert.equal(ask('a', 100), 0);
});
