import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { LagMonitor } from '../../../src/store/stages/lag';

// The event-loop lag sampler of the deadline stage (src/store/stages/lag.ts), on a clock the test
// moves: it samples only while calls wait, and a stall while one waits is seen whole.

test('the sampler runs only while a call waits, and stops on its first tick after the last one ends', async () => {
  const m = new LagMonitor();
  assert.equal(m.sampling, false, 'no call has waited yet');
  m.begin();
  m.begin();
  assert.equal(m.sampling, true);
  m.end();
  await sleep(30);
  assert.equal(m.sampling, true, 'one call still waits');
  m.end();
  await sleep(30);
  assert.equal(m.sampling, false, 'no call waits: the timer is gone');
  m.close();
});

test('time idle before a call is not a stall; a stall while it waits is', async () => {
  let now = 1_000;
  const m = new LagMonitor(() => now);
  m.begin();
  m.end();
  await sleep(30);
  assert.equal(m.sampling, false);
  // A minute with no call, then one.
  now = 61_000;
  m.begin();
  assert.equal(m.maxLagSince(61_000), 0);
  // The process is busy for 40 ms while it waits; its 5 ms tick comes 35 ms late.
  now += 40;
  assert.equal(m.maxLagSince(61_000), 35);
  m.close();
});
