import type { LimitSpec } from '../../algorithms';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import { BoundedMap } from '../bounded-map';
import type { OwnEntry } from '../shared';

const MAX_KEYS = 100_000;

interface Window {
  startMs: number;
  hits: number;
  atMs: number;
}

// One counter's own hits: its latest window, and the one before it (a sliding window still counts
// it). Keyed by the counter's key alone, so that recording a decision builds no string: this runs
// for every limit of every decision.
interface Held {
  key: string;
  spec: LimitSpec;
  latest: Window;
  before?: Window;
}

// The hits this process itself put into Redis windows (its decisions that consumed, its leases,
// its journal's write-backs), per counter and window: what it puts back when Redis lost its data
// (lua/restore_own.lua). Every process puts back only its own, so the fleet's restores add up to
// what the fleet had put in, whatever their order. Windows are Redis time. Buckets are put back
// from the fleet's last reported use instead (recovery.ts): they refill once for all.
// Bounded: the least recently written counters go first (then under-counted after a loss, never
// over).
export class OwnHits {
  private readonly held = new BoundedMap<string, Held>(MAX_KEYS);

  add(spec: LimitSpec & { key: string }, hits: number, atMs: number): void {
    if (!(hits > 0) || !isWindow(spec)) return;
    const startMs = windowStart(atMs, spec.periodMs);
    let h = this.held.get(spec.key);
    // A counter whose limit changed counts in other windows: start it afresh.
    if (h === undefined || h.spec.periodMs !== spec.periodMs || h.spec.algorithm !== spec.algorithm) {
      h = { key: spec.key, spec: specOf(spec), latest: { startMs, hits, atMs } };
    } else if (startMs === h.latest.startMs) addTo(h.latest, hits, atMs);
    else if (startMs > h.latest.startMs) {
      h.before = startMs - h.latest.startMs === spec.periodMs ? h.latest : undefined;
      h.latest = { startMs, hits, atMs };
    } else if (h.before !== undefined && startMs === h.before.startMs) addTo(h.before, hits, atMs);
    else if (startMs === h.latest.startMs - spec.periodMs) h.before = { startMs, hits, atMs };
    // (Older still: a window that no longer counts anywhere.)
    this.held.set(spec.key, h);
  }

  // What still counts at Redis time `nowMs`: windows still current (a sliding window's previous
  // one too). Counters with nothing that counts are forgotten.
  current(nowMs: number): OwnEntry[] {
    const out: OwnEntry[] = [];
    for (const h of [...this.held.values()]) {
      const counting = [h.before, h.latest].filter((w): w is Window => w !== undefined && counts(h.spec, w.startMs, nowMs));
      if (counting.length === 0) this.held.delete(h.key);
      for (const w of counting) out.push({ key: h.key, ...h.spec, hits: w.hits, windowStartMs: w.startMs, atMs: w.atMs });
    }
    return out;
  }
}

function addTo(w: Window, hits: number, atMs: number): void {
  w.hits += hits;
  w.atMs = Math.max(w.atMs, atMs);
}

function counts(spec: LimitSpec, startMs: number, nowMs: number): boolean {
  const current = windowStart(nowMs, spec.periodMs);
  if (spec.algorithm === 'sliding_window') return startMs >= current - spec.periodMs;
  return startMs === current;
}
