import { capacity, isWindow, specOf } from '../../algorithms/types';
import type { Clock } from '../../clock';
import type { StoreEvents } from '../events';
import type { OwnEntry, SharedOps } from '../shared';
import { answeredWithin } from '../timeout';
import type { DataEpoch } from './epoch';
import type { Known } from './key-memory';

// Calls the fallback answered for (Redis missed the caller's budget) that are still on their way:
// their outcome decides what the journal writes back, so recovery lets them land first.
export class LateCalls {
  private readonly calls = new Set<Promise<unknown>>();

  track(call: Promise<unknown>): void {
    this.calls.add(call);
    void call.finally(() => this.calls.delete(call));
  }

  // Waits until those in flight now have settled, `timeoutMs` at most.
  async settle(timeoutMs: number): Promise<void> {
    if (this.calls.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([Promise.allSettled([...this.calls]), timeout]);
    clearTimeout(timer);
  }
}

// What recovery needs of Redis.
export interface RecoveryRedis extends Pick<SharedOps, 'probe' | 'heartbeat' | 'restoreOwn'> {
  refunds: { drain(): Promise<void> };
}

// The breaker recovery answers to (store/breaker.ts CircuitBreaker).
export interface RecoveryBreaker {
  // Redis answered after all: try to recover at once instead of after the cool-down.
  probeNow(reason: string): void;
  // Redis lost its data: stop deciding on it until recovery restored what this process had put in.
  trip(reason: string): void;
}

export interface RecoveryOptions {
  redis: RecoveryRedis;
  // Local time, for durations only.
  clock: Clock;
  // REDIS_TIMEOUT: each step waits this long for Redis at most, ms.
  stalledMs: number;
  replicaId: string;
  replicaTtlMs: number;
  // Redis' data epoch (see epoch.ts), also read by the replica registry's heartbeats.
  epoch: DataEpoch;
  // Redis' clock as seen from here: the probe's answer is one more reading of it.
  storeClock: { observe(storeNowMs: number, sentAtMs: number, receivedAtMs: number): void };
  // This process' own hits in windows, put back when Redis lost its data, and what Redis last said
  // of each counter: a bucket's view of the fleet's use (key-memory.ts).
  memory: { ownCurrent(storeNowMs: number): OwnEntry[]; allKnown(): Iterable<Known> };
  // The fallback's journal (journal.ts), written back once Redis answers.
  journal: { flush(): Promise<void> };
  // The fallback's local limiter: cleared once Redis has the truth again.
  local: { clear(): void };
  late: LateCalls;
  // Counts the live replicas again once recovered (replicas.ts).
  replicas: { beat(): Promise<void> };
  events: StoreEvents;
}

// Recovery after an outage: what has to happen, in order, before Redis decides again. It is the
// breaker's recover(): the breaker closes only when run() resolves, and opens again when it throws.
//
//   probe (a real decision round-trips) → heartbeat (the data epoch) → restore own hits if Redis
//   lost its data → let late calls land → refunds → journal write-back → clear the local limiter
//
// reportTo() hands it the breaker it reports to: a probe answered too late, and a data loss seen
// by any heartbeat, are news for the breaker.
export class Recovery {
  private breaker: RecoveryBreaker | undefined;

  constructor(private readonly o: RecoveryOptions) {
    o.epoch.onLost((reason) => this.breaker?.trip(reason));
  }

  reportTo(breaker: RecoveryBreaker): void {
    this.breaker = breaker;
  }

  // One attempt; throws (the breaker stays open) when Redis does not answer a step within
  // `stalledMs` or a write fails. Every step may run again: restores are idempotent per data
  // lifetime (lua/restore_own.lua), the journal and refunds drop what landed.
  async run(): Promise<void> {
    const { redis, clock, stalledMs, epoch } = this.o;
    const sent = clock.now();
    const probing = redis.probe();
    // A frozen Redis answers the probe when it thaws, long after this attempt gave up: recover
    // then, at once, rather than a cool-down later (replicas recovering together keep the window
    // where one decides on Redis before another's write-back lands short).
    probing.then(
      () => this.breaker?.probeNow('Redis answered a late probe'),
      () => undefined,
    );
    const probe = await answeredWithin(probing, stalledMs, 'recovery probe');
    this.o.storeClock.observe(probe.nowMs, sent, clock.now());
    const beat = await answeredWithin(redis.heartbeat(this.o.replicaId, this.o.replicaTtlMs, epoch.proposal), stalledMs, 'recovery heartbeat');
    if (epoch.lost(beat.epoch)) await this.restore(beat.nowMs);
    epoch.adopt(beat.epoch);
    // Calls sent before the probe have answered by now (one connection keeps order); let their
    // outcomes reach the journal before it is written.
    await this.o.late.settle(stalledMs);
    await redis.refunds.drain();
    await this.o.journal.flush();
    // Redis has the truth again; the next outage starts from what it says then.
    this.o.local.clear();
    void this.o.replicas.beat();
  }

  // After Redis lost its data: puts back the hits this process had put into windows itself
  // (every process does, so the fleet's add up), exactly once per data lifetime; and for each
  // bucket (token bucket, GCRA) the use Redis last reported, of the whole fleet: a bucket refills
  // once for everyone, so hits split by process would each be refilled in full and the fleet's
  // sum would fall short. The script adds to a bucket only what its view exceeds the views
  // already put back (see lua/restore_own.lua).
  private async restore(storeNowMs: number): Promise<void> {
    const entries = this.o.memory.ownCurrent(storeNowMs);
    for (const k of this.o.memory.allKnown()) {
      if (isWindow(k.spec)) continue;
      const used = capacity(k.spec) - k.remaining;
      if (used > 0) entries.push({ key: k.key, ...specOf(k.spec), hits: used, atMs: k.atMs });
    }
    await this.o.redis.restoreOwn(entries, this.o.replicaId);
    this.o.events.restored(entries.length);
  }
}
