import { type AlgorithmImpl, EPSILON, type LimitSpec, type State, ttlWithin, type View, type Verdict, wholeRequests } from './types';

// Capacity `burst`, refilled continuously at limit/period; a request is allowed when the bucket
// holds at least its hits. Refill is computed lazily from the elapsed time (clamped at zero, so a
// clock step backwards never removes tokens). State: [tokens, lastUpdateMs].

function rate(spec: LimitSpec): number {
  return spec.limit / spec.periodMs;
}

function tokensAt(state: State | undefined, spec: LimitSpec, nowMs: number): number {
  if (state === undefined) return spec.burst;
  const elapsed = Math.max(0, nowMs - state[1]);
  return Math.min(spec.burst, state[0] + elapsed * rate(spec));
}

// Time for the bucket to gain `missing` tokens; Infinity without refill.
function refillMs(missing: number, spec: LimitSpec): number {
  if (missing <= EPSILON) return 0;
  const r = rate(spec);
  return r > 0 ? Math.ceil((missing - EPSILON) / r) : Infinity;
}

export const tokenBucket: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    const tokens = tokensAt(state, spec, nowMs);
    const full = refillMs(spec.burst - tokens, spec);
    return {
      remaining: wholeRequests(tokens),
      resetMs: Number.isFinite(full) ? full : spec.periodMs,
      used: spec.burst - tokens,
    };
  },

  decide(state: State | undefined, spec: LimitSpec, hits: number, nowMs: number): Verdict {
    const tokens = tokensAt(state, spec, nowMs);
    if (tokens + EPSILON >= hits) {
      return { allowed: true, retryAfterMs: 0, next: [Math.max(0, tokens - hits), nowMs] };
    }
    const retryAfterMs = hits > spec.burst ? Infinity : refillMs(hits - tokens, spec);
    return { allowed: false, retryAfterMs, next: undefined };
  },

  // Until the bucket is full again; a bucket that never refills (limit 0) is kept as long as any
  // counter (MAX_TTL_MS): expiring it would hand out a fresh burst.
  ttlMs(state: State, spec: LimitSpec, nowMs: number): number {
    return ttlWithin(refillMs(spec.burst - tokensAt(state, spec, nowMs), spec));
  },

  refund(state: State, spec: LimitSpec, hits: number, _decidedAtMs: number, nowMs: number): State {
    return [Math.min(spec.burst, tokensAt(state, spec, nowMs) + hits), nowMs];
  },
};
