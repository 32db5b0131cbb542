import type { LimitSpec } from '../algorithms';

// Operations only a shared (Redis) store has, beside the Store interface: leases, write-back of
// fallback hits, refunds, and the replica registry. The resilience stages use these; the memory
// store has none of them.

export interface LeaseGrant {
  granted: number;
  // Redis time (ms) when the units were taken: their window, and where give-backs go.
  takenAtMs: number;
  remaining: number;
  resetMs: number;
  // When nothing was granted: until one unit could be (Infinity: never).
  retryAfterMs: number;
  // The units are usable this long at most (they expire with what they were taken from: a
  // region's allowance, store/region/), ms.
  usableMs?: number;
}

// Hits a replica's local fallback admitted, to be added to the shared counter exactly once.
export interface AbsorbEntry extends LimitSpec {
  key: string;
  hits: number;
  // Windows: the window (Redis time, ms) the hits fell in; hits of a window no longer counted are
  // dropped. Buckets: undefined.
  windowStartMs?: number;
  // Buckets: how long ago (ms, measured locally) the last of the hits was admitted; only what has
  // not refilled since is taken from the bucket. Windows: ignored.
  ageMs: number;
}

// Hits consumed by a decision that was then denied (another slot group said no, or the caller was
// already answered otherwise), to be given back.
export interface RefundEntry extends LimitSpec {
  key: string;
  hits: number;
  // Redis time of the decision that consumed them (finds the window they went to).
  decidedAtMs: number;
}

// Hits a process put into a counter itself, put back after Redis lost its data (restoreOwn).
export interface OwnEntry extends LimitSpec {
  key: string;
  hits: number;
  // Windows: the window (Redis time, ms) the hits went to. Buckets: undefined.
  windowStartMs?: number;
  // Redis time of the latest of the hits (buckets: `hits` is what had not refilled by then).
  atMs: number;
}

// A view of a counter (what Redis said remained, and when): the counter is made at least that
// used (multi-region: a bucket a cut-off region starts deciding on its own starts empty).
export interface RestoreEntry extends LimitSpec {
  key: string;
  remaining: number;
  // Redis time when Redis said so.
  atMs: number;
}

export interface SharedOps {
  // Takes up to `units` of a limit's budget.
  lease(spec: LimitSpec & { key: string }, units: number): Promise<LeaseGrant>;
  // Gives back units a lease took at `takenAtMs` and did not use.
  giveBack(spec: LimitSpec & { key: string }, units: number, takenAtMs: number): Promise<void>;
  // Adds fallback hits to the shared counters; callers batch (see MAX_BATCH).
  absorb(entries: readonly AbsorbEntry[]): Promise<void>;
  // Gives back consumed hits; callers batch.
  refund(entries: readonly RefundEntry[]): Promise<void>;
  // Registers this replica as alive for `ttlMs`; returns the live replicas, Redis time and the
  // data epoch: a value stored in Redis (set to `epoch` when absent), which changes exactly when
  // Redis lost its data (a restart without persistence, a flush).
  heartbeat(replicaId: string, ttlMs: number, epoch: string): Promise<{ replicas: number; nowMs: number; epoch: string }>;
  // Makes each counter at least as used as the entry says it was (lua/restore.lua); callers batch.
  restore(entries: readonly RestoreEntry[]): Promise<void>;
  // Adds to each counter the hits process `owner` had put into it, once per Redis data lifetime:
  // a marker written with them (lost with them) makes a retry skip what already landed
  // (lua/restore_own.lua); callers batch.
  restoreOwn(entries: readonly OwnEntry[], owner: string): Promise<void>;
  leave(replicaId: string): Promise<void>;
  // One real decision (no writes) round-tripped: connection, scripts and Lua all work.
  probe(): Promise<{ nowMs: number }>;
}

// Most entries per absorb/refund script call: bounds the argument list and the time one script
// holds Redis.
export const MAX_BATCH = 256;

// A batched write (absorb) that failed part-way: `landed` holds the entries that did reach Redis,
// so that a retry sends only the rest and nothing is counted twice.
export class PartialWrite extends Error {
  constructor(
    message: string,
    readonly landed: ReadonlySet<object>,
  ) {
    super(message);
    this.name = 'PartialWrite';
  }
}
