import type { LimitMode } from '../model';
import type { LimitSpec } from '../algorithms';

// One limit of a request, ready for a store: the counter key and everything needed to decide it.
export interface LimitCheck extends LimitSpec {
  key: string;
  hits: number;
  mode: LimitMode;
  // Units per lease when the rule asks for leases (`lease` in rate_limit); see stages/leases.ts.
  lease?: number;
}

export interface LimitOutcome {
  // This limit alone would admit the hits.
  allowed: boolean;
  // The hits were written to this limit's counter.
  consumed: boolean;
  // The counter after the decision (consumed or not): whole requests left, ms until empty.
  // undefined = not known (an answer made without asking the store for this limit: a cached
  // denial of another limit of the request, or the `allow` fallback). Never guessed.
  remaining: number | undefined;
  resetMs: number | undefined;
  // 0 when allowed; ms until the same hits would be allowed; Infinity when never.
  retryAfterMs: number;
  // Budget in use before this request, in requests (for near-limit statistics; 0 when unknown).
  usedBefore: number;
  // Answered from the over-limit cache, without asking the store (upstream's
  // over_limit_with_local_cache).
  fromLocalCache?: boolean;
}

export type DegradedPolicy = 'local' | 'allow';

// `O`: a store may say more of each limit (the Redis store, of a region's allowance: region/types.ts).
export interface Decision<O extends LimitOutcome = LimitOutcome> {
  // The request as a whole is admitted (see admits() in algorithms/policy.ts).
  admitted: boolean;
  outcomes: O[];
  // Set when the shared store could not decide and a fallback did ('local' limiter or 'allow').
  degraded?: { policy: DegradedPolicy; reason: string };
  // The store's clock when it decided (Redis TIME, or the memory store's own clock), ms; absent for
  // decisions made without the store (a fallback's, a lease's).
  storeTimeMs?: number;
}

export interface DecideOptions {
  // Upstream counting: every hit is written even when the answer is OVER_LIMIT.
  countDeniedHits: boolean;
  // The request's domain (fallback policies can differ per domain).
  domain?: string;
  // The caller's own deadline (ms since the epoch); the store must answer before it.
  deadlineAt?: number;
  // The call being decided: a store that queues work checks it before sending, and refuses a call
  // already cancelled with CancelledError (errors.ts) instead of asking Redis for it.
  caller?: { readonly cancelled: boolean };
  // The demand the caller stands for, per check, instead of the checks' hits: an RLQS bucket's
  // Envoys on this replica, whose requests Envoy decides itself (units per second, for `forMs`).
  // Multi-region sizes the region's allowances by it (region/demand.ts); other stores ignore it.
  demand?: { perS: number; forMs: number };
}

// A counter store. decide() evaluates all limits of one request atomically: no other decide()
// interleaves between reading the counters and writing them. The memory store gets that from the
// event loop, the Redis store from running one Lua script per request (per slot group).
//
// The resilience stages (stages/) implement Store too, each wrapping the next; compose.ts stacks
// them in one place.
export interface Store {
  readonly kind: string;
  decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision>;
  // The decision decide() would make now, without writing anything (the explain endpoint).
  peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision>;
  // Able to decide (health checks).
  ready(): boolean;
  // Why answers are degraded right now (a fallback decides), if they are.
  degraded?(): string | undefined;
  // Called whenever ready() may have changed (connections come and go).
  onReadyChange?(listener: () => void): void;
  // A new config was swapped in: forget what was derived from the old one (cached denials, leases).
  configChanged?(): void;
  // Gives back `units` of `check`'s counter that the decision at `takenAtMs` (its storeTimeMs)
  // consumed and nobody used (RLQS reservations). A window's units go back only while that window
  // is counted. Best effort, in the background (Redis: the refund queue); never fails the caller.
  giveBackUnused?(check: LimitCheck, units: number, takenAtMs: number): void;
  close(): Promise<void>;
}
