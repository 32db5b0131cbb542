import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { ManualClock } from '../../src/clock';
import { CancelledError } from '../../src/errors';
import type { Algorithm } from '../../src/model';
import { MemoryStore } from '../../src/store/memory';
import type { DecideOptions, LimitCheck, Store } from '../../src/store/store';
import { type RedisNode, startCluster, startRedis, stopAll } from '../support/redis';
import { makeStack, until } from '../support/stack';
import { storeBehaviour } from '../support/store-behaviour';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// The composed production stacks (over-limit cache, leases, fallback with journal, breaker,
// deadline) run the shared behaviour suite, then the regression tests of issue 8's defects that
// need to see inside a decision. Everything talks to real redis-server processes.

let standalone: RedisNode;
let clusterPort = 0;
before(async () => {
  standalone = await startRedis();
  clusterPort = (await startCluster()).nodes[0].port;
});
after(() => stopAll());

async function ready(store: Store): Promise<Store> {
  await until('the stack to be ready', () => store.ready());
  return store;
}

storeBehaviour('memory (as the app runs it)', (clock) => new MemoryStore({ clock }));
storeBehaviour('redis standalone, every stage on', (clock) => ready(makeStack({ port: standalone.port, manual: clock }).store));
storeBehaviour('redis cluster, every stage on', (clock) => ready(makeStack({ port: clusterPort, cluster: true, manual: clock }).store));

const opts: DecideOptions = { countDeniedHits: false };
// A breaker that recovers 100 ms after an outage, so the tests wait on Redis, not on cool-downs.
const QUICK_RECOVERY = { breaker: { windowMs: 10_000, minCalls: 10, failureRatio: 0.5, cooldownMs: 100 } };
let seq = 0;
function check(limit: number, over: Partial<LimitCheck> = {}): LimitCheck {
  const algorithm: Algorithm = over.algorithm ?? 'fixed_window';
  return { key: `stack:{k${++seq}}`, algorithm, limit, periodMs: DAY_MS, burst: limit, hits: 1, mode: 'enforce', ...over };
}

// The fixed-window count Redis holds for `key` ("start:count"), 0 when absent.
async function redisCount(node: RedisNode, key: string): Promise<number> {
  const raw = await node.cli('GET', key);
  return raw === '' ? 0 : Number(raw.split(':')[1]);
}

function busyWait(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

const nextTurn = () => new Promise((r) => setImmediate(r));

describe('only Redis failures open the breaker', () => {
  test('event-loop lag of our own misses no answer and opens nothing; a frozen Redis opens it', async () => {
    const node = await startRedis();
    const { store, seen } = makeStack({ port: node.port, stack: { breaker: { windowMs: 10_000, minCalls: 5, failureRatio: 0.5, cooldownMs: 60_000 } } });
    try {
      await ready(store);
      const c = check(1_000_000);
      for (let i = 0; i < 20; i++) {
        const pending = store.decide([c], { ...opts, deadlineAt: Date.now() + 20 });
        // The call is on its way to Redis (the store sends the calls of one event-loop turn at its
        // end, as one batch: two turns later it is written); now this process is busy past the
        // caller's budget.
        await nextTurn();
        await nextTurn();
        busyWait(60);
        const d = await pending;
        assert.equal(d.admitted, true);
      }
      assert.deepEqual(seen.breaker, [], 'our own lag opened the breaker');
      assert.equal(seen.counts['failure:timeout'] ?? 0, 0);
      node.pause();
      // The window holds 20 successes: 20 timeouts reach the failure ratio of 0.5.
      for (let i = 0; i < 40 && seen.breaker.length === 0; i++) {
        const d = await store.decide([c], { ...opts, deadlineAt: Date.now() + 30 });
        assert.equal(d.degraded?.policy, 'local');
      }
      assert.equal(seen.counts['failure:timeout'], 20, JSON.stringify(seen.counts));
      assert.match(seen.breaker[0] ?? '', /^closed->open: 20 of 40 calls failed/);
    } finally {
      node.resume();
      await store.close();
    }
  });
});

describe('a call reset before its batch leaves', () => {
  // The gRPC listener hands the store the call; a reset that arrives in a later read of the same
  // event-loop turn (after the request was read, before the batch is written) must cost Redis
  // nothing and must not look like a Redis failure.
  for (const cluster of [false, true]) {
    test(`is not sent to Redis, and the breaker and fallback never see it${cluster ? ' (cluster)' : ''}`, async () => {
      const { store, seen } = makeStack({ port: cluster ? clusterPort : standalone.port, cluster });
      try {
        await ready(store);
        await awayFromWindowEdge(DAY_MS, 60_000);
        const c = check(1_000);
        for (let round = 0; round < 30; round++) {
          const reset = { cancelled: false };
          const live = { cancelled: false };
          const cancelledCall = store.decide([c], { ...opts, caller: reset });
          const liveCall = store.decide([c], { ...opts, caller: live });
          reset.cancelled = true;
          await assert.rejects(cancelledCall, CancelledError);
          assert.equal((await liveCall).admitted, true);
        }
        // A caller already gone before the store is asked.
        await assert.rejects(store.decide([c], { ...opts, caller: { cancelled: true } }), CancelledError);
        assert.equal((await store.peek([c], opts)).outcomes[0].remaining, 1_000 - 30, 'only the live calls were counted');
        assert.deepEqual(seen.counts, {}, 'a cancelled call was counted as a store failure or a degraded answer');
        assert.deepEqual(seen.breaker, []);
        assert.equal(store.degraded?.(), undefined);
      } finally {
        await store.close();
      }
    });
  }
});

describe('written back exactly once', () => {
  test('a late answer that consumed nothing leaves the fallback hit journaled (defect 2)', async () => {
    const node = await startRedis();
    const other = makeStack({ port: node.port });
    const { store, seen } = makeStack({ port: node.port, stack: { journalFlushMs: 100 } });
    try {
      await ready(other.store);
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      const c = check(1);
      // Another replica exhausts the key; this one has never seen it.
      assert.equal((await other.store.decide([c], opts)).admitted, true);
      node.pause();
      const d = await store.decide([c], { ...opts, deadlineAt: Date.now() + 50 });
      assert.equal(d.admitted, true);
      assert.equal(d.degraded?.policy, 'local');
      node.resume();
      // Redis denied the late call: the fallback's hit is Redis' to learn, once.
      await until('the write-back', async () => (await redisCount(node, c.key)) === 2);
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await redisCount(node, c.key), 2);
      assert.equal(seen.counts.writeBackHits, 1);
    } finally {
      node.resume();
      await Promise.all([store.close(), other.store.close()]);
    }
  });

  test('a write-back that fails is kept and retried (defect 4)', async () => {
    const node = await startRedis();
    const { store, seen } = makeStack({
      port: node.port,
      stack: { breaker: { windowMs: 10_000, minCalls: 2, failureRatio: 0.5, cooldownMs: 100 } },
    });
    try {
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      const c = check(10);
      // A key of the wrong type: every script on it fails, so Redis errors and the fallback admits.
      await node.cli('HSET', c.key, 'poison', '1');
      for (let i = 0; i < 3; i++) assert.equal((await store.decide([c], opts)).degraded?.policy, 'local');
      await until('a failed write-back', () => seen.writeBackErrors.length >= 2);
      await node.cli('DEL', c.key);
      await until('the write-back', async () => (await redisCount(node, c.key)) === 3);
      await until('the breaker to close', () => store.degraded?.() === undefined);
      assert.equal(await redisCount(node, c.key), 3);
    } finally {
      await store.close();
    }
  });

  test('after a restart the first decision already sees what the fallback admitted (defect 5)', async () => {
    let node = await startRedis();
    const port = node.port;
    const { store } = makeStack({ port, stack: QUICK_RECOVERY });
    try {
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      const c = check(10);
      await node.stop('SIGKILL');
      let admitted = 0;
      for (let i = 0; i < 12; i++) if ((await store.decide([c], opts)).admitted) admitted++;
      assert.equal(admitted, 10);
      node = await startRedis({ port });
      await until('the stack to be back on Redis', () => store.degraded?.() === undefined);
      const first = await store.decide([c], opts);
      assert.equal(first.degraded, undefined);
      assert.equal(first.admitted, false, 'the first decision after recovery admitted an 11th hit');
      assert.equal(await redisCount(node, c.key), 10);
    } finally {
      await store.close();
    }
  });

  test('after Redis lost its data, the hits it had admitted are put back before the journal', async () => {
    let node = await startRedis();
    const port = node.port;
    const { store, seen } = makeStack({ port, stack: QUICK_RECOVERY });
    try {
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      // The replica has registered (and read the data epoch) before Redis goes.
      await until('a heartbeat', async () => (await node.cli('EXISTS', 'sluice:{sluice-fleet}epoch')) === '1');
      const c = check(100);
      for (let i = 0; i < 5; i++) assert.equal((await store.decide([c], opts)).degraded, undefined);
      await node.stop('SIGKILL');
      for (let i = 0; i < 3; i++) assert.equal((await store.decide([c], opts)).degraded?.policy, 'local');
      // Restarted empty, by the same (only) replica that set the lost epoch.
      node = await startRedis({ port });
      await until('the stack to be back on Redis', () => store.degraded?.() === undefined);
      assert.equal(seen.counts.restored, 1);
      assert.equal(await redisCount(node, c.key), 8);
    } finally {
      await store.close();
    }
  });

  test('a stall longer than REDIS_TIMEOUT is not counted twice (defect 5)', async () => {
    const node = await startRedis();
    const { store, seen } = makeStack({ port: node.port, stack: { ...QUICK_RECOVERY, stalledMs: 300 } });
    try {
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      const c = check(10);
      node.pause();
      let admitted = 0;
      for (let i = 0; i < 12; i++) if ((await store.decide([c], { ...opts, deadlineAt: Date.now() + 40 })).admitted) admitted++;
      assert.equal(admitted, 10);
      await until('the stall to open the breaker', () => (seen.counts['failure:stalled'] ?? 0) > 0);
      node.resume();
      await until('the stack to be back on Redis', () => store.degraded?.() === undefined);
      // The stalled calls ran in Redis after all and counted the same 10 hits the fallback admitted.
      assert.equal(await redisCount(node, c.key), 10);
      assert.equal(seen.counts.writeBackHits ?? 0, 0);
    } finally {
      node.resume();
      await store.close();
    }
  });

  test('12,000 journal entries are written back in batches (defect 6)', async () => {
    let node = await startRedis();
    const port = node.port;
    const { store, seen } = makeStack({ port, stack: QUICK_RECOVERY });
    try {
      await ready(store);
      await awayFromWindowEdge(DAY_MS, 60_000);
      await node.stop('SIGKILL');
      for (let i = 0; i < 12_000; i++) assert.equal((await store.decide([check(5)], opts)).admitted, true);
      node = await startRedis({ port });
      await until('the stack to be back on Redis', () => store.degraded?.() === undefined, 30_000);
      assert.equal(seen.counts.writeBackHits, 12_000);
      assert.deepEqual(seen.writeBackErrors, []);
      assert.ok(Number(await node.cli('DBSIZE')) >= 12_000);
    } finally {
      await store.close();
    }
  });
});

describe('leases follow Redis time', () => {
  test('a lease taken in one window serves nothing in the next (defect 1)', async () => {
    const clock = new ManualClock(1_700_000_000_000);
    const { store } = makeStack({ port: standalone.port, manual: clock, settings: { leaseTtlMs: 60_000 } });
    try {
      await ready(store);
      const c = check(10, { periodMs: 1000, lease: 10 });
      clock.set(1_700_000_001_000 - 1);
      const pending = store.decide([c], opts);
      // Redis takes the lease at the window's last millisecond; its answer is handled in the next.
      clock.set(1_700_000_001_000 + 1);
      let admitted = (await pending).admitted ? 1 : 0;
      for (let i = 0; i < 25; i++) if ((await store.decide([c], opts)).admitted) admitted++;
      // All of them in the second window, which has a budget of 10 (the old code admitted 19).
      assert.equal(admitted, 10);
    } finally {
      await store.close();
    }
  });

  test('a replica whose lease refill came back empty admits again once units held elsewhere return (defect 7)', async () => {
    const node = await startRedis();
    const settings = { leaseTtlMs: 400 };
    const a = makeStack({ port: node.port, settings });
    const b = makeStack({ port: node.port, settings });
    try {
      await Promise.all([ready(a.store), ready(b.store)]);
      await awayFromWindowEdge(DAY_MS, 60_000);
      const c = check(20, { lease: 10 });
      assert.equal((await a.store.decide([c], opts)).admitted, true);
      let admitted = 0;
      for (let i = 0; i < 12; i++) if ((await b.store.decide([c], opts)).admitted) admitted++;
      assert.equal(admitted, 10);
      // a's 9 unused units go back after the lease TTL; b's cached denial must not outlive that.
      await until('b to admit again', async () => (await b.store.decide([c], opts)).admitted, 3000);
    } finally {
      await Promise.all([a.store.close(), b.store.close()]);
    }
  });
});
