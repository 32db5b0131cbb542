import type { Clock } from '../clock';
import { UnavailableError } from '../errors';
import { windowStart } from '../limiter/algorithms/types';
import { CircuitBreaker, type BreakerOptions, type BreakerState } from './breaker';
import { LeaseManager, type LeaseOptions, type Reservation } from './leases';
import type { MemoryStore } from './memory';
import { OverLimitCache } from './over-limit-cache';
import type { AbsorbEntry, RedisStore } from './redis';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from './store';

export type FallbackPolicy = 'local' | 'allow' | 'deny';

export interface ResilienceOptions {
  clock: Clock;
  // Longest a decision waits on the shared store, ms.
  deadlineMs: number;
  // Kept back from the caller's own deadline, ms.
  marginMs: number;
  breaker: Omit<BreakerOptions, 'clock' | 'onChange'>;
  policy: FallbackPolicy;
  domainPolicies: ReadonlyMap<string, FallbackPolicy>;
  // Share of each limit the local fallback enforces (e.g. 0.25 with four replicas).
  share: number;
  overLimitCacheSize: number;
  // Leased batches for hot keys; undefined = off.
  leases?: Omit<LeaseOptions, 'clock' | 'redisUsable' | 'events'> & { events: LeaseOptions['events'] };
  // Metrics and logs.
  events: {
    breaker(from: BreakerState, to: BreakerState, reason: string): void;
    degraded(policy: FallbackPolicy, reason: string): void;
    storeFailure(kind: 'error' | 'timeout', message: string): void;
    overLimitCacheHit(): void;
    writeBack(entries: number, hits: number, error?: string): void;
  };
}

class DeadlineExceeded extends Error {}

// Bounds the write-back journal (distinct counters touched while Redis was away).
const MAX_JOURNAL = 100_000;

interface JournalRef {
  key: string;
  hits: number;
}

// The shared store behind a deadline, a circuit breaker and a local fallback, with a cache of keys
// known to be over their limit. When Redis is slow or gone sluice keeps answering, within the
// caller's deadline, and says that it is degraded.
export class ResilientStore implements Store {
  readonly kind: string;
  readonly breaker: CircuitBreaker;
  readonly overLimit: OverLimitCache;
  // Hits the local fallback admitted, to be written back when the shared store returns.
  private readonly journal = new Map<string, AbsorbEntry>();
  private readonly leases?: LeaseManager;

  constructor(
    private readonly primary: RedisStore,
    private readonly local: MemoryStore,
    private readonly o: ResilienceOptions,
  ) {
    this.kind = `${primary.kind}+fallback`;
    this.overLimit = new OverLimitCache(o.overLimitCacheSize);
    this.breaker = new CircuitBreaker({
      ...o.breaker,
      clock: o.clock,
      onChange: (from, to, reason) => {
        o.events.breaker(from, to, reason);
        if (to === 'closed') void this.writeBack();
      },
    });
    if (o.leases !== undefined) {
      const events = o.leases.events;
      this.leases = new LeaseManager(primary, {
        ...o.leases,
        clock: o.clock,
        redisUsable: () => this.breaker.current === 'closed',
        events: {
          ...events,
          exhausted: (key: string, hits: number, until: number) => {
            this.overLimit.remember(key, hits, until);
            events.exhausted(key, hits, until);
          },
        },
      });
    }
    primary.onReadyChange(() => {
      if (primary.ready()) this.breaker.probeNow('connection established');
      else this.breaker.trip('connection lost');
    });
  }

  // Serving whenever some answer can be given: Redis, or a fallback that decides.
  ready(): boolean {
    return this.primary.ready() || this.o.policy !== 'deny';
  }

  onReadyChange(listener: () => void): void {
    this.primary.onReadyChange(listener);
  }

  degraded(): string | undefined {
    if (this.primary.ready() && this.breaker.current === 'closed') return undefined;
    const why = this.primary.ready() ? `circuit breaker ${this.breaker.current}` : 'Redis unreachable';
    return `${why}; fallback policy ${this.o.policy}`;
  }

  async close(): Promise<void> {
    await this.leases?.close();
    await Promise.all([this.primary.close(), this.local.close()]);
  }

  // What decide() would answer now, consuming nothing: Redis within the deadline, else the local
  // fallback's view (marked degraded).
  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    let timer: NodeJS.Timeout | undefined;
    const budget = Math.max(1, this.budgetMs(options));
    const deadline = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new DeadlineExceeded('deadline')), budget)));
    try {
      if (this.breaker.current !== 'closed') throw new Error('circuit breaker open');
      return await Promise.race([this.primary.peek(checks, options), deadline]);
    } catch (err) {
      const local = await this.local.peek(this.scaled(checks), options);
      return { ...local, degraded: { policy: 'local', reason: (err as Error).message } };
    } finally {
      clearTimeout(timer);
    }
  }

  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const now = this.o.clock.now();
    // Upstream counting wants every hit in Redis, so neither the cache nor leases apply then.
    if (options.countDeniedHits) return this.decideShared(checks, options, now);
    const cached = this.cachedDenial(checks, now);
    if (cached !== undefined) return cached;
    if (this.leases === undefined) return this.decideShared(checks, options, now);
    return this.decideWithLeases(this.leases, checks, options, now);
  }

  // Leased limits are reserved locally; the rest is decided by Redis (or the fallback); if that
  // denies the request, the local reservations are released: still all-or-nothing.
  private async decideWithLeases(leases: LeaseManager, checks: readonly LimitCheck[], options: DecideOptions, now: number): Promise<Decision> {
    const waitMs = Math.max(0, this.budgetMs(options));
    const reserved = await Promise.all(checks.map((c) => leases.reserve(c, waitMs)));
    const rest = checks.map((_, i) => i).filter((i) => reserved[i] === undefined);
    // A take may have just found a key exhausted: answer from the over-limit cache.
    const cached = rest.length > 0 ? this.cachedDenial(checks, this.o.clock.now()) : undefined;
    if (cached !== undefined) {
      for (const r of reserved) if (r !== undefined) leases.release(r);
      return cached;
    }
    if (rest.length === 0) {
      for (const r of reserved) leases.commit(r as Reservation);
      return { admitted: true, outcomes: reserved.map((r) => leases.outcome(r as Reservation)) };
    }
    let shared: Decision;
    try {
      shared = await this.decideShared(rest.length === checks.length ? checks : rest.map((i) => checks[i]), options, now);
    } catch (err) {
      for (const r of reserved) if (r !== undefined) leases.release(r);
      throw err;
    }
    if (rest.length === checks.length) return shared;
    const outcomes: LimitOutcome[] = [];
    rest.forEach((i, j) => (outcomes[i] = shared.outcomes[j]));
    reserved.forEach((r, i) => {
      if (r === undefined) return;
      outcomes[i] = leases.outcome(r);
      if (shared.admitted) {
        leases.commit(r);
        return;
      }
      leases.release(r);
      outcomes[i] = { ...outcomes[i], consumed: false };
    });
    return { admitted: shared.admitted, outcomes, degraded: shared.degraded };
  }

  private async decideShared(checks: readonly LimitCheck[], options: DecideOptions, now: number): Promise<Decision> {
    const budget = this.budgetMs(options);
    if (budget <= 0) return this.fallback(checks, options, 'no time left before the caller deadline');
    if (!this.breaker.tryAcquire()) return this.fallback(checks, options, 'circuit breaker open');
    const call = this.primary.decide(checks, options);
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DeadlineExceeded(`no answer within ${Math.round(budget)} ms`)), budget);
    });
    try {
      const decision = await Promise.race([call, deadline]);
      this.breaker.success();
      this.remember(checks, decision, now);
      return decision;
    } catch (err) {
      const timeout = err instanceof DeadlineExceeded;
      const message = (err as Error).message;
      this.o.events.storeFailure(timeout ? 'timeout' : 'error', message);
      this.breaker.failure(message);
      const journaled: JournalRef[] = [];
      const answer = this.fallback(checks, options, timeout ? 'store deadline exceeded' : `store error: ${message}`, journaled);
      // A late answer means Redis counted the hits after all: do not write them back again.
      if (timeout) void call.then(() => this.unjournal(journaled), () => undefined);
      return answer;
    } finally {
      clearTimeout(timer);
    }
  }

  private budgetMs(options: DecideOptions): number {
    if (options.deadlineAt === undefined) return this.o.deadlineMs;
    return Math.min(this.o.deadlineMs, options.deadlineAt - this.o.marginMs - Date.now());
  }

  private cachedDenial(checks: readonly LimitCheck[], now: number): Decision | undefined {
    let i = -1;
    let until: number | undefined;
    while (until === undefined && ++i < checks.length) {
      if (checks[i].mode === 'enforce') until = this.overLimit.deniedUntil(checks[i].key, checks[i].hits, now);
    }
    if (until === undefined) return undefined;
    this.o.events.overLimitCacheHit();
    const wait = until - now;
    const outcomes: LimitOutcome[] = checks.map((_, j) =>
      j === i
        ? { allowed: false, consumed: false, remaining: 0, resetMs: wait, retryAfterMs: wait, usedBefore: checks[i].limit }
        : { allowed: true, consumed: false, remaining: 0, resetMs: 0, retryAfterMs: 0, usedBefore: 0 },
    );
    return { admitted: false, outcomes };
  }

  private remember(checks: readonly LimitCheck[], decision: Decision, now: number): void {
    decision.outcomes.forEach((o, i) => {
      const c = checks[i];
      if (!o.allowed && c.mode === 'enforce' && Number.isFinite(o.retryAfterMs) && o.retryAfterMs > 0) {
        this.overLimit.remember(c.key, c.hits, now + o.retryAfterMs);
      }
    });
  }

  // `journaled` collects what the local fallback journaled for write-back, so that a late Redis
  // answer for the same request can take it out again.
  private fallback(checks: readonly LimitCheck[], options: DecideOptions, reason: string, journaled: JournalRef[] = []): Decision {
    const policy = (options.domain !== undefined && this.o.domainPolicies.get(options.domain)) || this.o.policy;
    this.o.events.degraded(policy, reason);
    if (policy === 'deny') throw new UnavailableError(`counter store unavailable (${reason}); fallback policy is deny`);
    if (policy === 'allow') {
      const outcomes = checks.map((c) => ({ allowed: true, consumed: false, remaining: c.limit, resetMs: 0, retryAfterMs: 0, usedBefore: 0 }));
      return { admitted: true, outcomes, degraded: { policy, reason } };
    }
    const decision = this.local.decideNow(this.scaled(checks), options);
    const now = this.o.clock.now();
    decision.outcomes.forEach((o, i) => {
      if (!o.consumed || checks[i].hits <= 0) return;
      const key = this.journalAdd(checks[i], now);
      if (key !== undefined) journaled.push({ key, hits: checks[i].hits });
    });
    return { ...decision, degraded: { policy, reason } };
  }

  // The limits the local fallback enforces: each a FALLBACK_SHARE of the global one, at least 1.
  private scaled(checks: readonly LimitCheck[]): LimitCheck[] {
    const scale = (n: number) => (n <= 0 ? n : Math.max(1, Math.floor(n * this.o.share)));
    return checks.map((c) => ({ ...c, limit: scale(c.limit), burst: scale(c.burst) }));
  }

  // Windows journal per window (only hits of a still-open window are written back); buckets per key.
  private journalKey(c: LimitCheck, now: number): string {
    const windowed = c.algorithm === 'fixed_window' || c.algorithm === 'sliding_window';
    return windowed ? `${c.key}#${windowStart(now, c.periodMs)}` : c.key;
  }

  // The journal entry the hits went to, or undefined when the journal is full.
  private journalAdd(c: LimitCheck, now: number): string | undefined {
    const k = this.journalKey(c, now);
    const e = this.journal.get(k);
    if (e !== undefined) {
      e.hits += c.hits;
      e.atMs = now;
      return k;
    }
    if (this.journal.size >= MAX_JOURNAL) return undefined;
    this.journal.set(k, { key: c.key, algorithm: c.algorithm, limit: c.limit, periodMs: c.periodMs, burst: c.burst, hits: c.hits, atMs: now });
    return k;
  }

  private unjournal(refs: readonly JournalRef[]): void {
    for (const { key, hits } of refs) {
      const e = this.journal.get(key);
      if (e === undefined) continue;
      e.hits = Math.max(0, e.hits - hits);
      if (e.hits === 0) this.journal.delete(key);
    }
  }

  private async writeBack(): Promise<void> {
    const entries = [...this.journal.values()].filter((e) => e.hits > 0);
    this.journal.clear();
    if (entries.length === 0) return;
    const hits = entries.reduce((a, e) => a + e.hits, 0);
    try {
      await this.primary.absorb(entries);
      this.o.events.writeBack(entries.length, hits);
    } catch (err) {
      this.o.events.writeBack(entries.length, hits, (err as Error).message);
    }
  }
}
