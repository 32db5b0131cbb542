// Keys the store reported over the limit, remembered until they can pass again, so that a flood
// against an exhausted key is answered locally and costs Redis nothing (upstream's local cache,
// LOCAL_CACHE_SIZE_IN_BYTES). Bounded: beyond maxEntries the least recently written entries go.
//
// An entry is valid for requests of at least `hits` hits: a smaller request might fit earlier.

import { BoundedMap } from './bounded-map';

interface Entry {
  untilMs: number;
  hits: number;
}

export class OverLimitCache {
  private readonly entries: BoundedMap<string, Entry>;

  constructor(private readonly maxEntries: number) {
    this.entries = new BoundedMap(maxEntries);
  }

  get size(): number {
    return this.entries.size;
  }

  // The time until which `key` denies `hits`, or undefined when it is not known to deny them.
  deniedUntil(key: string, hits: number, now: number): number | undefined {
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (e.untilMs <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return hits >= e.hits ? e.untilMs : undefined;
  }

  clear(): void {
    this.entries.clear();
  }

  remember(key: string, hits: number, untilMs: number): void {
    if (this.maxEntries <= 0 || hits <= 0) return;
    const existing = this.entries.get(key);
    if (existing !== undefined && existing.hits < hits && existing.untilMs >= untilMs) return;
    this.entries.set(key, { untilMs, hits });
  }
}
