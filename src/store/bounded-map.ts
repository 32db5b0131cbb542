// A map that holds at most `max` entries and forgets the least recently written first, in O(1)
// per operation: two generations, written into the young one; when it holds half the bound it
// becomes the old one and the previous old one is dropped whole.
//
// (A Map trimmed by deleting `keys().next()` looks O(1) but is not: V8 leaves deleted entries as
// holes at the front of its table, and every `keys().next()` walks over all of them, tens of µs per
// call with 100,000 keys.)
export class BoundedMap<K, V> {
  private young = new Map<K, V>();
  private old = new Map<K, V>();

  constructor(private readonly max: number) {}

  get size(): number {
    let n = this.young.size;
    for (const k of this.old.keys()) if (!this.young.has(k)) n++;
    return n;
  }

  get(key: K): V | undefined {
    const v = this.young.get(key);
    return v !== undefined ? v : this.old.get(key);
  }

  set(key: K, value: V): void {
    if (this.max <= 0) return;
    this.young.set(key, value);
    if (this.young.size >= Math.max(1, this.max / 2)) {
      this.old = this.young;
      this.young = new Map();
    }
  }

  delete(key: K): void {
    this.young.delete(key);
    this.old.delete(key);
  }

  clear(): void {
    this.young.clear();
    this.old.clear();
  }

  // Every live entry once (the young value where both generations hold the key).
  *values(): IterableIterator<V> {
    yield* this.young.values();
    for (const [k, v] of this.old) if (!this.young.has(k)) yield v;
  }
}
