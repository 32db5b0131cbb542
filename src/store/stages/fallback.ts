import type { Clock } from '../../clock';
import { CancelledError, UnavailableError } from '../../errors';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import type { StoreEvents } from '../events';
import type { MemoryStore } from '../memory';
import type { RefundEntry } from '../shared';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from '../store';
import { BreakerOpen } from './breaker';
import { DeadlineExceeded } from './deadline';
import type { Journal, JournalRef } from './journal';
import type { KeyMemory } from './key-memory';
import { seedState } from './seed';
import { Stage } from './stage';
import type { StoreClock } from './store-clock';
import type { LateCalls } from './recovery';

export type FallbackPolicy = 'local' | 'allow' | 'deny';

export interface FallbackOptions {
  policy: FallbackPolicy;
  domainPolicies: ReadonlyMap<string, FallbackPolicy>;
  // The local limiter; its clock must be `storeClock` so its windows are Redis' windows.
  local: MemoryStore;
  journal: Journal;
  // What Redis last said of each counter (where the local limiter starts from), and the hits this
  // process put into Redis (put back after Redis lost its data).
  memory: KeyMemory;
  // Local clock (durations) and the estimate of Redis' clock built on it.
  clock: Clock;
  storeClock: StoreClock;
  // This replica's share of what remains (1 / live replicas, or FALLBACK_SHARE).
  share: () => number;
  // Gives back hits Redis consumed for a request the fallback had already denied.
  refund: (entries: RefundEntry[]) => void;
  // Where reconciling a call answered late is tracked, for recovery to wait on (recovery.ts).
  late: LateCalls;
  events: StoreEvents;
}

// When Redis cannot decide (error, breaker open, no answer within the caller's budget), the
// domain's fallback policy does: `deny` refuses (UNAVAILABLE), `allow` admits without claiming
// any number, `local` decides with a local limiter that admits this replica's share of what Redis
// last said remains, journaling every admitted hit for the write-back.
export class FallbackStage extends Stage {
  private wasReady = false;
  // Redis calls of requests the fallback answered, still under way: their outcome decides what
  // the journal writes back, so recovery waits for them first.

  constructor(
    inner: Store,
    private readonly o: FallbackOptions,
  ) {
    super(inner);
    inner.onReadyChange?.(() => this.noteReady());
  }

  override get kind(): string {
    return `${this.inner.kind}+fallback`;
  }

  // Ready once Redis has decided for real; after that a later outage keeps serving degraded
  // (unless the policy is deny, which cannot answer without Redis).
  override ready(): boolean {
    if (this.noteReady()) return true;
    return this.wasReady && this.o.policy !== 'deny';
  }

  override degraded(): string | undefined {
    const why = this.inner.degraded?.();
    return why === undefined ? undefined : `${why}; fallback policy ${this.o.policy}`;
  }

  override async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const sent = this.o.clock.now();
    let decision: Decision;
    try {
      decision = await this.inner.decide(checks, options);
    } catch (err) {
      // Nobody waits for an answer, and Redis did not fail.
      if (err instanceof CancelledError) throw err;
      return this.fallback(checks, options, err);
    }
    this.o.storeClock.observe(decision.storeTimeMs, sent, this.o.clock.now());
    this.o.memory.decided(checks, decision);
    return decision;
  }

  // Units a Redis decision took and nobody used go back the way of every refund: the queue
  // retries them, recovery drains it before the breaker closes.
  override giveBackUnused(check: LimitCheck, units: number, takenAtMs: number): void {
    if (units > 0) this.o.refund([{ key: check.key, ...specOf(check), hits: units, decidedAtMs: takenAtMs }]);
  }

  override async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    try {
      return await this.inner.peek(checks, options);
    } catch (err) {
      const reason = reasonOf(err);
      const policy = this.policyFor(options);
      if (policy === 'deny') throw new UnavailableError(`counter store unavailable (${reason}); fallback policy is deny`);
      if (policy === 'allow') return allowAll(checks, reason);
      const local = await this.o.local.peek(this.localChecks(checks), options);
      return { ...local, degraded: { policy, reason } };
    }
  }

  private noteReady(): boolean {
    const ready = this.inner.ready();
    if (ready) this.wasReady = true;
    return ready;
  }

  private policyFor(options: DecideOptions): FallbackPolicy {
    return (options.domain !== undefined && this.o.domainPolicies.get(options.domain)) || this.o.policy;
  }

  private fallback(checks: readonly LimitCheck[], options: DecideOptions, err: unknown): Decision {
    const reason = reasonOf(err);
    const policy = this.policyFor(options);
    this.o.events.degraded(policy, reason);
    if (policy === 'deny') throw new UnavailableError(`counter store unavailable (${reason}); fallback policy is deny`);
    if (policy === 'allow') return allowAll(checks, reason);
    const late = err instanceof DeadlineExceeded ? err.late : undefined;
    const windowOf = (c: LimitCheck) => (isWindow(c) ? windowStart(this.o.storeClock.now(), c.periodMs) : undefined);
    // Admitting what cannot be written back would break the budget: a full journal denies.
    if (!this.o.journal.canTake(checks, windowOf)) {
      const denied = checks.map(
        (): LimitOutcome => ({ allowed: false, consumed: false, remaining: undefined, resetMs: undefined, retryAfterMs: 1000, usedBefore: 0 }),
      );
      return { admitted: false, outcomes: denied, degraded: { policy, reason: `${reason}; write-back journal full` } };
    }
    const decision = this.o.local.decideNow(this.localChecks(checks), options);
    const refs: (JournalRef | undefined)[] = decision.outcomes.map((o, i) =>
      o.consumed && checks[i].hits > 0 ? this.o.journal.add(checks[i], windowOf(checks[i]), checks[i].hits, late !== undefined) : undefined,
    );
    if (late !== undefined) this.reconcileLate(checks, refs, late);
    return { ...decision, degraded: { policy, reason } };
  }

  // The Redis call of a request the fallback answered finished after all: hits both counted are
  // Redis' (nothing to write back); hits only the fallback admitted settle for the write-back;
  // hits only Redis consumed (the caller was denied) are given back. A call that failed counted
  // nothing.
  private reconcileLate(checks: readonly LimitCheck[], refs: (JournalRef | undefined)[], late: Promise<Decision>): void {
    const reconciled = late.then(
      (redis) => {
        const refunds: RefundEntry[] = [];
        checks.forEach((c, i) => {
          const ref = refs[i];
          const consumed = redis.outcomes[i]?.consumed === true;
          if (ref !== undefined && consumed) {
            this.o.journal.cancel(ref);
            if (redis.storeTimeMs !== undefined) this.o.memory.addOwn(c, c.hits, redis.storeTimeMs);
          } else if (ref !== undefined) this.o.journal.settle(ref);
          else if (consumed && redis.storeTimeMs !== undefined) {
            refunds.push({ key: c.key, ...specOf(c), hits: c.hits, decidedAtMs: redis.storeTimeMs });
          }
        });
        if (refunds.length > 0) this.o.refund(refunds);
      },
      () => {
        for (const ref of refs) if (ref !== undefined) this.o.journal.settle(ref);
      },
    );
    this.o.late.track(reconciled);
  }

  // The checks as this replica's local limiter enforces them: its share of each limit, each
  // counter started from what Redis last said remains.
  private localChecks(checks: readonly LimitCheck[]): LimitCheck[] {
    const share = Math.min(1, Math.max(0, this.o.share()));
    const now = this.o.storeClock.now();
    return checks.map((c) => {
      const local = { ...c, limit: Math.floor(c.limit * share), burst: Math.floor(c.burst * share) };
      if (!this.o.local.has(c.key)) {
        const state = seedState(local, this.o.memory.known(c.key), share, now);
        if (state !== undefined) this.o.local.seed(local, state);
      }
      return local;
    });
  }
}

function reasonOf(err: unknown): string {
  if (err instanceof DeadlineExceeded || err instanceof BreakerOpen) return err.message;
  return `store error: ${(err as Error).message}`;
}

// The allow policy admits and says nothing about what remains: it does not know.
function allowAll(checks: readonly LimitCheck[], reason: string): Decision {
  const outcomes = checks.map(
    (): LimitOutcome => ({ allowed: true, consumed: false, remaining: undefined, resetMs: undefined, retryAfterMs: 0, usedBefore: 0 }),
  );
  return { admitted: true, outcomes, degraded: { policy: 'allow', reason } };
}
