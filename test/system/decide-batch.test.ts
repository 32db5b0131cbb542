import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import type { Algorithm, LimitMode } from '../../src/model';
import { silentEvents } from '../../src/store/events';
import { decideArgs, RedisStore, windowBase } from '../../src/store/redis';
import { loadScripts } from '../../src/store/redis/scripts';
import type { LimitCheck } from '../../src/store/store';
import { scriptCalls, startRedis, stopAll, type RedisNode } from '../support/redis';

// decide.lua decides a batch's requests in order against the states the earlier ones left, and
// writes each counter once at the end. That must be the same as sending the requests one by one:
// the same answers, and the same values and expiries in Redis. Each trial runs the same requests
// both ways at the same (explicit) time, on two copies of the same counters ('a:' batched, 'b:'
// one call each), and compares.

const T0 = 1_700_000_000_000;
// Limits whose expiries differ by whole seconds between states (a window of its own length, a
// token a second), so that a wrong expiry cannot hide in the time the two runs take.
const KEYS: { name: string; algorithm: Algorithm; limit: number; periodMs: number; burst: number }[] = [
  { name: 'fw', algorithm: 'fixed_window', limit: 4, periodMs: 60_000, burst: 4 },
  { name: 'sw', algorithm: 'sliding_window', limit: 3, periodMs: 30_000, burst: 3 },
  { name: 'tb', algorithm: 'token_bucket', limit: 5, periodMs: 5_000, burst: 5 },
  { name: 'gc', algorithm: 'gcra', limit: 4, periodMs: 8_000, burst: 2 },
];
// Expiry set on the counters a trial starts with: far from any the algorithms set.
const SEED_TTL_MS = 3_600_000;

interface LimitArb {
  key: number;
  hits: number;
  mode: LimitMode;
}

const limitArb = fc.record({
  key: fc.nat({ max: KEYS.length }), // KEYS.length: the key of another type
  hits: fc.integer({ min: 0, max: 3 }),
  mode: fc.constantFrom<LimitMode>('enforce', 'enforce', 'shadow', 'quota'),
});
const trialArb = fc.record({
  countDenied: fc.boolean(),
  // Requests sent before the trial (one by one, on both copies): the counters' starting states.
  seed: fc.array(fc.array(limitArb, { minLength: 1, maxLength: 3 }), { maxLength: 4 }),
  requests: fc.array(fc.array(limitArb, { minLength: 1, maxLength: 3 }), { minLength: 2, maxLength: 12 }),
  withBadKey: fc.boolean(),
});

describe('decide.lua batches', () => {
  let node: RedisNode;
  let conn: Redis;
  let store: RedisStore;
  let windowStore: RedisStore;
  const clock = new ManualClock(T0);

  before(async () => {
    node = await startRedis();
    conn = new Redis({ port: node.port, host: '127.0.0.1' });
    store = new RedisStore({ clients: [conn], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 't:' });
    windowStore = new RedisStore({ clients: [conn], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 't:', windowHashes: true });
    while (!store.ready() || !windowStore.ready()) await new Promise((r) => setTimeout(r, 20));
  });

  after(async () => {
    await store.close();
    await windowStore.close();
    await stopAll();
  });

  // With a key per counter, and with fixed windows as fields of their window's hash (the default,
  // WINDOW_COUNTERS=hash): there the fixed window 'fw' is a field of `t:{}windows|…` (its value is
  // compared, its expiry is the hash's, the same for both copies), and the key of another type
  // (a hash) is used by a limit with a key of its own (the sliding window), so that it fails.
  for (const windows of [false, true]) {
    test(`a batch answers and writes what its requests sent one by one do${windows ? ' (fixed windows in window hashes)' : ''}`, () =>
      batchesAsOneByOne(windows));
  }

  async function batchesAsOneByOne(windows: boolean): Promise<void> {
    const s = windows ? windowStore : store;
    const inHash = (i: number) => windows && i < KEYS.length && KEYS[i].algorithm === 'fixed_window';
    const hashOf = (i: number) => `${windowBase('t:')(KEYS[i].periodMs)}${clock.now() - (clock.now() % KEYS[i].periodMs)}`;
    const badAlgorithm = windows ? 1 : 0;
    let trial = 0;
    const counts = { batches: 0, requests: 0, failed: 0, consumedTwice: 0, kept: 0, fields: 0 };
    await fc.assert(
      fc.asyncProperty(trialArb, async ({ countDenied, seed, requests, withBadKey }) => {
        trial++;
        const key = (copy: string, i: number) =>
          i === KEYS.length ? `${copy}${trial}${windows ? 'w' : ''}:bad` : `${copy}${trial}${windows ? 'w' : ''}:${KEYS[i].name}`;
        const checks = (copy: string, limits: LimitArb[]): LimitCheck[] =>
          limits
            .filter((l) => withBadKey || l.key < KEYS.length)
            .map((l) => {
              const k = KEYS[l.key === KEYS.length ? badAlgorithm : l.key];
              return { key: key(copy, l.key), algorithm: k.algorithm, limit: k.limit, periodMs: k.periodMs, burst: k.burst, hits: l.hits, mode: l.mode };
            });
        const options = { countDeniedHits: countDenied };
        clock.set(T0 + trial * 1_000_000);
        if (withBadKey) for (const copy of ['a:', 'b:']) await conn.hset(key(copy, KEYS.length), 'f', '1');
        // The starting states: made on copy 'a:', then set on both copies alike, with one expiry
        // (a state that expires within a millisecond, such as a full bucket's, would otherwise be
        // gone from one copy and not the other).
        for (const limits of seed) {
          const cs = checks('a:', limits);
          if (cs.length > 0) await s.decide(cs, options).catch(() => undefined);
        }
        const names = KEYS.map((_, i) => i);
        for (const i of names) {
          const [a, b] = [key('a:', i), key('b:', i)];
          if (inHash(i)) {
            const value = await conn.hget(hashOf(i), a);
            if (value !== null) await conn.hset(hashOf(i), b, value);
            continue;
          }
          const value = await conn.get(a);
          if (value === null) await conn.del(a, b);
          else await conn.multi().set(a, value, 'PX', SEED_TTL_MS).set(b, value, 'PX', SEED_TTL_MS).exec();
        }
        clock.set(T0 + trial * 1_000_000 + 1_500);
        const sent = requests.map((limits) => ({ a: checks('a:', limits), b: checks('b:', limits) })).filter((r) => r.a.length > 0);

        // 'a:' all at once: one batch (one script call); 'b:' one call each.
        const started = Date.now();
        const calls = await scriptCalls(node);
        const batched = await Promise.allSettled(sent.map((r) => s.decide(r.a, options)));
        // One call, or nothing here is batched (a key of another type makes it decide again inside).
        assert.equal((await scriptCalls(node)) - calls, 1);
        const single: PromiseSettledResult<unknown>[] = [];
        for (const r of sent)
          single.push(
            await s.decide(r.b, options).then(
              (value) => ({ status: 'fulfilled' as const, value }),
              (reason: unknown) => ({ status: 'rejected' as const, reason }),
            ),
          );
        const tookMs = Date.now() - started;
        counts.batches++;
        counts.requests += sent.length;

        sent.forEach((_, i) => {
          const [x, y] = [batched[i], single[i]];
          assert.equal(x.status, y.status, `request ${i}: ${JSON.stringify({ countDenied, requests })}`);
          if (x.status === 'rejected') {
            counts.failed++;
            assert.match(String(x.reason), /WRONGTYPE/);
          } else
            assert.deepEqual(
              x.value,
              (y as PromiseFulfilledResult<unknown>).value,
              `request ${i} answered differently: ${JSON.stringify({ countDenied, seed, requests })}`,
            );
        });
        for (const i of names) {
          const [a, b] = [key('a:', i), key('b:', i)];
          if (inHash(i)) {
            const [va, vb] = await conn.hmget(hashOf(i), a, b);
            assert.equal(va, vb, `value of ${KEYS[i].name}: ${JSON.stringify({ countDenied, seed, requests })}`);
            if (va !== null) counts.fields++;
            continue;
          }
          const replies = (await conn.multi().get(a).pttl(a).get(b).pttl(b).exec())!.map(([err, v]) => {
            assert.equal(err, null);
            return v;
          });
          const [va, ta, vb, tb] = replies as [string | null, number, string | null, number];
          const where = `${KEYS[i].name}: ${va} (${ta} ms) vs ${vb} (${tb} ms): ${JSON.stringify({ countDenied, seed, requests })}`;
          // A counter that expires within the time the runs took (a full bucket's lives 1 ms) may
          // be gone in one copy and not yet in the other: both must be that short-lived.
          const gone = (t: number) => t === -2 || t <= tookMs + 20;
          if (gone(ta) || gone(tb)) {
            assert.ok(gone(ta) && gone(tb), `short-lived in one copy only, ${where}`);
            continue;
          }
          assert.equal(va, vb, `value of ${where}`);
          // The copies were written tookMs apart at most; a wrong expiry is off by a second or more.
          assert.ok(Math.abs(ta - tb) <= tookMs + 5, `expiry of ${where}`);
          if (ta > SEED_TTL_MS - 60_000) counts.kept++;
        }
        const written = new Map<string, number>();
        for (const r of sent) for (const c of r.a) written.set(c.key, (written.get(c.key) ?? 0) + 1);
        if ([...written.values()].some((n) => n > 1)) counts.consumedTwice++;
      }),
      { numRuns: 150, seed: 20261201 },
    );
    // The trials exercised what they are for: shared keys, failed requests, kept expiries.
    assert.ok(counts.consumedTwice > 100, `batches with a key used twice: ${counts.consumedTwice}`);
    assert.ok(counts.failed > 20, `requests failed on the key of another type: ${counts.failed}`);
    assert.ok(counts.kept > 20, `counters that kept their expiry: ${counts.kept}`);
    if (windows) assert.ok(counts.fields > 100, `window-hash fields compared: ${counts.fields}`);
  }

  // The caller never sends these; the script must still fail only the request that has them.
  test('a request with a malformed limit fails alone and writes nothing', async () => {
    clock.set(T0 + 500_000_000);
    const limit = (key: string): LimitCheck => ({ key, algorithm: 'fixed_window', limit: 5, periodMs: 60_000, burst: 5, hits: 1, mode: 'enforce' });
    const requests = ['m:1', 'm:2', 'm:3', 'm:4'].map((key) => ({ all: [limit(key)], idx: [0] }));
    const [numKeys, args] = decideArgs(requests, false, String(T0 + 500_000_000), 'request');
    // ARGV: 5 fields, 1 spec, no window-hash group, then per request its count, the limit's number
    // and its hits.
    const at = (request: number) => numKeys + 7 + 3 * request;
    args[at(1) + 1] = '1.5';
    args[at(2) + 2] = 'x';
    args[at(3) + 1] = '0';
    const reply = (await conn.call('FCALL', loadScripts().functions.decide, numKeys, ...args)) as unknown[];
    assert.deepEqual(reply.slice(1), [1, 3, -1, 'not a limit: 1.5', -1, 'not a number of hits: x', -1, 'not a limit: 0']);
    assert.deepEqual(await conn.mget('m:1', 'm:2', 'm:3', 'm:4'), [`${T0 + 500_000_000 - ((T0 + 500_000_000) % 60_000)}:1`, null, null, null]);
  });
});
