import type { Clock } from '../../clock';
import { type LimitSpec, specOf } from '../../algorithms';
import { isWindow, windowStart } from '../../algorithms/types';
import type { DebtEntry } from './types';

interface Owed {
  key: string;
  spec: LimitSpec;
  hits: number;
  // Windows: the global window the hits fell in (estimated global time).
  windowStartMs?: number;
  // Local time of the last of the hits.
  lastAt: number;
}

const MAX_ENTRIES = 100_000;

// What a region admitted on its own while cut off from the global Redis (policy allow or a
// share), to be written into the global budget when it is back (lua/absorb.lua there, as a debt):
// windows take the hits while their window is still counted, buckets all of them, going below
// empty by up to one burst, so the overshoot is paid back by admitting less afterwards.
export class PartitionDebt {
  private readonly owed = new Map<string, Owed>();

  constructor(private readonly clock: Clock) {}

  get size(): number {
    return this.owed.size;
  }

  // `globalNowMs`: the global Redis' time as estimated here.
  add(check: LimitSpec & { key: string; hits: number }, globalNowMs: number): void {
    const windowStartMs = isWindow(check) ? windowStart(globalNowMs, check.periodMs) : undefined;
    const id = windowStartMs === undefined ? check.key : `${check.key}@${windowStartMs}`;
    const now = this.clock.now();
    const e = this.owed.get(id);
    if (e !== undefined) {
      e.hits += check.hits;
      e.lastAt = now;
      return;
    }
    // Beyond the cap the region's overshoot is not reconciled: bounded memory first.
    if (this.owed.size >= MAX_ENTRIES) return;
    this.owed.set(id, { key: check.key, spec: specOf(check), hits: check.hits, windowStartMs, lastAt: now });
  }

  entries(): DebtEntry[] {
    const now = this.clock.now();
    return [...this.owed.values()].map((e) => ({ key: e.key, ...e.spec, hits: e.hits, windowStartMs: e.windowStartMs, ageMs: now - e.lastAt, debt: true }));
  }

  // Forgets what was written (entries() taken before).
  clear(written: readonly DebtEntry[]): number {
    let hits = 0;
    for (const w of written) {
      const id = w.windowStartMs === undefined ? w.key : `${w.key}@${w.windowStartMs}`;
      const e = this.owed.get(id);
      if (e === undefined) continue;
      hits += w.hits;
      e.hits -= w.hits;
      if (e.hits <= 0) this.owed.delete(id);
    }
    return hits;
  }
}
