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
