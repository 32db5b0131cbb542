import calculateSlot from 'cluster-key-slot';
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../clock';
import { CancelledError } from '../errors';
import { ALGORITHM_IMPLS, type AlgorithmImpl, type LimitSpec, specOf, type State } from '../algorithms';
import { windowStart } from '../algorithms/types';
import { admits } from '../algorithms/policy';
import type { StoreEvents } from './events';
import { poolAmple, poolImpl, poolPendingMs, poolUnits } from './region/pool';
import { RefundQueue, type RefundQueueOptions } from './refund-queue';
import { encodeCall, WireCommand } from './resp';
import { loadScripts, type ScriptName, type Scripts } from './scripts';
import { PartialWrite, type AbsorbEntry, type AllowanceCredit, type LeaseGrant, MAX_BATCH, type RegionDemand, type RefundEntry, type OwnEntry, type RestoreEntry, type SharedOps } from './shared';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from './store';
import { settledWithin } from './timeout';

export type RedisClient = Redis | Cluster;

type Arg = string | number;
type Send = (...args: unknown[]) => Promise<unknown>;

// ioredis flattens array arguments into the command, so an argument list goes in as one array:
// spreading thousands of arguments into a call would overflow the stack.
function send(client: RedisClient, command: string, ...args: unknown[]): Promise<unknown> {
  return (client as unknown as Record<string, Send>)[command](...args);
}

const COMMAND: Record<ScriptName, string> = {
  decide: 'sluiceDecide',
  refund: 'sluiceRefund',
  absorb: 'sluiceAbsorb',
  lease: 'sluiceLease',
  heartbeat: 'sluiceHeartbeat',
  restore: 'sluiceRestore',
  restore_own: 'sluiceRestoreOwn',
  credit: 'sluiceCredit',
  reclaim: 'sluiceReclaim',
};

interface GroupResult {
  checks: number[];
  admitted: boolean;
  now: number;
  outcomes: LimitOutcome[];
  // Only for a group of a request spanning slots (combine() may have to report them): each
  // limit's counter before the request.
  before?: Before[];
}

interface Before {
  remaining: number;
  resetMs: number;
}

// Requests per batched decide call at most (and MAX_BATCH keys): one script call stays short.
const BATCH_REQUESTS = 64;

interface Pending {
  all: readonly LimitCheck[];
  idx: number[];
  caller: { readonly cancelled: boolean } | undefined;
  resolve(d: Decision): void;
  reject(err: unknown): void;
}
// Batches of one absorb/refund in flight at once: a big write-back neither floods Redis nor
// waits on one round trip per batch.
const PARALLEL_BATCHES = 16;
// While a connection is up but no decision has round-tripped yet, probe this often.
const PROBE_RETRY_MS = 200;
// How often readiness looks again at a cluster's primary connections while they open.
const WARM_POLL_MS = 20;
// close() waits this long for queued refunds and for each connection's QUIT.
const CLOSE_WAIT_MS = 1_000;

function num(s: unknown): number {
  return s === 'inf' ? Infinity : Number(s);
}

export interface RedisStoreOptions {
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
  // Tests shorten the refund backoff.
  refunds?: Pick<RefundQueueOptions, 'maxEntries' | 'firstRetryMs' | 'maxRetryMs'>;
}

// Counters in Redis. One script call decides a whole request; on Redis Cluster one call per hash
// slot group, in parallel, and the hits consumed by groups of a request that is denied after all
// are given back in the background (refunds). Besides the Store interface, the operations only a
// shared store has (SharedOps) for the resilience stages.
export class RedisStore implements Store, SharedOps {
  readonly kind: string;
  // Hits to give back for multi-slot requests denied (or failed) after some slots consumed.
  readonly refunds: RefundQueue;
  private next = 0;
  private readonly scripts: Scripts;
  // Functions (FCALL) until a server says it has none (Redis < 7); then EVALSHA for good.
  private functions = true;
  // Requests waiting for the end of this event-loop turn to go to Redis together (see batched()).
  private batch: { requests: Pending[]; keys: number; countDenied: boolean } = { requests: [], keys: 0, countDenied: false };
  private flushQueued = false;
  // Cluster calls waiting for the end of this turn (see decide()).
  private turnWaiters: (() => void)[] = [];
  // Library loads in flight, per connection, so that a burst of "not found" loads it once.
  private readonly loading = new Map<RedisClient, Promise<void>>();
  // Sticky: a real decision has round-tripped since start (readiness).
  private decidedOnce = false;
  private closed = false;
  private readonly listeners = new Set<() => void>();
  private readonly probing = new Set<RedisClient>();
  // The replica registry and the data epoch: one hash tag, so one script can read both on a
  // cluster (a tag in KEY_PREFIX comes first and wins, for both alike).
  private readonly registryKey: string;
  private readonly epochKey: string;
  // Where fixed windows are window-hash fields (see windowBase); undefined: a key each.
  private readonly windows: WindowBase | undefined;

  constructor(private readonly options: RedisStoreOptions) {
    this.kind = options.cluster ? 'redis-cluster' : 'redis';
    this.windows = options.windowHashes === true && !options.cluster ? windowBase(options.keyPrefix) : undefined;
    this.scripts = loadScripts();
    this.registryKey = `${options.keyPrefix}{sluice-fleet}replicas`;
    this.epochKey = `${options.keyPrefix}{sluice-fleet}epoch`;
    this.refunds = new RefundQueue({ ...options.refunds, events: options.events, split: (e) => this.batches(e), send: (b) => this.refundBatch(b) });
    for (const client of options.clients) {
      for (const [name, lua] of Object.entries(this.scripts.eval)) client.defineCommand(COMMAND[name as ScriptName], { lua });
      client.on('ready', () => {
        this.notify();
        this.probeUntilDecided(client);
      });
      for (const event of ['close', 'end', 'error']) client.on(event, () => this.notify());
      if (client.status === 'ready') this.probeUntilDecided(client);
    }
  }

  // Able to decide: a connection is up and a real decision has round-tripped since start (on a
  // cluster, once every primary's connection was up: see warm()).
  ready(): boolean {
    return this.decidedOnce && this.connected();
  }

  // Some connection is up (it may still fail to decide).
  connected(): boolean {
    return this.options.clients.some((c) => c.status === 'ready');
  }

  onReadyChange(listener: () => void): void {
    this.listeners.add(listener);
  }

  async close(): Promise<void> {
    this.closed = true;
    await settledWithin(this.refunds.drain().catch(() => undefined), CLOSE_WAIT_MS);
    this.refunds.close();
    await Promise.all(
      this.options.clients.map(async (c) => {
        await settledWithin(c.quit().catch(() => undefined), CLOSE_WAIT_MS);
        c.disconnect();
      }),
    );
  }

  decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    if (!this.options.cluster) return this.batched(checks, options);
    if (options.caller === undefined) return this.decideSlots(checks, options);
    // A cluster's calls are not batched, but they too leave at the end of the turn, once a reset
    // read in the same turn can be seen.
    return this.endOfTurn().then(() => (options.caller!.cancelled ? Promise.reject(new CancelledError()) : this.decideSlots(checks, options)));
  }

  private endOfTurn(): Promise<void> {
    return new Promise((resolve) => {
      if (this.turnWaiters.push(resolve) > 1) return;
      setImmediate(() => {
        const waiters = this.turnWaiters;
        this.turnWaiters = [];
        for (const w of waiters) w();
      });
    });
  }

  // On a cluster: one call per hash slot group of the request.
  private async decideSlots(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const groups = this.groups(checks);
    if (groups.length === 1) {
      const g = await this.decideGroup(checks, groups[0], options.countDeniedHits, 'request', 'decide');
      return { admitted: g.admitted, outcomes: g.outcomes, storeTimeMs: g.now };
    }
    const settled = await Promise.allSettled(groups.map((idx) => this.decideGroup(checks, idx, options.countDeniedHits, 'group', 'decide')));
    const done = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) {
      // The caller's fallback decides the whole request and journals all of it: what the other
      // groups consumed goes back, or it would count twice (even under COUNT_DENIED_HITS).
      this.refunds.add(consumed(checks, done));
      throw failed.reason;
    }
    return this.combine(checks, done, options);
  }

  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const groups = await Promise.all(this.groups(checks).map((idx) => this.decideGroup(checks, idx, options.countDeniedHits, 'peek', 'peek')));
    const outcomes: LimitOutcome[] = [];
    for (const g of groups) g.checks.forEach((i, j) => (outcomes[i] = g.outcomes[j]));
    return { admitted: admits(checks.map((c) => c.mode), outcomes.map((o) => o.allowed)), outcomes, storeTimeMs: latest(groups) };
  }

  // On one Redis (not a cluster), the requests that reach the store in one turn of the event loop
  // (the gRPC streams read from the sockets in that turn) go to Redis as one script call, each
  // decided on its own, in arrival order: Redis' cost per call and the client's are then paid once
  // per batch, not once per request. Nothing waits for a batch to fill: it leaves at the end of
  // the turn's I/O callbacks (setImmediate). (process.nextTick would not batch: Node drains the
  // tick and microtask queues after each stream's callback.)
  private batched(all: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const countDenied = options.countDeniedHits;
    const idx = this.groups(all)[0];
    return new Promise((resolve, reject) => {
      const b = this.batch;
      if (b.requests.length > 0 && (b.countDenied !== countDenied || b.requests.length >= BATCH_REQUESTS || b.keys + idx.length > MAX_BATCH)) this.flush();
      this.batch.countDenied = countDenied;
      this.batch.requests.push({ all, idx, caller: options.caller, resolve, reject });
      this.batch.keys += idx.length;
      if (!this.flushQueued) {
        this.flushQueued = true;
        setImmediate(() => {
          this.flushQueued = false;
          this.flush();
        });
      }
    });
  }

  // A call reset while it waited for the batch to leave (a later read of the same turn) is not
  // sent: Redis never spends time on an attacker's cancelled calls ahead of Envoy's.
  private flush(): void {
    const { countDenied } = this.batch;
    let requests = this.batch.requests;
    if (requests.length === 0) return;
    this.batch = { requests: [], keys: 0, countDenied: false };
    if (requests.some((r) => r.caller?.cancelled === true)) {
      const live: Pending[] = [];
      for (const r of requests) {
        if (r.caller?.cancelled === true) r.reject(new CancelledError());
        else live.push(r);
      }
      if (live.length === 0) return;
      requests = live;
    }
    this.decideMany(requests, countDenied, 'request', 'decide').then(
      (results) => results.forEach((r, i) => (r instanceof Error ? requests[i].reject(r) : requests[i].resolve({ admitted: r.admitted, outcomes: r.outcomes, storeTimeMs: r.now }))),
      (err: unknown) => requests.forEach((r) => r.reject(err)),
    );
  }

  // One decide script call for one request (one slot group of it on a cluster).
  private async decideGroup(all: readonly LimitCheck[], idx: number[], countDenied: boolean, scope: 'request' | 'group' | 'peek', operation: string, client?: RedisClient): Promise<GroupResult> {
    const [g] = await this.decideMany([{ all, idx }], countDenied, scope, operation, client);
    if (g instanceof Error) throw g;
    return g;
  }

  // One decide script call for `requests` (each the limits `idx` of `all`, all in one hash slot
  // on a cluster), in order. A request the script could not decide (it wrote nothing) comes back
  // as its Error, the others as their results.
  private async decideMany(
    requests: readonly { all: readonly LimitCheck[]; idx: number[] }[],
    countDenied: boolean,
    scope: 'request' | 'group' | 'peek',
    operation: string,
    client?: RedisClient,
  ): Promise<(GroupResult | Error)[]> {
    const [numKeys, args] = decideArgs(requests, countDenied, this.time(), scope, this.windows);
    // On one Redis (not a cluster, whose client routes a command by its arguments' keys) the
    // command is written here as bytes (store/resp.ts).
    const reply = (
      client === undefined && !this.options.cluster && this.functions
        ? await this.runWire(operation, 'decide', encodeCall('FCALL', this.scripts.functions.decide, numKeys, args), numKeys, args)
        : await this.run(operation, 'decide', numKeys, args, client)
    ) as unknown[];
    const now = replyTime(reply[0]);
    let p = 1;
    return requests.map((r) => {
      const admitted = reply[p++];
      if (admitted === -1) return new Error(String(reply[p++]));
      const before: Before[] | undefined = scope === 'group' ? [] : undefined;
      // Per limit: its flags (1 allowed, 2 consumed) when its counter had no state before, else
      // the flags' digit and that state (lua/decide.lua).
      const outcomes = r.idx.map((i) => {
        const entry = reply[p++];
        if (typeof entry === 'number') return outcomeFrom(r.all[i], entry, undefined, now, before);
        const text = String(entry);
        return outcomeFrom(r.all[i], text.charCodeAt(0) - 48, text.slice(1), now, before);
      });
      return { checks: r.idx, admitted: admitted === 1, now, outcomes, before };
    });
  }

  // Writes back hits a local fallback admitted (lua/absorb.lua), MAX_BATCH entries per call.
  async absorb(entries: readonly AbsorbEntry[]): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = batch.map((e) => e.key);
      args.push(this.time());
      for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.windowStartMs ?? '', e.ageMs, e.debt === true ? 1 : 0);
      return this.run('absorb', 'absorb', batch.length, args);
    });
  }

  // Gives back consumed hits (lua/refund.lua), MAX_BATCH entries per call.
  async refund(entries: readonly RefundEntry[]): Promise<void> {
    await this.inBatches(entries, (batch) => this.refundBatch(batch));
  }

  // Takes up to `units` of a limit's budget (lua/lease.lua). `demand`: a region leasing from the
  // global budget, at most its share of what remains; `maxShare`: at most this share of what
  // remains (a replica leasing from its region's allowance), and at least `atLeast` or nothing.
  async lease(spec: LimitSpec & { key: string }, units: number, demand?: RegionDemand, maxShare?: number, atLeast = 1): Promise<LeaseGrant> {
    const args: Arg[] = [spec.key, this.time(), luaAlgorithm(spec, this.windows), spec.limit, spec.periodMs, spec.burst, units];
    if (demand !== undefined) args.splice(1, 0, demand.key);
    if (demand !== undefined) args.push(demand.region, demand.rate, demand.staleMs, demand.windowStartMs ?? '');
    else if (maxShare !== undefined) args.push(maxShare, atLeast);
    const r = (await this.run('lease', 'lease', demand === undefined ? 1 : 2, args)) as unknown[];
    const grant: LeaseGrant = { granted: Number(r[0]), takenAtMs: Number(r[1]), remaining: num(r[2]), resetMs: num(r[3]), retryAfterMs: num(r[4]) };
    if (r[5] !== undefined) grant.usableMs = num(r[5]);
    if (r[6] !== undefined) grant.ample = Number(r[6]) === 1;
    return grant;
  }

  // Gives back `units` taken by a lease at `takenAtMs` (Redis time) that were not used.
  async giveBack(spec: LimitSpec & { key: string }, units: number, takenAtMs: number): Promise<void> {
    await this.run('give_back', 'refund', 1, [spec.key, this.time(), luaAlgorithm(spec, this.windows), spec.limit, spec.periodMs, spec.burst, units, takenAtMs]);
  }

  // Adds leased units to a regional allowance and holds (or releases) the region's refill lock
  // (lua/credit.lua). Returns the units it holds now.
  async credit(c: AllowanceCredit): Promise<number> {
    const args: Arg[] = [c.key, c.lockKey, this.time(), c.units, c.ttlMs, c.globalRemaining, c.globalResetMs, c.globalRetryMs === Infinity ? 'inf' : c.globalRetryMs, c.takenAtMs, c.windowMs ?? '', c.holdMs, c.startsInMs ?? ''];
    return Number(await this.run('credit', 'credit', 2, args));
  }

  // Takes back the units of an allowance expiring within `marginMs` (lua/reclaim.lua).
  async reclaim(key: string, marginMs: number): Promise<{ units: number; takenAtMs: number }> {
    const r = (await this.run('reclaim', 'reclaim', 1, [key, this.time(), marginMs])) as unknown[];
    return { units: Number(r[0]), takenAtMs: Number(r[1]) };
  }

  // A lock held for `ms` unless another holds it: true when this call got it.
  async claim(key: string, ms: number): Promise<boolean> {
    const r = await this.timed('claim', () => this.client().set(key, '1', 'PX', Math.max(1, Math.ceil(ms)), 'NX'));
    return r === 'OK';
  }

  // Puts back what a replica last saw of its counters after Redis lost its data
  // (lua/restore.lua), MAX_BATCH entries per call.
  async restore(entries: readonly RestoreEntry[]): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = batch.map((e) => e.key);
      args.push(this.time());
      for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.remaining, e.atMs);
      return this.run('restore', 'restore', batch.length, args);
    });
  }

  // Adds back the hits process `owner` had put into each counter, once per Redis data lifetime
  // (lua/restore_own.lua), MAX_BATCH entries per call. Each entry's marker hash shares its
  // counter's hash tag, hence its slot.
  async restoreOwn(entries: readonly OwnEntry[], owner: string): Promise<void> {
    await this.inBatches(entries, (batch) => {
      const args: Arg[] = [];
      for (const e of batch) args.push(e.key, `${this.options.keyPrefix}{${hashTagOf(e.key)}}restored:${owner}`);
      args.push(this.time());
      for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.windowStartMs ?? '', e.atMs);
      return this.run('restore', 'restore_own', 2 * batch.length, args);
    });
  }

  // Registers this replica in `${keyPrefix}{sluice-fleet}replicas` and reads the data epoch
  // (`...epoch`), proposing `epoch` when Redis holds none (lua/heartbeat.lua).
  async heartbeat(replicaId: string, ttlMs: number, epoch: string): Promise<{ replicas: number; nowMs: number; epoch: string }> {
    const r = (await this.run('heartbeat', 'heartbeat', 2, [this.registryKey, this.epochKey, this.time(), replicaId, ttlMs, epoch])) as unknown[];
    return { replicas: Number(r[0]), nowMs: Number(r[1]), epoch: String(r[2]) };
  }

  async leave(replicaId: string): Promise<void> {
    await this.timed('leave', () => this.client().zrem(this.registryKey, replicaId));
  }

  // One real decision round-tripped: the decide script in peek mode on a key of its own, through
  // every pool connection that is up, so that when it resolves every call sent before it on those
  // connections has been answered (each connection keeps order). Fails when any of them fails.
  async probe(): Promise<{ nowMs: number }> {
    const up = this.options.clients.filter((c) => c.status === 'ready');
    if (up.length === 0) return this.probeWith(this.client());
    const replies = await Promise.all(up.map((c) => this.probeWith(c)));
    return replies[0];
  }

  private async probeWith(client: RedisClient): Promise<{ nowMs: number }> {
    const check: LimitCheck = { key: `${this.options.keyPrefix}{sluice-probe}`, algorithm: 'fixed_window', limit: 1, periodMs: 1000, burst: 1, hits: 0, mode: 'enforce' };
    const g = await this.decideGroup([check], [0], false, 'peek', 'probe', client);
    return { nowMs: g.now };
  }

  // Whenever a connection becomes ready and no decision has round-tripped yet, probe through it
  // until one does (or it goes down again), so readiness does not wait for the first request.
  private probeUntilDecided(client: RedisClient): void {
    if (this.decidedOnce || this.closed || this.probing.has(client)) return;
    this.probing.add(client);
    const attempt = (): void => {
      if (this.decidedOnce || this.closed || client.status !== 'ready') {
        this.probing.delete(client);
        return;
      }
      if (!this.warm(client)) {
        setTimeout(attempt, WARM_POLL_MS).unref();
        return;
      }
      this.probeWith(client).then(
        () => this.probing.delete(client),
        () => setTimeout(attempt, PROBE_RETRY_MS).unref(),
      );
    };
    attempt();
  }

  // ioredis opens a cluster's node connections lazily, on the first command to each; a command
  // sent while one is still opening fails at once or waits out a 100 ms failover retry, and the
  // deadline then answers it by fallback while Redis is healthy. So once the cluster client is
  // ready every primary's connection is opened, and readiness waits for them. (Not earlier, on
  // 'refresh': a node connection still opening fails the cluster client's own ready check, which
  // then reconnects forever.) True when all are up.
  private warm(client: RedisClient): boolean {
    if (!this.options.cluster) return true;
    let up = true;
    for (const node of (client as Cluster).nodes('master')) {
      if (node.status === 'ready') continue;
      up = false;
      if (node.status === 'wait') node.connect().catch(() => undefined);
    }
    return up;
  }

  private notify(): void {
    for (const listener of this.listeners) listener();
  }

  // Dispatches synchronously (the refund queue relies on it: see refund-queue.ts).
  private refundBatch(batch: readonly RefundEntry[]): Promise<void> {
    const args: Arg[] = batch.map((e) => e.key);
    args.push(this.time());
    for (const e of batch) args.push(luaAlgorithm(e, this.windows), e.limit, e.periodMs, e.burst, e.hits, e.decidedAtMs);
    return this.run('refund', 'refund', batch.length, args).then(() => undefined);
  }

  // Runs batches (see batches()) with at most PARALLEL_BATCHES in flight; after a failure no new
  // batch starts, and the first error is thrown once those in flight have finished.
  private async inBatches<T extends { key: string }>(entries: readonly T[], send: (batch: T[]) => Promise<unknown>): Promise<void> {
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
  private batches<T extends { key: string }>(entries: readonly T[]): T[][] {
    const out: T[][] = [];
    for (const idx of this.groups(entries)) {
      for (let i = 0; i < idx.length; i += MAX_BATCH) out.push(idx.slice(i, i + MAX_BATCH).map((j) => entries[j]));
    }
    return out;
  }

  // Indexes grouped by the node that must run them: everything together on a single Redis; by
  // hash slot on a cluster (a script may only touch keys of one slot).
  private groups(items: readonly { key: string }[]): number[][] {
    if (!this.options.cluster) return [items.map((_, i) => i)];
    const bySlot = new Map<number, number[]>();
    items.forEach((c, i) => {
      const slot = calculateSlot(c.key);
      const group = bySlot.get(slot);
      if (group === undefined) bySlot.set(slot, [i]);
      else group.push(i);
    });
    return [...bySlot.values()];
  }

  // Round-robin over the connections that are up: a pool member that is down (reconnecting) gets
  // no calls, instead of failing its share of them.
  private client(): RedisClient {
    const clients = this.options.clients;
    for (let tried = 0; tried < clients.length; tried++) {
      this.next = (this.next + 1) % clients.length;
      if (clients[this.next].status === 'ready') return clients[this.next];
    }
    throw new Error('no Redis connection ready');
  }

  private async run(operation: string, script: ScriptName, numKeys: number, args: Arg[], client?: RedisClient): Promise<unknown> {
    const result = await this.timed(operation, () => {
      const c = client ?? this.client();
      return this.call(c, script, () => send(c, 'fcall', this.scripts.functions[script], numKeys, args), numKeys, args);
    });
    this.ran(script);
    return result;
  }

  // As run(), for FCALL written as bytes on one Redis: `wire` (see store/resp.ts), and the same
  // call's arguments in case EVALSHA must take its place.
  private async runWire(operation: string, script: ScriptName, wire: Buffer, numKeys: number, args: Arg[]): Promise<unknown> {
    const result = await this.timed(operation, () => {
      const c = this.client() as Redis;
      const fcall = (): Promise<unknown> => {
        const command = new WireCommand('fcall', wire);
        c.sendCommand(command);
        return command.promise;
      };
      return this.call(c, script, fcall, numKeys, args);
    });
    this.ran(script);
    return result;
  }

  private ran(script: ScriptName): void {
    if (script === 'decide' && !this.decidedOnce) {
      this.decidedOnce = true;
      this.notify();
    }
  }

  private async timed<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    const start = performance.now();
    let ok = false;
    try {
      const result = await fn();
      ok = true;
      return result;
    } finally {
      this.options.events.storeCall(operation, (performance.now() - start) / 1000, ok);
    }
  }

  // FCALL of the script's function in sluice's library, loading the library where it is missing
  // (a new server, a restart without persistence, FUNCTION FLUSH, a new cluster node) and trying
  // once more. On a server without Functions (Redis < 7): EVALSHA from then on.
  // `fcall` sends the FCALL; `numKeys` and `args` are the same call's, for EVALSHA.
  private async call(client: RedisClient, script: ScriptName, fcall: () => Promise<unknown>, numKeys: number, args: Arg[]): Promise<unknown> {
    if (this.functions) {
      try {
        return await fcall();
      } catch (err) {
        const message = err instanceof Error ? err.message : '';
        if (/unknown command/i.test(message)) this.functions = false;
        else if (!/function not found/i.test(message)) throw err;
        else {
          await this.loadLibrary(client);
          if (this.functions) return fcall();
        }
      }
    }
    return this.evalsha(client, script, numKeys, args);
  }

  // FUNCTION LOAD of the library on this connection's server, or on every primary of a cluster
  // (the function is looked for on the node that owns the keys). A library already there is fine.
  private loadLibrary(client: RedisClient): Promise<void> {
    let pending = this.loading.get(client);
    if (pending === undefined) {
      const targets: Redis[] = this.options.cluster ? (client as Cluster).nodes('master') : [client as Redis];
      pending = Promise.all(
        targets.map((node) =>
          node.call('FUNCTION', 'LOAD', this.scripts.library).catch((err: unknown) => {
            const message = err instanceof Error ? err.message : String(err);
            if (/already exists/i.test(message)) return;
            if (/unknown command|unknown subcommand/i.test(message)) {
              this.functions = false;
              return;
            }
            throw err;
          }),
        ),
      )
        .then(() => undefined)
        .finally(() => this.loading.delete(client));
      this.loading.set(client, pending);
    }
    return pending;
  }

  // EVALSHA, reloading on NOSCRIPT. ioredis re-sends once, but a second flush (or failover) can
  // land between its reload and the retry; then EVAL with the whole script, which cannot miss.
  private async evalsha(client: RedisClient, script: ScriptName, numKeys: number, args: Arg[]): Promise<unknown> {
    try {
      return await send(client, COMMAND[script], numKeys, args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.includes('NOSCRIPT')) throw err;
      return send(client, 'eval', this.scripts.eval[script], numKeys, args);
    }
  }

  private time(): string {
    return this.options.explicitClock === undefined ? '' : String(this.options.explicitClock.now());
  }

  // The request rule across slot groups. A denial never waits for (or fails because of) giving
  // back what other groups consumed: that goes to the refund queue, and the answer reports the
  // counters as they were before this request.
  private combine(all: readonly LimitCheck[], groups: GroupResult[], options: DecideOptions): Decision {
    const outcomes: LimitOutcome[] = [];
    const before: Before[] = [];
    for (const g of groups) {
      g.checks.forEach((i, j) => {
        outcomes[i] = g.outcomes[j];
        before[i] = g.before![j];
      });
    }
    const admitted = admits(all.map((c) => c.mode), outcomes.map((o) => o.allowed));
    if (!admitted && !options.countDeniedHits) {
      this.refunds.add(consumed(all, groups));
      outcomes.forEach((o, i) => {
        if (!o.consumed) return;
        o.consumed = false;
        o.remaining = before[i].remaining;
        o.resetMs = before[i].resetMs;
      });
    }
    return { admitted, outcomes, storeTimeMs: latest(groups) };
  }
}

type DecideRequests = readonly { all: readonly LimitCheck[]; idx: number[] }[];

// The decide script's keys and arguments for `requests` (see lua/decide.lua): the batch's counter
// keys, each once; then whether denied hits count, the time, the scope, the number of requests,
// the batch's limit specs (each once), the window-hash groups, and per request its number of
// limits and per limit which key and spec (one number) and its hits. Keys and specs named by
// number cost the script array lookups instead of strings to hash and compare per limit. With
// `windows`, the keys of fixed windows kept in window hashes come first, grouped by period (one
// hash per group), each group named by a spec of its period.
export function decideArgs(requests: DecideRequests, countDenied: boolean, time: string, scope: string, windows?: WindowBase): [number, Arg[]] {
  const keys: string[] = [];
  const keyNumbers = new Map<string, number>();
  const specs: string[] = [];
  const specNumbers = new Map<string, number>();
  // Per key kept in a window hash: its period; the first spec seen per period.
  const keyPeriods: number[] = [];
  const periodSpecs = new Map<number, number>();
  // Per limit: its key's number, its spec's number, its hits; per request first its count.
  const limits: number[] = [];
  for (const r of requests) {
    limits.push(r.idx.length);
    for (const i of r.idx) {
      const c = r.all[i];
      const text = decideSpec(c, windows);
      let s = specNumbers.get(text);
      if (s === undefined) specNumbers.set(text, (s = specs.push(text)));
      let k = keyNumbers.get(c.key);
      if (k === undefined) {
        keyNumbers.set(c.key, (k = keys.push(c.key)));
        if (inWindowHash(c, windows)) {
          keyPeriods[k] = c.periodMs;
          if (!periodSpecs.has(c.periodMs)) periodSpecs.set(c.periodMs, s);
        }
      }
      limits.push(k, s, c.hits);
    }
  }
  // Key k is the call's key place[k]: window-hash keys first, period by period, then the others.
  let args: Arg[] = keys;
  let place: number[] | undefined;
  const groups: number[] = [];
  if (periodSpecs.size > 0) {
    args = [];
    place = [];
    for (const [period, spec] of periodSpecs) {
      const first = args.length;
      for (let k = 1; k <= keys.length; k++) if (keyPeriods[k] === period) place[k] = args.push(keys[k - 1]);
      groups.push(spec, args.length - first);
    }
    for (let k = 1; k <= keys.length; k++) if (keyPeriods[k] === undefined) place[k] = args.push(keys[k - 1]);
  }
  const n = args.length;
  args.push(countDenied ? '1' : '0', time, scope, requests.length, specs.length);
  for (const text of specs) args.push(text);
  args.push(groups.length / 2);
  for (const g of groups) args.push(g);
  for (let j = 0; j < limits.length; ) {
    const count = limits[j++];
    args.push(count);
    for (let e = 0; e < count; e++, j += 3) {
      const k = place === undefined ? limits[j] : place[limits[j]];
      args.push((limits[j + 1] - 1) * n + k, limits[j + 2]);
    }
  }
  return [n, args];
}

// The decide script's time: whole microseconds of Redis' clock, or a test's explicit time in ms
// (a string). See clock() in lua/algorithms.lua.
function replyTime(raw: unknown): number {
  return typeof raw === 'string' ? Number(raw) : (raw as number) / 1000;
}

// WINDOW_COUNTERS=hash: the base of the names of the hashes that hold a period's fixed windows
// (the script appends the window's start, Redis time in ms; see fixed_hash in lua/algorithms.lua).
// `{}` keeps the names apart from every counter key (keys.ts escapes braces in their parts).
export type WindowBase = (periodMs: number) => string;

export function windowBase(prefix: string): WindowBase {
  // One text per period, made once: every window-hash limit of every batch asks for it.
  const made = new Map<number, string>();
  return (periodMs) => {
    let base = made.get(periodMs);
    if (base === undefined) made.set(periodMs, (base = `${prefix}{}windows|fixed_window:${periodMs}|`));
    return base;
  };
}

// Whether `spec`'s counter is a field of its window's hash: fixed windows in sluice's layout.
function inWindowHash(spec: LimitSpec, windows: WindowBase | undefined): windows is WindowBase {
  return windows !== undefined && spec.algorithm === 'fixed_window' && spec.layout === undefined;
}

// A limit's spec as decide.lua takes it: one text, which the script parses once per library load;
// a window-hash spec ends with its hashes' base.
export function decideSpec(c: Pick<LimitCheck, 'algorithm' | 'limit' | 'periodMs' | 'burst' | 'mode' | 'layout'>, windows?: WindowBase): string {
  if (inWindowHash(c, windows)) return `fixed_window_hash:${c.limit}:${c.periodMs}:${c.burst}:${c.mode}:${windows(c.periodMs)}`;
  return `${luaAlgorithm(c)}:${c.limit}:${c.periodMs}:${c.burst}:${c.mode}`;
}

// The scripts' name of a spec's algorithm: the fixed window in upstream's layout has its own
// (its state is stored as the count alone; see fixed_window_upstream in lua/algorithms.lua), and
// so has one in a window hash, followed by its hashes' base (spec_from in lua/algorithms.lua).
function luaAlgorithm(spec: LimitSpec, windows?: WindowBase): string {
  if (spec.layout === 'pool') return 'pool';
  if (spec.layout === 'upstream') return 'fixed_window_upstream';
  if (inWindowHash(spec, windows)) return `fixed_window_hash|${windows(spec.periodMs)}`;
  return spec.algorithm;
}

function implFor(spec: LimitSpec): AlgorithmImpl {
  return spec.layout === 'pool' ? poolImpl : ALGORITHM_IMPLS[spec.algorithm];
}

// A counter's state as the scripts store it ("a:b[:c]", numbers exact: see lua/algorithms.lua);
// a fixed window's count alone (upstream's layout, where the key names its window, or a window
// hash's field), whose window is the current one.
function decodeState(raw: unknown, spec?: LimitSpec, nowMs = 0): State | undefined {
  if (raw === null || raw === undefined) return undefined;
  const text = typeof raw === 'string' ? raw : String(raw);
  const colon = text.indexOf(':');
  if (colon < 0) return spec?.algorithm === 'fixed_window' && spec.layout !== 'pool' ? [windowStart(nowMs, spec.periodMs), Number(text)] : [Number(text)];
  // Windows' two numbers (most states) without split's array of strings: once per limit and answer.
  if (text.indexOf(':', colon + 1) < 0) return [Number(text.slice(0, colon)), Number(text.slice(colon + 1))];
  return text.split(':').map(Number);
}

// What the script decided for one limit (`flags`: 1 allowed, 2 consumed), and what follows from
// the counter's state before and the script's time: the same view and decide functions as the
// memory store's, so both stores answer alike. With `before`, the counter before the request is
// added to it.
function outcomeFrom(c: LimitCheck, flags: number, raw: unknown, now: number, before?: Before[]): LimitOutcome {
  const impl = implFor(c);
  const state = decodeState(raw, c, now);
  const allowed = (flags & 1) === 1;
  const consumed = (flags & 2) === 2;
  const verdict = impl.decide(state, c, c.hits, now);
  const was = impl.view(state, c, now);
  const after = consumed ? impl.view(verdict.next, c, now) : was;
  before?.push({ remaining: was.remaining, resetMs: was.resetMs });
  const outcome: LimitOutcome = {
    allowed,
    consumed,
    remaining: after.remaining,
    resetMs: after.resetMs,
    retryAfterMs: allowed ? 0 : verdict.retryAfterMs,
    usedBefore: was.used,
  };
  if (c.layout === 'pool') {
    outcome.held = state === undefined ? undefined : poolUnits(consumed ? verdict.next : state, now);
    outcome.ample = state !== undefined && poolAmple(state, now);
    const pending = state === undefined ? undefined : poolPendingMs(state, now);
    if (pending !== undefined) outcome.pendingMs = pending;
  }
  return outcome;
}

// What the groups consumed, as refunds (each at its own group's Redis time).
function consumed(all: readonly LimitCheck[], groups: GroupResult[]): RefundEntry[] {
  const out: RefundEntry[] = [];
  for (const g of groups) {
    g.checks.forEach((i, j) => {
      if (!g.outcomes[j].consumed) return;
      const c = all[i];
      out.push({ key: c.key, ...specOf(c), hits: c.hits, decidedAtMs: g.now });
    });
  }
  return out;
}

// A multi-slot decision's time: the latest of its groups' clocks (cluster nodes' clocks differ).
function latest(groups: GroupResult[]): number | undefined {
  return groups.length === 0 ? undefined : groups.reduce((t, g) => Math.max(t, g.now), -Infinity);
}

// What decides a key's hash slot: the text between its first '{' and the next '}' when not empty,
// else the whole key (which keys.ts never leaves with a '}': it escapes braces in every part).
function hashTagOf(key: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}
