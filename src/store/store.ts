import type { LimitMode } from '../model';
import type { LimitSpec } from '../limiter/algorithms';

// One limit of a request, ready for a store: the counter key and everything needed to decide it.
export interface LimitCheck extends LimitSpec {
  key: string;
  hits: number;
  mode: LimitMode;
  // Units per lease when the rule asks for leases (`lease` in rate_limit); see store/leases.ts.
  lease?: number;
}

export interface LimitOutcome {
  // This limit alone would admit the hits.
  allowed: boolean;
  // The hits were written to this limit's counter.
  consumed: boolean;
  // The counter after the decision (consumed or not): whole requests left, ms until empty.
  remaining: number;
  resetMs: number;
  // 0 when allowed; ms until the same hits would be allowed; Infinity when never.
  retryAfterMs: number;
  // Budget in use before this request, in requests (for near-limit statistics).
  usedBefore: number;
}

export interface Decision {
  // The request as a whole is admitted (see admits() in limiter/policy.ts).
  admitted: boolean;
  outcomes: LimitOutcome[];
  // Set when the shared store could not decide and a fallback did ('local' limiter or 'allow').
  degraded?: { policy: 'local' | 'allow'; reason: string };
}

export interface DecideOptions {
  // Upstream counting: every hit is written even when the answer is OVER_LIMIT.
  countDeniedHits: boolean;
  // The request's domain (fallback policies can differ per domain).
  domain?: string;
  // The caller's own deadline (ms since the epoch); the store must answer before it.
  deadlineAt?: number;
}

// A counter store. decide() evaluates all limits of one request atomically: no other decide()
// interleaves between reading the counters and writing them. The memory store gets that from the
// event loop, the Redis store from running one Lua script per request.
export interface Store {
  readonly kind: string;
  decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision>;
  // The decision decide() would make now, without writing anything (the explain endpoint).
  peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision>;
  // Reachable and able to decide (health checks).
  ready(): boolean;
  // Why answers are degraded right now (a fallback decides), if they are.
  degraded?(): string | undefined;
  // Called whenever ready() may have changed (connections come and go).
  onReadyChange?(listener: () => void): void;
  close(): Promise<void>;
}
