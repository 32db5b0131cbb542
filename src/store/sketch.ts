import { ALGORITHM_IMPLS, type LimitSpec, type State } from '../algorithms';
import { windowStart } from '../algorithms/types';

// The memory store's approximate tier: where counters go when every exact slot holds a live
// counter. It can only over-count, so it can never reset a limit or admit what the exact algorithm
// would deny.
//
// Each partition (one per limit spec: algorithm, period, limit, burst) is a max-min sketch: DEPTH
// rows of WIDTH cells; a key maps to one cell per row; writing a value raises each of the key's
// cells to at least that value; reading takes the smallest of the key's cells. A cell only ever
// holds the maximum of values written by the keys mapped to it, so the reading is ≥ the last value
// written for the key itself (the count-min sketch with "conservative update").
//
// The value is chosen so that larger means "more budget used":
// - fixed and sliding windows: the count of the window (one sketch for the current window and,
//   for sliding windows, one for the previous);
// - token bucket and GCRA: the time at which the bucket is empty of debt again ("full at"):
//   now + used × period / limit, where used is the algorithm's own view of the state (burst −
//   tokens; GCRA's debt / T), rounded up to the next whole ms. Without writes it stays put while the
//   bucket refills, so it needs no window. A bucket that never refills (limit 0) is "full at" the
//   end of its TTL and reads as fully used until then.
// Algorithms decide with a state built from these readings (for buckets: a fresh counter charged
// `used`, so the state layout stays the algorithm's business); since every algorithm admits less
// from a larger count or usage, an over-estimate only denies more. Writes fold in the state
// computed from the over-estimate, so the invariant "reading ≥ truth" is kept by induction.
// Partitions are dropped once everything in them has expired.

const DEPTH = 4;
// Past this many partitions (request-side overrides can make many specs), new specs share one
// partition per algorithm and period; readings then take the larger of both, so nothing is lost.
const MAX_PARTITIONS = 16;

interface Partition {
  periodMs: number;
  start: number; // windows: start of the window `curr` counts
  curr: Float64Array;
  prev?: Float64Array; // sliding windows: the window before `start`
  liveUntil: number; // nothing in the partition matters from then on
}

export class ApproximateTier {
  private readonly partitions = new Map<string, Partition>();
  private readonly width: number;
  private readonly idx = new Uint32Array(DEPTH);

  constructor(width: number) {
    this.width = 1 << Math.ceil(Math.log2(Math.max(16, width)));
  }

  get bytes(): number {
    let cells = 0;
    for (const p of this.partitions.values()) cells += p.curr.length + (p.prev?.length ?? 0);
    return cells * 8;
  }

  get empty(): boolean {
    return this.partitions.size === 0;
  }

  // A state at least as used as `key`'s true state, or undefined when nothing is known about it.
  read(key: string, spec: LimitSpec, now: number): State | undefined {
    if (this.partitions.size === 0) return undefined;
    this.index(key);
    let state: State | undefined;
    for (const p of [this.partitions.get(specKey(spec)), this.partitions.get(sharedKey(spec))]) {
      if (p === undefined || !this.alive(p, now)) continue;
      state = mergeStates(spec, state, this.readFrom(p, spec, now), now);
    }
    return state;
  }

  // Folds `state` (computed from a read() of the same key, or a seed) into the key's cells.
  write(key: string, spec: LimitSpec, state: State, now: number): void {
    this.index(key);
    const p = this.partitionFor(spec, now);
    const { algorithm, periodMs } = spec;
    if (algorithm === 'fixed_window') {
      this.raiseWindow(p, state[0], state[1], now);
    } else if (algorithm === 'sliding_window') {
      this.raiseWindow(p, state[0], state[1], now);
      this.raiseWindow(p, state[0] - periodMs, state[2], now);
    } else {
      const fullAt = bucketFullAt(spec, state, now);
      this.raise(p.curr, fullAt);
      p.liveUntil = Math.max(p.liveUntil, fullAt);
    }
  }

  // Drops partitions whose contents have all expired.
  expire(now: number): void {
    for (const [k, p] of this.partitions) if (!this.alive(p, now)) this.partitions.delete(k);
  }

  clear(): void {
    this.partitions.clear();
  }

  private readFrom(p: Partition, spec: LimitSpec, now: number): State | undefined {
    if (spec.algorithm === 'fixed_window' || spec.algorithm === 'sliding_window') {
      const start = windowStart(now, spec.periodMs);
      this.rotate(p, start);
      // A clock that stepped back reads the newer window's counts: more, never less.
      const curr = this.estimate(p.curr);
      const prev = p.prev === undefined || start > p.start ? 0 : this.estimate(p.prev);
      if (curr === 0 && prev === 0) return undefined;
      return spec.algorithm === 'fixed_window' ? [start, curr] : [start, curr, prev];
    }
    const fullAt = this.estimate(p.curr);
    if (fullAt <= now) return undefined;
    // A bucket never holds more than `burst` in use, so the clamp keeps the reading ≥ the truth.
    const used = spec.limit > 0 ? Math.min(spec.burst, ((fullAt - now) * spec.limit) / spec.periodMs) : spec.burst;
    return ALGORITHM_IMPLS[spec.algorithm].decide(undefined, spec, Math.max(0, used), now).next;
  }

  private partitionFor(spec: LimitSpec, now: number): Partition {
    const own = specKey(spec);
    let p = this.partitions.get(own);
    if (p !== undefined && this.alive(p, now)) return p;
    if (p !== undefined) this.partitions.delete(own);
    const key = this.partitions.size < MAX_PARTITIONS ? own : sharedKey(spec);
    p = this.partitions.get(key);
    if (p === undefined || !this.alive(p, now)) {
      const windowed = spec.algorithm === 'fixed_window' || spec.algorithm === 'sliding_window';
      p = {
        periodMs: spec.periodMs,
        start: windowed ? windowStart(now, spec.periodMs) : 0,
        curr: new Float64Array(DEPTH * this.width),
        prev: spec.algorithm === 'sliding_window' ? new Float64Array(DEPTH * this.width) : undefined,
        liveUntil: now,
      };
      this.partitions.set(key, p);
    }
    return p;
  }

  private alive(p: Partition, now: number): boolean {
    return now < p.liveUntil;
  }

  // Moves a window partition forward to the window starting at `start` (never back).
  private rotate(p: Partition, start: number): void {
    if (start <= p.start) return;
    if (p.prev !== undefined && start === p.start + p.periodMs) {
      const old = p.prev;
      p.prev = p.curr;
      p.curr = old.fill(0);
    } else {
      p.curr.fill(0);
      p.prev?.fill(0);
    }
    p.start = start;
  }

  private raiseWindow(p: Partition, start: number, count: number, now: number): void {
    if (count <= 0) return;
    this.rotate(p, start);
    const span = p.prev === undefined ? 1 : 2;
    if (start >= p.start) this.raise(p.curr, count);
    else if (p.prev !== undefined && start === p.start - p.periodMs) this.raise(p.prev, count);
    else if (start < p.start) this.raise(p.curr, count); // older than kept: count it as current (more)
    p.liveUntil = Math.max(p.liveUntil, p.start + span * p.periodMs, now);
  }

  private index(key: string): void {
    // FNV-1a twice with different offsets, combined by double hashing.
    let h1 = 0x811c9dc5;
    let h2 = 0x01000193 ^ key.length;
    for (let i = 0; i < key.length; i++) {
      const c = key.charCodeAt(i);
      h1 = Math.imul(h1 ^ c, 0x01000193);
      h2 = Math.imul(h2 ^ c, 0x5bd1e995);
    }
    h2 = (h2 ^ (h2 >>> 15)) | 1;
    const mask = this.width - 1;
    for (let row = 0; row < DEPTH; row++) this.idx[row] = row * this.width + ((h1 + Math.imul(row, h2)) & mask);
  }

  private estimate(cells: Float64Array): number {
    let min = Infinity;
    for (let row = 0; row < DEPTH; row++) min = Math.min(min, cells[this.idx[row]]);
    return min;
  }

  private raise(cells: Float64Array, value: number): void {
    for (let row = 0; row < DEPTH; row++) if (cells[this.idx[row]] < value) cells[this.idx[row]] = value;
  }
}

function specKey(spec: LimitSpec): string {
  return `${spec.algorithm}:${spec.periodMs}:${spec.limit}:${spec.burst}`;
}

function sharedKey(spec: LimitSpec): string {
  return `${spec.algorithm}:${spec.periodMs}:*`;
}

// When a token bucket or GCRA counter in `state` has nothing in use any more, rounded up to a whole
// ms (the margin covers float error in epoch-ms arithmetic); without refill, when its TTL ends.
function bucketFullAt(spec: LimitSpec, state: State, now: number): number {
  const impl = ALGORITHM_IMPLS[spec.algorithm];
  if (!(spec.limit > 0)) return now + impl.ttlMs(state, spec, now);
  const used = Math.max(0, impl.view(state, spec, now).used);
  return Math.ceil(now + (used * spec.periodMs) / spec.limit + 1e-3);
}

// The more used of two states of one key at `now` (each component at its most used), so that
// seeding or merging never lowers a counter.
export function mergeStates(spec: LimitSpec, a: State | undefined, b: State | undefined, now: number): State | undefined {
  if (a === undefined) return b;
  if (b === undefined) return a;
  switch (spec.algorithm) {
    case 'fixed_window': {
      const start = windowStart(now, spec.periodMs);
      const count = (s: State) => (s[0] >= start ? s[1] : 0);
      return [start, Math.max(count(a), count(b))];
    }
    case 'sliding_window': {
      const start = windowStart(now, spec.periodMs);
      const counts = (s: State): [number, number] => {
        if (s[0] >= start) return [s[1], s[2]];
        if (s[0] === start - spec.periodMs) return [0, s[1]];
        return [0, 0];
      };
      const [ca, pa] = counts(a);
      const [cb, pb] = counts(b);
      return [start, Math.max(ca, cb), Math.max(pa, pb)];
    }
    default: {
      // Buckets refill at one rate whatever their state: more in use now is more in use later.
      const impl = ALGORITHM_IMPLS[spec.algorithm];
      return impl.view(a, spec, now).used >= impl.view(b, spec, now).used ? a : b;
    }
  }
}
