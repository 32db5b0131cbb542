import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, describe, test } from 'node:test';
import { monotonicClock } from '../../src/clock';
import { CircuitBreaker } from '../../src/store/breaker';
import { MemoryStore } from '../../src/store/memory';
import { RedisStore } from '../../src/store/redis';
import { DataEpoch } from '../../src/store/stages/epoch';
import { Journal } from '../../src/store/stages/journal';
import { KeyMemory } from '../../src/store/stages/key-memory';
import { LateCalls, Recovery } from '../../src/store/stages/recovery';
import { ReplicaRegistry } from '../../src/store/stages/replicas';
import { StoreClock } from '../../src/store/stages/store-clock';
import type { LimitCheck } from '../../src/store/store';
import { type RedisNode, startRedis, stopAll } from '../support/redis';
import { recordingEvents, redisClient, until } from '../support/stack';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// Recovery (store/stages/recovery.ts) on its own, against a real redis-server: the parts it puts
// in order are the real ones; the breaker is the real CircuitBreaker it answers to.

after(stopAll);

const STALLED_MS = 500;
// Longer than any wait below: a breaker that closes did so because recovery asked, not by cool-down.
const COOLDOWN_MS = 60_000;

function recoveryOn(node: RedisNode) {
  const { events, seen } = recordingEvents();
  const clock = monotonicClock;
  const client = redisClient(node.port);
  const redis = new RedisStore({ clients: [client], cluster: false, events, keyPrefix: 'sluice:' });
  const storeClock = new StoreClock(clock);
  const epoch = new DataEpoch();
  const replicaId = randomUUID();
  const replicas = new ReplicaRegistry(redis, { epoch, id: replicaId, ttlMs: 10_000, events, clock });
  const memory = new KeyMemory();
  const journal = new Journal(redis, clock, events);
  const local = new MemoryStore({ clock: storeClock, maxKeys: 1_000 });
  const late = new LateCalls();
  const recovery = new Recovery({
    redis,
    clock,
    stalledMs: STALLED_MS,
    replicaId,
    replicaTtlMs: 10_000,
    epoch,
    storeClock,
    memory,
    journal,
    local,
    late,
    replicas,
    events,
  });
  const breaker = new CircuitBreaker({ clock, windowMs: 10_000, minCalls: 1_000, failureRatio: 1, cooldownMs: COOLDOWN_MS, recover: () => recovery.run() });
  recovery.reportTo(breaker);
  const close = async () => {
    await replicas.close();
    await local.close();
    await redis.close();
  };
  return { redis, replicas, memory, journal, local, late, recovery, breaker, seen, close };
}

function check(name: string, hits: number): LimitCheck {
  return { key: `sluice:{recovery-${process.pid}-${name}}`, algorithm: 'fixed_window', limit: 10, periodMs: DAY_MS, burst: 10, hits, mode: 'enforce' };
}

async function remaining(store: Pick<RedisStore, 'peek'> | MemoryStore, c: LimitCheck): Promise<number | undefined> {
  const d = await store.peek([{ ...c, hits: 0 }], { countDeniedHits: false });
  return d.outcomes[0].remaining;
}

describe('Recovery', () => {
  test('a data loss seen by a heartbeat trips the breaker; recovery puts back this process\u2019 own hits, once, then it closes', async () => {
    await awayFromWindowEdge(DAY_MS, 30_000);
    const node = await startRedis();
    const r = recoveryOn(node);
    try {
      await until('the first heartbeat', () => r.replicas.count !== undefined);
      const c = check('lost', 3);
      const d = await r.redis.decide([c], { countDeniedHits: false });
      assert.equal(d.admitted, true);
      r.memory.addOwn(c, 3, d.storeTimeMs!);
      await node.cli('FLUSHALL');
      assert.equal(await remaining(r.redis, c), 10, 'Redis lost the 3 hits');

      await r.replicas.beat();
      assert.equal(r.breaker.current, 'open', 'the new epoch trips the breaker');
      r.breaker.probeNow('test: Redis is back');
      await until('the breaker closed by recovery', () => r.breaker.current === 'closed');
      assert.equal(await remaining(r.redis, c), 7, 'the own hits are back');
      assert.equal(r.seen.counts.restored, 1);

      // Another attempt (a retry, a later outage) in the same data lifetime adds nothing.
      await r.recovery.run();
      assert.equal(await remaining(r.redis, c), 7);
    } finally {
      await r.close();
    }
  });

  test('with Redis\u2019 data kept: nothing restored, the journal written back, the local limiter cleared', async () => {
    await awayFromWindowEdge(DAY_MS, 30_000);
    const node = await startRedis();
    const r = recoveryOn(node);
    try {
      await until('the first heartbeat', () => r.replicas.count !== undefined);
      const c = check('kept', 2);
      r.memory.addOwn(c, 5, Date.now());
      r.journal.add(c, Math.floor(Date.now() / DAY_MS) * DAY_MS, 2, false);
      await r.local.decide([{ ...c, hits: 4 }], { countDeniedHits: false });
      assert.equal(await remaining(r.local, c), 6);

      await r.recovery.run();
      assert.equal(await remaining(r.redis, c), 8, 'the journal\u2019s 2 hits, and not the 5 own hits');
      assert.equal(r.journal.size, 0);
      assert.equal(await remaining(r.local, c), 10, 'the local limiter starts afresh');
      assert.equal(r.seen.counts.restored, undefined);
    } finally {
      await r.close();
    }
  });

  test('a frozen Redis: the attempt gives up after REDIS_TIMEOUT, and the late answer to its probe recovers at once', async () => {
    const node = await startRedis();
    const r = recoveryOn(node);
    try {
      await until('the first heartbeat', () => r.replicas.count !== undefined);
      r.breaker.trip('test: outage');
      node.pause();
      r.breaker.probeNow('test: try now');
      await until('the attempt failed', () => r.breaker.current === 'open');
      node.resume();
      await until('the breaker closed on the late probe answer', () => r.breaker.current === 'closed');
    } finally {
      node.resume();
      await r.close();
    }
  });
});

describe('LateCalls', () => {
  test('settle waits for the calls in flight, and no longer than it is told', async () => {
    const late = new LateCalls();
    let landed = false;
    late.track(new Promise<void>((resolve) => setTimeout(() => ((landed = true), resolve()), 50)));
    await late.settle(10_000);
    assert.equal(landed, true);

    late.track(new Promise<void>(() => undefined));
    await late.settle(20);
  });
});
