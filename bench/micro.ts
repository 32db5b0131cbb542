import { ManualClock } from '../src/clock';
import type { Algorithm } from '../src/model';
import { MemoryStore } from '../src/store/memory';
import type { LimitCheck } from '../src/store/store';

// In-process cost of one decision, against a baseline of a bare Map increment measured in the
// same run, so the ratio survives a noisy machine better than the absolute figure.

const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];

function opsPerSecond(run: (i: number) => void, minMs = 400): number {
  for (let i = 0; i < 20_000; i++) run(i); // warm-up
  let n = 0;
  const start = performance.now();
  let elapsed = 0;
  while (elapsed < minMs) {
    for (let j = 0; j < 10_000; j++) run(n++);
    elapsed = performance.now() - start;
  }
  return (n / elapsed) * 1000;
}

function check(algorithm: Algorithm, key: string): LimitCheck {
  return { key, algorithm, limit: 1e9, periodMs: 60_000, burst: 1e9, hits: 1, mode: 'enforce' };
}

export function microBench(distinctKeys: number): { name: string; opsPerSec: number; ratio: number }[] {
  const keys = Array.from({ length: distinctKeys }, (_, i) => `sluice:{bench|tenant=t${i}}|fixed_window:60000`);
  const map = new Map<string, number>();
  const baseline = opsPerSecond((i) => {
    const k = keys[i % distinctKeys];
    map.set(k, (map.get(k) ?? 0) + 1);
  });
  const rows = [{ name: 'baseline: Map increment', opsPerSec: baseline, ratio: 1 }];
  for (const algorithm of ALGORITHMS) {
    const clock = new ManualClock(1_800_000_000_000);
    const store = new MemoryStore({ clock, maxKeys: distinctKeys * 2 });
    const checks = keys.map((k) => [check(algorithm, k)]);
    const ops = opsPerSecond((i) => {
      clock.advance(0.01);
      store.decideNow(checks[i % distinctKeys], { countDeniedHits: false });
    });
    void store.close();
    rows.push({ name: `decide ${algorithm}`, opsPerSec: ops, ratio: ops / baseline });
  }
  return rows;
}

// Heap bytes per counter held by the memory store (needs node --expose-gc).
export function memoryPerKey(count = 200_000): { algorithm: Algorithm; bytesPerKey: number }[] {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error('run with node --expose-gc');
  return ALGORITHMS.map((algorithm) => {
    gc();
    const before = process.memoryUsage().heapUsed;
    const store = new MemoryStore({ clock: new ManualClock(1_800_000_000_000), maxKeys: count * 2 });
    for (let i = 0; i < count; i++) {
      store.decideNow([check(algorithm, `sluice:{edge|tenant=cust_${i}}|route=/v1/payments/checkout|${algorithm}:60000`)], { countDeniedHits: false });
    }
    gc();
    const bytesPerKey = (process.memoryUsage().heapUsed - before) / count;
    void store.close();
    return { algorithm, bytesPerKey };
  });
}

export interface CapRow {
  name: string;
  opsPerSec: number;
  // The slowest single decision, ms (what a request queued behind it waits).
  worstMs: number;
  size: number;
  overflowBytes: number;
}

// New distinct keys per second into a memory store capped at `maxKeys`: below the cap, at the cap
// with expired counters to reclaim, and at the cap with every counter live (the approximate tier
// decides). Each phase inserts `maxKeys` / 5 new keys, one decision each.
export function capBench(maxKeys = 1_000_000): CapRow[] {
  const n = Math.floor(maxKeys / 5);
  const day = 86_400_000;
  const key = (tag: string, i: number) => `sluice:{edge|tenant=cust_${tag}${i}}|route=/v1/payments/checkout|fixed_window:${day}`;
  const dayCheck = (k: string): LimitCheck => ({ key: k, algorithm: 'fixed_window', limit: 100, periodMs: day, burst: 100, hits: 1, mode: 'enforce' });
  const secondCheck = (k: string): LimitCheck => ({ ...dayCheck(k), periodMs: 1000 });
  let worstMs = 0;
  const timed = (count: number, run: (i: number) => void): number => {
    worstMs = 0;
    const start = performance.now();
    let last = start;
    for (let i = 0; i < count; i++) {
      run(i);
      const t = performance.now();
      if (t - last > worstMs) worstMs = t - last;
      last = t;
    }
    return (count / (last - start)) * 1000;
  };
  const opts = { countDeniedHits: false };
  const rows: CapRow[] = [];
  const row = (name: string, store: MemoryStore, opsPerSec: number) =>
    rows.push({ name, opsPerSec, worstMs, size: store.size, overflowBytes: store.overflowBytes });

  const clock = new ManualClock(1_800_000_000_000);
  const store = new MemoryStore({ clock, maxKeys });
  // Fill to the cap: 4/5 daily counters, then 1/5 per-second ones (timed: below the cap).
  for (let i = 0; i < maxKeys - n; i++) store.decideNow([dayCheck(key('d', i))], opts);
  row(
    'below the cap (new keys)',
    store,
    timed(n, (i) => store.decideNow([secondCheck(key('s', i))], opts)),
  );
  clock.advance(1000);
  row(
    'at the cap, expired ones reclaimed',
    store,
    timed(n, (i) => store.decideNow([dayCheck(key('r', i))], opts)),
  );
  row(
    'at the cap, all live (approximate)',
    store,
    timed(n, (i) => store.decideNow([dayCheck(key('o', i))], opts)),
  );
  void store.close();
  return rows;
}
