import { type AlgorithmImpl, EPSILON, type LimitSpec, type State, ttlWithin, type View, type Verdict, wholeRequests, windowStart } from './types';

// Two-window weighted counter (Cloudflare's): estimate = previous × (share of the current window
// still to run) + current. O(1) memory, no 2× burst at window edges.
// State: [currentWindowStartMs, currentCount, previousCount].

interface Counts {
  start: number;
  curr: number;
  prev: number;
}

function countsAt(state: State | undefined, nowMs: number, periodMs: number): Counts {
  const start = windowStart(nowMs, periodMs);
  if (state === undefined) return { start, curr: 0, prev: 0 };
  if (state[0] === start) return { start, curr: state[1], prev: state[2] };
  if (state[0] === start - periodMs) return { start, curr: 0, prev: state[1] };
  return { start, curr: 0, prev: 0 };
}

function estimate(c: Counts, nowMs: number, periodMs: number): number {
  return c.prev * (1 - (nowMs - c.start) / periodMs) + c.curr;
}

// Earliest time at which `hits` more fit: the previous window's weight decays linearly, so solve
// prev × (1 − f) + curr + hits ≤ limit for f in this window, else in the next one (where the
// current count becomes the decaying one).
function retryAfter(c: Counts, spec: LimitSpec, hits: number, nowMs: number): number {
  const p = spec.periodMs;
  if (hits > spec.limit) return Infinity;
  if (c.curr + hits <= spec.limit) {
    const f = 1 - (spec.limit - c.curr - hits) / c.prev;
    return Math.max(0, Math.ceil(c.start + p * f - nowMs));
  }
  const f = c.curr === 0 ? 0 : Math.max(0, 1 - (spec.limit - hits) / c.curr);
  return Math.max(0, Math.ceil(c.start + p + p * f - nowMs));
}

export const slidingWindow: AlgorithmImpl = {
  view(state: State | undefined, spec: LimitSpec, nowMs: number): View {
    const c = countsAt(state, nowMs, spec.periodMs);
    const used = estimate(c, nowMs, spec.periodMs);
    let resetMs = 0;
    if (c.curr > 0) resetMs = c.start + 2 * spec.periodMs - nowMs;
    else if (c.prev > 0) resetMs = c.start + spec.periodMs - nowMs;
    return { remaining: wholeRequests(spec.limit - used), resetMs, used };
  },

  decide(state: State | undefined, spec: LimitSpec, hits: number, nowMs: number): Verdict {
    const c = countsAt(state, nowMs, spec.periodMs);
    const allowed = estimate(c, nowMs, spec.periodMs) + hits <= spec.limit + EPSILON;
    const retryAfterMs = allowed ? 0 : retryAfter(c, spec, hits, nowMs);
    return { allowed, retryAfterMs, next: [c.start, c.curr + hits, c.prev] };
  },

  ttlMs(state: State, spec: LimitSpec, nowMs: number): number {
    return ttlWithin(state[0] + 2 * spec.periodMs - nowMs);
  },

  // The hits' window is the current one, or the previous one (still weighing on the estimate).
  refund(state: State, spec: LimitSpec, hits: number, decidedAtMs: number): State {
    const at = windowStart(decidedAtMs, spec.periodMs);
    if (state[0] === at) return [state[0], Math.max(0, state[1] - hits), state[2]];
    if (state[0] === at + spec.periodMs) return [state[0], state[1], Math.max(0, state[2] - hits)];
    return state;
  },
};
