import type { Clock } from '../clock';
import { windowStart } from '../limiter/algorithms/types';
import type { LeaseGrant, RedisStore } from './redis';
import type { LimitCheck, LimitOutcome } from './store';

export interface LeaseOptions {
  clock: Clock;
  // Requests per second for one key at this replica that make it hot (auto leases); 0 = off.
  autoThreshold: number;
  // Units per lease for hot keys without a rule `lease`: this share of the limit, at least 1.
  autoShare: number;
  // How long a bucket/GCRA lease (and a window lease at most) is kept before unused units go back.
  ttlMs: number;
  // Refill in the background when a lease falls below this share of its size.
  lowWater: number;
  // May a background call go to Redis now (the breaker is closed)?
  redisUsable: () => boolean;
  events: {
    taken(units: number): void;
    returned(units: number): void;
    servedLocally(hits: number): void;
    exhausted(key: string, hits: number, untilMs: number): void;
  };
}

interface Lease {
  check: LimitCheck;
  size: number;
  available: number;
  takenAt: string;
  expiresAt: number;
  // Global remaining reported by the last take, for the remaining we report.
  remainingAtTake: number;
  resetAt: number;
}

export interface Reservation {
  lease: Lease;
  hits: number;
}

const HOT_FOR_MS = 10_000;
const MAX_TRACKED = 10_000;

// Leased token batches for hot keys: the replica takes a batch of units from the global budget in
// one script call, serves requests from it locally, refills in the background at a low-water
// mark, and gives back what is unused when the lease expires or its window ends. Units are taken
// before they are served, so the fleet never admits more than the limit; the price is
// under-admission while other replicas hold unused units (at most their lease sizes).
export class LeaseManager {
  private readonly leases = new Map<string, Lease>();
  private readonly rates = new Map<string, { second: number; count: number; hotUntil: number }>();
  // Takes in flight, one per key: a burst of requests waits for it instead of each taking a batch
  // (or each going to Redis).
  private readonly taking = new Map<string, Promise<void>>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly redis: RedisStore,
    private readonly o: LeaseOptions,
  ) {
    this.sweeper = setInterval(() => this.expire(), 100);
    this.sweeper.unref();
  }

  // Reserves `check.hits` from this replica's lease, waiting up to `waitMs` for a take when the
  // lease is short; undefined when the check must go to Redis the ordinary way (no lease for it,
  // Redis unusable, a take that came back empty or too late).
  async reserve(check: LimitCheck, waitMs: number): Promise<Reservation | undefined> {
    const size = this.leaseSize(check);
    if (size === 0 || check.hits > size) return undefined;
    for (let attempt = 0; attempt < 2; attempt++) {
      const lease = this.live(check.key);
      if (lease !== undefined && lease.available >= check.hits) {
        lease.available -= check.hits;
        if (lease.available < size * this.o.lowWater) void this.refill(check, size, lease);
        return { lease, hits: check.hits };
      }
      if (!this.o.redisUsable()) return undefined;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), waitMs)));
      const result = await Promise.race([this.refill(check, size, lease), late]);
      clearTimeout(timer);
      if (result === 'late') return undefined;
    }
    return undefined;
  }

  private live(key: string): Lease | undefined {
    const lease = this.leases.get(key);
    if (lease === undefined || lease.expiresAt > this.o.clock.now()) return lease;
    void this.retire(lease);
    return undefined;
  }

  // The request was admitted: the reserved units are spent.
  commit(r: Reservation): void {
    this.o.events.servedLocally(r.hits);
  }

  // The request was denied by its other limits: the units go back into the lease.
  release(r: Reservation): void {
    r.lease.available += r.hits;
  }

  outcome(r: Reservation): LimitOutcome {
    const now = this.o.clock.now();
    const used = r.lease.check.limit - r.lease.remainingAtTake - r.lease.available;
    return {
      allowed: true,
      consumed: true,
      remaining: Math.max(0, r.lease.remainingAtTake + r.lease.available),
      resetMs: Math.max(0, r.lease.resetAt - now),
      retryAfterMs: 0,
      usedBefore: Math.max(0, used - r.hits),
    };
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.leases.values()].map((l) => this.retire(l)));
  }

  private leaseSize(check: LimitCheck): number {
    if (check.mode !== 'enforce' || check.hits <= 0) return 0;
    if (check.lease !== undefined) return check.lease;
    if (this.o.autoThreshold <= 0 || !this.isHot(check.key)) return 0;
    return Math.max(1, Math.floor(check.limit * this.o.autoShare));
  }

  private isHot(key: string): boolean {
    const now = this.o.clock.now();
    const second = Math.floor(now / 1000);
    let r = this.rates.get(key);
    if (r === undefined) {
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

  private refill(check: LimitCheck, size: number, lease: Lease | undefined): Promise<void> {
    const inFlight = this.taking.get(check.key);
    if (inFlight !== undefined) return inFlight;
    const wanted = lease === undefined ? size : Math.max(1, size - lease.available);
    const take = this.redis.lease(check, wanted).then(
      (grant) => {
        this.taking.delete(check.key);
        this.granted(check, size, grant);
      },
      () => {
        this.taking.delete(check.key);
      },
    );
    this.taking.set(check.key, take);
    return take;
  }

  private granted(check: LimitCheck, size: number, grant: LeaseGrant): void {
    const now = this.o.clock.now();
    if (grant.granted === 0) {
      if (Number.isFinite(grant.retryAfterMs)) this.o.events.exhausted(check.key, 1, now + grant.retryAfterMs);
      return;
    }
    this.o.events.taken(grant.granted);
    const windowed = check.algorithm === 'fixed_window' || check.algorithm === 'sliding_window';
    // Unused units go back after the lease TTL, so other replicas can use them; a window's units
    // are only good in their window.
    const windowEnd = windowStart(now, check.periodMs) + check.periodMs;
    const expiresAt = windowed ? Math.min(windowEnd, now + this.o.ttlMs) : now + this.o.ttlMs;
    const old = this.leases.get(check.key);
    // A refill joins the live lease (and leaves with it: a window lease never outlives its window).
    if (old !== undefined && old.expiresAt > now) {
      old.available += grant.granted;
      old.remainingAtTake = grant.remaining;
      old.resetAt = now + grant.resetMs;
      return;
    }
    if (old !== undefined) void this.retire(old);
    this.leases.set(check.key, {
      check,
      size,
      available: grant.granted,
      takenAt: grant.takenAt,
      expiresAt,
      remainingAtTake: grant.remaining,
      resetAt: now + grant.resetMs,
    });
  }

  private expire(): void {
    const now = this.o.clock.now();
    for (const lease of this.leases.values()) if (lease.expiresAt <= now) void this.retire(lease);
  }

  private async retire(lease: Lease): Promise<void> {
    if (this.leases.get(lease.check.key) === lease) this.leases.delete(lease.check.key);
    const unused = lease.available;
    lease.available = 0;
    if (unused <= 0) return;
    try {
      await this.redis.giveBack(lease.check, unused, lease.takenAt);
      this.o.events.returned(unused);
    } catch {
      // Redis is away: the units are lost to this window (under-admission, never over).
    }
  }
}
