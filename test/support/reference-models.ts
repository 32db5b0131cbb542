import { MAX_TTL_MS } from '../../src/algorithms/types';
import type { Algorithm } from '../../src/model';

// Reference models of the four algorithms, written from their definitions (not from the code under
// test) in exact integer arithmetic, for the property tests.
//
// Time is counted in ticks of 1/4096 ms: every double between 2^40 and 2^41 ms (2004-2039 as epoch
// ms) is a whole number of ticks, so epoch-scale times with sub-ms parts are represented exactly,
// and every quantity below is a BigInt: no float rounding decides an answer here.
//
// Two allowances the implementations make on purpose, stated here instead of hidden in a tolerance
// of the test: (1) the continuous algorithms (sliding window, token bucket) compare with a slack of
// EPSILON = 1e-6 requests (src/algorithms/types.ts), so that float rounding can never turn
// an exactly admissible request into a denial (a third of a request per ms must not make "exactly
// 5 left" 4.9999999); a request that exceeds its definition by less than a millionth of a request
// is admitted. (2) No state outlives MAX_TTL_MS (10 years): a token bucket that never refills
// (requests_per_unit 0) is full again after that.
export const TICKS_PER_MS = 4096;
// EPSILON as a fraction: 1 / SLACK_DEN requests.
const SLACK_DEN = 1_000_000n;
const MAX_TTL_TICKS = BigInt(MAX_TTL_MS) * BigInt(TICKS_PER_MS);

export interface ModelSpec {
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst: number;
}

export interface Model {
  // Whether `hits` more are admissible at `ticks`; applies them when they are.
  take(ticks: bigint, hits: number): boolean;
}

const b = BigInt;

// Count per aligned window ≤ limit; admitted iff count + hits ≤ limit.
function fixedWindow(spec: ModelSpec): Model {
  const p = b(spec.periodMs * TICKS_PER_MS);
  let window = -1n;
  let count = 0n;
  return {
    take(t, hits) {
      const w = t / p;
      if (w !== window) [window, count] = [w, 0n];
      if (count + b(hits) > b(spec.limit)) return false;
      count += b(hits);
      return true;
    },
  };
}

// estimate = prev × (1 − elapsed/period) + curr; admitted iff estimate + hits ≤ limit.
// Multiplied through by the period: prev × (P − elapsed) + (curr + hits) × P ≤ limit × P.
function slidingWindow(spec: ModelSpec): Model {
  const p = b(spec.periodMs * TICKS_PER_MS);
  const counts = new Map<bigint, bigint>();
  return {
    take(t, hits) {
      const w = t / p;
      const prev = counts.get(w - 1n) ?? 0n;
      const curr = counts.get(w) ?? 0n;
      const elapsed = t - w * p;
      // Within the slack: scaled by SLACK_DEN, the slack of 1e-6 requests is p.
      if ((prev * (p - elapsed) + (curr + b(hits)) * p) * SLACK_DEN > b(spec.limit) * p * SLACK_DEN + p) return false;
      counts.set(w, curr + b(hits));
      return true;
    },
  };
}

// Continuous tokens capped at burst, refilled at limit/period; starts full; admitted iff tokens ≥
// hits. Tokens are kept multiplied by P (period in ticks): refill over e ticks is then e × limit.
function tokenBucket(spec: ModelSpec): Model {
  const p = b(spec.periodMs * TICKS_PER_MS);
  const cap = b(spec.burst) * p;
  let tokens = cap;
  let last: bigint | undefined;
  // When the state was last written (an admission): a rate-0 bucket's state lives MAX_TTL_MS.
  let written: bigint | undefined;
  return {
    take(t, hits) {
      if (last !== undefined) tokens = min(cap, tokens + (t - last) * b(spec.limit));
      if (written !== undefined && spec.limit === 0 && t - written >= MAX_TTL_TICKS) tokens = cap;
      last = t;
      if (tokens * SLACK_DEN + p < b(hits) * p * SLACK_DEN) return false;
      tokens = max(0n, tokens - b(hits) * p);
      written = t;
      return true;
    },
  };
}

// GCRA: emission interval T = period/limit, tolerance τ = burst × T; conforming iff
// max(TAT, now) + hits × T − now ≤ τ. Kept multiplied by limit: T × limit = P.
// limit 0: nothing but zero hits ever conforms.
function gcra(spec: ModelSpec): Model {
  const p = b(spec.periodMs * TICKS_PER_MS);
  const l = b(spec.limit);
  let tatL: bigint | undefined;
  return {
    take(t, hits) {
      if (spec.limit === 0) return hits === 0;
      const nowL = t * l;
      const next = max(tatL ?? nowL, nowL) + b(hits) * p;
      if (next - nowL > b(spec.burst) * p) return false;
      tatL = next;
      return true;
    },
  };
}

function min(x: bigint, y: bigint): bigint {
  return x < y ? x : y;
}

function max(x: bigint, y: bigint): bigint {
  return x > y ? x : y;
}

export function referenceModel(spec: ModelSpec): Model {
  switch (spec.algorithm) {
    case 'fixed_window':
      return fixedWindow(spec);
    case 'sliding_window':
      return slidingWindow(spec);
    case 'token_bucket':
      return tokenBucket(spec);
    case 'gcra':
      return gcra(spec);
  }
}
