import { type AlgorithmImpl, type LimitSpec, type State, ttlWithin, type View, type Verdict, windowStart } from './types';

// Upstream's algorithm: windows aligned to multiples of their length since the epoch; a request
// is over the limit when count + hits > limit. State: [windowStartMs, count].

function countAt(state: State | undefined, start: number): number {
  return state !== undefined && state[0] === start ? state[1] : 0;
}

export const fixedWindow: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    const start = windowStart(nowMs, spec.periodMs);
    const count = countAt(state, start);
    return {
      remaining: Math.max(0, spec.limit - count),
      resetMs: start + spec.periodMs - nowMs,
      used: count,
    };
  },

  decide(state: State | undefined, spec: LimitSpec, hits: number, nowMs: number): Verdict {
    const start = windowStart(nowMs, spec.periodMs);
    const count = countAt(state, start);
    const allowed = count + hits <= spec.limit;
    let retryAfterMs = 0;
    if (!allowed) retryAfterMs = hits <= spec.limit ? start + spec.periodMs - nowMs : Infinity;
    return { allowed, retryAfterMs, next: [start, count + hits] };
  },

  ttlMs(state: State, spec: LimitSpec, nowMs: number): number {
    return ttlWithin(state[0] + spec.periodMs - nowMs);
  },

  refund(state: State, spec: LimitSpec, hits: number, decidedAtMs: number): State {
    return state[0] === windowStart(decidedAtMs, spec.periodMs) ? [state[0], Math.max(0, state[1] - hits)] : state;
  },
};
