import type { Clock } from '../../clock';
import { type LimitSpec, specOf } from '../../limiter/algorithms';
import { windowStart } from '../../limiter/algorithms/types';
import type { LeaseGrant } from '../shared';
import type { LimitCheck } from '../store';
import type { RegionEvents } from './events';
import type { GlobalLink } from './global-link';
import { type RegionKeys, isWindow } from './keys';

// The regional Redis operations a refill needs (RedisStore has them).
export interface RegionalOps {
  claim(key: string, ms: number): Promise<boolean>;
  credit(c: import('../shared').AllowanceCredit): Promise<number>;
  reclaim(key: string, marginMs: number): Promise<{ units: number; takenAtMs: number }>;
}

export interface RefillerOptions {
  region: string;
  clock: Clock;
  // A lease covers this much of the region's demand.
  horizonMs: number;
  // Unused leased units go back after this.
  leaseTtlMs: number;
  timeoutMs: number;
  // Live replicas of this region (each sees its share of the region's demand).
  replicas: () => number;
  events: RegionEvents;
}

// A refill starts when the allowance falls below this share of a lease.
export const LOW_WATER = 0.5;
// An allowance this close to expiry is taken back and its units returned, ms.
const RECLAIM_MARGIN_MS = 1000;
const SWEEP_MS = 250;
// After a claim lost to another replica of the region, ask again no sooner than this, ms.
const BUSY_BACKOFF_MS = 50;
const MAX_TRACKED = 100_000;
// Kept off a window allowance's life for the credit to reach the regional Redis, ms.
const CREDIT_TRAVEL_MS = 5;

export type RefillResult = 'credited' | 'busy' | 'failed';

// Units covering a demand of `ratePerS` over `horizonMs`: at least one request's hits, at most
// what the limit holds (a region's lease of the global budget, a replica's of the allowance).
export function unitsOver(check: LimitCheck, ratePerS: number, horizonMs: number): number {
  const capacity = isWindow(check) ? check.limit : Math.max(check.burst, 1);
  return Math.max(1, check.hits, Math.min(capacity, Math.ceil((ratePerS * horizonMs) / 1000)));
}

interface Demand {
  second: number;
  count: number;
  // Hits per second at this replica, smoothed over past seconds.
  rate: number;
}

// Keeps a region's allowances topped up from the global budget, off the request path: one replica
// of the region at a time per key (a lock in the regional Redis), leases sized to the region's
// demand over the horizon, at most the region's share of what remains (lease.lua), backing off
// with jitter while the global budget is short, and giving back what a lease did not use when it
// expires.
export class Refiller {
  private readonly inFlight = new Map<string, Promise<RefillResult>>();
  private readonly notBefore = new Map<string, number>();
  private readonly demand = new Map<string, Demand>();
  private readonly sizes = new Map<string, number>();
  // Allowances this replica credited with a TTL lease, to take back before they expire.
  private readonly expiring = new Map<string, { spec: LimitSpec & { key: string }; expiresAt: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly regional: RegionalOps,
    private readonly link: GlobalLink,
    private readonly keys: RegionKeys,
    private readonly o: RefillerOptions,
  ) {
    this.sweeper = setInterval(() => void this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  // Counts a request's hits on `check` as the region's demand (admitted or not).
  note(check: LimitCheck): void {
    const now = this.o.clock.now();
    const second = Math.floor(now / 1000);
    let d = this.demand.get(check.key);
    if (d === undefined) {
      if (this.demand.size >= MAX_TRACKED) this.demand.clear();
      d = { second, count: 0, rate: 0 };
      this.demand.set(check.key, d);
    }
    if (d.second !== second) {
      // Seconds without hits count as zero.
      const idle = Math.min(8, second - d.second - 1);
      d.rate = (d.rate * 0.5 + d.count * 0.5) * 0.5 ** idle;
      d.second = second;
      d.count = 0;
    }
    d.count += check.hits;
  }

  // The region's demand for the key, units per second: this replica's times the live replicas.
  regionRate(key: string): number {
    return this.replicaRate(key) * Math.max(1, this.o.replicas());
  }

  // This replica's demand for the key, units per second.
  replicaRate(key: string): number {
    const d = this.demand.get(key);
    if (d === undefined) return 0;
    const elapsed = Math.max(0.25, (this.o.clock.now() % 1000) / 1000);
    return Math.max(d.rate, d.count / elapsed);
  }

  // Units a lease asks for: the region's demand over the horizon, within what the limit holds.
  size(check: LimitCheck): number {
    return unitsOver(check, this.regionRate(check.key), this.o.horizonMs);
  }

  // The last lease size asked for, per key (metrics).
  meanSize(): number {
    if (this.sizes.size === 0) return 0;
    let sum = 0;
    for (const s of this.sizes.values()) sum += s;
    return sum / this.sizes.size;
  }

  // Tops up the region's allowance for `check` from the global budget unless another refill of
  // it is under way (here or at another replica of the region) or the region is backing off.
  refill(check: LimitCheck, held: number | undefined): Promise<RefillResult> {
    const running = this.inFlight.get(check.key);
    if (running !== undefined) return running;
    if (!this.link.reachable || (this.notBefore.get(check.key) ?? 0) > this.o.clock.now()) return Promise.resolve('busy');
    // Units leased but not credited (the regional Redis failed meanwhile) are lost to the budget:
    // under-admission, never over.
    const p = this.take(check, held)
      .catch((): RefillResult => 'failed')
      .finally(() => this.inFlight.delete(check.key));
    this.inFlight.set(check.key, p);
    return p;
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  private async take(check: LimitCheck, held: number | undefined): Promise<RefillResult> {
    const pool = this.keys.pool(check.key);
    const lock = this.keys.lock(check.key);
    if (!(await this.regional.claim(lock, this.o.timeoutMs + 100).catch(() => false))) {
      this.backOff(check.key, BUSY_BACKOFF_MS);
      return 'busy';
    }
    const size = this.size(check);
    this.remember(check.key, size);
    const wanted = Math.max(1, size - Math.max(0, held ?? 0));
    const spec = { key: check.key, ...specOf(check) };
    let grant: LeaseGrant;
    const sentAt = this.o.clock.now();
    try {
      grant = await this.link.lease(spec, wanted, { key: this.keys.demand(check.key), region: this.o.region, rate: this.regionRate(check.key), staleMs: 3 * this.o.horizonMs });
    } catch {
      // The lock, left to expire, is the region's backoff.
      return 'failed';
    }
    const ttlMs = this.ttlFor(check, grant, sentAt);
    // A window's hold ends soon after it: the next window's first lease must not wait, and a lease
    // sent earlier would reach the global Redis while the old window still runs there.
    const holdMs = isWindow(check) ? Math.max(0, Math.min(ttlMs + this.link.roundTripMs + 2 * CREDIT_TRAVEL_MS, this.holdFor(check, grant, wanted))) : this.holdFor(check, grant, wanted);
    await this.regional.credit({
      key: pool,
      lockKey: lock,
      units: grant.granted,
      ttlMs,
      globalRemaining: grant.remaining,
      globalResetMs: grant.resetMs,
      globalRetryMs: grant.retryAfterMs,
      takenAtMs: grant.takenAtMs,
      windowMs: isWindow(check) ? check.periodMs : undefined,
      holdMs,
    });
    if (holdMs > 0) this.backOff(check.key, holdMs);
    if (grant.granted > 0) {
      this.o.events.leased(grant.granted, size);
      if (ttlMs >= this.o.leaseTtlMs) this.expiring.set(pool, { spec, expiresAt: this.o.clock.now() + ttlMs });
    }
    return 'credited';
  }

  // A window lease ends with its window; others after the lease TTL. The global Redis took the
  // units at takenAtMs, no earlier than the lease was sent: the window's rest counted from the send
  // (everything since, the round trip and this process' own delays included, is taken off) ends the
  // allowance no later than the window, whatever this process' event loop did meanwhile.
  private ttlFor(check: LimitCheck, grant: LeaseGrant, sentAt: number): number {
    if (!isWindow(check)) return this.o.leaseTtlMs;
    const windowLeft = windowStart(grant.takenAtMs, check.periodMs) + check.periodMs - grant.takenAtMs;
    const left = windowLeft - (this.o.clock.now() - sentAt) - CREDIT_TRAVEL_MS;
    // 0 or less: the window ended while the lease travelled; credit.lua drops its units.
    return Math.min(this.o.leaseTtlMs, Math.floor(left));
  }

  // How long the region waits before asking again: not at all when it got what it asked for;
  // a horizon (jittered) when the budget gave less, since asking sooner would only take crumbs;
  // until one unit is back when it gave nothing (a window's end, exactly: its new budget should
  // be used at once).
  private holdFor(check: LimitCheck, grant: LeaseGrant, wanted: number): number {
    const jitter = 0.8 + Math.random() * 0.4;
    if (grant.granted >= wanted) return 0;
    if (grant.granted > 0) return Math.round(this.o.horizonMs * jitter);
    const retry = Number.isFinite(grant.retryAfterMs) ? grant.retryAfterMs : this.o.leaseTtlMs;
    if (isWindow(check)) return Math.max(1, Math.min(this.o.leaseTtlMs, Math.ceil(retry)));
    return Math.round(Math.min(this.o.leaseTtlMs, Math.max(retry, this.o.horizonMs)) * jitter);
  }

  private backOff(key: string, ms: number): void {
    if (this.notBefore.size >= MAX_TRACKED) this.notBefore.clear();
    this.notBefore.set(key, this.o.clock.now() + ms);
  }

  private remember(key: string, size: number): void {
    if (this.sizes.size >= MAX_TRACKED) this.sizes.clear();
    this.sizes.set(key, size);
  }

  // Allowances whose lease TTL is about to end give their unused units back to the global budget
  // (unless a later lease extended them).
  private async sweep(): Promise<void> {
    const now = this.o.clock.now();
    for (const [pool, e] of this.expiring) {
      if (e.expiresAt - now > RECLAIM_MARGIN_MS) continue;
      this.expiring.delete(pool);
      if (!this.link.reachable) continue;
      try {
        const back = await this.regional.reclaim(pool, RECLAIM_MARGIN_MS);
        if (back.units <= 0) continue;
        await this.link.giveBack(e.spec, back.units, back.takenAtMs);
        this.o.events.returned(back.units);
      } catch {
        // Units not given back are lost to the budget: under-admission, never over.
      }
    }
  }
}
