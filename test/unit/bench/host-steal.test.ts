import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { STEAL_STALL_MS, stealMsOf, summarise, watchSteal } from '../../../bench/host-steal';

// The "Envoy in front" bench's steal watch (bench/host-steal.ts): which of a row's missed decisions
// came while the hypervisor had taken the machine's CPU.

describe('bench: host steal', () => {
  test("/proc/stat's steal column, in ms; none where the line or the column is missing", () => {
    const stat = 'cpu  4705 356 584 3699176 23 23 0 17 0 0\ncpu0 1393280 32966 572056 13343292 6130 0 17 0 0 0\nintr 0\n';
    assert.equal(stealMsOf(stat), 170);
    assert.equal(stealMsOf('cpu  4705 356 584 3699176 23 23 0\n'), undefined);
    assert.equal(stealMsOf('intr 0\n'), undefined);
  });

  test('errors count as during steal when their interval and the two before it lost 20 ms or more', () => {
    assert.equal(STEAL_STALL_MS, 20);
    const iv = (stealMs: number, errors: number) => ({ stealMs, errors });
    // The run that prompted it: 30 ms, then 90 ms of steal, and 15 errors in the second interval.
    assert.deepEqual(summarise([iv(0, 0), iv(30, 0), iv(90, 15), iv(0, 0)]), { stealMs: 120, errorsInSteal: 15 });
    // Two intervals after the steal still count; three do not; 10 ms is not enough.
    assert.deepEqual(summarise([iv(20, 0), iv(0, 0), iv(0, 2), iv(0, 3)]), { stealMs: 20, errorsInSteal: 2 });
    assert.deepEqual(summarise([iv(10, 1), iv(0, 4)]), { stealMs: 10, errorsInSteal: 0 });
    assert.deepEqual(summarise([iv(0, 7)]), { stealMs: 0, errorsInSteal: 0 });
    assert.deepEqual(summarise([]), { stealMs: 0, errorsInSteal: 0 });
  });

  test('the watch samples the count until stopped (this machine reports steal)', async () => {
    let n = 0;
    const watch = await watchSteal(async () => n);
    n = 3;
    await new Promise((r) => setTimeout(r, 250));
    const s = await watch.stop();
    assert.ok(s !== undefined, 'this Linux machine has a steal column in /proc/stat');
    assert.ok(s.stealMs >= 0 && s.errorsInSteal <= 3);
  });
});
