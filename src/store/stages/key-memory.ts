import type { LimitSpec } from '../../algorithms';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import { BoundedMap } from '../bounded-map';
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

// All this process remembers of one counter, in one record that is changed in place: a decision
// on a counter already held allocates nothing, and a new counter costs one object and one map
// entry (where two maps held three or four objects per key, and a hot key's record was replaced at
// every decision). A class: every record has one shape.
class Kept implements Known {
  // Redis' last word (`remaining` NaN: it has said nothing yet). The check itself is kept as the
  // spec (it is one, and is not changed after it is made): no copy per limit and decision.
  spec: LimitSpec;
  remaining = Number.NaN;
  atMs = 0;
  // This process' own hits (windows only): the spec they count in, their latest window and the
  // one before it (a sliding window still counts it). `own` undefined: none held; `beforeStartMs`
  // NaN: no window before the latest.
  own: LimitSpec | undefined = undefined;
  latestStartMs = 0;
  latestHits = 0;
  latestAtMs = 0;
  beforeStartMs = Number.NaN;
  beforeHits = 0;
  beforeAtMs = 0;

  constructor(
    readonly key: string,
    spec: LimitSpec,
  ) {
    this.spec = spec;
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
export class KeyMemory {
  private readonly keys = new BoundedMap<string, Kept>(MAX_KEYS);

  // Redis decided `checks`: what remains of each, and the hits of those it consumed.
  // (Loops, not forEach: no closure per decision.)
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
  // journal's write-backs, a late Redis answer that counted what the fallback admitted). The spec
  // is copied: the caller's object may be one that changes.
  addOwn(spec: LimitSpec & { key: string }, hits: number, atMs: number): void {
    if (!(hits > 0) || !isWindow(spec)) return;
    const k = this.keys.get(spec.key) ?? new Kept(spec.key, spec);
    addHits(k, k.own !== undefined && sameWindows(k.own, spec) ? k.own : specOf(spec), hits, atMs);
    this.keys.set(spec.key, k);
  }

  known(key: string): Known | undefined {
    const k = this.keys.get(key);
    return k === undefined || Number.isNaN(k.remaining) ? undefined : k;
  }

  *allKnown(): IterableIterator<Known> {
    for (const k of this.keys.values()) if (!Number.isNaN(k.remaining)) yield k;
  }

  // This process' own hits that still count at Redis time `nowMs`: windows still current (a
  // sliding window's previous one too). Hits that count nowhere any more are forgotten.
  ownCurrent(nowMs: number): OwnEntry[] {
    const out: OwnEntry[] = [];
    for (const k of [...this.keys.values()]) {
      const own = k.own;
      if (own === undefined) continue;
      const spec = specOf(own);
      const before = !Number.isNaN(k.beforeStartMs) && counts(own, k.beforeStartMs, nowMs);
      const latest = counts(own, k.latestStartMs, nowMs);
      if (before) out.push({ key: k.key, ...spec, hits: k.beforeHits, windowStartMs: k.beforeStartMs, atMs: k.beforeAtMs });
      if (latest) out.push({ key: k.key, ...spec, hits: k.latestHits, windowStartMs: k.latestStartMs, atMs: k.latestAtMs });
      if (before || latest) continue;
      k.own = undefined;
      if (Number.isNaN(k.remaining)) this.keys.delete(k.key);
    }
    return out;
  }

  private note(c: LimitCheck, remaining: number | undefined, hits: number, atMs: number): void {
    const own = hits > 0 && isWindow(c);
    if (remaining === undefined && !own) return;
    let k = this.keys.get(c.key);
    if (k === undefined) k = new Kept(c.key, c);
    if (remaining !== undefined) {
      k.spec = c;
      k.remaining = remaining;
      k.atMs = atMs;
    }
    if (own) addHits(k, c, hits, atMs);
    this.keys.set(c.key, k);
  }
}

// Adds `hits` at `atMs` to the window they went to. `spec` is what the hits count in; it is kept
// when the counter starts afresh.
function addHits(k: Kept, spec: LimitSpec, hits: number, atMs: number): void {
  const periodMs = spec.periodMs;
  const startMs = windowStart(atMs, periodMs);
  // A counter whose limit changed counts in other windows: start it afresh.
  if (k.own === undefined || !sameWindows(k.own, spec)) {
    k.own = spec;
    setLatest(k, startMs, hits, atMs);
    k.beforeStartMs = Number.NaN;
  } else if (startMs === k.latestStartMs) {
    k.latestHits += hits;
    k.latestAtMs = Math.max(k.latestAtMs, atMs);
  } else if (startMs > k.latestStartMs) {
    if (startMs - k.latestStartMs === periodMs) {
      k.beforeStartMs = k.latestStartMs;
      k.beforeHits = k.latestHits;
      k.beforeAtMs = k.latestAtMs;
    } else k.beforeStartMs = Number.NaN;
    setLatest(k, startMs, hits, atMs);
  } else if (startMs === k.beforeStartMs) {
    k.beforeHits += hits;
    k.beforeAtMs = Math.max(k.beforeAtMs, atMs);
  } else if (startMs === k.latestStartMs - periodMs) {
    k.beforeStartMs = startMs;
    k.beforeHits = hits;
    k.beforeAtMs = atMs;
  }
  // (Older still: a window that no longer counts anywhere.)
}

function setLatest(k: Kept, startMs: number, hits: number, atMs: number): void {
  k.latestStartMs = startMs;
  k.latestHits = hits;
  k.latestAtMs = atMs;
}

function sameWindows(a: LimitSpec, b: LimitSpec): boolean {
  return a.periodMs === b.periodMs && a.algorithm === b.algorithm;
}

function counts(spec: LimitSpec, startMs: number, nowMs: number): boolean {
  const current = windowStart(nowMs, spec.periodMs);
  if (spec.algorithm === 'sliding_window') return startMs >= current - spec.periodMs;
  return startMs === current;
}
