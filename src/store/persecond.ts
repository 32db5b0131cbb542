import { UnavailableError } from '../errors';
import { type LimitSpec, specOf } from '../algorithms';
import { admits } from '../algorithms/policy';
import type { StoreEvents } from './events';
import type { RefundEntry } from './shared';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from './store';

// REDIS_PERSECOND (upstream's name): limits of one second or less are counted on their own Redis,
// the others on REDIS_URL's, each through its whole stack (cache, leases, fallback, breaker).

// Upstream sends a limit to the per-second Redis when its unit is SECOND. Its configs have no
// other window than one unit, so there that is a period of one second; sluice's algorithms,
// `unit_multiplier` and `window` add other periods: the one-second and shorter ones (a 1 s token
// bucket, a 500 ms window) are the short-lived, hot counters a separate Redis is for, a 30 s
// window is not.
export const PER_SECOND_MAX_PERIOD_MS = 1000;

export function isPerSecond(spec: LimitSpec): boolean {
  return spec.periodMs <= PER_SECOND_MAX_PERIOD_MS;
}

// Put before what the per-second Redis' stack says (degraded reasons, failures, breaker changes);
// server/health.ts reads it back.
export const PER_SECOND_LABEL = 'per-second Redis: ';

// One side of the split: its stack, and the refund queue of its Redis.
export interface SplitPart {
  store: Store;
  refund(entries: RefundEntry[]): void;
}

interface Parts {
  perSecond: number[];
  main: number[];
  perSecondChecks: LimitCheck[];
  mainChecks: LimitCheck[];
}

// A request's limits on two Redis cannot be decided by one script, so all-or-nothing is kept in
// order: the per-second part is decided first (it is the one that denies under bursts); if it
// denies, the main part is only read (peek), so nothing of it is consumed; if it admits, the main
// part is decided, and if that denies the request, what the per-second part consumed is given
// back through its Redis' refund queue (lua/refund.lua), as Redis Cluster requests spanning slots
// are. Weaker than on one Redis: until the refund lands, those hits count (a concurrent request
// may be denied for them, never admitted beyond the limit); hits a fallback admitted while its
// Redis was down are journaled, not refunded, so they stay counted (the over-count is bounded by
// those requests' hits and ends with their one-second window).
export class PerSecondSplit implements Store {
  constructor(
    private readonly main: SplitPart,
    private readonly perSecond: SplitPart,
  ) {}

  get kind(): string {
    return `${this.main.store.kind}+persecond`;
  }

  giveBackUnused(check: LimitCheck, units: number, takenAtMs: number): void {
    (isPerSecond(check) ? this.perSecond : this.main).store.giveBackUnused?.(check, units, takenAtMs);
  }

  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const p = partsOf(checks);
    if (p.perSecond.length === 0) return this.main.store.decide(checks, options);
    if (p.main.length === 0) return this.second((s) => s.decide(checks, options));
    if (options.countDeniedHits) {
      // Upstream counting writes every hit whatever the answer: nothing to order or give back.
      const [second, main] = await Promise.all([this.second((s) => s.decide(p.perSecondChecks, options)), this.main.store.decide(p.mainChecks, options)]);
      return merge(checks, p, second, main);
    }
    const second = await this.second((s) => s.decide(p.perSecondChecks, options));
    if (!second.admitted) return merge(checks, p, second, await this.main.store.peek(p.mainChecks, options));
    let main: Decision;
    try {
      main = await this.main.store.decide(p.mainChecks, options);
    } catch (err) {
      // The fallback of the main stack could not answer either (policy deny): nothing is admitted.
      this.perSecond.refund(refunds(p.perSecondChecks, second));
      throw err;
    }
    const merged = merge(checks, p, second, main);
    if (merged.admitted) return merged;
    this.perSecond.refund(refunds(p.perSecondChecks, second));
    this.main.refund(refunds(p.mainChecks, main));
    givenBack(merged.outcomes, checks, p.perSecond, second);
    givenBack(merged.outcomes, checks, p.main, main);
    return merged;
  }

  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const p = partsOf(checks);
    if (p.perSecond.length === 0) return this.main.store.peek(checks, options);
    if (p.main.length === 0) return this.second((s) => s.peek(checks, options));
    const [second, main] = await Promise.all([this.second((s) => s.peek(p.perSecondChecks, options)), this.main.store.peek(p.mainChecks, options)]);
    return merge(checks, p, second, main);
  }

  ready(): boolean {
    return this.main.store.ready() && this.perSecond.store.ready();
  }

  degraded(): string | undefined {
    const second = this.perSecond.store.degraded?.();
    return joinReasons(this.main.store.degraded?.(), second === undefined ? undefined : `${PER_SECOND_LABEL}${second}`);
  }

  onReadyChange(listener: () => void): void {
    this.main.store.onReadyChange?.(listener);
    this.perSecond.store.onReadyChange?.(listener);
  }

  configChanged(): void {
    this.main.store.configChanged?.();
    this.perSecond.store.configChanged?.();
  }

  async close(): Promise<void> {
    await Promise.all([this.main.store.close(), this.perSecond.store.close()]);
  }

  // The per-second stack's answer, with its degraded reason or its refusal (fallback policy deny)
  // labelled, so that answers and errors say which Redis could not decide.
  private async second(call: (store: Store) => Promise<Decision>): Promise<Decision> {
    let d: Decision;
    try {
      d = await call(this.perSecond.store);
    } catch (err) {
      if (!(err instanceof UnavailableError)) throw err;
      throw new UnavailableError(err.message.replace('counter store unavailable (', `counter store unavailable (${PER_SECOND_LABEL}`), { cause: err });
    }
    return d.degraded === undefined ? d : { ...d, degraded: { ...d.degraded, reason: `${PER_SECOND_LABEL}${d.degraded.reason}` } };
  }
}

// With quota limits on both sides, neither Redis can apply the quota rule (denied when every quota
// limit says no) alone: each decides its quota limits as shadow ones (consumed when allowed and
// its part admitted), and merge() applies the rule across both.
function partsOf(checks: readonly LimitCheck[]): Parts {
  const perSecond: number[] = [];
  const main: number[] = [];
  checks.forEach((c, i) => (isPerSecond(c) ? perSecond : main).push(i));
  const quota = (idx: number[]) => idx.some((i) => checks[i].mode === 'quota');
  const asShadow = quota(perSecond) && quota(main);
  const pick = (idx: number[]) => idx.map((i): LimitCheck => (asShadow && checks[i].mode === 'quota' ? { ...checks[i], mode: 'shadow' } : checks[i]));
  return { perSecond, main, perSecondChecks: pick(perSecond), mainChecks: pick(main) };
}

function merge(checks: readonly LimitCheck[], p: Parts, second: Decision, main: Decision): Decision {
  const outcomes: LimitOutcome[] = new Array<LimitOutcome>(checks.length);
  p.perSecond.forEach((i, j) => (outcomes[i] = { ...second.outcomes[j] }));
  p.main.forEach((i, j) => (outcomes[i] = { ...main.outcomes[j] }));
  const admitted = admits(
    checks.map((c) => c.mode),
    outcomes.map((o) => o.allowed),
  );
  const reason = joinReasons(main.degraded?.reason, second.degraded?.reason);
  const policy = main.degraded?.policy ?? second.degraded?.policy;
  const merged: Decision = { admitted, outcomes, storeTimeMs: main.storeTimeMs ?? second.storeTimeMs };
  if (reason !== undefined && policy !== undefined) merged.degraded = { policy, reason };
  return merged;
}

// What one part consumed, to give back to its Redis. Only what its Redis decided: a fallback's
// hits are in its journal (written back later), and a decision without Redis time (every limit
// served from leases) cannot name the window its hits went to.
function refunds(checks: readonly LimitCheck[], d: Decision): RefundEntry[] {
  const at = d.storeTimeMs;
  if (d.degraded !== undefined || at === undefined) return [];
  return checks.flatMap((c, j) => (d.outcomes[j].consumed ? [{ key: c.key, ...specOf(c), hits: c.hits, decidedAtMs: at }] : []));
}

// The outcomes of a part given back, as a denied request on one Redis reports them: not consumed,
// remaining as before (consuming took exactly the hits in whole requests). The reset before is
// known only for fixed windows (their window end); for the others it is reported unknown.
function givenBack(outcomes: LimitOutcome[], checks: readonly LimitCheck[], idx: number[], d: Decision): void {
  const back = new Set(
    refunds(
      idx.map((i) => checks[i]),
      d,
    ).map((e) => e.key),
  );
  idx.forEach((i) => {
    const o = outcomes[i];
    if (!back.has(checks[i].key)) return;
    o.consumed = false;
    if (o.remaining !== undefined) o.remaining += checks[i].hits;
    if (checks[i].algorithm !== 'fixed_window') o.resetMs = undefined;
  });
}

// The main Redis' reason first, then the (labelled) per-second one's: server/health.ts splits them.
function joinReasons(main: string | undefined, second: string | undefined): string | undefined {
  if (main === undefined) return second;
  return second === undefined ? main : `${main}; ${second}`;
}

// The per-second Redis' events, told apart from the main one's: its calls are timed as
// persecond_<operation> (as the global Redis' are global_<operation>), its messages labelled.
export function perSecondEvents(events: StoreEvents): StoreEvents {
  const label = (text: string) => `${PER_SECOND_LABEL}${text}`;
  return {
    ...events,
    storeCall: (operation, seconds, ok) => events.storeCall(`persecond_${operation}`, seconds, ok),
    storeFailure: (kind, message) => events.storeFailure(kind, label(message)),
    breaker: (from, to, reason) => events.breaker(from, to, label(reason)),
    degraded: (policy, reason) => events.degraded(policy, label(reason)),
    writeBack: (entries, hits, error) => events.writeBack(entries, hits, error === undefined ? undefined : label(error)),
    refund: (entries, error) => events.refund(entries, error === undefined ? undefined : label(error)),
  };
}
