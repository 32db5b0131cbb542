import type { Clock } from '../../clock';
import { type LimitSpec, specOf } from '../../algorithms';
import type { StoreEvents } from '../events';
import { type AbsorbEntry, MAX_BATCH, PartialWrite, type SharedOps } from '../shared';
import type { LimitCheck } from '../store';

interface Entry extends LimitSpec {
  id: string;
  key: string;
  windowStartMs?: number;
  // Hits whose fate is settled: Redis does not have them, they must be written back.
  settled: number;
  // Hits admitted locally while the Redis call of the same request is still under way: if that
  // call consumed, Redis has them already; if not, they settle.
  pending: number;
  // Local time of the latest hit (bucket write-backs take only what has not refilled since).
  lastAtMs: number;
}

// A share of one journal entry that one request added.
export interface JournalRef {
  entry: Entry;
  hits: number;
}

export const MAX_JOURNAL = 100_000;

// What the local fallback admitted, to be written to Redis exactly once: kept until a write-back
// succeeds (a failed batch stays and is retried), never removed by a late Redis answer that
// consumed nothing. Windows are journaled per window (Redis time), buckets per key.
export class Journal {
  private readonly entries = new Map<string, Entry>();
  private flushing: Promise<void> | undefined;

  constructor(
    private readonly shared: Pick<SharedOps, 'absorb'>,
    private readonly clock: Clock,
    private readonly events: StoreEvents,
    private readonly maxEntries = MAX_JOURNAL,
    // Hits that reached Redis (`ageMs`: how long ago the last of them was admitted, locally).
    private readonly landed?: (entry: LimitSpec & { key: string; windowStartMs?: number }, hits: number, ageMs: number) => void,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  // Hits waiting to be written back (settled) and waiting for a late answer (pending).
  totals(): { settled: number; pending: number } {
    let settled = 0;
    let pending = 0;
    for (const e of this.entries.values()) {
      settled += e.settled;
      pending += e.pending;
    }
    return { settled, pending };
  }

  // Whether add() can take hits for all of these (no new entry beyond the bound).
  canTake(checks: readonly LimitCheck[], windowOf: (c: LimitCheck) => number | undefined): boolean {
    let fresh = 0;
    for (const c of checks) if (!this.entries.has(idOf(c, windowOf(c)))) fresh++;
    return this.entries.size + fresh <= this.maxEntries;
  }

  add(check: LimitCheck, windowStartMs: number | undefined, hits: number, pending: boolean): JournalRef {
    const id = idOf(check, windowStartMs);
    let e = this.entries.get(id);
    if (e === undefined) {
      e = { id, key: check.key, ...specOf(check), windowStartMs, settled: 0, pending: 0, lastAtMs: 0 };
      this.entries.set(id, e);
    }
    if (pending) e.pending += hits;
    else e.settled += hits;
    e.lastAtMs = this.clock.now();
    return { entry: e, hits };
  }

  // The late Redis answer did not consume these hits: they are Redis' to learn.
  settle(ref: JournalRef): void {
    ref.entry.pending -= ref.hits;
    ref.entry.settled += ref.hits;
  }

  // The late Redis answer consumed these hits too: Redis has them, nothing to write back.
  cancel(ref: JournalRef): void {
    ref.entry.pending -= ref.hits;
    this.dropIfEmpty(ref.entry);
  }

  // Writes every settled hit to Redis in batches; rejects on the first failed batch, keeping it
  // and everything after it for the next attempt. One flush at a time.
  flush(): Promise<void> {
    if (this.flushing === undefined) {
      this.flushing = this.flushAll().finally(() => (this.flushing = undefined));
    }
    return this.flushing;
  }

  private async flushAll(): Promise<void> {
    const ready = [...this.entries.values()].filter((e) => e.settled > 0);
    for (let i = 0; i < ready.length; i += MAX_BATCH) {
      const batch = ready.slice(i, i + MAX_BATCH);
      const now = this.clock.now();
      const taken = batch.map((e) => e.settled);
      const absorb: AbsorbEntry[] = batch.map((e, j) => ({
        key: e.key,
        ...specOf(e),
        hits: taken[j],
        windowStartMs: e.windowStartMs,
        ageMs: Math.max(0, now - e.lastAtMs),
      }));
      const hits = taken.reduce((a, b) => a + b, 0);
      let landed: (j: number) => boolean = () => true;
      let failure: Error | undefined;
      try {
        await this.shared.absorb(absorb);
      } catch (err) {
        failure = err as Error;
        const done = err instanceof PartialWrite ? err.landed : new Set<object>();
        landed = (j) => done.has(absorb[j]);
      }
      let written = 0;
      batch.forEach((e, j) => {
        if (!landed(j)) return;
        e.settled -= taken[j];
        written += taken[j];
        this.landed?.(e, taken[j], absorb[j].ageMs);
        this.dropIfEmpty(e);
      });
      if (written > 0) this.events.writeBack(batch.length, written);
      if (failure !== undefined) {
        this.events.writeBack(batch.length, hits - written, failure.message);
        throw failure;
      }
    }
  }

  private dropIfEmpty(e: Entry): void {
    if (e.settled <= 0 && e.pending <= 0 && this.entries.get(e.id) === e) this.entries.delete(e.id);
  }
}

function idOf(check: LimitCheck, windowStartMs: number | undefined): string {
  return windowStartMs === undefined ? check.key : `${check.key}#${windowStartMs}`;
}
