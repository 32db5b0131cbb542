import calculateSlot from 'cluster-key-slot';
import type { Cluster, Redis } from 'ioredis';
import type { Clock } from '../clock';
import type { LimitSpec } from '../limiter/algorithms';
import { admits } from '../limiter/policy';
import { loadScripts } from './scripts';
import type { DecideOptions, Decision, LimitCheck, LimitOutcome, Store } from './store';

export type RedisClient = Redis | Cluster;

type ScriptName = 'sluiceDecide' | 'sluiceRefund' | 'sluiceAbsorb' | 'sluiceLease';

interface ScriptClient {
  sluiceDecide(numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  sluiceRefund(numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  sluiceAbsorb(numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  sluiceLease(numKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
}

interface GroupResult {
  checks: number[];
  admitted: boolean;
  now: string;
  outcomes: (LimitOutcome & { remainingBefore: number; resetBefore: number })[];
}

const FIELDS = 8;

export interface LeaseGrant {
  granted: number;
  // Redis time of the take, for giving units back to the right window.
  takenAt: string;
  remaining: number;
  resetMs: number;
  // When nothing was granted: until one unit could be.
  retryAfterMs: number;
}

// Hits admitted at `atMs` by a local fallback, to be added to the shared counter.
export interface AbsorbEntry extends LimitSpec {
  key: string;
  hits: number;
  atMs: number;
}

function num(s: string | number): number {
  return s === 'inf' ? Infinity : Number(s);
}

export interface RedisStoreOptions {
  // Round-robin over these (REDIS_POOL_SIZE); one Cluster client in cluster mode.
  clients: RedisClient[];
  cluster: boolean;
  // Tests only: pass this clock's time to the scripts instead of Redis' TIME.
  explicitClock?: Clock;
  // Every script call's duration, by operation (decide, refund, absorb, lease), for metrics.
  observe?: (operation: string, seconds: number, ok: boolean) => void;
}

const OPERATION: Record<ScriptName, string> = { sluiceDecide: 'decide', sluiceRefund: 'refund', sluiceAbsorb: 'absorb', sluiceLease: 'lease' };

// Counters in Redis. One script call decides a whole request; on Redis Cluster one call per hash
// slot group, in parallel, and a compensating refund when one group denies after others consumed.
export class RedisStore implements Store {
  readonly kind: string;
  private next = 0;
  private readonly scripts: Record<ScriptName, string>;

  constructor(private readonly options: RedisStoreOptions) {
    this.kind = options.cluster ? 'redis-cluster' : 'redis';
    const scripts = loadScripts();
    this.scripts = { sluiceDecide: scripts.decide, sluiceRefund: scripts.refund, sluiceAbsorb: scripts.absorb, sluiceLease: scripts.lease };
    for (const client of options.clients) {
      for (const [name, lua] of Object.entries(this.scripts)) client.defineCommand(name, { lua });
    }
  }

  ready(): boolean {
    return this.options.clients.some((c) => c.status === 'ready');
  }

  onReadyChange(listener: () => void): void {
    for (const c of this.options.clients) for (const event of ['ready', 'close', 'end', 'error']) c.on(event, listener);
  }

  async close(): Promise<void> {
    await Promise.all(this.options.clients.map((c) => c.quit().catch(() => c.disconnect())));
  }

  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const groups = this.groups(checks);
    if (groups.length === 1) {
      const g = await this.decideGroup(checks, groups[0], options, 'request');
      return { admitted: g.admitted, outcomes: g.outcomes.map(strip) };
    }
    const settled = await Promise.allSettled(groups.map((g) => this.decideGroup(checks, g, options, 'group')));
    const done = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) {
      if (!options.countDeniedHits) await this.refund(checks, done).catch(() => undefined);
      throw failed.reason;
    }
    return this.combine(checks, done, options);
  }

  // Writes back hits admitted elsewhere (see lua/absorb.lua); one script call per slot group.
  async absorb(entries: readonly AbsorbEntry[]): Promise<void> {
    const groups = this.groups(entries);
    await Promise.all(
      groups.map(async (idx) => {
        const group = idx.map((i) => entries[i]);
        const args: (string | number)[] = [this.time()];
        for (const e of group) args.push(e.algorithm, e.limit, e.periodMs, e.burst, e.hits, e.atMs);
        await this.run('sluiceAbsorb', group.length, [...group.map((e) => e.key), ...args]);
      }),
    );
  }

  // Takes up to `units` of a limit's budget (lua/lease.lua).
  async lease(spec: LimitSpec & { key: string }, units: number): Promise<LeaseGrant> {
    const args = [this.time(), spec.algorithm, spec.limit, spec.periodMs, spec.burst, units];
    const r = (await this.run('sluiceLease', 1, [spec.key, ...args])) as (string | number)[];
    return { granted: Number(r[0]), takenAt: String(r[1]), remaining: num(r[2]), resetMs: num(r[3]), retryAfterMs: num(r[4]) };
  }

  // Gives back `units` taken by a lease at `takenAt` (Redis time) that were not used.
  async giveBack(spec: LimitSpec & { key: string }, units: number, takenAt: string): Promise<void> {
    const args = [takenAt, this.time(), spec.algorithm, spec.limit, spec.periodMs, spec.burst, units];
    await this.run('sluiceRefund', 1, [spec.key, ...args]);
  }

  async peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    const groups = await Promise.all(this.groups(checks).map((g) => this.decideGroup(checks, g, options, 'peek')));
    const outcomes: LimitOutcome[] = [];
    for (const g of groups) g.checks.forEach((i, j) => (outcomes[i] = strip(g.outcomes[j])));
    return { admitted: admits(checks.map((c) => c.mode), outcomes.map((o) => o.allowed)), outcomes };
  }

  // Checks grouped by the node that must run them: everything together on a single Redis; by
  // hash slot on a cluster (a script may only touch keys of one slot).
  private groups(checks: readonly { key: string }[]): number[][] {
    if (!this.options.cluster) return [checks.map((_, i) => i)];
    const bySlot = new Map<number, number[]>();
    checks.forEach((c, i) => {
      const slot = calculateSlot(c.key);
      const group = bySlot.get(slot);
      if (group === undefined) bySlot.set(slot, [i]);
      else group.push(i);
    });
    return [...bySlot.values()];
  }

  private client(): ScriptClient {
    const clients = this.options.clients;
    this.next = (this.next + 1) % clients.length;
    return clients[this.next] as unknown as ScriptClient;
  }

  // EVALSHA, reloading on NOSCRIPT. ioredis re-sends once, but a second flush (or failover) can
  // land between its reload and the retry; then EVAL with the whole script, which cannot miss.
  private async run(name: ScriptName, numKeys: number, args: (string | number)[]): Promise<unknown> {
    const start = performance.now();
    let ok = false;
    try {
      const result = await this.call(name, numKeys, args);
      ok = true;
      return result;
    } finally {
      this.options.observe?.(OPERATION[name], (performance.now() - start) / 1000, ok);
    }
  }

  private async call(name: ScriptName, numKeys: number, args: (string | number)[]): Promise<unknown> {
    const client = this.client();
    try {
      return await client[name](numKeys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.includes('NOSCRIPT')) throw err;
      return client.eval(this.scripts[name], numKeys, ...args);
    }
  }

  private time(): string {
    return this.options.explicitClock === undefined ? '' : String(this.options.explicitClock.now());
  }

  private async decideGroup(all: readonly LimitCheck[], idx: number[], options: DecideOptions, scope: 'request' | 'group' | 'peek'): Promise<GroupResult> {
    const checks = idx.map((i) => all[i]);
    const args: (string | number)[] = [options.countDeniedHits ? '1' : '0', this.time(), scope];
    for (const c of checks) args.push(c.algorithm, c.limit, c.periodMs, c.burst, c.hits, c.mode);
    const reply = (await this.run('sluiceDecide', checks.length, [...checks.map((c) => c.key), ...args])) as (string | number)[];
    const outcomes = checks.map((_, j) => {
      const f = reply.slice(2 + j * FIELDS, 2 + (j + 1) * FIELDS);
      return {
        allowed: f[0] === 1,
        consumed: f[1] === 1,
        remaining: num(f[2]),
        resetMs: num(f[3]),
        retryAfterMs: num(f[4]),
        usedBefore: num(f[5]),
        remainingBefore: num(f[6]),
        resetBefore: num(f[7]),
      };
    });
    return { checks: idx, admitted: reply[0] === 1, now: String(reply[1]), outcomes };
  }

  private async combine(all: readonly LimitCheck[], groups: GroupResult[], options: DecideOptions): Promise<Decision> {
    const outcomes: (LimitOutcome & { remainingBefore: number; resetBefore: number })[] = [];
    for (const g of groups) g.checks.forEach((i, j) => (outcomes[i] = g.outcomes[j]));
    const admitted = admits(all.map((c) => c.mode), outcomes.map((o) => o.allowed));
    if (!admitted && !options.countDeniedHits) {
      await this.refund(all, groups);
      for (const o of outcomes) {
        if (!o.consumed) continue;
        o.consumed = false;
        o.remaining = o.remainingBefore;
        o.resetMs = o.resetBefore;
      }
    }
    return { admitted, outcomes: outcomes.map(strip) };
  }

  // Gives back what groups consumed for a request that is denied after all.
  private async refund(all: readonly LimitCheck[], groups: GroupResult[]): Promise<void> {
    await Promise.all(
      groups.map(async (g) => {
        const consumed = g.checks.filter((_, j) => g.outcomes[j].consumed).map((i) => all[i]);
        if (consumed.length === 0) return;
        const args: (string | number)[] = [g.now, this.time()];
        for (const c of consumed) args.push(c.algorithm, c.limit, c.periodMs, c.burst, c.hits);
        await this.run('sluiceRefund', consumed.length, [...consumed.map((c) => c.key), ...args]);
      }),
    );
  }
}

function strip(o: LimitOutcome & { remainingBefore: number; resetBefore: number }): LimitOutcome {
  return {
    allowed: o.allowed,
    consumed: o.consumed,
    remaining: o.remaining,
    resetMs: o.resetMs,
    retryAfterMs: o.retryAfterMs,
    usedBefore: o.usedBefore,
  };
}
