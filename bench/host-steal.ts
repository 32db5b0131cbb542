import fs from 'node:fs';

// CPU time the hypervisor gave to other guests while this machine's processes waited ("steal" in
// /proc/stat), watched beside a count (Envoy's ratelimit.error) in 100 ms intervals, so that a row
// of the "Envoy in front" bench can say which of its missed decisions fell while the machine
// itself was not running. On the shared 2-core machines the bench runs on, a burst of 90 ms of
// steal in one interval made Envoy miss 15 decisions at once, and no other interval of that run
// missed any (docs/performance.md).

// /proc/stat counts in USER_HZ ticks, 100 a second on Linux.
const TICK_MS = 10;
export const INTERVAL_MS = 100;
// A decision misses Envoy's 20 ms timeout when the machine stops for about that long: errors in an
// interval count as during steal when it and the two before it lost at least this much.
export const STEAL_STALL_MS = 20;
const LOOKBACK = 2;

export interface Interval {
  stealMs: number;
  errors: number;
}

// The steal of /proc/stat's first (all-CPU) line, ms; undefined when there is none (not Linux, or
// a kernel without the column).
export function stealMsOf(procStat: string): number | undefined {
  const first = procStat.split('\n', 1)[0].trim().split(/\s+/);
  if (first[0] !== 'cpu' || first.length < 9) return undefined;
  const ticks = Number(first[8]);
  return Number.isFinite(ticks) ? ticks * TICK_MS : undefined;
}

export interface StealSummary {
  // Steal over the whole watch, ms of CPU (all cores together).
  stealMs: number;
  // Errors in intervals that, with the two before them, lost STEAL_STALL_MS or more.
  errorsInSteal: number;
}

export function summarise(intervals: readonly Interval[]): StealSummary {
  let stealMs = 0;
  let errorsInSteal = 0;
  for (let i = 0; i < intervals.length; i++) {
    stealMs += intervals[i].stealMs;
    if (intervals[i].errors === 0) continue;
    let lost = 0;
    for (let j = Math.max(0, i - LOOKBACK); j <= i; j++) lost += intervals[j].stealMs;
    if (lost >= STEAL_STALL_MS) errorsInSteal += intervals[i].errors;
  }
  return { stealMs, errorsInSteal };
}

function readStealMs(): number | undefined {
  try {
    return stealMsOf(fs.readFileSync('/proc/stat', 'utf8'));
  } catch {
    return undefined;
  }
}

// Samples steal and `count()` every INTERVAL_MS from now until stop(); stop() resolves undefined
// where the machine reports no steal.
export async function watchSteal(count: () => Promise<number>): Promise<{ stop(): Promise<StealSummary | undefined> }> {
  const first = readStealMs();
  if (first === undefined) return { stop: async () => undefined };
  let steal = first;
  let errors = await count();
  const intervals: Interval[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      await new Promise((r) => setTimeout(r, INTERVAL_MS));
      const s: number = readStealMs() ?? steal;
      const e = await count().catch(() => errors);
      intervals.push({ stealMs: s - steal, errors: e - errors });
      [steal, errors] = [s, e];
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return summarise(intervals);
    },
  };
}
