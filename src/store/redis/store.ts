import type { Cluster } from 'ioredis';
import { CancelledError } from '../../errors';
import { admits } from '../../algorithms/policy';
import { RefundQueue, type RefundQueueOptions } from '../refund-queue';
import { encodeCall } from '../resp';
import { MAX_BATCH } from '../shared';
import type { DecideOptions, Decision, LimitCheck, Store } from '../store';
import type { AllowanceOutcome } from '../region/types';
import { settledWithin } from '../timeout';
import { type Before, consumed, decideArgs, type GroupResult, latest, readDecideReply } from './decide-codec';
import type { RedisClient } from './scripts';
import { type RedisOpsOptions, RedisSharedOps } from './shared-ops';
import type { StoredCheck, StoredRefund } from './spec';

// What the scripts say of each limit: a region's allowance (`layout: 'pool'`, spec.ts) says what it holds.
type RedisDecision = Decision<AllowanceOutcome>;

// Requests per batched decide call at most (and MAX_BATCH keys): one script call stays short.
const BATCH_REQUESTS = 64;

interface Pending {
  all: readonly StoredCheck[];
  idx: number[];
  caller: { readonly cancelled: boolean } | undefined;
  resolve(d: RedisDecision): void;
  reject(err: unknown): void;
}
// While a connection is up but no decision has round-tripped yet, probe this often.
const PROBE_RETRY_MS = 200;
// How often readiness looks again at a cluster's primary connections while they open.
const WARM_POLL_MS = 20;
// close() waits this long for queued refunds and for each connection's QUIT.
const CLOSE_WAIT_MS = 1_000;

export interface RedisStoreOptions extends RedisOpsOptions {
  // Tests shorten the refund backoff.
  refunds?: Pick<RefundQueueOptions, 'maxEntries' | 'firstRetryMs' | 'maxRetryMs'>;
}

// Counters in Redis. One script call decides a whole request; on Redis Cluster one call per hash
// slot group, in parallel, and the hits consumed by groups of a request that is denied after all
// are given back in the background (refunds). Besides the Store interface, the operations only a
// shared store has (SharedOps) for the resilience stages.
export class RedisStore extends RedisSharedOps implements Store {
  readonly kind: string;
  // Hits to give back for multi-slot requests denied (or failed) after some slots consumed.
  readonly refunds: RefundQueue<StoredRefund>;
  // Requests waiting for the end of this event-loop turn to go to Redis together (see batched()).
  private batch: { requests: Pending[]; keys: number; countDenied: boolean } = { requests: [], keys: 0, countDenied: false };
  private flushQueued = false;
  // Cluster calls waiting for the end of this turn (see decide()).
  private turnWaiters: (() => void)[] = [];
  // Sticky: a real decision has round-tripped since start (readiness).
  private decidedOnce = false;
  private closed = false;
  private readonly listeners = new Set<() => void>();
  private readonly probing = new Set<RedisClient>();

  constructor(private readonly options: RedisStoreOptions) {
    super(options);
    this.kind = options.cluster ? 'redis-cluster' : 'redis';
    this.refunds = new RefundQueue({ ...options.refunds, events: options.events, split: (e) => this.batches(e), send: (b) => this.refundBatch(b) });
    for (const client of options.clients) {
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
    await settledWithin(
      this.refunds.drain().catch(() => undefined),
      CLOSE_WAIT_MS,
    );
    this.refunds.close();
    await Promise.all(
      this.options.clients.map(async (c) => {
        // QUIT only where a connection is up: one still connecting would hold close() a second.
        const up = c.status === 'ready';
        if (up)
          await settledWithin(
            c.quit().catch(() => undefined),
            CLOSE_WAIT_MS,
          );
        // Resolved once an open connection has ended, so that its close events (the breaker's trip
        // among them) are over when close() is (the warm-up's store closes before the port opens).
        // One waiting to reconnect has no socket to close, and ends without an event.
        c.disconnect();
        if (up && c.status !== 'end') await settledWithin(new Promise((resolve) => c.once('end', resolve)), CLOSE_WAIT_MS);
      }),
    );
  }

  decide(checks: readonly StoredCheck[], options: DecideOptions): Promise<RedisDecision> {
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
  private async decideSlots(checks: readonly StoredCheck[], options: DecideOptions): Promise<RedisDecision> {
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

  async peek(checks: readonly StoredCheck[], options: DecideOptions): Promise<RedisDecision> {
    const groups = await Promise.all(this.groups(checks).map((idx) => this.decideGroup(checks, idx, options.countDeniedHits, 'peek', 'peek')));
    const outcomes: AllowanceOutcome[] = [];
    for (const g of groups) g.checks.forEach((i, j) => (outcomes[i] = g.outcomes[j]));
    return {
      admitted: admits(
        checks.map((c) => c.mode),
        outcomes.map((o) => o.allowed),
      ),
      outcomes,
      storeTimeMs: latest(groups),
    };
  }

  // On one Redis (not a cluster), the requests that reach the store in one turn of the event loop
  // (the gRPC streams read from the sockets in that turn) go to Redis as one script call, each
  // decided on its own, in arrival order: Redis' cost per call and the client's are then paid once
  // per batch, not once per request. Nothing waits for a batch to fill: it leaves at the end of
  // the turn's I/O callbacks (setImmediate). (process.nextTick would not batch: Node drains the
  // tick and microtask queues after each stream's callback.)
  private batched(all: readonly StoredCheck[], options: DecideOptions): Promise<RedisDecision> {
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
      (results) =>
        results.forEach((r, i) =>
          r instanceof Error ? requests[i].reject(r) : requests[i].resolve({ admitted: r.admitted, outcomes: r.outcomes, storeTimeMs: r.now }),
        ),
      (err: unknown) => requests.forEach((r) => r.reject(err)),
    );
  }

  // One decide script call for one request (one slot group of it on a cluster).
  private async decideGroup(
    all: readonly StoredCheck[],
    idx: number[],
    countDenied: boolean,
    scope: 'request' | 'group' | 'peek',
    operation: string,
    client?: RedisClient,
  ): Promise<GroupResult> {
    const [g] = await this.decideMany([{ all, idx }], countDenied, scope, operation, client);
    if (g instanceof Error) throw g;
    return g;
  }

  // One decide script call for `requests` (each the limits `idx` of `all`, all in one hash slot
  // on a cluster), in order. A request the script could not decide (it wrote nothing) comes back
  // as its Error, the others as their results.
  private async decideMany(
    requests: readonly { all: readonly StoredCheck[]; idx: number[] }[],
    countDenied: boolean,
    scope: 'request' | 'group' | 'peek',
    operation: string,
    client?: RedisClient,
  ): Promise<(GroupResult | Error)[]> {
    const [numKeys, args] = decideArgs(requests, countDenied, this.time(), scope, this.windows);
    // On one Redis (not a cluster, whose client routes a command by its arguments' keys) the
    // command is written here as bytes (store/resp.ts).
    const reply = (
      client === undefined && !this.options.cluster && this.runner.usesFunctions
        ? await this.runner.runWire(operation, 'decide', encodeCall('FCALL', this.runner.scripts.functions.decide, numKeys, args), numKeys, args)
        : await this.runner.run(operation, 'decide', numKeys, args, client)
    ) as unknown[];
    this.decided();
    return readDecideReply(reply, requests, scope);
  }

  // One real decision round-tripped: the decide script in peek mode on a key of its own, through
  // every pool connection that is up, so that when it resolves every call sent before it on those
  // connections has been answered (each connection keeps order). Fails when any of them fails.
  async probe(): Promise<{ nowMs: number }> {
    const up = this.options.clients.filter((c) => c.status === 'ready');
    if (up.length === 0) return this.probeWith(this.runner.client());
    const replies = await Promise.all(up.map((c) => this.probeWith(c)));
    return replies[0];
  }

  private async probeWith(client: RedisClient): Promise<{ nowMs: number }> {
    const check: LimitCheck = {
      key: `${this.options.keyPrefix}{sluice-probe}`,
      algorithm: 'fixed_window',
      limit: 1,
      periodMs: 1000,
      burst: 1,
      hits: 0,
      mode: 'enforce',
    };
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

  private decided(): void {
    if (!this.decidedOnce) {
      this.decidedOnce = true;
      this.notify();
    }
  }

  private notify(): void {
    for (const listener of this.listeners) listener();
  }

  // The request rule across slot groups. A denial never waits for (or fails because of) giving
  // back what other groups consumed: that goes to the refund queue, and the answer reports the
  // counters as they were before this request.
  private combine(all: readonly StoredCheck[], groups: GroupResult[], options: DecideOptions): RedisDecision {
    const outcomes: AllowanceOutcome[] = [];
    const before: Before[] = [];
    for (const g of groups) {
      g.checks.forEach((i, j) => {
        outcomes[i] = g.outcomes[j];
        before[i] = g.before![j];
      });
    }
    const admitted = admits(
      all.map((c) => c.mode),
      outcomes.map((o) => o.allowed),
    );
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
