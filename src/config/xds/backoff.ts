export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
  // With jitter, each wait is spread by up to this share either way (0..1).
  randomFactor: number;
  jitter: boolean;
}

// The wait before reconnect attempt `attempt` (0 = the first after a loss): doubling from the
// initial interval up to the max, spread so that replicas that lost the same control plane do not
// all come back in the same instant.
export function backoffDelay(opts: BackoffOptions, attempt: number, random: () => number = Math.random): number {
  const base = Math.min(opts.maxMs, opts.initialMs * 2 ** Math.min(attempt, 30));
  if (!opts.jitter || opts.randomFactor === 0) return base;
  const spread = base * opts.randomFactor * (2 * random() - 1);
  return Math.max(1, Math.min(opts.maxMs, Math.round(base + spread)));
}
