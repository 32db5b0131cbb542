import { type Clock, monotonicClock } from '../clock';
import { ALGORITHM_IMPLS, type State } from '../algorithms';
import { admits } from '../algorithms/policy';
import { ExpiryHeap } from './memory-expiry';
import { ApproximateTier, mergeStates } from './sketch';
import type { Decision, DecideOptions, LimitCheck, LimitOutcome, Store } from './store';

export interface MemoryStoreOptions {
  clock?: Clock;
  // Most counters kept exactly. A live counter is never dropped to make room: expired ones are
  // reclaimed first, and when every slot holds a live counter, new keys are decided by a bounded
  // approximate tier that can only over-count (sketch.ts).
  maxKeys?: number;
  // Cells per row of each approximate-tier partition (4 rows of 8-byte cells); by default
  // maxKeys / 16 rounded up to a power of two, between 1,024 and 65,536.
  sketchWidth?: number;
  // How often expired counters are reclaimed in the background, ms.
  sweepIntervalMs?: number;
  // A limit was decided by the approximate tier (its key had no exact slot and none was free).
  onOverflow?: (key: string) => void;
}

export const DEFAULT_MAX_KEYS = 1_000_000;
// Expiry entries handled per background sweep slice, so a sweep never stalls the event loop.
const SWEEP_SLICE = 20_000;
// Expiry entries one insert at the cap may handle looking for an expired counter; past it the key
// is decided approximately and a background sweep takes over, so no single request stalls (e.g.
// when every daily counter's entry comes due at midnight and most were already extended).
const RECLAIM_BUDGET = 32;

class Slot {
  constructor(
    readonly key: string,
    public state: State,
    public expiresAt: number,
  ) {}
}

// Work counters, for tests and diagnostics.
export interface MemoryStoreStats {
  // Expiry entries taken off the heap (reclaimed, re-queued or stale).
  expiryPops: number;
  // Expired counters reclaimed.
  reclaimed: number;
  // Limits decided by the approximate tier.
  overflowDecisions: number;
}

// The embedded store: one process, counters in a Map. decide() is synchronous inside, so no other
// request interleaves between reading and writing a request's counters.
export class MemoryStore implements Store {
  readonly kind = 'memory';
  readonly stats: MemoryStoreStats = { expiryPops: 0, reclaimed: 0, overflowDecisions: 0 };
  private readonly slots = new Map<string, Slot>();
  private readonly expiry = new ExpiryHeap<Slot>();
  private readonly approximate: ApproximateTier;
  private readonly clock: Clock;
  private readonly maxKeys: number;
  private readonly onOverflow?: (key: string) => void;
  private readonly sweeper: NodeJS.Timeout;
  private sweepQueued = false;
  // Whether the last read() answered from the approximate tier.
  private readApproximate = false;

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.clock ?? monotonicClock;
    this.maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
    this.onOverflow = options.onOverflow;
    this.approximate = new ApproximateTier(options.sketchWidth ?? Math.min(65_536, Math.max(1024, this.maxKeys / 16)));
    this.sweeper = setInterval(() => this.backgroundSweep(), options.sweepIntervalMs ?? 10_000);
    this.sweeper.unref();
  }

  // Counters held exactly.
  get size(): number {
    return this.slots.size;
  }

  // Bytes held by the approximate tier (0 until the key cap is reached with live counters only).
  get overflowBytes(): number {
    return this.approximate.bytes;
  }

  // The decision says when it was made, on this store's clock: what giveBackUnused() needs.
  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const now = this.clock.now();
    return { ...this.decideAt(checks, options, false, now), storeTimeMs: now };
  }

  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.decideNow(checks, options, true);
  }

  decideNow(checks: readonly LimitCheck[], options: DecideOptions, dryRun = false): Decision {
    return this.decideAt(checks, options, dryRun, this.clock.now());
  }

  giveBackUnused(check: LimitCheck, units: number, takenAtMs: number): void {
    const now = this.clock.now();
    const slot = this.slots.get(check.key);
    const refund = ALGORITHM_IMPLS[check.algorithm].refund;
    if (units <= 0 || slot === undefined || slot.expiresAt <= now || refund === undefined) return;
    this.write(check, refund(slot.state, check, units, takenAtMs, now), now);
  }

  private decideAt(checks: readonly LimitCheck[], options: DecideOptions, dryRun: boolean, now: number): Decision {
    // Limits of one request that share a key see each other's hits, in request order.
    const working = new Map<string, State | undefined>();
    const before: (State | undefined)[] = [];
    const approximate: boolean[] = [];
    const verdicts = checks.map((check) => {
      let state: State | undefined;
      if (working.has(check.key)) state = working.get(check.key);
      else {
        state = this.read(check, now);
        if (this.readApproximate) approximate[before.length] = true;
      }
      before.push(state);
      const verdict = ALGORITHM_IMPLS[check.algorithm].decide(state, check, check.hits, now);
      const applies = options.countDeniedHits ? verdict.next !== undefined : verdict.allowed;
      if (applies) working.set(check.key, verdict.next);
      return verdict;
    });
    const admitted = admits(
      checks.map((c) => c.mode),
      verdicts.map((v) => v.allowed),
    );
    const outcomes: LimitOutcome[] = checks.map((check, i) => {
      const v = verdicts[i];
      const consume = !dryRun && v.next !== undefined && (options.countDeniedHits || (admitted && v.allowed));
      const impl = ALGORITHM_IMPLS[check.algorithm];
      const after = consume ? v.next : before[i];
      if (consume && !this.write(check, v.next as State, now)) approximate[i] = true;
      if (approximate[i] === true && !dryRun) this.overflowed(check.key);
      const view = impl.view(after, check, now);
      return {
        allowed: v.allowed,
        consumed: consume,
        remaining: view.remaining,
        resetMs: view.resetMs,
        retryAfterMs: v.retryAfterMs,
        usedBefore: impl.view(before[i], check, now).used,
      };
    });
    return { admitted, outcomes };
  }

  ready(): boolean {
    return true;
  }

  // Whether `key` holds a live exact counter. A key known only to the approximate tier says no;
  // seed() merges with what that tier holds, so seeding it never lowers its count.
  has(key: string): boolean {
    const slot = this.slots.get(key);
    return slot !== undefined && slot.expiresAt > this.clock.now();
  }

  // Starts `check`'s counter from `state` (the fallback starts from what Redis last said).
  seed(check: LimitCheck, state: State): void {
    const now = this.clock.now();
    const slot = this.slots.get(check.key);
    const merged = slot !== undefined ? state : mergeStates(check, this.approximate.read(check.key, check, now), state, now);
    if (merged !== undefined) this.write(check, merged, now);
  }

  // Forgets every counter (the fallback after an outage: Redis has the truth again).
  clear(): void {
    this.slots.clear();
    this.expiry.clear();
    this.approximate.clear();
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.clear();
  }

  // Reclaims expired counters, at most `budget` expiry entries; returns how many were reclaimed.
  sweep(budget = Infinity): number {
    const now = this.clock.now();
    let removed = 0;
    for (let n = 0; n < budget; n++) {
      const r = this.reclaimNext(now);
      if (r === undefined) break;
      if (r) removed++;
    }
    this.approximate.expire(now);
    return removed;
  }

  private backgroundSweep(): void {
    this.sweepQueued = false;
    const before = this.stats.expiryPops;
    this.sweep(SWEEP_SLICE);
    if (this.stats.expiryPops - before >= SWEEP_SLICE) this.queueSweep();
  }

  private queueSweep(): void {
    if (this.sweepQueued) return;
    this.sweepQueued = true;
    setImmediate(() => this.backgroundSweep());
  }

  private read(check: LimitCheck, now: number): State | undefined {
    this.readApproximate = false;
    const slot = this.slots.get(check.key);
    if (slot !== undefined) {
      if (slot.expiresAt > now) return slot.state;
      this.slots.delete(check.key); // its expiry entry goes stale
    }
    if (this.approximate.empty) return undefined;
    const state = this.approximate.read(check.key, check, now);
    this.readApproximate = state !== undefined;
    return state;
  }

  // Writes exactly when the key has a slot or one is free (reclaiming an expired one if needed);
  // otherwise folds the state into the approximate tier and returns false.
  private write(check: LimitCheck, state: State, now: number): boolean {
    const expiresAt = now + ALGORITHM_IMPLS[check.algorithm].ttlMs(state, check, now);
    const slot = this.slots.get(check.key);
    // Kept in place unless the expiry moves earlier than ms rounding explains (a reseed): its queued
    // entry must never come due after it, so the expiry in place only grows.
    if (slot !== undefined && expiresAt >= slot.expiresAt - 1) {
      slot.state = state;
      if (expiresAt > slot.expiresAt) slot.expiresAt = expiresAt;
      return true;
    }
    if (slot === undefined) {
      if (this.slots.size >= this.maxKeys && !this.reclaimOne(now)) {
        this.approximate.write(check.key, check, state, now);
        return false;
      }
      // Stale entries (deleted on read) are cleared at the cap by reclaimOne; below it, keep
      // them from piling up between sweeps.
      if (this.expiry.length > 2 * this.slots.size + 1024) this.reclaimNext(now);
    }
    // A new key, or an expiry moved earlier: queue a fresh slot (the old entry goes stale).
    const fresh = new Slot(check.key, state, expiresAt);
    this.slots.set(check.key, fresh);
    this.expiry.push(fresh, expiresAt);
    return true;
  }

  private reclaimOne(now: number): boolean {
    for (let n = 0; n < RECLAIM_BUDGET; n++) {
      const r = this.reclaimNext(now);
      if (r === undefined) return false;
      if (r) return true;
    }
    this.queueSweep();
    return false;
  }

  // Handles the earliest due expiry entry: true = reclaimed an expired counter, false = stale or
  // re-queued, undefined = nothing due.
  private reclaimNext(now: number): boolean | undefined {
    const slot = this.expiry.popDue(now);
    if (slot === undefined) return undefined;
    this.stats.expiryPops++;
    if (this.slots.get(slot.key) !== slot) return false;
    if (slot.expiresAt > now) {
      this.expiry.push(slot, slot.expiresAt);
      return false;
    }
    this.slots.delete(slot.key);
    this.stats.reclaimed++;
    return true;
  }

  private overflowed(key: string): void {
    this.stats.overflowDecisions++;
    this.onOverflow?.(key);
  }
}
