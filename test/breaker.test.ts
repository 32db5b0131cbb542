import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../src/clock';
import { CircuitBreaker, type BreakerState } from '../src/store/breaker';

function breaker() {
  const clock = new ManualClock(0);
  const changes: string[] = [];
  const b = new CircuitBreaker({
    clock,
    windowMs: 10_000,
    minCalls: 4,
    failureRatio: 0.5,
    cooldownMs: 1000,
    onChange: (from: BreakerState, to: BreakerState) => changes.push(`${from}->${to}`),
  });
  return { b, clock, changes };
}

test('opens on the failure ratio once enough calls were seen', () => {
  const { b, changes } = breaker();
  b.success();
  b.failure('x');
  assert.equal(b.current, 'closed');
  b.success();
  b.failure('x');
  assert.equal(b.current, 'open');
  assert.deepEqual(changes, ['closed->open']);
  assert.equal(b.tryAcquire(), false);
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
});

test('open → half-open after the cool-down lets exactly one probe through; success closes', () => {
  const { b, clock, changes } = breaker();
  b.trip('connection lost');
  clock.advance(999);
  assert.equal(b.tryAcquire(), false);
  clock.advance(1);
  assert.equal(b.tryAcquire(), true);
  assert.equal(b.current, 'half_open');
  assert.equal(b.tryAcquire(), false);
  b.success();
  assert.equal(b.current, 'closed');
  assert.deepEqual(changes, ['closed->open', 'open->half_open', 'half_open->closed']);
});

test('a failed probe opens again for another cool-down; a reconnect probes at once', () => {
  const { b, clock } = breaker();
  b.trip('connection lost');
  clock.advance(1000);
  assert.equal(b.tryAcquire(), true);
  b.failure('still down');
  assert.equal(b.current, 'open');
  assert.equal(b.tryAcquire(), false);
  b.probeNow('connection established');
  assert.equal(b.tryAcquire(), true);
  b.success();
  assert.equal(b.current, 'closed');
});
