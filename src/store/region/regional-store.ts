import type { Clock } from '../../clock';
import { isWindow, type LimitSpec, specOf } from '../../algorithms';
import { admits } from '../../algorithms/policy';
import type { PartitionPolicy } from './partition';
import type { RedisStore, Stored, StoredCheck } from '../redis';
import { type AbsorbEntry, type LeaseGrant, PartialWrite, type RefundEntry, type OwnEntry, type RestoreEntry, type SharedOps } from '../shared';
import type { DecideOptions, Decision, LimitCheck, Store } from '../store';
import { settledWithin } from '../timeout';
import { PartitionDebt } from './debt';
import type { RegionEvents } from './events';
import type { GlobalLink } from './global-link';
import type { RegionKeys } from './keys';
import { LOW_WATER, type Refiller, unitsOver } from './refiller';
import type { AllowanceOutcome } from './types';

export interface RegionalStoreOptions {
  region: string;
  clock: Clock;
  policy: PartitionPolicy;
  domainPolicies: ReadonlyMap<string, PartitionPolicy>;
  // The caller's budget for one decision, ms (the deadline stage's).
  budgetMs: (options: DecideOptions) => number;
  // A replica's lease of an allowance covers this much of its own demand, ms (0: none).
  replicaHorizonMs: number;
  events: RegionEvents;
}

// How a limit of a request is decided: from the region's allowance (always, while the global
// Redis is reachable), or, once the allowance is spent while cut off from it, by the partition
// policy: the region's own counter at its share of the limit, or allowed.
type Route = 'pool' | 'partition' | 'allow';

const MAX_HELD = 100_000;
// A replica's lease takes at most this share of what the region's allowance holds: the rest is
// left to other replicas, and to requests their leases cannot serve, until the refill lands.
const REPLICA_TAKE_SHARE = 0.5;
// Beyond three round trips, a wait for a lease gives up, ms.
const COLD_WAIT_SLACK_MS = 20;
// Kept back from the caller's budget for the decision after a wait for the global Redis, ms.
const REDECIDE_MS = 20;
// A request denied for want of units that the next window's allowance, leased ahead, brings within
// this many ms waits for them (the margin between a window's allowance and the next: Refiller).
const PENDING_WAIT_MS = 15;

// The regional Redis in multi-region mode (docs/multi-region.md), as the bottom of the Redis stack:
// every limit is decided against the region's allowance in the regional Redis, in one script as
// always, and the allowance is topped up from the global budget by the Refiller, off the request
// path. A request waits for the global Redis only for a key the region holds no allowance of yet
// (and only when the caller's deadline leaves time for the round trip).
//
// For the stages above it is the shared store: their leases and refunds go to the region's
// allowances, the fallback's write-backs to the global budget.
export class RegionalStore implements Store, SharedOps {
  readonly kind: string;
  readonly refunds: { add(entries: readonly RefundEntry[]): void; drain(): Promise<void> };
  // Keys whose allowance is spent while the global Redis is unreachable: decided by the policy.
  private readonly dry = new Set<string>();
  private readonly debt: PartitionDebt;
  private writing: Promise<void> | undefined;
  // Units each allowance held at its last decision here (metrics).
  private readonly held = new Map<string, number>();

  constructor(
    private readonly regional: RedisStore,
    private readonly link: GlobalLink,
    private readonly refiller: Refiller,
    private readonly keys: RegionKeys,
    private readonly o: RegionalStoreOptions,
  ) {
    this.kind = `${regional.kind} (region ${o.region})`;
    this.debt = new PartitionDebt(o.clock);
    this.refunds = {
      add: (entries) => regional.refunds.add(entries.map((e) => ({ ...e, key: keys.pool(e.key), layout: 'pool' }))),
      drain: () => regional.refunds.drain(),
    };
  }

  // Is the global Redis reachable from here (not partitioned)?
  globalReachable(): boolean {
    return this.link.reachable;
  }

  // The last round trip to the global Redis, ms.
  globalRoundTripMs(): number {
    return this.link.roundTripMs;
  }

  // Do replicas serve this region's decisions from leases of its allowances?
  get replicaLeases(): boolean {
    return this.o.replicaHorizonMs > 0;
  }

  heldUnits(): number {
    let sum = 0;
    for (const units of this.held.values()) sum += Math.max(0, units);
    return sum;
  }

  async decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    // The caller's budget is the deadline stage's, counted from here: a wait for the global Redis
    // must end early enough for the decision after it.
    const until = this.o.clock.now() + this.o.budgetMs(options) - REDECIDE_MS;
    let routes = checks.map((c) => this.route(c, options.domain));
    let d = await this.decideRouted(checks, routes, options);
    this.topUp(checks, routes, d.outcomes);
    if (
      (!d.admitted || checks.some((c, i) => this.readShort(c, d.outcomes[i]))) &&
      (await this.repair(checks, routes, d.outcomes, options, { until, storeTimeMs: d.storeTimeMs }))
    ) {
      routes = checks.map((c) => this.route(c, options.domain));
      d = await this.decideRouted(checks, routes, options);
    }
    this.recordDebt(checks, routes, d);
    return this.markCutOff(checks, routes, d, options.domain);
  }

  // A denial for want of an allowance while the global Redis is out of reach is the policy's
  // answer, not the budget's: the global budget may have units. Said like every other answer
  // made without the shared store.
  private markCutOff(checks: readonly LimitCheck[], routes: readonly Route[], d: Decision, domain: string | undefined): Decision {
    if (this.link.reachable || d.admitted || d.degraded !== undefined) return d;
    const dry = checks.some((c, i) => routes[i] === 'pool' && c.mode === 'enforce' && c.hits > 0 && !d.outcomes[i].allowed);
    if (!dry) return d;
    return { ...d, degraded: { policy: 'local', reason: this.cutOffReason(domain) } };
  }

  private cutOffReason(domain: string | undefined): string {
    return `global Redis unreachable from region ${this.o.region}: the region's allowance is spent; ${describe(this.policyFor(domain))}`;
  }

  peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.decideRouted(
      checks,
      checks.map((c) => this.route(c, options.domain)),
      options,
      true,
    );
  }

  ready(): boolean {
    return this.regional.ready();
  }

  connected(): boolean {
    return this.regional.connected();
  }

  degraded(): string | undefined {
    if (this.link.reachable) return undefined;
    return `global Redis unreachable from region ${this.o.region}: answering from the region's allowances, then by the partition policy (${describe(this.o.policy)})`;
  }

  onReadyChange(listener: () => void): void {
    this.regional.onReadyChange(listener);
  }

  configChanged(): void {}

  async close(): Promise<void> {
    this.refiller.close();
    await Promise.all([this.link.close(), this.regional.close()]);
  }

  // Called by the link when the global Redis answers again: the region's own admissions go into
  // the global budget first; then keys go back to their allowances.
  async reconcile(): Promise<void> {
    await this.writeDebt();
    this.dry.clear();
  }

  // One write at a time (what is recorded meanwhile goes in the next): an entry written twice
  // would count twice in the global budget.
  private writeDebt(): Promise<void> {
    this.writing ??= this.writeAllDebt().finally(() => (this.writing = undefined));
    return this.writing;
  }

  private async writeAllDebt(): Promise<void> {
    for (let entries = this.debt.entries(); entries.length > 0; entries = this.debt.entries()) {
      try {
        await this.link.absorb(entries);
      } catch (err) {
        if (err instanceof PartialWrite) this.o.events.reconciled(this.debt.clear(entries.filter((e) => err.landed.has(e))));
        throw err;
      }
      this.o.events.reconciled(this.debt.clear(entries));
    }
  }

  // Counts a request's hits as the region's demand, whoever answers it (the stages above answer
  // from leases and remembered denials): the stack calls this for every request.
  note(checks: readonly LimitCheck[]): void {
    for (const c of checks) {
      if (c.hits <= 0) continue;
      this.refiller.note(c);
      this.refiller.ahead(c);
    }
  }

  // The demand a caller stands for on each check (RLQS: Envoys that decide their requests
  // themselves and ask for units ahead of them), in place of its hits: the allowance is leased and
  // topped up for it as for the requests it stands for, and a read of it (0 hits, what an RLQS
  // assignment starts from) waits for units as a request would.
  declare(checks: readonly LimitCheck[], demand: { perS: number; forMs: number }): void {
    for (const c of checks) {
      this.refiller.declare(c.key, demand.perS, demand.forMs);
      if (demand.perS > 0) this.refiller.ahead({ ...c, hits: Math.max(1, c.hits) });
    }
  }

  // A read (0 hits) for declared demand that finds no unit in the allowance: short, as a request
  // for one unit would be.
  private readShort(c: LimitCheck, o: AllowanceOutcome): boolean {
    return c.hits <= 0 && (o.held ?? 0) < 1 && this.refiller.declaredRate(c.key) > 0;
  }

  // Has this replica seen requests for `check` lately?
  asked(check: LimitCheck): boolean {
    return this.refiller.replicaRate(check.key) > 0;
  }

  // Units a replica's lease of the region's allowance holds for `check`: its own demand over the
  // replica horizon (at least one request's hits, at most what the limit holds); 0 = no replica
  // leases, every decision on the regional Redis.
  replicaLeaseSize(check: LimitCheck): number {
    if (this.o.replicaHorizonMs <= 0) return 0;
    return unitsOver(check, this.refiller.replicaRate(check.key), this.o.replicaHorizonMs);
  }

  // SharedOps for the stages above: on the region's allowances. A replica's lease takes units from
  // the region's allowance, which is topped up as the decisions' would be; at least the hits of
  // the request it was taken for (`spec` is that request's check), or none.
  async lease(spec: LimitSpec & { key: string; hits?: number }, units: number): Promise<LeaseGrant> {
    const grant = await this.regional.lease(this.poolSpec(spec), units, undefined, REPLICA_TAKE_SHARE, Math.max(1, spec.hits ?? 1));
    const check: LimitCheck = { ...spec, hits: Math.max(1, units), mode: 'enforce' };
    // No allowance at all (a new key, a new window): the first request finding none leases it
    // and waits for it (decide), as without replica leases (a lease asked for here, as a window
    // ends, would reach the global Redis still in the old window); nothing here says "try later".
    if (grant.usableMs === undefined || grant.usableMs <= 0) return grant.granted === 0 ? { ...grant, retryAfterMs: 0 } : grant;
    this.remember(spec.key, grant.remaining);
    if (this.link.reachable && grant.remaining < this.refiller.size(check) * LOW_WATER) void this.refiller.refill(check, grant.remaining);
    // Dry, with units on their way (the global budget is not short): not a reason to deny here
    // until some later time; the next request goes to the regional Redis, which waits for them.
    if (grant.granted === 0 && this.unitsComing(grant.ample)) return { ...grant, retryAfterMs: 0 };
    return grant;
  }

  giveBack(spec: LimitSpec & { key: string }, units: number, takenAtMs: number): Promise<void> {
    return this.regional.giveBack(this.poolSpec(spec), units, takenAtMs);
  }

  // What the regional fallback admitted while the regional Redis could not decide was admitted
  // without any allowance: it goes into the global budget, as a partition's admissions do (the
  // journal keeps it and tries again while the global Redis is out of reach).
  async absorb(entries: readonly AbsorbEntry[]): Promise<void> {
    const debts = entries.map((e) => ({ ...e, debt: true }));
    try {
      await this.link.absorb(debts);
    } catch (err) {
      // The journal knows its entries by identity: say which of its own landed.
      if (err instanceof PartialWrite) throw new PartialWrite(err.message, new Set(entries.filter((_, i) => err.landed.has(debts[i]))));
      throw err;
    }
  }

  refund(entries: readonly RefundEntry[]): Promise<void> {
    return this.regional.refund(entries.map((e) => this.poolSpec(e)));
  }

  // An allowance lost with the regional Redis' data is leased again, not restored.
  async restore(_entries: readonly RestoreEntry[]): Promise<void> {}
  async restoreOwn(_entries: readonly OwnEntry[], _owner: string): Promise<void> {}

  heartbeat(replicaId: string, ttlMs: number, epoch: string): Promise<{ replicas: number; nowMs: number; epoch: string }> {
    return this.regional.heartbeat(replicaId, ttlMs, epoch);
  }

  leave(replicaId: string): Promise<void> {
    return this.regional.leave(replicaId);
  }

  probe(): Promise<{ nowMs: number }> {
    return this.regional.probe();
  }

  private poolSpec<T extends LimitSpec & { key: string }>(e: T): Stored<T> {
    return { ...e, key: this.keys.pool(e.key), layout: 'pool' };
  }

  private policyFor(domain: string | undefined): PartitionPolicy {
    return (domain === undefined ? undefined : this.o.domainPolicies.get(domain)) ?? this.o.policy;
  }

  private route(c: LimitCheck, domain: string | undefined): Route {
    if (this.link.reachable || !this.dry.has(c.key)) return 'pool';
    const policy = this.policyFor(domain);
    return policy.kind === 'deny' ? 'pool' : policy.kind === 'allow' ? 'allow' : 'partition';
  }

  private async decideRouted(
    checks: readonly LimitCheck[],
    routes: readonly Route[],
    options: DecideOptions,
    peek = false,
  ): Promise<Decision<AllowanceOutcome>> {
    const inner: StoredCheck[] = [];
    const at: number[] = [];
    routes.forEach((r, i) => {
      if (r === 'allow') return;
      at.push(i);
      inner.push(r === 'pool' ? this.poolSpec(checks[i]) : this.partitionCheck(checks[i], options.domain));
    });
    const d = inner.length === 0 ? undefined : peek ? await this.regional.peek(inner, options) : await this.regional.decide(inner, options);
    if (d !== undefined && inner.length === checks.length && routes.every((r) => r === 'pool')) return d;
    const outcomes: AllowanceOutcome[] = checks.map(() => ({
      allowed: true,
      consumed: false,
      remaining: undefined,
      resetMs: undefined,
      retryAfterMs: 0,
      usedBefore: 0,
    }));
    at.forEach((i, j) => (outcomes[i] = d!.outcomes[j]));
    const admitted = admits(
      checks.map((c) => c.mode),
      outcomes.map((o) => o.allowed),
    );
    const allow = routes.includes('allow');
    return { admitted, outcomes, storeTimeMs: d?.storeTimeMs, degraded: { policy: allow ? 'allow' : 'local', reason: this.cutOffReason(options.domain) } };
  }

  private partitionCheck(c: LimitCheck, domain: string | undefined): LimitCheck {
    const policy = this.policyFor(domain);
    const share = policy.kind === 'share' ? policy.share : 1;
    return { ...c, key: this.keys.partition(c.key), limit: Math.floor(c.limit * share), burst: Math.floor(c.burst * share) };
  }

  // Starts a refill of every allowance that fell below its low-water mark (in the background).
  private topUp(checks: readonly LimitCheck[], routes: readonly Route[], outcomes: readonly AllowanceOutcome[]): void {
    if (!this.link.reachable) return;
    checks.forEach((c, i) => {
      const held = outcomes[i].held;
      if (routes[i] !== 'pool' || (c.hits <= 0 && this.refiller.declaredRate(c.key) <= 0) || held === undefined) return;
      this.remember(c.key, held);
      if (held < this.refiller.size(c) * LOW_WATER) void this.refiller.refill(c, held);
    });
  }

  // May a refill bring a spent allowance units soon: the global Redis is reachable, and the
  // allowance's last refill brought all it asked for (the global budget is not short; when it is,
  // a wait would mostly end in a denial, one global round trip late).
  private unitsComing(ample: boolean | undefined): boolean {
    return this.link.reachable && ample === true;
  }

  private remember(key: string, held: number): void {
    if (this.held.size >= MAX_HELD && !this.held.has(key)) this.held.clear();
    this.held.set(key, held);
  }

  // After a denial: a key the region holds no allowance of gets one now, and a dry allowance the
  // units on their way, if the caller's deadline leaves time for the global round trip; while cut
  // off, a key whose allowance is spent goes to the partition policy. True when deciding again may
  // change the answer.
  private async repair(
    checks: readonly LimitCheck[],
    routes: readonly Route[],
    outcomes: readonly AllowanceOutcome[],
    options: DecideOptions,
    { until, storeTimeMs }: { until: number; storeTimeMs: number | undefined },
  ): Promise<boolean> {
    const short = checks
      .map((_, i) => i)
      .filter((i) => routes[i] === 'pool' && ((checks[i].hits > 0 && !outcomes[i].allowed) || this.readShort(checks[i], outcomes[i])));
    if (short.length === 0) return false;
    // Units of the next window, leased ahead, about to begin here (for every limit short of
    // units): worth a wait, with no call.
    const pending = Math.max(...short.map((i) => outcomes[i].pendingMs ?? Infinity));
    if (pending <= PENDING_WAIT_MS && pending < until - this.o.clock.now()) {
      // Whole ms past it: a timer may fire up to a ms short of a fraction.
      await sleep(Math.ceil(pending) + 1);
      return true;
    }
    if (!this.link.reachable) {
      const policy = this.policyFor(options.domain);
      if (policy.kind === 'deny') return false;
      const fresh = short.filter((i) => !this.dry.has(checks[i].key));
      for (const i of fresh) this.dry.add(checks[i].key);
      if (policy.kind === 'share')
        await this.startEmpty(
          fresh.map((i) => checks[i]),
          options.domain,
          storeTimeMs,
        );
      return true;
    }
    // Cold (no allowance yet), or dry with a refill that should bring units (the global budget
    // gave all that was asked last time): worth a wait. A dry allowance of a short budget is not.
    const waitable = short.filter((i) => outcomes[i].held === undefined || this.unitsComing(outcomes[i].ample));
    const refill = (i: number) => this.refiller.refill(checks[i], outcomes[i].held);
    const budget = until - this.o.clock.now();
    if (waitable.length === 0 || budget < 2 * this.link.roundTripMs + 10) {
      for (const i of waitable) void refill(i);
      return false;
    }
    // A lease answers in about a round trip; one that takes three is stuck (a link going dark),
    // and the caller is better served by a denial now than by one at its deadline.
    const rtt = this.link.roundTripMs;
    const wait = rtt > 0 ? Math.min(budget, 3 * rtt + COLD_WAIT_SLACK_MS) : budget;
    this.o.events.waited();
    const results = await settledWithin(Promise.all(waitable.map(refill)), wait);
    if (results === undefined) return false;
    // Busy: another replica of the region is leasing it (or, for a dry allowance, the region is
    // backing off). A cold key's credit lands about a round trip later: worth one more wait.
    const coldBusy = results.some((r, j) => r === 'busy' && outcomes[waitable[j]].held === undefined);
    if (coldBusy) await sleep(Math.min(until - this.o.clock.now(), this.link.roundTripMs + 20));
    return results.some((r, j) => r === 'credited' || (r === 'busy' && outcomes[waitable[j]].held === undefined)) || !this.link.reachable;
  }

  // A bucket a cut-off region starts deciding on its own starts empty: the region gets its share
  // of the rate from then on, not a burst on top of what it already spent. (A window's own count
  // starts at zero: at most the share of the limit per window.)
  private async startEmpty(checks: readonly LimitCheck[], domain: string | undefined, atMs: number | undefined): Promise<void> {
    const buckets = checks.filter((c) => !isWindow(c));
    if (buckets.length === 0 || atMs === undefined) return;
    const entries = buckets.map((c) => {
      const p = this.partitionCheck(c, domain);
      return { key: p.key, ...specOf(p), remaining: 0, atMs };
    });
    await this.regional.restore(entries).catch(() => undefined);
  }

  private recordDebt(checks: readonly LimitCheck[], routes: readonly Route[], d: Decision): void {
    if (routes.every((r) => r === 'pool')) return;
    const globalNow = this.link.globalNow() ?? Date.now();
    checks.forEach((c, i) => {
      const own = (routes[i] === 'partition' && d.outcomes[i].consumed) || (routes[i] === 'allow' && d.admitted);
      if (!own || c.hits <= 0) return;
      this.debt.add(c, globalNow);
      this.o.events.overshoot(c.hits);
    });
    // Decided on the region's own just as the link came back (after reconcile() read the debt).
    if (this.link.reachable) this.writeDebt().catch(() => undefined);
  }
}

function describe(p: PartitionPolicy): string {
  if (p.kind === 'share') return `the region admits up to ${Math.round(p.share * 1000) / 10}% of each limit on its own`;
  return p.kind === 'allow' ? 'allowed' : 'denied';
}

function sleep(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms));
}
