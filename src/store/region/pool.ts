import type { AlgorithmImpl, LimitSpec, State, Verdict, View } from '../../algorithms';
import { ttlWithin } from '../../algorithms/types';

// A regional allowance as the Redis store reads it back (lua/algorithms.lua `pool`, operation for
// operation): units a region leased from the global budget. State [units, expires, global
// remaining, reset at, retry at, taken at], times in the regional Redis' ms except `taken at`; a
// fixed window's next window, leased ahead of its start, follows as [units, from, expires, taken
// at], and is the allowance from `from` on (poolNow).
//
// What an answer reports as remaining is what the region holds: what it can admit without asking
// the global Redis. (The global budget may hold more, for any region; counting that here would let
// a fallback, which divides what was last seen remaining, admit units another region spends.)

// The allowance at `nowMs`, as stored (lua/algorithms.lua pool.decode).
export function poolNow(state: State, nowMs: number): State {
  if (state.length > 6 && nowMs >= state[7]) return [state[6], state[8], 0, state[8], 0, state[9]];
  return state;
}

export function poolUnits(state: State | undefined, nowMs: number): number {
  if (state === undefined) return 0;
  const s = poolNow(state, nowMs);
  return nowMs >= s[1] ? 0 : s[0];
}

function withUnits(state: State, units: number): State {
  const next = state.slice();
  next[0] = units;
  return next;
}

// Ms until the next window's units, leased ahead, begin (undefined: none pending).
export function poolPendingMs(state: State, nowMs: number): number | undefined {
  return state.length > 6 && nowMs < state[7] ? state[7] - nowMs : undefined;
}

// Did the allowance's last refill bring all it asked for (credit.lua: retry-at 0)?
export function poolAmple(state: State, nowMs: number): boolean {
  return poolNow(state, nowMs)[4] === 0;
}

export const poolImpl: AlgorithmImpl = {
  view(stored: State | undefined, spec: LimitSpec, nowMs: number): View {
    const state = stored === undefined ? undefined : poolNow(stored, nowMs);
    const remaining = Math.max(0, poolUnits(state, nowMs));
    return { remaining, resetMs: state === undefined ? 0 : Math.max(0, state[3] - nowMs), used: Math.max(0, spec.limit - remaining) };
  },

  decide(stored: State | undefined, _spec: LimitSpec, hits: number, nowMs: number): Verdict {
    const state = stored === undefined ? undefined : poolNow(stored, nowMs);
    const units = poolUnits(state, nowMs);
    if (state !== undefined && units >= hits) return { allowed: true, retryAfterMs: 0, next: withUnits(state, units - hits) };
    // No allowance yet: a lease may land any moment (the shortest retry there is).
    if (state === undefined) return { allowed: hits <= 0, retryAfterMs: hits <= 0 ? 0 : 1, next: undefined };
    const retryAt = state.length > 6 ? Math.min(state[4], state[7]) : state[4];
    return { allowed: false, retryAfterMs: Math.max(1, retryAt - nowMs), next: undefined };
  },

  ttlMs(stored: State, _spec: LimitSpec, nowMs: number): number {
    const state = poolNow(stored, nowMs);
    return ttlWithin(Math.max(state[1], state.length > 6 ? state[8] : 0) - nowMs);
  },
};
