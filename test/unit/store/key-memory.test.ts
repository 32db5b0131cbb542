import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LimitSpec } from '../../../src/algorithms';
import { specOf } from '../../../src/algorithms/types';
import { KeyMemory } from '../../../src/store/stages/key-memory';
import type { Decision, LimitCheck, LimitOutcome } from '../../../src/store/store';

// What a replica remembers per counter: what Redis last said remains (where its fallback starts),
// and what it puts back after Redis lost its data: its own hits of the windows that still count.
const MIN = 60_000;
const fixed: LimitSpec & { key: string } = { key: 'k', algorithm: 'fixed_window', limit: 10, periodMs: MIN, burst: 10 };
const sliding: LimitSpec & { key: string } = { ...fixed, key: 's', algorithm: 'sliding_window' };
const windows = (own: KeyMemory, key: string, nowMs: number) =>
  own
    .ownCurrent(nowMs)
    .filter((e) => e.key === key)
    .map((e) => [e.windowStartMs, e.hits]);

test('hits add up per window; a fixed window counts only while current, a sliding window one more', () => {
  const own = new KeyMemory();
  own.addOwn(fixed, 2, 10 * MIN + 5);
  own.addOwn(fixed, 3, 10 * MIN + 9);
  own.addOwn(sliding, 1, 10 * MIN + 5);
  own.addOwn(sliding, 4, 11 * MIN + 1);
  own.addOwn(fixed, 5, 11 * MIN + 1);
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
  const own = new KeyMemory();
  own.addOwn(sliding, 4, 11 * MIN + 1);
  // The journal writes back hits of the previous window after the latest was written.
  own.addOwn(sliding, 2, 10 * MIN + 30);
  own.addOwn(sliding, 1, 10 * MIN + 40);
  assert.deepEqual(windows(own, 's', 11 * MIN + 2), [
    [10 * MIN, 3],
    [11 * MIN, 4],
  ]);
  // Older than that: counts nowhere.
  own.addOwn(sliding, 7, 8 * MIN);
  assert.deepEqual(windows(own, 's', 11 * MIN + 2), [
    [10 * MIN, 3],
    [11 * MIN, 4],
  ]);
  own.addOwn(sliding, 6, 14 * MIN);
  assert.deepEqual(windows(own, 's', 14 * MIN + 1), [[14 * MIN, 6]]);
});

test('a counter whose limit changed period starts afresh; buckets and zero hits are not held', () => {
  const own = new KeyMemory();
  own.addOwn(fixed, 3, 10 * MIN);
  own.addOwn({ ...fixed, periodMs: 1000 }, 2, 10 * MIN + 1);
  assert.deepEqual(windows(own, 'k', 10 * MIN + 2), [[10 * MIN, 2]]);
  own.addOwn({ ...fixed, key: 'b', algorithm: 'token_bucket' }, 3, 10 * MIN);
  own.addOwn({ ...fixed, key: 'z' }, 0, 10 * MIN);
  assert.deepEqual(
    own.ownCurrent(10 * MIN + 2).map((e) => e.key),
    ['k'],
  );
});

const checkOf = (spec: LimitSpec & { key: string }, hits: number): LimitCheck => ({ ...spec, hits, mode: 'enforce' });
const outcome = (consumed: boolean, remaining: number | undefined): LimitOutcome => ({
  allowed: consumed,
  consumed,
  remaining,
  resetMs: undefined,
  retryAfterMs: 0,
  usedBefore: 0,
});

test('a Redis decision leaves what remains of each limit, and the hits of those it consumed as own', () => {
  const memory = new KeyMemory();
  const bucket = { ...fixed, key: 'b', algorithm: 'token_bucket' } as const;
  const checks = [checkOf(fixed, 2), checkOf(sliding, 1), checkOf(bucket, 1)];
  const decision: Decision = { admitted: false, outcomes: [outcome(true, 8), outcome(false, 0), outcome(true, undefined)], storeTimeMs: 10 * MIN + 5 };
  memory.decided(checks, decision);
  assert.deepEqual(
    [...memory.allKnown()].map((k) => [k.key, k.remaining, k.atMs]),
    [
      ['k', 8, 10 * MIN + 5],
      ['s', 0, 10 * MIN + 5],
    ],
  );
  assert.deepEqual(memory.known('k')?.spec, specOf(fixed));
  // Only the fixed window consumed and is a window: the bucket's use goes back as the fleet's view.
  assert.deepEqual(windows(memory, 'k', 10 * MIN + 6), [[10 * MIN, 2]]);
  assert.deepEqual(windows(memory, 's', 10 * MIN + 6), []);
  assert.equal(memory.ownCurrent(10 * MIN + 6).length, 1);
  // A fallback's answer (degraded) or one without Redis' time tells nothing.
  memory.decided(checks, { ...decision, outcomes: [outcome(true, 1), outcome(true, 1), outcome(true, 1)], degraded: { policy: 'local', reason: 'down' } });
  memory.decided(checks, { ...decision, outcomes: [outcome(true, 1), outcome(true, 1), outcome(true, 1)], storeTimeMs: undefined });
  assert.equal(memory.known('k')?.remaining, 8);
  assert.deepEqual(windows(memory, 'k', 10 * MIN + 6), [[10 * MIN, 2]]);
});

test('a counter keeps a spec shared by every counter of that spec, never the check it was decided with', () => {
  // The checks are objects per request: kept, every new key would keep one alive long after its
  // request. Counters of the same spec share one object; more specs than are shared still keep
  // each counter's own.
  const memory = new KeyMemory();
  const decide = (spec: LimitSpec & { key: string }) => {
    const c = checkOf(spec, 1);
    memory.decided([c], { admitted: true, outcomes: [outcome(true, 5)], storeTimeMs: 10 * MIN });
    return c;
  };
  const a = decide({ ...fixed, key: 'a' });
  decide({ ...fixed, key: 'b' });
  assert.notEqual(memory.known('a')?.spec, a);
  assert.equal(memory.known('a')?.spec, memory.known('b')?.spec);
  assert.deepEqual(memory.known('a')?.spec, specOf(fixed));
  for (let i = 0; i < 40; i++) decide({ ...sliding, key: `n${i}`, limit: i + 1 });
  for (let i = 0; i < 40; i++) assert.deepEqual(memory.known(`n${i}`)?.spec, { ...specOf(sliding), limit: i + 1 });
  assert.deepEqual(windows(memory, 'n39', 10 * MIN + 1), [[10 * MIN, 1]]);
  assert.deepEqual(memory.known('a')?.spec, specOf(fixed));
});

test('a counter decided again holds the latest answer; its own hits forgotten, what Redis said stays', () => {
  const memory = new KeyMemory();
  const c = checkOf(fixed, 1);
  memory.decided([c], { admitted: true, outcomes: [outcome(true, 9)], storeTimeMs: 10 * MIN });
  memory.decided([c], { admitted: true, outcomes: [outcome(true, 8)], storeTimeMs: 10 * MIN + 1 });
  assert.deepEqual([memory.known('k')?.remaining, memory.known('k')?.atMs], [8, 10 * MIN + 1]);
  // A lease's take counts as a decision that consumed what it was granted.
  memory.granted(c, 3, 5, 10 * MIN + 2);
  assert.deepEqual([memory.known('k')?.remaining, windows(memory, 'k', 10 * MIN + 3)], [3, [[10 * MIN, 7]]]);
  // Windows that count nowhere any more are dropped; a counter with nothing else is forgotten.
  memory.addOwn({ ...fixed, key: 'only-own' }, 2, 10 * MIN);
  assert.deepEqual(memory.ownCurrent(12 * MIN), []);
  assert.equal(memory.known('k')?.remaining, 3);
  assert.equal(memory.known('only-own'), undefined);
  assert.deepEqual(
    [...memory.allKnown()].map((k) => k.key),
    ['k'],
  );
  // Own hits start again after being forgotten.
  memory.decided([c], { admitted: true, outcomes: [outcome(true, 2)], storeTimeMs: 12 * MIN + 1 });
  assert.deepEqual(windows(memory, 'k', 12 * MIN + 2), [[12 * MIN, 1]]);
});

test('bounded: the least recently written counters go first, whole generations at a time', () => {
  // 4 keys: generations of 2.
  const memory = new KeyMemory(4);
  const at = 10 * MIN;
  const decide = (key: string, remaining: number) =>
    memory.decided([checkOf({ ...fixed, key }, 1)], { admitted: true, outcomes: [outcome(true, remaining)], storeTimeMs: at });
  decide('a', 1);
  decide('b', 2);
  decide('c', 3);
  // 'a' written again: moved to the young generation with its own hits, so it outlives 'b', which
  // goes with its generation when 'd' starts a new one.
  decide('a', 4);
  decide('d', 5);
  decide('e', 6);
  assert.deepEqual([...memory.allKnown()].map((k) => [k.key, k.remaining]).sort(), [
    ['a', 4],
    ['c', 3],
    ['d', 5],
    ['e', 6],
  ]);
  assert.deepEqual(windows(memory, 'a', at + 1), [[at, 2]]);
  assert.equal(memory.known('b'), undefined);
  // Many more than the bound: never more than it held.
  for (let i = 0; i < 1000; i++) decide(`k${i}`, i);
  assert.ok([...memory.allKnown()].length <= 4);
  assert.equal(memory.known('k999')?.remaining, 999);
});

test('generations reused after being dropped: no counter sees numbers or hits of one that held its slot before', () => {
  // A dropped generation's arrays become the next young one's. Against a model of the two
  // generations (maps of whole records), over many rotations: every counter held has exactly its
  // own latest answer and hits, and no forgotten one comes back.
  const memory = new KeyMemory(6);
  type Rec = { remaining: number; hits: number };
  let young = new Map<string, Rec>();
  let old = new Map<string, Rec>();
  let seed = 7;
  const rand = (n: number) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) % n;
  };
  const at = 10 * MIN;
  for (let op = 0; op < 3000; op++) {
    const key = `k${rand(12)}`;
    const remaining = rand(100);
    const consumed = rand(3) > 0;
    memory.decided([checkOf({ ...fixed, key }, 1)], { admitted: consumed, outcomes: [outcome(consumed, remaining)], storeTimeMs: at });
    let rec = young.get(key);
    if (rec === undefined) {
      const moved = old.get(key);
      if (young.size >= 3) {
        old = young;
        young = new Map();
      }
      rec = moved === undefined ? { remaining: 0, hits: 0 } : { ...moved };
      young.set(key, rec);
    }
    rec.remaining = remaining;
    if (consumed) rec.hits += 1;
    const held = new Map([...old, ...young]);
    for (let k = 0; k < 12; k++) {
      const name = `k${k}`;
      const want = held.get(name);
      assert.equal(memory.known(name)?.remaining, want?.remaining, `op ${op}: ${name}`);
      assert.deepEqual(windows(memory, name, at + 1), want === undefined || want.hits === 0 ? [] : [[at, want.hits]], `op ${op}: ${name}`);
    }
  }
});
