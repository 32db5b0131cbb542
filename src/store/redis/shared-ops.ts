import calculateSlot from 'cluster-key-slot';
import type { Clock } from '../../clock';
import type { LimitSpec } from '../../algorithms';
import type { StoreEvents } from '../events';
import { PartialWrite, MAX_BATCH, type OwnEntry, type RestoreEntry, type SharedOps } from '../shared';
import type { AllowanceCredit, AllowanceGrant, DebtEntry, RegionDemand } from '../region/types';
import { luaAlgorithm, type WindowBase, windowBase } from './decide-codec';
import { type Arg, type RedisClient, ScriptRunner } from './scripts';
import type { Stored, StoredRefund } from './spec';

// Batches of one absorb/refund in flight at once: a big write-back neither floods Redis nor
// waits on one round trip per batch.
const PARALLEL_BATCHES = 16;

function num(s: unknown): number {
  return s === 'inf' ? Infinity : Number(s);
}

export interface RedisOpsOptions {
  // Round-robin over the ready ones (REDIS_POOL_SIZE); one Cluster client in cluster mode.
  clients: RedisClient[];
  cluster: boolean;
  // Tests only: pass this clock's time to the scripts instead of Redis' TIME.
  explicitClock?: Clock;
  events: StoreEvents;
  // KEY_PREFIX: the replica registry and the probe key live under it.
  keyPrefix: string;
  // WINDOW_COUNTERS=hash: fixed windows in sluice's key layout are fields of their window's hash
  // (lua/algorithms.lua fixed_hash); ignored on a cluster, where every counter keeps its own key.
  windowHashes?: boolean;
}

// The operations only a shared store has (SharedOps), each one script call per batch (one hash
// slot each on a cluster): the write-backs, refunds, leases and allowances, restores and the
// replica registry that the resilience stages and the multi-region layer use. RedisStore adds
// the decisions (store.ts); probe() is its, since a probe is a real decision.
export abstract class RedisSharedOps implements SharedOps {
  protected readonly runner: ScriptRunner;
  protected readonly cluster: boolean;
  protected readonly keyPrefix: string;
  private readonly explicitClock: Clock | undefined;
  // The replica registry and the data epoch: one hash tag, so one script can read both on a
  // cluster (a tag in KEY_PREFIX comes first and wins, for both alike).
  private readonly registryKey: string;
  private readonly epochKey: string;
  // Where fixed windows are window-hash fields (see windowBase); undefined: a key each.
  protected readonly windows: WindowBase | undefined;

  constructor(o: RedisOpsOptions) {
    this.runner = new ScriptRunner(o);
    this.cluster = o.cluster;
    this.keyPrefix = o.keyPrefix;
    this.explicitClock = o.explicitClock;
    this.windows = o.windowHashes === true && !o.cluster ? windowBase(o.keyPrefix) : undefined;
    this.registryKey = `${o.keyPrefix}{sluice-fleet}replicas`;
    this.epochKey = `${o.keyPrefix}{sluice-fleet}epoch`;
  }

  abstract probe(): Promise<{ nowMs: number }>;

  // Writes back hits a local fallback admitted (lua/absorb.lua), MAX_BATCH entries per call.
  async absorb(entries: readonly DebtEntry[]): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = batch.map((e) => e.key);
      args.push(this.time());
      for (const e of batch)
        args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.windowStartMs ?? '', e.ageMs, e.debt === true ? 1 : 0);
      return this.runner.run('absorb', 'absorb', batch.length, args);
    });
  }

  // Gives back consumed hits (lua/refund.lua), MAX_BATCH entries per call.
  async refund(entries: readonly StoredRefund[]): Promise<void> {
    await this.inBatches(entries, (batch) => this.refundBatch(batch));
  }

  // Takes up to `units` of a limit's budget (lua/lease.lua). `demand`: a region leasing from the
  // global budget, at most its share of what remains; `maxShare`: at most this share of what
  // remains (a replica leasing from its region's allowance), and at least `atLeast` or nothing.
  async lease(spec: Stored<LimitSpec> & { key: string }, units: number, demand?: RegionDemand, maxShare?: number, atLeast = 1): Promise<AllowanceGrant> {
    const args: Arg[] = [spec.key, this.time(), luaAlgorithm(spec, this.windows), spec.limit, spec.periodMs, spec.burst, units];
    if (demand !== undefined) args.splice(1, 0, demand.key);
    if (demand !== undefined) args.push(demand.region, demand.rate, demand.staleMs, demand.windowStartMs ?? '');
    else if (maxShare !== undefined) args.push(maxShare, atLeast);
    const r = (await this.runner.run('lease', 'lease', demand === undefined ? 1 : 2, args)) as unknown[];
    const grant: AllowanceGrant = { granted: Number(r[0]), takenAtMs: Number(r[1]), remaining: num(r[2]), resetMs: num(r[3]), retryAfterMs: num(r[4]) };
    if (r[5] !== undefined) grant.usableMs = num(r[5]);
    if (r[6] !== undefined) grant.ample = Number(r[6]) === 1;
    return grant;
  }

  // Gives back `units` taken by a lease at `takenAtMs` (Redis time) that were not used.
  async giveBack(spec: Stored<LimitSpec> & { key: string }, units: number, takenAtMs: number): Promise<void> {
    await this.runner.run('give_back', 'refund', 1, [
      spec.key,
      this.time(),
      luaAlgorithm(spec, this.windows),
      spec.limit,
      spec.periodMs,
      spec.burst,
      units,
      takenAtMs,
    ]);
  }

  // Adds leased units to a regional allowance and holds (or releases) the region's refill lock
  // (lua/credit.lua). Returns the units it holds now.
  async credit(c: AllowanceCredit): Promise<number> {
    const args: Arg[] = [
      c.key,
      c.lockKey,
      this.time(),
      c.units,
      c.ttlMs,
      c.globalRemaining,
      c.globalResetMs,
      c.globalRetryMs === Infinity ? 'inf' : c.globalRetryMs,
      c.takenAtMs,
      c.windowMs ?? '',
      c.holdMs,
      c.startsInMs ?? '',
    ];
    return Number(await this.runner.run('credit', 'credit', 2, args));
  }

  // Takes back the units of an allowance expiring within `marginMs` (lua/reclaim.lua); a window's
  // allowance, spent with its window's global budget, is kept until the window ends.
  async reclaim(key: string, marginMs: number, window: boolean): Promise<{ units: number; takenAtMs: number }> {
    const r = (await this.runner.run('reclaim', 'reclaim', 1, [key, this.time(), marginMs, window ? '1' : '0'])) as unknown[];
    return { units: Number(r[0]), takenAtMs: Number(r[1]) };
  }

  // A lock held for `ms` unless another holds it: true when this call got it.
  async claim(key: string, ms: number): Promise<boolean> {
    const r = await this.runner.timed('claim', () => this.runner.client().set(key, '1', 'PX', Math.max(1, Math.ceil(ms)), 'NX'));
    return r === 'OK';
  }

  // Puts back what a replica last saw of its counters after Redis lost its data
  // (lua/restore.lua), MAX_BATCH entries per call.
  async restore(entries: readonly RestoreEntry[]): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = batch.map((e) => e.key);
      args.push(this.time());
      for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.remaining, e.atMs);
      return this.runner.run('restore', 'restore', batch.length, args);
    });
  }

  // Adds back the hits process `owner` had put into each counter, once per Redis data lifetime
  // (lua/restore_own.lua), MAX_BATCH entries per call. Each entry's marker hash shares its
  // counter's hash tag, hence its slot.
  async restoreOwn(entries: readonly OwnEntry[], owner: string): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = [];
      // Windows: the owner's own marker; buckets: one marker for the fleet (their views are of
      // the fleet's use, not additive).
      for (const e of batch) args.push(e.key, `${this.keyPrefix}{${hashTagOf(e.key)}}restored:${e.windowStartMs === undefined ? '*fleet' : owner}`);
      args.push(this.time());
      for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.windowStartMs ?? '', e.atMs);
      return this.runner.run('restore', 'restore_own', 2 * batch.length, args);
    });
  }

  // Registers this replica in `${keyPrefix}{sluice-fleet}replicas` and reads the data epoch
  // (`...epoch`), proposing `epoch` when Redis holds none (lua/heartbeat.lua).
  async heartbeat(replicaId: string, ttlMs: number, epoch: string): Promise<{ replicas: number; nowMs: number; epoch: string }> {
    const r = (await this.runner.run('heartbeat', 'heartbeat', 2, [this.registryKey, this.epochKey, this.time(), replicaId, ttlMs, epoch])) as unknown[];
    return { replicas: Number(r[0]), nowMs: Number(r[1]), epoch: String(r[2]) };
  }

  async leave(replicaId: string): Promise<void> {
    await this.runner.timed('leave', () => this.runner.client().zrem(this.registryKey, replicaId));
  }
  // Dispatches synchronously (the refund queue relies on it: see refund-queue.ts).
  protected refundBatch(batch: readonly StoredRefund[]): Promise<void> {
    const args: Arg[] = batch.map((e) => e.key);
    args.push(this.time());
    for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.decidedAtMs);
    return this.runner.run('refund', 'refund', batch.length, args).then(() => undefined);
  }

  // Runs batches (see batches()) with at most PARALLEL_BATCHES in flight; after a failure no new
  // batch starts, and the first error is thrown once those in flight have finished.
  protected async inBatches<T extends { key: string }>(entries: readonly T[], send: (batch: T[]) => Promise<unknown>): Promise<void> {
    const batches = this.batches(entries);
    const landed = new Set<object>();
    let next = 0;
    let failure: { error: unknown } | undefined;
    const worker = async (): Promise<void> => {
      while (failure === undefined && next < batches.length) {
        const batch = batches[next++];
        try {
          await send(batch);
          for (const e of batch) landed.add(e);
        } catch (error) {
          failure ??= { error };
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(PARALLEL_BATCHES, batches.length) }, worker));
    if (failure !== undefined) throw new PartialWrite((failure.error as Error).message, landed);
  }

  // Entries split into script calls: one hash slot each on a cluster, at most MAX_BATCH each.
  protected batches<T extends { key: string }>(entries: readonly T[]): T[][] {
    const out: T[][] = [];
    for (const idx of this.groups(entries)) {
      for (let i = 0; i < idx.length; i += MAX_BATCH) out.push(idx.slice(i, i + MAX_BATCH).map((j) => entries[j]));
    }
    return out;
  }

  // Indexes grouped by the node that must run them: everything together on a single Redis; by
  // hash slot on a cluster (a script may only touch keys of one slot).
  protected groups(items: readonly { key: string }[]): number[][] {
    if (!this.cluster) return [items.map((_, i) => i)];
    const bySlot = new Map<number, number[]>();
    items.forEach((c, i) => {
      const slot = calculateSlot(c.key);
      const group = bySlot.get(slot);
      if (group === undefined) bySlot.set(slot, [i]);
      else group.push(i);
    });
    return [...bySlot.values()];
  }

  protected time(): string {
    return this.explicitClock === undefined ? '' : String(this.explicitClock.now());
  }
}

// What decides a key's hash slot: the text between its first '{' and the next '}' when not empty,
// else the whole key (which keys.ts never leaves with a '}': it escapes braces in every part).
function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}
