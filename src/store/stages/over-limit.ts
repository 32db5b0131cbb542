import { capacity } from '../../algorithms';
import type { Clock } from '../../clock';
import type { StoreEvents } from '../events';
import { OverLimitCache, type OverLimitCacheStats } from '../over-limit-cache';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from '../store';
import { Stage } from './stage';

export interface OverLimitOptions {
  clock: Clock;
  size: number;
  // Answer from the cache with upstream counting too (upstream's local cache: a remembered key is
  // not counted); otherwise counting bypasses the cache, every hit going to Redis.
  whenCounting: boolean;
  // Keys served from leases: their denial is remembered no longer than `leaseTtlMs`, because
  // units other replicas hold come back within it.
  isLeased: (check: LimitCheck) => boolean;
  leaseTtlMs: number;
  events: StoreEvents;
  onCache?: (stats: OverLimitCacheStats) => void;
}

// Keys Redis said are over their limit, remembered until they can pass again, so a flood against
// an exhausted key is answered here and costs Redis nothing (upstream's local cache). Only Redis'
// own denials are remembered, never a fallback's; a new config forgets them all.
//
// As upstream, the cache answers per limit: a remembered key is denied without asking Redis, and
// the request's other limits still go to Redis, so every status is known (the RLS answer cannot say
// "unknown"). Only a request whose every limit is remembered costs Redis nothing.
export class OverLimitCacheStage extends Stage {
  private readonly cache: OverLimitCache;

  constructor(
    inner: Store,
    private readonly o: OverLimitOptions,
  ) {
    super(inner);
    this.cache = new OverLimitCache(o.size);
    o.onCache?.(this.cache);
  }

  // Not an async function: most requests go on to the store with no promise of this stage's own.
  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    if (options.countDeniedHits && !this.o.whenCounting) return this.inner.decide(checks, options);
    const now = this.o.clock.now();
    // Most requests find nothing remembered: nothing is allocated for them.
    let cached: (number | undefined)[] | undefined;
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i];
      const until = c.mode === 'enforce' ? this.cache.deniedUntil(c.key, c.hits, now) : undefined;
      if (until !== undefined) (cached ??= new Array<number | undefined>(checks.length))[i] = until;
    }
    if (cached === undefined) return this.decideAndRemember(checks, options);
    return this.decideRemembered(checks, options, cached, now);
  }

  // Some limits are remembered as denied: those are answered here, the others asked.
  private async decideRemembered(checks: readonly LimitCheck[], options: DecideOptions, remembered: (number | undefined)[], now: number): Promise<Decision> {
    const denied = checks.flatMap((_, i) => (remembered[i] === undefined ? [] : [i]));
    const rest = checks.flatMap((_, i) => (remembered[i] === undefined ? [i] : []));
    const outcomes: LimitOutcome[] = [];
    for (const i of denied) outcomes[i] = { ...cachedOutcome(checks[i], remembered[i]! - now), fromLocalCache: true };
    if (rest.length === 0) {
      this.o.events.overLimitCacheHit();
      return { admitted: false, outcomes };
    }
    // The request is denied already; its other limits are still evaluated, never filled in. With
    // upstream counting they take their hits as upstream's do (INCRBY); otherwise the request
    // consumes nothing and they are only read.
    const others = rest.map((i) => checks[i]);
    const decision = options.countDeniedHits ? await this.decideAndRemember(others, options) : await this.inner.peek(others, options);
    rest.forEach((i, j) => (outcomes[i] = decision.outcomes[j]));
    return { ...decision, admitted: false, outcomes };
  }

  // Units came back: the key may pass again before the remembered denial ends.
  override giveBackUnused(check: LimitCheck, units: number, takenAtMs: number): void {
    this.cache.forget(check.key);
    super.giveBackUnused(check, units, takenAtMs);
  }

  override configChanged(): void {
    this.cache.clear();
    this.inner.configChanged?.();
  }

  private async decideAndRemember(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    // Redis decided after the call was sent: a denial remembered from then ends no later than
    // Redis' own (from the answer's arrival it could deny for up to a round trip after the key
    // can pass again, and report a reset that long too late).
    const sentAt = this.o.clock.now();
    const decision = await this.inner.decide(checks, options);
    if (decision.degraded === undefined) this.remember(checks, decision, sentAt);
    return decision;
  }

  private remember(checks: readonly LimitCheck[], decision: Decision, now: number): void {
    decision.outcomes.forEach((o, i) => {
      const c = checks[i];
      if (o.allowed || c.mode !== 'enforce' || !Number.isFinite(o.retryAfterMs) || o.retryAfterMs <= 0) return;
      const wait = this.o.isLeased(c) ? Math.min(o.retryAfterMs, this.o.leaseTtlMs) : o.retryAfterMs;
      this.cache.remember(c.key, c.hits, now + wait);
    });
  }
}

export interface LocalDenial {
  resetMs: number;
  retryAfterMs: number;
}

// A request denied without asking the store, every one of its limits known to have nothing left
// (remaining 0, its reset, its retry-after; its whole capacity in use, for near-limit statistics).
export function knownDenial(checks: readonly LimitCheck[], denials: readonly LocalDenial[]): Decision {
  return { admitted: false, outcomes: checks.map((c, j) => deniedOutcome(c, denials[j])) };
}

function deniedOutcome(c: LimitCheck, denial: LocalDenial): LimitOutcome {
  return { allowed: false, consumed: false, remaining: 0, resetMs: denial.resetMs, retryAfterMs: denial.retryAfterMs, usedBefore: capacity(c) };
}

// A remembered denial: nothing left until it can pass again, which is also when its counter resets
// as far as these hits go.
function cachedOutcome(c: LimitCheck, waitMs: number): LimitOutcome {
  return deniedOutcome(c, { resetMs: waitMs, retryAfterMs: waitMs });
}
