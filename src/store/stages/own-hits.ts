import type { LimitSpec } from '../../algorithms';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import { BoundedMap } from '../bounded-map';
import type { OwnEntry } from '../shared';

const MAX_ENTRIES = 100_000;

// What the bucket has not refilled of `hits` after `ageMs`.
function unrefilled(s: LimitSpec, hits: number, ageMs: number): number {
  if (s.periodMs <= 0) return hits;
  return Math.max(0, hits - (Math.max(0, ageMs) * s.limit) / s.periodMs);
}

// The hits this process itself put into Redis (its decisions that consumed, its leases, its
// journal's write-backs), per counter and window: what it puts back when Redis lost its data
// (lua/restore_own.lua). Every process puts back only its own, so the fleet's restores add up to
// what the fleet had put in, whatever their order. Windows keep one entry per window (Redis
// time); buckets one per key, the hits not yet refilled as of `atMs`. Bounded: the least recently
// written go first (then under-counted after a loss, never over-counted).
export class OwnHits {
  private readonly held = new BoundedMap<string, OwnEntry>(MAX_ENTRIES);

  add(spec: LimitSpec & { key: string }, hits: number, atMs: number): void {
    if (!(hits > 0)) return;
    const w = isWindow(spec) ? windowStart(atMs, spec.periodMs) : undefined;
    const id = w === undefined ? spec.key : `${spec.key}#${w}`;
    const h = this.held.get(id);
    if (h === undefined) {
      this.held.set(id, { key: spec.key, ...specOf(spec), hits, windowStartMs: w, atMs });
      return;
    }
    if (w === undefined) {
      h.hits = unrefilled(h, h.hits, atMs - h.atMs) + hits;
      h.atMs = Math.max(h.atMs, atMs);
    } else h.hits += hits;
    this.held.set(id, h);
  }

  // What still counts at Redis time `nowMs`: windows still current (a sliding window's previous
  // one too), buckets not refilled since. Entries that no longer count are forgotten.
  current(nowMs: number): OwnEntry[] {
    const out: OwnEntry[] = [];
    for (const h of [...this.held.values()]) {
      if (counts(h, nowMs)) out.push({ ...h });
      else this.held.delete(h.windowStartMs === undefined ? h.key : `${h.key}#${h.windowStartMs}`);
    }
    return out;
  }
}

function counts(h: OwnEntry, nowMs: number): boolean {
  if (h.windowStartMs === undefined) return unrefilled(h, h.hits, nowMs - h.atMs) > 0;
  const start = windowStart(nowMs, h.periodMs);
  if (h.algorithm === 'sliding_window') return h.windowStartMs >= start - h.periodMs;
  return h.windowStartMs === start;
}
