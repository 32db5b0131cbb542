import type { Clock } from '../../clock';
import type { LeaseGrant } from '../shared';
import type { DecideOptions, LimitCheck } from '../store';

// What the lease stage (stages/leases.ts) asks whoever decides which keys are leased, how big a
// lease is and how an empty take is answered. The stage does the mechanics (reserve, refill, give
// back, expire); a rule's own `lease` size always wins over the policy's. AutoLeases below is the
// single-Redis policy; a multi-region stack hands its own (store/region/lease-policy.ts).
export interface LeasePolicy {
  // Units per lease for a check without a rule `lease` (an enforced check with hits); 0: not
  // leased. Called once per check of every request: it may count the key's rate.
  size(check: LimitCheck): number;
  // Is a check without a rule `lease` served from leases right now (without counting anything)?
  leased(check: LimitCheck): boolean;
  // Longest a request waits for a take, ms. 0: a request its lease cannot serve goes the ordinary
  // way at once, and the take follows it in the background.
  waitMs(options: DecideOptions): number;
  // May a key whose take came back empty be denied here now (without asking Redis)?
  mayDenyLocally(): boolean;
  // A take came back empty: how long its key is denied here, and the retry-after to answer.
  exhaustedFor(grant: LeaseGrant): { forMs: number; retryAfterMs: number };
  // Units other replicas hold come back within this, ms: a denial remembered for a leased key
  // (here or in the over-limit cache) lasts no longer.
  readonly unitsBackWithinMs: number;
  // An empty take's denial period is over: take again in the background, so that the next request
  // finds a lease? `requested`: a request for the key found it over (else a timer asks).
  retake(check: LimitCheck, requested: boolean): boolean;
}

export interface AutoLeaseOptions {
  clock: Clock;
  // Requests per second for one key at this replica that make it hot; 0 = off.
  autoThreshold: number;
  // Units per lease for a hot key: this share of the limit, at least 1.
  autoShare: number;
  // A lease's life (LEASE_TTL), ms: units other replicas hold come back within it.
  ttlMs: number;
  // The caller's budget, ms: how long a request waits for a take.
  budgetMs: (options: DecideOptions) => number;
}

const HOT_FOR_MS = 10_000;
const MAX_TRACKED = 10_000;
// The sketch in front of the exact counts: CELLS counters in each of two rows (32 KB in all).
const CELLS = 4096;

// One Redis: rules that ask for leases, and keys hot at this replica (automatic leases). A request
// waits for a take within its budget; an empty take denies its key here until units may be back
// (a lease TTL at most); the next request takes again.
export class AutoLeases implements LeasePolicy {
  // Exact counts, for keys the sketch says may be hot: most keys of a busy fleet never are, and a
  // record per key and second for each of them (an object and a map entry, keeping the key alive
  // until the map is cleared) is garbage the collector copies.
  private readonly rates = new Map<string, { second: number; count: number; hotUntil: number }>();
  // This second's requests per key, over-counted (count-min with conservative update: two cells
  // a key, each raised to the smaller one's count plus one): below a quarter of the threshold, a
  // key cannot be hot, and costs a hash and two counters.
  private readonly cells = new Uint32Array(2 * CELLS);
  private cellsSecond = Number.NaN;

  constructor(private readonly o: AutoLeaseOptions) {}

  get unitsBackWithinMs(): number {
    return this.o.ttlMs;
  }

  size(check: LimitCheck): number {
    if (this.o.autoThreshold <= 0 || !this.isHot(check.key)) return 0;
    return Math.max(1, Math.floor(check.limit * this.o.autoShare));
  }

  leased(check: LimitCheck): boolean {
    const r = this.rates.get(check.key);
    return r !== undefined && r.hotUntil > this.o.clock.now();
  }

  waitMs(options: DecideOptions): number {
    return this.o.budgetMs(options);
  }

  mayDenyLocally(): boolean {
    return true;
  }

  exhaustedFor(grant: LeaseGrant): { forMs: number; retryAfterMs: number } {
    return { forMs: Math.min(grant.retryAfterMs, this.o.ttlMs), retryAfterMs: grant.retryAfterMs };
  }

  retake(): boolean {
    return false;
  }

  // Counts a request for `key`; hot for HOT_FOR_MS once it reaches the threshold within a second.
  private isHot(key: string): boolean {
    const now = this.o.clock.now();
    const second = Math.floor(now / 1000);
    let r = this.rates.get(key);
    if (r === undefined) {
      // Counted exactly from here on: hot a quarter of the threshold late at most, never early.
      if (this.sketched(key, second) * 4 < this.o.autoThreshold) return false;
      if (this.rates.size >= MAX_TRACKED) this.rates.clear();
      r = { second, count: 0, hotUntil: 0 };
      this.rates.set(key, r);
    }
    if (r.second !== second) {
      r.second = second;
      r.count = 0;
    }
    if (++r.count >= this.o.autoThreshold) r.hotUntil = now + HOT_FOR_MS;
    return r.hotUntil > now;
  }

  // Counts a request for `key` in this second's sketch: at least its requests this second.
  private sketched(key: string, second: number): number {
    const cells = this.cells;
    if (second !== this.cellsSecond) {
      cells.fill(0);
      this.cellsSecond = second;
    }
    // FNV-1a; its low and high bits pick a cell in each row.
    let h = 0x811c9dc5;
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
    const a = h & (CELLS - 1);
    const b = CELLS + ((h >>> 20) & (CELLS - 1));
    const n = Math.min(cells[a], cells[b]) + 1;
    if (cells[a] < n) cells[a] = n;
    if (cells[b] < n) cells[b] = n;
    return n;
  }
}
