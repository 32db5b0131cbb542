import type { Algorithm } from '../model';

// What an algorithm needs to know about a limit.
export interface LimitSpec {
  algorithm: Algorithm;
  // Requests per period.
  limit: number;
  // Window length (windows) or refill period (buckets), in ms.
  periodMs: number;
  // Token bucket capacity / GCRA burst, in requests.
  burst: number;
  // How a shared store keeps the counter: 'upstream' = envoyproxy/ratelimit's layout (a fixed
  // window's count alone, as an integer, under a key that names its window; see keys.ts). A store
  // may keep layouts of its own (the Redis store's: store/redis/spec.ts).
  layout?: 'upstream';
}

// What the algorithms read of a spec: the layout is the store's business.
export type AlgorithmSpec = Omit<LimitSpec, 'layout'>;

// The spec part of anything that carries one (a check, a journal entry): what a store needs to
// find and decide the counter, nothing else (its layout too, whichever the store's).
export function specOf<L extends string>(s: AlgorithmSpec & { layout?: L }): AlgorithmSpec & { layout?: L } {
  const { algorithm, limit, periodMs, burst, layout } = s;
  return layout === undefined ? { algorithm, limit, periodMs, burst } : { algorithm, limit, periodMs, burst, layout };
}

// Windows (fixed, sliding) count hits per window start; buckets (token bucket, GCRA) refill
// continuously, so what a store remembers of them decays with time instead of ending at a boundary.
export function isWindow(spec: Pick<LimitSpec, 'algorithm'>): boolean {
  return spec.algorithm === 'fixed_window' || spec.algorithm === 'sliding_window';
}

// Requests' worth of budget a limit holds when empty: a window's limit, a bucket's burst.
export function capacity(spec: Pick<LimitSpec, 'algorithm' | 'limit' | 'burst'>): number {
  return isWindow(spec) ? spec.limit : spec.burst;
}

// An algorithm's state is a short tuple of numbers so that the Redis scripts can store exactly the
// same thing in a hash (see lua/ once the Redis store lands) and both stores give the same answers.
export type State = readonly number[];

// The counter as seen at `now`, without changing it.
export interface View {
  // Whole requests that could still be admitted now.
  remaining: number;
  // Until the counter is back to its empty state (window end, bucket full), ms.
  resetMs: number;
  // Requests' worth of budget in use now (count, or capacity minus tokens); for near-limit stats.
  used: number;
}

export interface Verdict {
  allowed: boolean;
  // 0 when allowed; otherwise ms until the same hits would be allowed. Infinity when they never
  // can (more hits than the limit or the bucket holds).
  retryAfterMs: number;
  // The state with the hits applied, or undefined when the algorithm cannot apply them (a bucket
  // never goes into debt). For windows it is defined even when not allowed, which is what
  // COUNT_DENIED_HITS (upstream's counting) writes.
  next: State | undefined;
}

export interface AlgorithmImpl {
  view(state: State | undefined, spec: AlgorithmSpec, nowMs: number): View;
  decide(state: State | undefined, spec: AlgorithmSpec, hits: number, nowMs: number): Verdict;
  // How long `state` must be kept after `now`; after that it is equivalent to no state at all.
  ttlMs(state: State, spec: AlgorithmSpec, nowMs: number): number;
  // `state` with `hits` a decision at `decidedAtMs` consumed given back (lua/algorithms.lua's
  // refund, for the memory store): a window's hits only while their window is counted. (A region's
  // allowance, read back in store/region/pool.ts, is refunded by Redis only.)
  refund?(state: State, spec: AlgorithmSpec, hits: number, decidedAtMs: number, nowMs: number): State;
}

// Float slack for the continuous algorithms: 1/3-request emission intervals and the like must not
// turn "exactly 5 left" into 4.9999999 → 4. The Redis scripts use the same constant.
export const EPSILON = 1e-6;

export function wholeRequests(x: number): number {
  return x <= 0 ? 0 : Math.floor(x + EPSILON);
}

export function windowStart(nowMs: number, periodMs: number): number {
  return Math.floor(nowMs / periodMs) * periodMs;
}

// The longest TTL a counter is kept: 10 years. Longer ones (a huge period, a bucket that never
// refills) would be written as e.g. 1e+17, which Redis rejects as PX; lua/algorithms.lua clamps
// to the same value.
export const MAX_TTL_MS = 315_360_000_000;

export function ttlWithin(ms: number): number {
  return Math.min(MAX_TTL_MS, Math.max(1, Math.ceil(ms)));
}
