import type { AbsorbEntry, LeaseGrant } from '../shared';
import type { LimitOutcome } from '../store';

// What the Redis store says and takes only for multi-region: its scripts keep a region's
// allowances (the `pool` layout, lua/algorithms.lua), lease from the global budget against the
// regions' demand (lua/lease.lua) and credit allowances (lua/credit.lua). The core types
// (store.ts, shared.ts, algorithms/) do not carry these, nor the `pool` layout (redis/spec.ts);
// the Redis store returns and accepts them, and region/ reads and writes them.

// A limit decided against a region's allowance (`layout: 'pool'`).
export interface AllowanceOutcome extends LimitOutcome {
  // Units the region's allowance for this limit holds after the decision; undefined when the
  // region holds none (never leased, or expired).
  held?: number;
  // ... and its last refill brought all it asked for (the global budget is not short).
  ample?: boolean;
  // ... and ms until units of the next window, leased ahead, begin (none: undefined).
  pendingMs?: number;
}

// A replica's lease of an allowance: its last refill brought all it asked for.
export interface AllowanceGrant extends LeaseGrant {
  ample?: boolean;
}

// Hits a region admitted beyond its allowance (`debt`). Buckets take all of them, even below
// empty (by one burst at most), so the overshoot is paid back (lua/algorithms.lua).
export interface DebtEntry extends AbsorbEntry {
  debt?: boolean;
}

// A region's demand for a counter, sent with its leases from the global budget (multi-region).
export interface RegionDemand {
  // The hash of the regions' demand for the counter (same hash slot as the counter).
  key: string;
  region: string;
  // Units per second the region spends of this counter.
  rate: number;
  // A region not heard of for this long no longer counts.
  staleMs: number;
  // A fixed window's start (global Redis ms): units of that window only; the window after the
  // current one is leased ahead of its start (lua/lease.lua ARGV[10]).
  windowStartMs?: number;
}

// Units leased from the global budget, to put into a regional allowance (lua/credit.lua).
export interface AllowanceCredit {
  key: string;
  lockKey: string;
  units: number;
  ttlMs: number;
  globalRemaining: number;
  globalResetMs: number;
  globalRetryMs: number;
  takenAtMs: number;
  // Window algorithms: the window length (units of another window are not kept).
  windowMs?: number;
  holdMs: number;
  // Units of a window that has not begun (leased ahead): usable from this many ms on.
  startsInMs?: number;
}
