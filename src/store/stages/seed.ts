import type { State } from '../../algorithms';
import { windowStart } from '../../algorithms/types';
import type { LimitCheck } from '../store';
import type { Known } from './key-memory';

// The state a replica's local fallback starts a counter from, given what Redis last said remains
// (`known`, at Redis time) and this replica's share: the local limiter then admits at most
// floor(remaining × share) in the window Redis last saw, and its share of the limit in a later
// one. Buckets start with their share of the tokens at that time and refill at their share of the
// rate. `local` is the check as the fallback enforces it (limit and burst already scaled).
// undefined: start empty (a key never seen, or a window that is over).
export function seedState(local: LimitCheck, known: Known | undefined, share: number, nowMs: number): State | undefined {
  if (known === undefined) return undefined;
  const mine = Math.floor(known.remaining * share);
  const { periodMs } = local;
  switch (local.algorithm) {
    case 'fixed_window': {
      const start = windowStart(nowMs, periodMs);
      if (windowStart(known.atMs, periodMs) !== start) return undefined;
      return [start, Math.max(0, local.limit - mine)];
    }
    case 'sliding_window': {
      const start = windowStart(nowMs, periodMs);
      const seen = windowStart(known.atMs, periodMs);
      const used = Math.max(0, local.limit - mine);
      if (seen === start) return [start, used, 0];
      if (seen === start - periodMs) return [start, 0, used];
      return undefined;
    }
    case 'token_bucket':
      return [Math.min(local.burst, mine), Math.min(known.atMs, nowMs)];
    case 'gcra': {
      if (local.limit <= 0) return undefined;
      const emission = periodMs / local.limit;
      return [Math.min(known.atMs, nowMs) + Math.max(0, local.burst - mine) * emission];
    }
  }
}
