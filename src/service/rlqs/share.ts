// How much of a bucket's shared budget one Envoy holds: pure arithmetic, no store, no protobuf.

// One Envoy's hold on one bucket, as the share computation sees it.
export interface Hold {
  // Units reserved in the shared counter for this Envoy and not yet reported used.
  credit: number;
  // Requests per second it saw for the bucket in its last report (admitted and denied).
  rate: number;
}

// Requests per second a report shows: Envoy's first report of a bucket has no elapsed time (it
// counts the request that created the bucket); it is taken as one second's worth.
export function reportRate(allowed: number, denied: number, elapsedS: number): number {
  return (allowed + denied) / Math.max(1, elapsedS);
}

// The units `self` should hold: its fair share of the bucket's pool (what the counter has left plus
// what every Envoy of the bucket holds), shared in proportion to demand, and no more than it can use
// before its assignment expires (`horizonS`), so that one quiet Envoy does not lock away what
// others, or RLS callers of the same counter, could use. At least 1 unit of demand is assumed, so a
// new Envoy is not starved by ones that reported first.
export function targetHold(self: Hold, others: readonly Hold[], remaining: number, horizonS: number): number {
  let pool = Math.max(0, remaining) + self.credit;
  let weights = self.rate;
  for (const o of others) {
    pool += o.credit;
    weights += o.rate;
  }
  const fair = weights > 0 ? (pool * self.rate) / weights : pool / (others.length + 1);
  const need = Math.max(1, Math.ceil(self.rate * horizonS));
  return Math.max(0, Math.min(Math.floor(fair), need));
}
