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

  // Answered here only when every limit of the request is a remembered denial: each is then known
  // exactly (remaining 0, its reset). A request with any other limit goes to the store, which
  // denies it all the same (consuming nothing) and says what the other limits have left: the RLS
  // answer has no way to say "unknown", and 0 would be a wrong answer.
  private cachedDenial(checks: readonly LimitCheck[], now: number): Decision | undefined {
    const denials: LocalDenial[] = [];
    for (const c of checks) {
      const until = c.mode === 'enforce' ? this.cache.deniedUntil(c.key, c.hits, now) : undefined;
      if (until === undefined) return undefined;
      denials.push({ resetMs: until - now, retryAfterMs: until - now });
    }
    if (denials.length === 0) return undefined;
    this.o.events.overLimitCacheHit();
    return knownDenial(checks, denials);
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
  const outcomes = checks.map((c, j): LimitOutcome => ({
    allowed: false,
    consumed: false,
    remaining: 0,
    resetMs: denials[j].resetMs,
    retryAfterMs: denials[j].retryAfterMs,
    usedBefore: c.algorithm === 'token_bucket' || c.algorithm === 'gcra' ? c.burst : c.limit,
  }));
  return { admitted: false, outcomes };
}
