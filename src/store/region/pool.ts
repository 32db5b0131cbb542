import type { AlgorithmImpl, LimitSpec, State, Verdict, View } from '../../limiter/algorithms';
import { ttlWithin } from '../../limiter/algorithms/types';

// A regional allowance as the Redis store reads it back (lua/algorithms.lua `pool`, operation for
// operation): units a region leased from the global budget. State [units, expires, global
// remaining, reset at, retry at, taken at], times in the regional Redis' ms except `taken at`.
//
// What an answer reports as remaining is what the region holds: what it can admit without asking
// the global Redis. (The global budget may hold more, for any region; counting that here would let
// a fallback, which divides what was last seen remaining, admit units another region spends.)

export function poolUnits(state: State | undefined, nowMs: number): number {
  if (state === undefined || nowMs >= state[1]) return 0;
  return state[0];
}

function withUnits(state: State, units: number): State {
  return [units, state[1], state[2], state[3], state[4], state[5]];
}

// Did the allowance's last refill bring all it asked for (credit.lua: retry-at 0)?
export function poolAmple(state: State): boolean {
  return state[4] === 0;
}

export const poolImpl: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    const remaining = Math.max(0, poolUnits(state, nowMs));
    return { remaining, resetMs: state === undefined ? 0 : Math.max(0, state[3] - nowMs), used: Math.max(0, spec.limit - remaining) };
  },

  decide(state: State | undefined, _spec: LimitSpec, hits: number, nowMs: number): Verdict {
    const units = poolUnits(state, nowMs);
    if (state !== undefined && units >= hits) return { allowed: true, retryAfterMs: 0, next: withUnits(state, units - hits) };
    // No allowance yet: a lease may land any moment (the shortest retry there is).
    if (state === undefined) return { allowed: hits <= 0, retryAfterMs: hits <= 0 ? 0 : 1, next: undefined };
    return { allowed: false, retryAfterMs: Math.max(1, state[4] - nowMs), next: undefined };
  },

  ttlMs(state: State, _spec: LimitSpec, nowMs: number): number {
    return ttlWithin(state[1] - nowMs);
  },
};
