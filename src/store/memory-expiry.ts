// A binary min-heap of counters by the expiry they had when queued. A counter's expiry only moves
// later while it lives (a window ends later, a bucket refills later), so a write never re-sorts the
// heap: when an entry comes due and its counter has since been extended, the owner queues it again
// at its current expiry. Entries of counters that were deleted or replaced stay until they come
// due ("lazy deletion"); the owner recognises and drops them. Every pop is paid for by an earlier
// push or extending write: amortised O(log n) per write, never a scan.
//
// The times live in a Float64Array beside the items (8 bytes each, no boxed number per counter,
// and the comparisons read contiguous memory).

export class ExpiryHeap<T> {
  private items: T[] = [];
  private times = new Float64Array(1024);

  get length(): number {
    return this.items.length;
  }

  push(item: T, at: number): void {
    const items = this.items;
    let i = items.length;
    if (i === this.times.length) {
      const grown = new Float64Array(this.times.length * 2);
      grown.set(this.times);
      this.times = grown;
    }
    const times = this.times;
    items.push(item);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (times[parent] <= at) break;
      items[i] = items[parent];
      times[i] = times[parent];
      i = parent;
    }
    items[i] = item;
    times[i] = at;
  }

  // The entry with the earliest time when that time is ≤ now, removed; undefined otherwise.
  popDue(now: number): T | undefined {
    const items = this.items;
    if (items.length === 0 || this.times[0] > now) return undefined;
    const top = items[0];
    const lastAt = this.times[items.length - 1];
    const last = items.pop() as T;
    if (items.length > 0) this.siftDown(last, lastAt);
    return top;
  }

  clear(): void {
    this.items = [];
    this.times = new Float64Array(1024);
  }

  private siftDown(item: T, at: number): void {
    const { items, times } = this;
    const n = items.length;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && times[child + 1] < times[child]) child++;
      if (times[child] >= at) break;
      items[i] = items[child];
      times[i] = times[child];
      i = child;
    }
    items[i] = item;
    times[i] = at;
  }
}
