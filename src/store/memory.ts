import { type Clock, monotonicClock } from '../clock';
import { ALGORITHM_IMPLS, type State } from '../limiter/algorithms';
import { admits } from '../limiter/policy';
import type { Decision, DecideOptions, LimitCheck, LimitOutcome, Store } from './store';

export interface MemoryStoreOptions {
  clock?: Clock;
  // Most counters kept at once; beyond it the least recently written one is evicted, so a flood of
  // distinct keys costs bounded memory (at the price of forgetting old counters).
  maxKeys?: number;
  // How often expired counters are reclaimed, ms.
  sweepIntervalMs?: number;
  onEvict?: (key: string) => void;
}

export const DEFAULT_MAX_KEYS = 1_000_000;
const SWEEP_SCAN_LIMIT = 10_000;

interface Slot {
  state: State;
  expiresAt: number;
}

// The embedded store: one process, counters in a Map. decide() is synchronous inside, so no other
// request interleaves between reading and writing a request's counters.
export class MemoryStore implements Store {
  readonly kind = 'memory';
  private readonly slots = new Map<string, Slot>();
  private readonly clock: Clock;
  private readonly maxKeys: number;
  private readonly onEvict?: (key: string) => void;
  private readonly sweeper: NodeJS.Timeout;

  constructor(options: MemoryStoreOptions = {}) {
    this.clock = options.clock ?? monotonicClock;
    this.maxKeys = options.maxKeys ?? DEFAULT_MAX_KEYS;
    this.onEvict = options.onEvict;
    this.sweeper = setInterval(() => this.sweep(), options.sweepIntervalMs ?? 10_000);
    this.sweeper.unref();
  }

  get size(): number {
    return this.slots.size;
  }

  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.decideNow(checks, options);
  }

  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.decideNow(checks, options, true);
  }

  decideNow(checks: readonly LimitCheck[], options: DecideOptions, dryRun = false): Decision {
    const now = this.clock.now();
    // Limits of one request that share a key see each other's hits, in request order.
    const working = new Map<string, State | undefined>();
    const before: (State | undefined)[] = [];
    const verdicts = checks.map((check) => {
      const state = working.has(check.key) ? working.get(check.key) : this.read(check.key, now);
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
      if (consume) this.write(check, v.next as State, now);
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

  // Whether `key` holds a live counter.
  has(key: string): boolean {
    return this.read(key, this.clock.now()) !== undefined;
  }

  // Starts `check`'s counter from `state` (the fallback starts from what Redis last said).
  seed(check: LimitCheck, state: State): void {
    this.write(check, state, this.clock.now());
  }

  // Forgets every counter (the fallback after an outage: Redis has the truth again).
  clear(): void {
    this.slots.clear();
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.slots.clear();
  }

  private read(key: string, now: number): State | undefined {
    const slot = this.slots.get(key);
    if (slot === undefined) return undefined;
    if (slot.expiresAt <= now) {
      this.slots.delete(key);
      return undefined;
    }
    return slot.state;
  }

  private write(check: LimitCheck, state: State, now: number): void {
    const ttl = ALGORITHM_IMPLS[check.algorithm].ttlMs(state, check, now);
    // Delete first so that Map order stays least-recently-written first (eviction and sweep order).
    if (!this.slots.delete(check.key) && this.slots.size >= this.maxKeys) this.evictOldest();
    this.slots.set(check.key, { state, expiresAt: now + ttl });
  }

  private evictOldest(): void {
    const oldest = this.slots.keys().next();
    if (oldest.done) return;
    this.slots.delete(oldest.value);
    this.onEvict?.(oldest.value);
  }

  // Reclaims expired counters from the least recently written end, a bounded number per pass so a
  // sweep never stalls the event loop.
  sweep(): number {
    const now = this.clock.now();
    let scanned = 0;
    let removed = 0;
    for (const [key, slot] of this.slots) {
      if (++scanned > SWEEP_SCAN_LIMIT) break;
      if (slot.expiresAt <= now) {
        this.slots.delete(key);
        removed++;
      }
    }
    return removed;
  }
}
