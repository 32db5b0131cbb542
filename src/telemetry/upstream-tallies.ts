// Upstream-named tallies as plain data (counters by statsd name, the gRPC response-time histogram),
// which the USE_PROMETHEUS listener maps and the workers of WORKERS > 1 send to the primary.

export interface Observation {
  // Upper bounds and cumulative counts, sum and count.
  buckets: [number, number][];
  sum: number;
  count: number;
}

// What the listener's upstream-named series are computed from: upstream's statsd names with their
// totals, and the gRPC response-time histogram. Plain data, so that under WORKERS > 1 every worker
// sends its own to the primary, which sums them with its own (config loads) for a scrape.
export interface UpstreamTallies {
  counters: [string, number][];
  responseTime: Observation;
}

// Several processes' tallies as one: counters by name, histograms bucket by bucket (every process
// has the same buckets).
export function sumTallies(all: readonly UpstreamTallies[]): UpstreamTallies {
  const counters = new Map<string, number>();
  const buckets = new Map<number, number>();
  const responseTime: Observation = { buckets: [], sum: 0, count: 0 };
  for (const t of all) {
    for (const [name, n] of t.counters) counters.set(name, (counters.get(name) ?? 0) + n);
    for (const [le, n] of t.responseTime.buckets) buckets.set(le, (buckets.get(le) ?? 0) + n);
    responseTime.sum += t.responseTime.sum;
    responseTime.count += t.responseTime.count;
  }
  responseTime.buckets = [...buckets].sort((a, b) => a[0] - b[0]);
  return { counters: [...counters], responseTime };
}
