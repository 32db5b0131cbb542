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

// Heap per entry, measured with 200,000 entries (node --expose-gc): about 110 bytes plus the key,
// 150 B for a 40-byte key, 173 B for 64, 229 B for 120. A size in bytes is turned into entries
// of a 64-byte key.
export const ENTRY_BYTES = 174;
// Upstream's cache library (freecache) never allocates less than 512 KiB, whatever it is asked
// for: LOCAL_CACHE_SIZE_IN_BYTES=1000 holds as many keys there as 512 KiB would.
export const MIN_CACHE_BYTES = 512 * 1024;

// Entries that fit in LOCAL_CACHE_SIZE_IN_BYTES (0: off, as upstream).
export function entriesForBytes(bytes: number): number {
  return bytes <= 0 ? 0 : Math.floor(Math.max(bytes, MIN_CACHE_BYTES) / ENTRY_BYTES);
}

// Lookups since start and entries held, for upstream's ratelimit.localcache.* series.
export interface OverLimitCacheStats {
  readonly hits: number;
  readonly misses: number;
  readonly size: number;
}

export class OverLimitCache implements OverLimitCacheStats {
  private readonly entries: BoundedMap<string, Entry>;
  hits = 0;
  misses = 0;

  constructor(private readonly maxEntries: number) {
    this.entries = new BoundedMap(maxEntries);
  }

  get size(): number {
    return this.entries.size;
  }

  // The time until which `key` denies `hits`, or undefined when it is not known to deny them.
  deniedUntil(key: string, hits: number, now: number): number | undefined {
    const until = this.lookup(key, hits, now);
    if (this.maxEntries > 0) {
      if (until === undefined) this.misses++;
      else this.hits++;
    }
    return until;
  }

  clear(): void {
    this.entries.clear();
  }

  forget(key: string): void {
    this.entries.delete(key);
  }

  remember(key: string, hits: number, untilMs: number): void {
    if (this.maxEntries <= 0 || hits <= 0) return;
    const existing = this.entries.get(key);
    if (existing !== undefined && existing.hits < hits && existing.untilMs >= untilMs) return;
    this.entries.set(key, { untilMs, hits });
  }

  private lookup(key: string, hits: number, now: number): number | undefined {
    const e = this.entries.get(key);
    if (e === undefined) return undefined;
    if (e.untilMs <= now) {
      this.entries.delete(key);
      return undefined;
    }
    return hits >= e.hits ? e.untilMs : undefined;
  }
}
