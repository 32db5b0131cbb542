import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import { CircuitBreaker, type BreakerState } from '../../../src/store/breaker';

// The state machine alone, with a manual clock. Recovery is a function the breaker runs in the
// background; no request is ever let through as a probe.
function breaker(recover: () => Promise<void> = async () => undefined) {
  const clock = new ManualClock(0);
  const changes: string[] = [];
  let recoveries = 0;
  const b = new CircuitBreaker({
    clock,
    windowMs: 10_000,
    minCalls: 4,
    failureRatio: 0.5,
    cooldownMs: 60_000,
    recover: () => (recoveries++, recover()),
    onChange: (from: BreakerState, to: BreakerState) => changes.push(`${from}->${to}`),
  });
  return { b, clock, changes, recoveries: () => recoveries };
}

const tick = () => new Promise((r) => setImmediate(r));

test('opens on the failure ratio once enough calls were seen', () => {
  const { b, changes } = breaker();
  b.success();
  b.failure('x');
  assert.equal(b.current, 'closed');
  b.success();
  b.failure('x');
  assert.equal(b.current, 'open');
  assert.deepEqual(changes, ['closed->open']);
  assert.equal(b.allows(), false);
  b.close();
});

test('old failures leave the sliding window', () => {
  const { b, clock } = breaker();
  b.failure('x');
  b.failure('x');
  b.failure('x');
  clock.advance(11_000);
  b.failure('x');
  b.success();
  b.success();
  b.success();
  assert.equal(b.current, 'closed');
  b.close();
});

test('after the cool-down it recovers in the background; requests are refused until recovery succeeds', async () => {
  let finish: () => void = () => undefined;
  const { b, clock, changes, recoveries } = breaker(() => new Promise<void>((resolve) => (finish = resolve)));
  b.trip('connection lost');
  clock.advance(59_999);
  assert.equal(b.allows(), false);
  assert.equal(recoveries(), 0);
  clock.advance(1);
  assert.equal(b.allows(), false, 'no request is the probe');
  assert.equal(b.current, 'half_open');
  assert.equal(recoveries(), 1);
  assert.equal(b.allows(), false);
  assert.equal(recoveries(), 1, 'one recovery at a time');
  finish();
  await tick();
  assert.equal(b.current, 'closed');
  assert.equal(b.allows(), true);
  assert.deepEqual(changes, ['closed->open', 'open->half_open', 'half_open->closed']);
  b.close();
});

test('a failed recovery opens again for another cool-down; a reconnect recovers at once', async () => {
  let fail = true;
  const { b, clock, recoveries } = breaker(async () => {
    if (fail) throw new Error('still down');
  });
  b.trip('connection lost');
  clock.advance(60_000);
  b.allows();
  await tick();
  assert.equal(b.current, 'open');
  assert.equal(b.allows(), false);
  fail = false;
  b.probeNow('connection established');
  await tick();
  assert.equal(recoveries(), 2);
  assert.equal(b.current, 'closed');
  b.close();
});

test('failures while not closed are not counted (the outage is already known)', () => {
  const { b } = breaker(() => new Promise<void>(() => undefined));
  b.trip('x');
  for (let i = 0; i < 10; i++) b.failure('y');
  assert.equal(b.current, 'open');
  b.close();
});
