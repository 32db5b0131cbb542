import type { Clock } from '../../clock';
import type { StoreEvents } from '../events';
import { OverLimitCache } from '../over-limit-cache';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from '../store';
import { Stage } from './stage';

export interface OverLimitOptions {
  clock: Clock;
  size: number;
  // Keys served from leases: their denial is remembered no longer than `leaseTtlMs`, because
  // units other replicas hold come back within it.
  isLeased: (check: LimitCheck) => boolean;
  leaseTtlMs: number;
  events: StoreEvents;
}

// Keys Redis said are over their limit, remembered until they can pass again, so a flood against
// an exhausted key is answered here and costs Redis nothing (upstream's local cache). Only Redis'
// own denials are remembered, never a fallback's; a new config forgets them all.
export class OverLimitCacheStage extends Stage {
  private readonly cache: OverLimitCache;

  constructor(
    inner: Store,
    private readonly o: OverLimitOptions,
  ) {
    super(inner);
    this.cache = new OverLimitCache(o.size);
  }

  override async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    // Upstream counting wants every hit in Redis.
    if (options.countDeniedHits) return this.inner.decide(checks, options);
    const now = this.o.clock.now();
    const cached = this.cachedDenial(checks, now);
    if (cached !== undefined) return cached;
    const decision = await this.inner.decide(checks, options);
    if (decision.degraded === undefined) this.remember(checks, decision, this.o.clock.now());
    return decision;
  }

  override configChanged(): void {
    this.cache.clear();
    this.inner.configChanged?.();
  }

  // The denying limit is known exactly (remaining 0, its reset); the other limits of the request
  // were not asked, so what they have left is unknown and said to be.
  private cachedDenial(checks: readonly LimitCheck[], now: number): Decision | undefined {
    let i = -1;
    let until: number | undefined;
    while (until === undefined && ++i < checks.length) {
      if (checks[i].mode === 'enforce') until = this.cache.deniedUntil(checks[i].key, checks[i].hits, now);
    }
    if (until === undefined) return undefined;
    this.o.events.overLimitCacheHit();
    return knownDenial(checks, i, until - now, until - now);
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

// A request denied without asking the store: check `i` is known to have nothing left (remaining
// 0, its reset, its retry-after; its whole capacity in use, for near-limit statistics); the other
// limits were not asked, so what they have left is unknown and said to be.
export function knownDenial(checks: readonly LimitCheck[], i: number, resetMs: number, retryAfterMs: number): Decision {
  const outcomes = checks.map((c, j): LimitOutcome =>
    j === i
      ? { allowed: false, consumed: false, remaining: 0, resetMs, retryAfterMs, usedBefore: c.algorithm === 'token_bucket' || c.algorithm === 'gcra' ? c.burst : c.limit }
      : { allowed: true, consumed: false, remaining: undefined, resetMs: undefined, retryAfterMs: 0, usedBefore: 0 },
  );
  return { admitted: false, outcomes };
}
