import { type AlgorithmImpl, EPSILON, type LimitSpec, type State, ttlWithin, type View, type Verdict, wholeRequests } from './types';

// Generic Cell Rate Algorithm. Emission interval T = period / limit; tolerance τ = burst × T, so up
// to `burst` requests may arrive at once and the sustained rate is limit per period. A request of
// `hits` is conforming when max(TAT, now) + hits × T − now ≤ τ (TAT: theoretical arrival time).
//
// State: [debtMs, atMs], the TAT as an offset from the time of the last write: TAT = at + debt.
// Storing the TAT itself (an epoch-ms double, one step = 2.4e-4 ms) rounds every hits × T added to
// it, and a burst's worth of roundings lost its last request for most limits; the offset is small,
// so the arithmetic stays exact to far below EPSILON, and now − at is exact. A one-number state
// [tatMs] (older writers, the fallback's seed, refund/absorb/restore in lua/) is still read.

function interval(spec: LimitSpec): number {
  return spec.periodMs / spec.limit;
}

// max(TAT, now) − now.
export function gcraDebt(state: State | undefined, nowMs: number): number {
  if (state === undefined) return 0;
  if (state.length < 2) return Math.max(0, state[0] - nowMs);
  return Math.max(0, state[0] - Math.max(0, nowMs - state[1]));
}

export const gcra: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    if (spec.limit <= 0) return { remaining: 0, resetMs: spec.periodMs, used: 0 };
    const t = interval(spec);
    const debt = gcraDebt(state, nowMs);
    return {
      remaining: wholeRequests((spec.burst * t - debt) / t),
      resetMs: Math.ceil(debt - EPSILON),
      used: debt / t,
    };
  },

  decide(state: State | undefined, spec: LimitSpec, hits: number, nowMs: number): Verdict {
    if (spec.limit <= 0) {
      return { allowed: hits === 0, retryAfterMs: hits === 0 ? 0 : Infinity, next: state ?? [0, nowMs] };
    }
    const t = interval(spec);
    const tolerance = spec.burst * t;
    const debt = gcraDebt(state, nowMs) + hits * t;
    if (debt <= tolerance + EPSILON) {
      return { allowed: true, retryAfterMs: 0, next: [debt, nowMs] };
    }
    const retryAfterMs = hits > spec.burst ? Infinity : Math.ceil(debt - tolerance - EPSILON);
    return { allowed: false, retryAfterMs, next: undefined };
  },

  ttlMs(state: State, _spec: LimitSpec, nowMs: number): number {
    return ttlWithin(gcraDebt(state, nowMs));
  },

  refund(state: State, spec: LimitSpec, hits: number, _decidedAtMs: number, nowMs: number): State {
    if (spec.limit <= 0) return state;
    return [Math.max(0, gcraDebt(state, nowMs) - hits * interval(spec)), nowMs];
  },
};
