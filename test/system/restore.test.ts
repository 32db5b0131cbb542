import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import type { Cluster, Redis } from 'ioredis';
import type { Algorithm } from '../../src/model';
import type { DecideOptions, LimitCheck, Store } from '../../src/store/store';
import { type RedisNode, startRedis, stopAll } from '../support/redis';
import { makeStack, type Recorded, until } from '../support/stack';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// Issue 34, item 1: Redis restarted empty under a fleet. Each stack here is one sluice process
// (its own replica id, ledger and journal) on one real redis-server; a process' Redis client is
// disconnected and reconnected by hand so that the order in which processes recover, and where
// Redis loses its data again, is the test's, not the scheduler's. The fleet-level run with real
// server processes is test/system/fleet-restore.test.ts.

after(() => stopAll());

const LIMIT = 5;
const opts: DecideOptions = { countDeniedHits: false };
// A breaker that recovers 100 ms after an outage; each process' fallback admits half of what
// Redis last told it remains (as FALLBACK_SHARE=auto does once both heartbeats were counted).
const STACK = { breaker: { windowMs: 10_000, minCalls: 10, failureRatio: 0.5, cooldownMs: 100 }, share: 0.5 };

interface Proc {
  name: string;
  store: Store;
  client: Redis | Cluster;
  seen: Recorded;
}

let seq = 0;
function counter(algorithm: Algorithm = 'fixed_window'): LimitCheck {
  return { key: `restore:{k${++seq}}:${algorithm}`, algorithm, limit: LIMIT, periodMs: DAY_MS, burst: LIMIT, hits: 1, mode: 'enforce' };
}

async function admitted(p: Proc, c: LimitCheck, n: number, how?: 'redis' | 'local'): Promise<number> {
  let yes = 0;
  for (let i = 0; i < n; i++) {
    const d = await p.store.decide([c], opts);
    if (how === 'redis') assert.equal(d.degraded, undefined, `${p.name}: a decision on Redis`);
    if (how === 'local') assert.equal(d.degraded?.policy, 'local', `${p.name}: a fallback decision`);
    if (d.admitted) yes++;
  }
  return yes;
}

// A fixed window's count in Redis ("start:count"), 0 when absent.
async function count(node: RedisNode, key: string): Promise<number> {
  const raw = await node.cli('GET', key);
  return raw === '' ? 0 : Number(raw.split(':')[1]);
}

// SHUTDOWN NOSAVE, then a fresh, empty redis-server on the same port.
async function restartEmpty(node: RedisNode): Promise<RedisNode> {
  await node.cli('SHUTDOWN', 'NOSAVE').catch(() => '');
  await node.stop();
  return startRedis({ port: node.port });
}

async function fleet(node: RedisNode, n: number): Promise<Proc[]> {
  const procs = Array.from({ length: n }, (_, i) => ({ name: `process ${i + 1}`, ...makeStack({ port: node.port, stack: STACK }) }));
  for (const p of procs) await until(`${p.name} ready`, () => p.store.ready());
  // Every process has registered (the fallback's share is 1/n) and read the data epoch.
  await until('every heartbeat', async () => Number(await node.cli('ZCARD', 'sluice:{sluice-fleet}replicas')) === n);
  await until('the epoch', async () => (await node.cli('EXISTS', 'sluice:{sluice-fleet}epoch')) === '1');
  await new Promise((r) => setTimeout(r, 300));
  return procs;
}

async function reconnect(p: Proc): Promise<void> {
  await p.client.connect();
  await until(`${p.name} back on Redis`, () => p.store.degraded?.() === undefined);
}

// After every process recovered: Redis holds what the fleet admitted, and the rest of the window
// admits only what the limit leaves.
async function settle(node: RedisNode, procs: Proc[], c: LimitCheck, before: number): Promise<void> {
  if (c.algorithm === 'fixed_window') assert.equal(await count(node, c.key), before, 'Redis holds what the fleet admitted');
  let total = before;
  for (const p of procs) total += await admitted(p, c, LIMIT, 'redis');
  assert.ok(total <= LIMIT, `the window admitted ${total} against a limit of ${LIMIT}`);
  if (c.algorithm === 'fixed_window') {
    assert.equal(total, LIMIT, 'the window admitted its whole limit, no less');
    assert.equal(await count(node, c.key), total);
  }
}

interface Run {
  node: RedisNode;
  a: Proc;
  b: Proc;
  procs: Proc[];
}

// Two processes on a fresh Redis, well inside a day's window; closed after `body`.
async function withFleet(body: (run: Run) => Promise<void>): Promise<void> {
  const node = await startRedis();
  const procs = await fleet(node, 2);
  const run = { node, a: procs[0], b: procs[1], procs };
  try {
    await awayFromWindowEdge(DAY_MS, 60_000);
    await body(run);
  } finally {
    for (const p of procs) await p.store.close();
    await run.node.stop();
  }
}

// Each process admits one hit of `c` on Redis; then both lose their connection and Redis restarts
// empty (each reconnects when the test says). Returns the hits admitted.
async function oneEachThenLoss(run: Run, c: LimitCheck): Promise<number> {
  const total = (await admitted(run.a, c, 1, 'redis')) + (await admitted(run.b, c, 1, 'redis'));
  assert.equal(total, 2);
  run.a.client.disconnect();
  run.b.client.disconnect();
  run.node = await restartEmpty(run.node);
  return total;
}

describe('Redis restarted empty under 2 processes: restore adds each process\u2019 own hits, once', () => {
  for (const algorithm of ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const) {
    test(`${algorithm}: restart before any restore; one process recovers (restore, write-back) before the other`, () =>
      withFleet(async (run) => {
        const c = counter(algorithm);
        let total = await oneEachThenLoss(run, c);
        total += (await admitted(run.a, c, 3, 'local')) + (await admitted(run.b, c, 3, 'local'));
        await reconnect(run.a);
        await reconnect(run.b);
        await settle(run.node, run.procs, c, total);
      }));
  }

  test('restart again after one process restored and wrote back, before the other did', () =>
    withFleet(async (run) => {
      const c = counter();
      let total = await oneEachThenLoss(run, c);
      const aLocal = await admitted(run.a, c, 3, 'local');
      total += aLocal + (await admitted(run.b, c, 3, 'local'));
      await reconnect(run.a);
      assert.equal(await count(run.node, c.key), 1 + aLocal, 'process 1 put back its own and wrote back its journal');
      // Lost again: process 1 puts back all it had put in (decided and written back), process 2 its own.
      run.node = await restartEmpty(run.node);
      await until('process 1 back on Redis', () => run.a.store.degraded?.() === undefined);
      await reconnect(run.b);
      await settle(run.node, run.procs, c, total);
    }));

  test('restart during a restore: a restore that failed part-way is retried without adding twice', () =>
    withFleet(async (run) => {
      const c1 = counter();
      const c2 = counter();
      const total2 = await admitted(run.a, c2, 1, 'redis');
      let total1 = await oneEachThenLoss(run, c1);
      total1 += await admitted(run.a, c1, 1, 'local');
      // A key of the wrong type: process 1's restore script puts back c2, then fails on c1.
      await run.node.cli('HSET', c1.key, 'poison', '1');
      await run.a.client.connect();
      await until('process 1 put back c2', async () => (await count(run.node, c2.key)) === 1);
      await new Promise((r) => setTimeout(r, 300));
      assert.notEqual(run.a.store.degraded?.(), undefined, 'recovery waits for the whole restore');
      await run.node.cli('DEL', c1.key);
      await until('process 1 back on Redis', () => run.a.store.degraded?.() === undefined);
      await reconnect(run.b);
      assert.equal(await count(run.node, c2.key), total2);
      await settle(run.node, run.procs, c1, total1);
    }));

  test('restart during the write-back: a journal that failed to land is written after the next loss, with the restore', () =>
    withFleet(async (run) => {
      const c1 = counter();
      const c2 = counter();
      const total1 = await oneEachThenLoss(run, c1);
      const total2 = await admitted(run.a, c2, 2, 'local');
      assert.ok(total2 > 0);
      await run.node.cli('HSET', c2.key, 'poison', '1');
      await run.a.client.connect();
      await until('a failed write-back', () => run.a.seen.writeBackErrors.length > 0);
      assert.equal(await count(run.node, c1.key), 1, 'process 1 put back its own hit before its journal');
      run.node = await restartEmpty(run.node);
      await until('process 1 back on Redis', () => run.a.store.degraded?.() === undefined);
      await reconnect(run.b);
      assert.equal(await count(run.node, c2.key), total2);
      await settle(run.node, run.procs, c1, total1);
    }));
});
