import type { LimitSpec } from '../../algorithms';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import type { OwnEntry } from '../shared';
import type { Decision, LimitCheck } from '../store';

// What Redis last said of a counter: where a fallback starts from when Redis goes away, and a
// bucket's view of the fleet's use that recovery puts back.
export interface Known {
  key: string;
  spec: LimitSpec;
  // Whole requests Redis said remain after its decision.
  remaining: number;
  // Redis time of that decision.
  atMs: number;
}

const MAX_KEYS = 100_000;

// A counter's numbers, FIELDS to a slot: what Redis said remains (NaN: nothing yet) and when; this
// process' own hits in the latest window and in the one before it (a sliding window still counts
// it): each window's start, hits (0: no such window) and the Redis time of its latest hits.
const REMAINING = 0;
const AT = 1;
const LATEST_START = 2;
const LATEST_HITS = 3;
const LATEST_AT = 4;
const BEFORE_START = 5;
const BEFORE_HITS = 6;
const BEFORE_AT = 7;
const FIELDS = 8;
const FIRST_SLOTS = 256;

// The counters written since a point: a slot each, its numbers in one typed array and its specs
// in two arrays. No object per counter: a record per key (an object, and a boxed number for each
// time in it) is copied by the garbage collector for every new tenant; with slots, a CPU profile of
// 3-descriptor requests on new keys spent 6% less in all.
class Generation {
  slots = new Map<string, number>();
  nums = new Float64Array(FIRST_SLOTS * FIELDS);
  // The spec Redis last decided, and the spec this process' own hits count in (undefined: none
  // held); both from SharedSpecs.
  readonly specs: (LimitSpec | undefined)[] = [];
  readonly owns: (LimitSpec | undefined)[] = [];
  used = 0;

  // `maxSlots`: the most it ever holds (half the bound); its arrays grow to that and no further.
  constructor(private readonly maxSlots: number) {}

  add(key: string): number {
    const i = this.used++;
    if (i * FIELDS >= this.nums.length) {
      const grown = new Float64Array(Math.min(this.nums.length * 2, Math.max(this.maxSlots, i + 1) * FIELDS));
      grown.set(this.nums);
      this.nums = grown;
    }
    this.slots.set(key, i);
    return i;
  }

  // Empty again, its arrays kept: a generation dropped whole becomes the next young one, which
  // then fills them without allocating (the old slots' numbers and specs are written over as
  // they are handed out again, and no key reaches them before).
  recycle(): this {
    this.slots = new Map();
    this.used = 0;
    return this;
  }
}

// The specs notes keep: one object per distinct spec, the most recent SPECS of them. A note that
// kept the caller's check would keep an object per request alive, copied by scavenges until it is
// promoted: after 100,000 3-descriptor requests for new keys, a heap snapshot held 100,000 checks
// (9 MB) that nothing else needed.
const SPECS = 16;

class SharedSpecs {
  private readonly held: LimitSpec[] = [];
  private next = 0;

  of(s: LimitSpec): LimitSpec {
    const held = this.held;
    for (let i = 0; i < held.length; i++) {
      const h = held[i];
      if (h.periodMs === s.periodMs && h.limit === s.limit && h.algorithm === s.algorithm && h.burst === s.burst && h.layout === s.layout) return h;
    }
    const made = specOf(s);
    if (held.length < SPECS) held.push(made);
    else {
      held[this.next] = made;
      this.next = (this.next + 1) % SPECS;
    }
    return made;
  }
}

// Per counter, bounded (the least recently written go first, then under-counted after a loss,
// never over): what Redis last said remains (the fallback's starting point), and the hits this
// process itself put into Redis windows (its decisions that consumed, its leases, its journal's
// write-backs), which it puts back when Redis lost its data (lua/restore_own.lua). Every process
// puts back only its own, so the fleet's restores add up to what the fleet had put in, whatever
// their order. Windows are Redis time. Buckets are put back from the fleet's last reported use
// instead (recovery.ts): they refill once for all. Keyed by the counter's key alone, so that
// recording a decision builds no string: this runs for every limit of every decision.
// Two generations, as store/bounded-map.ts: written into the young one; when it holds half the
// bound it becomes the old one and the previous old one is dropped whole.
export class KeyMemory {
  private young: Generation;
  private old: Generation;
  private readonly shared = new SharedSpecs();
  private readonly half: number;

  constructor(maxKeys = MAX_KEYS) {
    this.half = Math.max(1, Math.floor(maxKeys / 2));
    this.young = new Generation(this.half);
    this.old = new Generation(this.half);
  }

  // Redis decided `checks`: what remains of each, and the hits of those it consumed.
  // (A loop, not forEach: no closure per decision.)
  decided(checks: readonly LimitCheck[], decision: Decision): void {
    const at = decision.storeTimeMs;
    if (at === undefined || decision.degraded !== undefined) return;
    const outcomes = decision.outcomes;
    for (let i = 0; i < outcomes.length; i++) {
      const o = outcomes[i];
      const c = checks[i];
      this.note(c, o.remaining, o.consumed ? c.hits : 0, at);
    }
  }

  // A lease took `granted` units of `check` at Redis time `atMs`, leaving `remaining`.
  granted(check: LimitCheck, remaining: number, granted: number, atMs: number): void {
    this.note(check, remaining, granted, atMs);
  }

  // Hits this process put into a window at Redis time `atMs` by other ways than a decision (the
  // journal's write-backs, a late Redis answer that counted what the fallback admitted).
  addOwn(spec: LimitSpec & { key: string }, hits: number, atMs: number): void {
    if (!(hits > 0) || !isWindow(spec)) return;
    const i = this.slotFor(spec.key);
    const own = this.young.owns[i];
    addHits(this.young, i, own !== undefined && sameWindows(own, spec) ? own : this.shared.of(spec), hits, atMs);
  }

  known(key: string): Known | undefined {
    let g = this.young;
    let i = g.slots.get(key);
    if (i === undefined) {
      g = this.old;
      i = g.slots.get(key);
    }
    return i === undefined ? undefined : knownAt(g, i, key);
  }

  *allKnown(): IterableIterator<Known> {
    for (const [g, i, key] of this.all()) {
      const k = knownAt(g, i, key);
      if (k !== undefined) yield k;
    }
  }

  // This process' own hits that still count at Redis time `nowMs`: windows still current (a
  // sliding window's previous one too). Hits that count nowhere any more are forgotten.
  ownCurrent(nowMs: number): OwnEntry[] {
    const out: OwnEntry[] = [];
    for (const [g, i, key] of [...this.all()]) {
      const own = g.owns[i];
      if (own === undefined) continue;
      const spec = specOf(own);
      const n = g.nums;
      const at = i * FIELDS;
      const before = n[at + BEFORE_HITS] > 0 && counts(own, n[at + BEFORE_START], nowMs);
      const latest = counts(own, n[at + LATEST_START], nowMs);
      if (before) out.push({ key, ...spec, hits: n[at + BEFORE_HITS], windowStartMs: n[at + BEFORE_START], atMs: n[at + BEFORE_AT] });
      if (latest) out.push({ key, ...spec, hits: n[at + LATEST_HITS], windowStartMs: n[at + LATEST_START], atMs: n[at + LATEST_AT] });
      if (before || latest) continue;
      g.owns[i] = undefined;
      if (Number.isNaN(n[at + REMAINING])) {
        this.young.slots.delete(key);
        this.old.slots.delete(key);
      }
    }
    return out;
  }

  private note(c: LimitCheck, remaining: number | undefined, hits: number, atMs: number): void {
    const own = hits > 0 && isWindow(c);
    if (remaining === undefined && !own) return;
    const i = this.slotFor(c.key);
    // (After slotFor: it may have made a new young generation.)
    const g = this.young;
    const spec = this.shared.of(c);
    if (remaining !== undefined) {
      g.specs[i] = spec;
      g.nums[i * FIELDS + REMAINING] = remaining;
      g.nums[i * FIELDS + AT] = atMs;
    }
    if (own) addHits(g, i, spec, hits, atMs);
  }

  // The young generation's slot for `key`, written now: moved there from the old one (its
  // numbers and specs copied), or new and empty.
  private slotFor(key: string): number {
    const y = this.young.slots.get(key);
    if (y !== undefined) return y;
    const from = this.old;
    const o = from.slots.get(key);
    if (this.young.used >= this.half) {
      // (`from` becomes the young one: slot `o` is read below before any other slot is written.)
      this.old = this.young;
      this.young = from.recycle();
    }
    const g = this.young;
    const i = g.add(key);
    if (o === undefined) {
      g.nums.fill(0, i * FIELDS, (i + 1) * FIELDS);
      g.nums[i * FIELDS + REMAINING] = Number.NaN;
      g.specs[i] = undefined;
      g.owns[i] = undefined;
    } else {
      // (Element by element: a subarray to copy from would be an object per moved counter.)
      const src = from.nums;
      const dst = g.nums;
      for (let f = 0; f < FIELDS; f++) dst[i * FIELDS + f] = src[o * FIELDS + f];
      g.specs[i] = from.specs[o];
      g.owns[i] = from.owns[o];
    }
    return i;
  }

  // Every counter held once (the young slot where both generations hold the key).
  private *all(): IterableIterator<[Generation, number, string]> {
    for (const [key, i] of this.young.slots) yield [this.young, i, key];
    for (const [key, i] of this.old.slots) if (!this.young.slots.has(key)) yield [this.old, i, key];
  }
}

function knownAt(g: Generation, i: number, key: string): Known | undefined {
  const remaining = g.nums[i * FIELDS + REMAINING];
  const spec = g.specs[i];
  if (Number.isNaN(remaining) || spec === undefined) return undefined;
  return { key, spec, remaining, atMs: g.nums[i * FIELDS + AT] };
}

// Adds `hits` at `atMs` to the window they went to. `spec` is what the hits count in; it is kept
// when the counter starts afresh.
function addHits(g: Generation, i: number, spec: LimitSpec, hits: number, atMs: number): void {
  const n = g.nums;
  const at = i * FIELDS;
  const periodMs = spec.periodMs;
  const startMs = windowStart(atMs, periodMs);
  const held = g.owns[i];
  const latestStart = n[at + LATEST_START];
  // A counter whose limit changed counts in other windows: start it afresh.
  if (held === undefined || !sameWindows(held, spec)) {
    g.owns[i] = spec;
    setWindow(n, at + LATEST_START, startMs, hits, atMs);
    n[at + BEFORE_HITS] = 0;
  } else if (startMs === latestStart) {
    n[at + LATEST_HITS] += hits;
    n[at + LATEST_AT] = Math.max(n[at + LATEST_AT], atMs);
  } else if (startMs > latestStart) {
    if (startMs - latestStart === periodMs) n.copyWithin(at + BEFORE_START, at + LATEST_START, at + LATEST_START + 3);
    else n[at + BEFORE_HITS] = 0;
    setWindow(n, at + LATEST_START, startMs, hits, atMs);
  } else if (n[at + BEFORE_HITS] > 0 && startMs === n[at + BEFORE_START]) {
    n[at + BEFORE_HITS] += hits;
    n[at + BEFORE_AT] = Math.max(n[at + BEFORE_AT], atMs);
  } else if (startMs === latestStart - periodMs) setWindow(n, at + BEFORE_START, startMs, hits, atMs);
  // (Older still: a window that no longer counts anywhere.)
}

// A window's start, hits and latest time, from `at` on.
function setWindow(n: Float64Array, at: number, startMs: number, hits: number, atMs: number): void {
  n[at] = startMs;
  n[at + 1] = hits;
  n[at + 2] = atMs;
}

function sameWindows(a: LimitSpec, b: LimitSpec): boolean {
  return a.periodMs === b.periodMs && a.algorithm === b.algorithm;
}

function counts(spec: LimitSpec, startMs: number, nowMs: number): boolean {
  const current = windowStart(nowMs, spec.periodMs);
  if (spec.algorithm === 'sliding_window') return startMs >= current - spec.periodMs;
  return startMs === current;
}
