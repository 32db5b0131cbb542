import type { Clock } from '../../clock';
import { type LimitSpec, specOf } from '../../algorithms';
import { isWindow, windowStart } from '../../algorithms/types';
import type { LeaseGrant } from '../shared';
import type { LimitCheck } from '../store';
import type { RegionEvents } from './events';
import type { GlobalLink } from './global-link';
import type { RegionKeys } from './keys';

// The regional Redis operations a refill needs (RedisStore has them).
export interface RegionalOps {
  claim(key: string, ms: number): Promise<boolean>;
  credit(c: import('./types').AllowanceCredit): Promise<number>;
  reclaim(key: string, marginMs: number, window: boolean): Promise<{ units: number; takenAtMs: number }>;
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
// Kept off a window allowance's life for the credit to reach the regional Redis, ms; and the next
// window's units, leased ahead, begin as much after the window's start as estimated here: a margin
// for the estimate on either side of the edge.
const CREDIT_TRAVEL_MS = 5;
// A fixed window's next window is leased this many round trips before it starts (at least
// AHEAD_MIN_MS, at most half a window ahead).
const AHEAD_ROUND_TRIPS = 3;
const AHEAD_MIN_MS = 500;

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
  // Demand callers declared (RLQS: requests its Envoys decide themselves): units per second, until
  // a local time.
  private readonly declared = new Map<string, { perS: number; until: number }>();
  private readonly sizes = new Map<string, number>();
  // Allowances this replica credited with a TTL lease, to take back before they expire.
  private readonly expiring = new Map<string, { spec: LimitSpec & { key: string }; expiresAt: number }>();
  // The window (its start, global Redis ms) each key was last leased ahead for, from this replica.
  private readonly aheadFor = new Map<string, number>();
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

  // Sets the demand a caller stands for on `key` (units per second, for `forMs`): counted beside
  // the hits of the requests seen here.
  declare(key: string, perS: number, forMs: number): void {
    if (this.declared.size >= MAX_TRACKED && !this.declared.has(key)) this.declared.clear();
    this.declared.set(key, { perS: Math.max(0, perS), until: this.o.clock.now() + forMs });
  }

  // What callers declared for the key and is still current, units per second.
  declaredRate(key: string): number {
    const d = this.declared.get(key);
    if (d === undefined) return 0;
    if (d.until > this.o.clock.now()) return d.perS;
    this.declared.delete(key);
    return 0;
  }

  // The region's demand for the key, units per second: this replica's times the live replicas.
  regionRate(key: string): number {
    return (this.replicaRate(key) + this.declaredRate(key)) * Math.max(1, this.o.replicas());
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

  // A fixed window's next window is leased ahead of its start, so that the region holds its units
  // when it begins and no request waits for the global Redis then: when this replica sees demand
  // for the key within a few round trips of the window's end (the global Redis' clock as estimated
  // here), and no other replica of the region did it for that window (a lock).
  ahead(check: LimitCheck): void {
    if (check.algorithm !== 'fixed_window' || check.hits <= 0 || !this.link.reachable) return;
    const globalNow = this.link.globalNow();
    if (globalNow === undefined) return;
    const next = windowStart(globalNow, check.periodMs) + check.periodMs;
    const lead = Math.min(check.periodMs / 2, Math.max(AHEAD_MIN_MS, AHEAD_ROUND_TRIPS * this.link.roundTripMs));
    if (next - globalNow > lead || this.aheadFor.get(check.key) === next) return;
    if (this.aheadFor.size >= MAX_TRACKED) this.aheadFor.clear();
    this.aheadFor.set(check.key, next);
    void this.takeAhead(check, next, next - globalNow).catch(() => undefined);
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  private async takeAhead(check: LimitCheck, next: number, leftMs: number): Promise<void> {
    const lock = this.keys.aheadLock(check.key);
    // Held into the next window, well before the one after it is leased ahead.
    const holdMs = leftMs + Math.min(check.periodMs / 4, this.o.timeoutMs + 100);
    if (!(await this.regional.claim(lock, holdMs))) return;
    const size = this.size(check);
    const spec = { key: check.key, ...specOf(check) };
    const sentAt = this.o.clock.now();
    const grant = await this.link.lease(spec, size, {
      key: this.keys.demand(check.key),
      region: this.o.region,
      rate: this.regionRate(check.key),
      staleMs: 3 * this.o.horizonMs,
      windowStartMs: next,
    });
    if (grant.granted <= 0) return;
    const base = {
      key: this.keys.pool(check.key),
      lockKey: lock,
      units: grant.granted,
      globalRemaining: grant.remaining,
      globalResetMs: grant.resetMs,
      globalRetryMs: grant.retryAfterMs,
      windowMs: check.periodMs,
    };
    const keepLock = Math.max(1, holdMs - (this.o.clock.now() - sentAt));
    // Taken ahead (the global Redis' clock still in the window before), or, when the window had
    // begun there, units of the current window.
    const ahead = grant.takenAtMs < next;
    const globalNow = this.link.globalNow() ?? grant.takenAtMs;
    const startsIn = ahead ? Math.max(1, next - globalNow + CREDIT_TRAVEL_MS) : 0;
    const ttlMs = ahead ? Math.min(this.o.leaseTtlMs, Math.floor(next + check.periodMs - globalNow - CREDIT_TRAVEL_MS - startsIn)) : this.ttlFor(check, grant);
    await this.regional.credit({ ...base, ttlMs, takenAtMs: ahead ? next : grant.takenAtMs, holdMs: keepLock, startsInMs: ahead ? startsIn : undefined });
    this.o.events.leased(grant.granted, size);
    if (ttlMs >= this.o.leaseTtlMs) this.expiring.set(base.key, { spec, expiresAt: this.o.clock.now() + startsIn + ttlMs });
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
    try {
      grant = await this.link.lease(spec, wanted, {
        key: this.keys.demand(check.key),
        region: this.o.region,
        rate: this.regionRate(check.key),
        staleMs: 3 * this.o.horizonMs,
      });
    } catch {
      // The lock, left to expire, is the region's backoff.
      return 'failed';
    }
    const ttlMs = this.ttlFor(check, grant);
    const holdMs = this.holdAfter(check, grant, wanted, ttlMs);
    await this.regional.credit({
      key: pool,
      lockKey: lock,
      units: grant.granted,
      ttlMs,
      globalRemaining: grant.remaining,
      globalResetMs: grant.resetMs,
      // An empty window lease marks the allowance spent until its window ends, and asks again (in
      // the background: units given back by other regions) after the hold.
      globalRetryMs: isWindow(check) && grant.granted <= 0 ? Math.min(grant.retryAfterMs, holdMs) : grant.retryAfterMs,
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

  // A window lease ends with its window; others after the lease TTL. The window's end is the global
  // Redis' clock's, as estimated here (GlobalLink.globalNow: the last lease's round trip, halved),
  // the same estimate by which the next window's units, leased ahead, begin: a region's windows
  // are the global ones, shifted by that estimate's error (docs/multi-region.md).
  private ttlFor(check: LimitCheck, grant: LeaseGrant): number {
    if (!isWindow(check)) return this.o.leaseTtlMs;
    const windowEnd = windowStart(grant.takenAtMs, check.periodMs) + check.periodMs;
    const left = Math.floor(windowEnd - (this.link.globalNow() ?? grant.takenAtMs) - CREDIT_TRAVEL_MS);
    // 0 or less: the window ended while the lease travelled; credit.lua drops its units. An empty
    // lease (the window's budget spent) keeps the allowance, spent, until the window ends: were
    // it to expire with the lease TTL, the next request would find none and wait for a lease.
    return grant.granted > 0 ? Math.min(this.o.leaseTtlMs, left) : left;
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

  // A window's hold ends soon after it: the next window's first lease must not wait, and a lease
  // sent earlier would reach the global Redis while the old window still runs there. A short
  // budget's hold that would end in the window's last two round trips lasts to its end: a lease
  // then would bring crumbs that the window ends before they are spent (the next window's units
  // are leased ahead).
  private holdAfter(check: LimitCheck, grant: LeaseGrant, wanted: number, ttlMs: number): number {
    const hold = this.holdFor(check, grant, wanted);
    if (!isWindow(check)) return hold;
    const toEnd = Math.max(0, ttlMs + this.link.roundTripMs + 2 * CREDIT_TRAVEL_MS);
    return hold > 0 && hold > ttlMs - 2 * this.link.roundTripMs ? toEnd : Math.min(toEnd, hold);
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
        const back = await this.regional.reclaim(pool, RECLAIM_MARGIN_MS, isWindow(e.spec));
        if (back.units <= 0) continue;
        await this.link.giveBack(e.spec, back.units, back.takenAtMs);
        this.o.events.returned(back.units);
      } catch {
        // Units not given back are lost to the budget: under-admission, never over.
      }
    }
  }
}
