import type { Clock } from '../../clock';
import { isWindow, windowStart } from '../../algorithms/types';
import type { StoreEvents } from '../events';
import type { LeaseGrant, SharedOps } from '../shared';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from '../store';
import type { LeasePolicy } from './lease-policy';
import { knownDenial, type LocalDenial } from './over-limit';
import { Stage } from './stage';

export interface LeaseOptions {
  clock: Clock;
  // Which keys are leased, how big a lease is, how an empty take is answered (lease-policy.ts).
  policy: LeasePolicy;
  // How long a lease is kept before unused units go back (a window lease ends with its window).
  ttlMs: number;
  // Refill in the background when a lease falls below this share of its size.
  lowWater: number;
  // The caller's budget, ms: how long a request that does not wait for takes (policy.waitMs 0)
  // still waits for its key's take already under way.
  budgetMs: (options: DecideOptions) => number;
  // May a call go to Redis now (the breaker is closed)?
  usable: () => boolean;
  // Every take's answer: what Redis said remains, at Redis time.
  onGrant: (check: LimitCheck, grant: LeaseGrant) => void;
  events: StoreEvents;
}

interface Lease {
  check: LimitCheck;
  size: number;
  available: number;
  // Redis time of the take that opened the lease; a window lease serves that window only.
  takenAtMs: number;
  windowStartMs?: number;
  // Local time after which the lease serves nothing (its window's end or the TTL, whichever first).
  expiresAt: number;
  // Local time its units' window (or regional allowance) ends, at the latest.
  endsAt: number;
  // Local time it last served a request.
  servedAt: number;
  // What Redis said remains after the last take, and when the counter resets (local time).
  remainingAtTake: number;
  resetAt: number;
}

interface Exhausted {
  until: number;
  retryAfterMs: number;
  resetMs: number;
  // What to take again once `until` has passed, if the policy retakes.
  check: LimitCheck;
  size: number;
  // Set when that take has started: until this local time, while it is under way, the key stays
  // denied here (a regional Redis that stopped answering is for the ordinary way, its deadline
  // and fallback).
  retakeUntil?: number;
}

interface Reservation {
  lease: Lease;
  hits: number;
}

const SWEEP_MS = 100;
// A key stays denied here at most this long past its denial period while its retake is under
// way (a regional round trip, normally), ms.
const RETAKE_WAIT_MS = 100;
const MAX_TRACKED = 10_000;

// Leased token batches for hot keys: a replica takes a batch of units from the global budget in
// one script call, serves requests from it locally, refills in the background at a low-water
// mark, and gives back what is unused when the lease expires. Units are taken before they are
// served, so the fleet never admits more than the limit; the price is under-admission while other
// replicas hold unused units (at most their lease sizes, for at most the lease TTL).
//
// A lease follows Redis' clock: it carries the window Redis took it in and ends, on the local
// clock, no later than that window's end measured from when the take was sent.
export class LeaseStage extends Stage {
  private readonly leases = new Map<string, Lease>();
  // One take in flight per key: a burst waits for it instead of each taking a batch.
  private readonly taking = new Map<string, Promise<void>>();
  // Keys whose last take came back empty: denied here until units may be back (a lease TTL at
  // most, since units other replicas hold return within it), so a burst costs Redis one take.
  private readonly exhausted = new Map<string, Exhausted>();
  private readonly sweeper: NodeJS.Timeout;
  private readonly retakes = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    inner: Store,
    private readonly shared: Pick<SharedOps, 'lease' | 'giveBack'>,
    private readonly o: LeaseOptions,
  ) {
    super(inner);
    this.sweeper = setInterval(() => this.expire(), SWEEP_MS);
    this.sweeper.unref();
  }

  // Whether `check` is served from leases (a rule lease, or the policy's): a cached denial of it
  // must not outlive unitsBackWithinMs, since units held elsewhere come back within it.
  isLeased(check: LimitCheck): boolean {
    return check.lease !== undefined || this.o.policy.leased(check);
  }

  get unitsBackWithinMs(): number {
    return this.o.policy.unitsBackWithinMs;
  }

  // Not an async function: a request no lease serves goes on with no promise of this stage's own.
  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    // Upstream counting wants every hit in Redis. A caller that declares the demand it stands for
    // (RLQS) takes units for others, sized by that demand: from the shared store, not from this
    // replica's leases, which are sized by the requests seen here.
    if (options.countDeniedHits || options.demand !== undefined) return this.inner.decide(checks, options);
    // Each check's lease size, once (it counts the key's rate). Most requests have no check a
    // lease can serve: they go on at once, without a reservation (a promise) per check.
    const sizes = checks.map((c) => this.leaseSize(c));
    const now = this.o.clock.now();
    if (!checks.some((c, i) => this.leasable(c, sizes[i], now))) {
      const denied = this.exhaustedDenial(checks);
      return denied === undefined ? this.inner.decide(checks, options) : Promise.resolve(denied);
    }
    return this.decideLeased(checks, options, sizes);
  }

  private async decideLeased(checks: readonly LimitCheck[], options: DecideOptions, sizes: number[]): Promise<Decision> {
    const waitMs = Math.max(0, this.o.policy.waitMs(options));
    const reserved = await Promise.all(checks.map((c, i) => this.reserve(c, sizes[i], waitMs, options)));
    const denied = this.exhaustedDenial(checks);
    if (denied !== undefined) {
      for (const r of reserved) if (r !== undefined) this.release(r);
      return denied;
    }
    const rest = checks.map((_, i) => i).filter((i) => reserved[i] === undefined);
    if (rest.length === 0) return { admitted: true, outcomes: reserved.map((r) => this.commit(r as Reservation)) };
    let shared: Decision;
    try {
      shared = await this.inner.decide(rest.length === checks.length ? checks : rest.map((i) => checks[i]), options);
    } catch (err) {
      for (const r of reserved) if (r !== undefined) this.release(r);
      throw err;
    }
    if (waitMs <= 0) this.takeAfter(checks, sizes, rest);
    if (rest.length === checks.length) return shared;
    const outcomes: LimitOutcome[] = [];
    rest.forEach((i, j) => (outcomes[i] = shared.outcomes[j]));
    reserved.forEach((r, i) => {
      if (r === undefined) return;
      if (shared.admitted) outcomes[i] = this.commit(r);
      else {
        this.release(r);
        outcomes[i] = { ...this.outcome(r), consumed: false };
      }
    });
    return { ...shared, outcomes };
  }

  // Checks their leases could not serve, when requests do not wait for takes, went the ordinary
  // way: their takes follow the decision (on the same connection), so a take never empties the
  // counter under the request that started it.
  private takeAfter(checks: readonly LimitCheck[], sizes: readonly number[], indices: readonly number[]): void {
    if (!this.o.usable()) return;
    const now = this.o.clock.now();
    for (const i of indices) if (this.leasable(checks[i], sizes[i], now)) void this.refill(checks[i], sizes[i], this.live(checks[i].key));
  }

  override configChanged(): void {
    // Lease sizes and limits come from the config: start over with the new one.
    for (const lease of [...this.leases.values()]) void this.retire(lease);
    this.inner.configChanged?.();
  }

  override async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const t of this.retakes) clearTimeout(t);
    this.retakes.clear();
    await Promise.all([...this.leases.values()].map((l) => this.retire(l)));
    await this.inner.close();
  }

  // Reserves `check.hits` from this replica's lease, waiting up to `waitMs` for a take when the
  // lease is short; undefined when the check must go the ordinary way (no lease for it, Redis
  // unusable, a take that came back empty or too late).
  private leasable(check: LimitCheck, size: number, now: number): boolean {
    return size > 0 && check.hits <= size && !this.isExhausted(check.key, now);
  }

  // `size`: leaseSize(check), worked out by the caller.
  private async reserve(check: LimitCheck, size: number, waitMs: number, options: DecideOptions): Promise<Reservation | undefined> {
    if (!this.leasable(check, size, this.o.clock.now())) return undefined;
    // Two takes at most (one may land in a window that is already over), then a last look.
    for (let attempt = 0; attempt <= 2; attempt++) {
      const lease = this.live(check.key);
      if (lease !== undefined && lease.available > 0 && lease.available < check.hits && waitMs <= 0) {
        // Too few for this request, and it does not wait for a refill: what the lease holds goes
        // back first, for the ordinary way to find (units split among replicas' leases and the
        // shared budget, each too few for the request, would deny it with the budget unspent).
        await this.retire(lease);
        return undefined;
      }
      if (lease !== undefined && lease.available >= check.hits) {
        lease.available -= check.hits;
        lease.servedAt = this.o.clock.now();
        if (lease.available < size * this.o.lowWater && this.o.usable()) void this.refill(check, size, lease);
        return { lease, hits: check.hits };
      }
      if (attempt === 2 || !this.o.usable()) return undefined;
      // A request that does not wait for takes still waits for its key's take under way: going the
      // ordinary way, it would reach Redis behind that take (one connection) and could find the
      // counter emptied by it, denied while the units it took sit here unused.
      const wait = waitMs > 0 ? waitMs : this.taking.has(check.key) ? this.o.budgetMs(options) : 0;
      if (wait <= 0) return undefined;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), wait)));
      const result = await Promise.race([this.refill(check, size, lease), late]);
      clearTimeout(timer);
      if (result === 'late') return undefined;
    }
    return undefined;
  }

  // A request whose every limit is enforced with an exhausted lease is denied here, each known to
  // have nothing left (remaining 0). A request with any other limit goes on (to Redis, which
  // denies it all the same and says what the others have left: 0 for them would be a wrong
  // answer).
  private exhaustedDenial(checks: readonly LimitCheck[]): Decision | undefined {
    if (!this.o.policy.mayDenyLocally()) return undefined;
    const now = this.o.clock.now();
    const denials: LocalDenial[] = [];
    for (const c of checks) {
      if (c.mode !== 'enforce' || c.hits <= 0 || !this.isExhausted(c.key, now)) return undefined;
      const e = this.exhausted.get(c.key)!;
      denials.push({ resetMs: Math.max(0, e.resetMs), retryAfterMs: Math.min(e.retryAfterMs, Math.max(1, e.until - now)) });
    }
    if (denials.length === 0) return undefined;
    this.o.events.overLimitCacheHit();
    return knownDenial(checks, denials);
  }

  private isExhausted(key: string, now: number): boolean {
    const e = this.exhausted.get(key);
    if (e === undefined) return false;
    if (e.until > now || (e.retakeUntil !== undefined && now < e.retakeUntil && this.taking.has(key))) return true;
    // Asked for as its denial period ends: the request that finds it so starts the retake (unless
    // the timer did) and is answered here, rather than going the ordinary way as well.
    if (e.retakeUntil === undefined && this.o.policy.retake(e.check, true) && this.retake(e)) return true;
    this.exhausted.delete(key);
    return false;
  }

  private live(key: string): Lease | undefined {
    const lease = this.leases.get(key);
    if (lease === undefined || lease.expiresAt > this.o.clock.now()) return lease;
    void this.retire(lease);
    return undefined;
  }

  private commit(r: Reservation): LimitOutcome {
    this.o.events.leaseServed(r.hits);
    return this.outcome(r);
  }

  private release(r: Reservation): void {
    if (this.leases.get(r.lease.check.key) === r.lease) r.lease.available += r.hits;
    else void this.giveBackUnits(r.lease, r.hits);
  }

  // Remaining as of the last take: what Redis said then plus the units this replica still holds.
  private outcome(r: Reservation): LimitOutcome {
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

  private leaseSize(check: LimitCheck): number {
    if (check.mode !== 'enforce' || check.hits <= 0) return 0;
    if (check.lease !== undefined) return check.lease;
    return this.o.policy.size(check);
  }

  private refill(check: LimitCheck, size: number, lease: Lease | undefined): Promise<void> {
    const inFlight = this.taking.get(check.key);
    if (inFlight !== undefined) return inFlight;
    const wanted = lease === undefined ? size : Math.max(1, size - lease.available);
    const sentAt = this.o.clock.now();
    const take = this.shared.lease(check, wanted).then(
      (grant) => {
        this.taking.delete(check.key);
        this.granted(check, size, grant, sentAt);
      },
      () => {
        this.taking.delete(check.key);
      },
    );
    this.taking.set(check.key, take);
    return take;
  }

  private granted(check: LimitCheck, size: number, grant: LeaseGrant, sentAt: number): void {
    this.o.onGrant(check, grant);
    const now = this.o.clock.now();
    if (grant.granted === 0) {
      // Nothing to wait for (a regional allowance not leased yet, or refilled soon): the next
      // request asks. A lease that still holds units serves on: its key is not exhausted here.
      if (grant.retryAfterMs <= 0 || (this.live(check.key)?.available ?? 0) > 0) return;
      if (this.exhausted.size >= MAX_TRACKED) this.exhausted.clear();
      const { forMs, retryAfterMs } = this.o.policy.exhaustedFor(grant);
      const entry: Exhausted = { until: now + forMs, retryAfterMs, resetMs: grant.resetMs, check, size };
      this.exhausted.set(check.key, entry);
      this.retakeAt(entry);
      return;
    }
    this.exhausted.delete(check.key);
    this.o.events.leaseTaken(grant.granted);
    const windowStartMs = isWindow(check) ? windowStart(grant.takenAtMs, check.periodMs) : undefined;
    // Redis took the units at takenAtMs, no earlier than we sent the take: counting the window's
    // rest from the send time ends the lease no later than the window does.
    const windowLeft = windowStartMs === undefined ? Infinity : windowStartMs + check.periodMs - grant.takenAtMs;
    // Units of a regional allowance end with it, whatever this replica's idea of the window.
    const lifeMs = Math.min(windowLeft, grant.usableMs ?? Infinity);
    const expiresAt = sentAt + Math.min(this.o.ttlMs, lifeMs);
    const old = this.leases.get(check.key);
    // A refill joins the live lease only when Redis took it in the same window.
    if (old !== undefined && old.expiresAt > now && old.windowStartMs === windowStartMs) {
      // Units in use are not idle: a lease its refills keep busy lives on (up to its window's end,
      // or its allowance's, which the region's refills move on), instead of giving back and taking
      // again every TTL, each time sending requests the ordinary way until the take lands.
      old.expiresAt = Math.max(old.expiresAt, expiresAt);
      old.endsAt = Math.max(old.endsAt, sentAt + lifeMs);
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
      takenAtMs: grant.takenAtMs,
      windowStartMs,
      expiresAt,
      endsAt: sentAt + lifeMs,
      servedAt: now,
      remainingAtTake: grant.remaining,
      resetAt: now + grant.resetMs,
    });
  }

  // When the key's denial period ends (units may be back after an empty take), takes again if
  // the policy says so and nothing else took, cleared or retook it meanwhile.
  private retakeAt(entry: Exhausted): void {
    const key = entry.check.key;
    const timer = setTimeout(
      () => {
        this.retakes.delete(timer);
        if (this.exhausted.get(key) !== entry || entry.retakeUntil !== undefined || !this.o.policy.retake(entry.check, false)) return;
        if (!this.retake(entry)) this.exhausted.delete(key);
      },
      Math.max(0, entry.until - this.o.clock.now()),
    );
    timer.unref();
    this.retakes.add(timer);
  }

  // Starts the take of an exhausted key whose denial period is over; true when it is under way
  // (requests meanwhile are still answered here, a regional round trip longer).
  private retake(entry: Exhausted): boolean {
    if (this.closed || !this.o.usable() || this.live(entry.check.key) !== undefined) return false;
    entry.retakeUntil = this.o.clock.now() + RETAKE_WAIT_MS;
    void this.refill(entry.check, entry.size, undefined);
    return this.taking.has(entry.check.key);
  }

  // Every sweep: leases past their end give back what they hold. One that served a request within
  // its TTL is taken anew at once (a window's next, an allowance's next), so the key's next
  // request finds a lease rather than a take to wait for (or, not waiting, the ordinary way).
  private expire(): void {
    const now = this.o.clock.now();
    for (const lease of [...this.leases.values()]) {
      if (lease.expiresAt > now) continue;
      const active = now - lease.servedAt < this.o.ttlMs;
      const retired = this.retire(lease);
      if (active && this.o.usable()) void retired.then(() => this.refill(lease.check, lease.size, undefined));
    }
  }

  private async retire(lease: Lease): Promise<void> {
    if (this.leases.get(lease.check.key) === lease) this.leases.delete(lease.check.key);
    const unused = lease.available;
    lease.available = 0;
    // Units of a window (or a regional allowance) that has ended, or ends before a give-back is
    // sure to land, are worth nothing: a late give-back could land in the next one's counter.
    if (this.o.clock.now() >= lease.endsAt - SWEEP_MS) return;
    await this.giveBackUnits(lease, unused);
  }

  private async giveBackUnits(lease: Lease, units: number): Promise<void> {
    if (units <= 0) return;
    try {
      await this.shared.giveBack(lease.check, units, lease.takenAtMs);
      this.o.events.leaseReturned(units);
    } catch {
      // Redis is away: the units are lost to their window (under-admission, never over).
    }
  }
}
