import {
  type AlgorithmImpl,
  EPSILON,
  type LimitSpec,
  type State,
  type View,
  type Verdict,
  wholeRequests,
} from './types';

// Generic Cell Rate Algorithm: one timestamp per key, the theoretical arrival time (TAT).
// Emission interval T = period / limit; tolerance τ = burst × T, so up to `burst` requests may
// arrive at once and the sustained rate is limit per period. A request of `hits` is conforming
// when max(TAT, now) + hits × T − now ≤ τ. State: [tatMs].

function interval(spec: LimitSpec): number {
  return spec.periodMs / spec.limit;
}

function tatAt(state: State | undefined, nowMs: number): number {
  return state === undefined ? nowMs : Math.max(state[0], nowMs);
}

export const gcra: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    if (spec.limit <= 0) return { remaining: 0, resetMs: spec.periodMs, used: 0 };
    const t = interval(spec);
    const debt = tatAt(state, nowMs) - nowMs;
    return {
      remaining: wholeRequests((spec.burst * t - debt) / t),
      resetMs: Math.ceil(debt - EPSILON),
      used: debt / t,
    };
  },

  decide(state: State | undefined, spec: LimitSpec, hits: number, nowMs: number): Verdict {
    if (spec.limit <= 0) {
      return { allowed: hits === 0, retryAfterMs: hits === 0 ? 0 : Infinity, next: state ?? [nowMs] };
    }
    const t = interval(spec);
    const tolerance = spec.burst * t;
    const newTat = tatAt(state, nowMs) + hits * t;
    if (newTat - nowMs <= tolerance + EPSILON) {
      return { allowed: true, retryAfterMs: 0, next: [newTat] };
    }
    const retryAfterMs = hits > spec.burst ? Infinity : Math.ceil(newTat - tolerance - nowMs - EPSILON);
    return { allowed: false, retryAfterMs, next: undefined };
  },

  ttlMs(state: State, _spec: LimitSpec, nowMs: number): number {
    return Math.max(1, Math.ceil(state[0] - nowMs));
  },
};
