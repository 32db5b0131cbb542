import type { LimitSpec } from '../../algorithms';
import { isWindow, specOf, windowStart } from '../../algorithms/types';
import { BoundedMap } from '../bounded-map';
import type { OwnEntry } from '../shared';

const MAX_ENTRIES = 100_000;

// The hits this process itself put into Redis windows (its decisions that consumed, its leases,
// its journal's write-backs), per counter and window: what it puts back when Redis lost its data
// (lua/restore_own.lua). Every process puts back only its own, so the fleet's restores add up to
// what the fleet had put in, whatever their order. One entry per window (Redis time). Buckets are
// put back from the fleet's last reported use instead (recovery.ts): they refill once for all.
// Bounded: the least recently written go first (then under-counted after a loss, never over).
export class OwnHits {
  private readonly held = new BoundedMap<string, OwnEntry>(MAX_ENTRIES);

  add(spec: LimitSpec & { key: string }, hits: number, atMs: number): void {
    if (!(hits > 0) || !isWindow(spec)) return;
    const w = windowStart(atMs, spec.periodMs);
    const id = `${spec.key}#${w}`;
    const h = this.held.get(id);
    if (h === undefined) this.held.set(id, { key: spec.key, ...specOf(spec), hits, windowStartMs: w, atMs });
    else {
      h.hits += hits;
      h.atMs = Math.max(h.atMs, atMs);
      this.held.set(id, h);
    }
  }

  // What still counts at Redis time `nowMs`: windows still current (a sliding window's previous
  // one too). Entries that no longer count are forgotten.
  current(nowMs: number): OwnEntry[] {
    const out: OwnEntry[] = [];
    for (const h of [...this.held.values()]) {
      if (counts(h, nowMs)) out.push({ ...h });
      else this.held.delete(`${h.key}#${h.windowStartMs}`);
    }
    return out;
  }
}

function counts(h: OwnEntry, nowMs: number): boolean {
  const start = windowStart(nowMs, h.periodMs);
  if (h.algorithm === 'sliding_window') return h.windowStartMs! >= start - h.periodMs;
  return h.windowStartMs === start;
}
