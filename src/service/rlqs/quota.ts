import { type Clock, monotonicClock } from '../../clock';
import type { ConfigHolder } from '../../config/holder';
import type { RateLimitRule } from '../../config/types';
import { UnavailableError } from '../../errors';
import type {
  RateLimitQuotaResponse,
  RateLimitQuotaResponse_BucketAction as PbAction,
  RateLimitQuotaUsageReports,
} from '../../gen/envoy/service/rate_limit_quota/v3/rlqs';
import { planRequest, type LimiterSettings } from '../../limiter/limiter';
import type { Logger } from '../../logger';
import type { Entry } from '../../model';
import type { LimitCheck, LimitOutcome, Store } from '../../store/store';
import type { RequestBounds } from '../request';
import { allowAll, abandon, denyAll, tokens, type ActionKind } from './actions';
import { bucketEntries, type BucketUsage, validateReport } from './bucket';
import { type Hold, reportRate, targetHold } from './share';

// What the RLQS service tells telemetry (server/ turns it into metrics).
export interface RlqsEvents {
  report(domain: string, buckets: number): void;
  action(domain: string, action: ActionKind): void;
  unknownBucket(domain: string): void;
  streams(delta: 1 | -1): void;
}

export interface QuotaOptions {
  assignmentTtlMs: number;
  unknownBucket: 'allow' | 'deny';
  maxBucketsPerStream: number;
}

export interface QuotaDeps {
  config: ConfigHolder;
  store: Store;
  limiter: LimiterSettings;
  bounds: RequestBounds;
  options: QuotaOptions;
  events: RlqsEvents;
  logger: Logger;
  clock?: Clock;
}

// One Envoy's (one stream's) hold on one bucket.
interface Holding extends Hold {
  domain: string;
  usage: BucketUsage;
  // The rule and descriptor the bucket matched; undefined: no rule (the unknown-bucket behaviour).
  entries?: Entry[];
  rule?: RateLimitRule;
  // Local time its assignment ends at Envoy; what is left of the credit then goes back.
  expiresAt: number;
  // The store's time of the oldest take still in the credit (the window its units went to), or
  // undefined when the credit holds units that cannot be given back (taken without the store).
  takenAtMs?: number;
  // Gives the credit back when the assignment lapses without a renewal (the stream may be gone).
  lapse?: NodeJS.Timeout;
  // Makes every assignment a new token bucket at Envoy (see actions.ts).
  assignments: number;
}

// Reports a stream may have waiting; more ends it (a client that writes faster than reports are
// answered is not an Envoy).
const MAX_PENDING_REPORTS = 64;
// How long the store may take for a report's answer, ms. Off Envoy's request path, and Envoy asks
// again only at its next report (5 s on): time for a round trip to a far store (multi-region: a
// region that holds no allowance of the bucket yet leases one) rather than an empty assignment.
const REPORT_DEADLINE_MS = 1000;

// The RLQS server: Envoys report usage per bucket; each report is answered with an assignment per
// bucket, a token bucket holding units reserved in the same counter RLS decides on (docs/rlqs.md).
export class RateLimitQuotaService {
  private readonly clock: Clock;
  private readonly streams = new Set<QuotaStream>();
  // Every hold on a bucket, across streams: the Envoys sharing it.
  private readonly groups = new Map<string, Set<Holding>>();
  private stopped = false;

  constructor(private readonly deps: QuotaDeps) {
    this.clock = deps.clock ?? monotonicClock;
  }

  // A new stream; `send` writes an answer on it, `fail` ends it with an error.
  open(send: (response: RateLimitQuotaResponse) => void, fail: (err: Error) => void): QuotaStream {
    const stream = new QuotaStream(this, send, fail);
    this.streams.add(stream);
    this.deps.events.streams(1);
    return stream;
  }

  // A new config is in: buckets whose rule is gone are abandoned at their Envoy, and holds on a rule
  // that changed start over (their units belong to the old counter). Streams stay open.
  configChanged(): void {
    for (const stream of this.streams) stream.configChanged();
  }

  // The service stops: assignments still out stay consumed (their Envoys use them until their TTL);
  // nothing is given back to a store that is closing.
  close(): void {
    this.stopped = true;
  }

  get activeStreams(): number {
    return this.streams.size;
  }

  /** @internal */ closed(stream: QuotaStream): void {
    if (this.streams.delete(stream)) this.deps.events.streams(-1);
  }

  /** @internal */ get d(): QuotaDeps {
    return this.deps;
  }

  /** @internal */ now(): number {
    return this.clock.now();
  }

  /** @internal */ join(h: Holding): void {
    const key = groupKey(h);
    let group = this.groups.get(key);
    if (group === undefined) this.groups.set(key, (group = new Set()));
    group.add(h);
  }

  /** @internal */ leave(h: Holding): void {
    const key = groupKey(h);
    const group = this.groups.get(key);
    if (group?.delete(h) && group.size === 0) this.groups.delete(key);
  }

  // Units reserved for `h` that its Envoy did not use go back to the counter (RLS can admit them).
  /** @internal */ giveBack(h: Holding, units: number): void {
    const config = this.deps.config.config;
    if (this.stopped || units <= 0 || h.takenAtMs === undefined || h.entries === undefined || config === undefined) return;
    const check = planRequest(config, descriptorRequest(h, units), this.deps.limiter).checks[0];
    if (check !== undefined) this.deps.store.giveBackUnused?.(check, units, h.takenAtMs);
  }

  // The assignment ended at Envoy: what it did not report used goes back.
  /** @internal */ lapse(h: Holding): void {
    clearTimeout(h.lapse);
    h.lapse = undefined;
    this.giveBack(h, h.credit);
    h.credit = 0;
  }

  // The other live holds on the same bucket (an expired one holds nothing and asks for nothing).
  /** @internal */ others(h: Holding, now: number): Hold[] {
    const out: Hold[] = [];
    for (const o of this.groups.get(groupKey(h)) ?? []) if (o !== h && o.expiresAt > now) out.push(o);
    return out;
  }
}

function groupKey(h: Holding): string {
  return `${h.domain}\u0000${h.usage.id}`;
}

// What identifies the counter a rule decides on: a hold on another one starts over.
function ruleSignature(rule: RateLimitRule | undefined, entries: Entry[] | undefined): string {
  if (rule === undefined || entries === undefined) return '';
  return JSON.stringify([rule.fullKey, rule.algorithm, rule.requestsPerUnit, rule.periodMs, rule.burst, rule.unlimited, entries]);
}

export class QuotaStream {
  private readonly holdings = new Map<string, Holding>();
  private chain: Promise<void> = Promise.resolve();
  private pending = 0;
  private ended = false;

  constructor(
    private readonly service: RateLimitQuotaService,
    private readonly send: (response: RateLimitQuotaResponse) => void,
    private readonly fail: (err: Error) => void,
  ) {}

  // A report arrived: answered in arrival order, one at a time (a bucket's credit is updated by
  // each in turn).
  receive(pb: RateLimitQuotaUsageReports): void {
    if (this.ended) return;
    if (++this.pending > MAX_PENDING_REPORTS)
      return this.end(new ResourceExhaustedError(`more than ${MAX_PENDING_REPORTS} usage reports waiting on one stream`));
    this.chain = this.chain.then(async () => {
      this.pending--;
      if (this.ended) return;
      try {
        const response = await this.answer(pb);
        if (response !== undefined && !this.ended) this.send(response);
      } catch (err) {
        this.end(err as Error);
      }
    });
  }

  // The client is done reporting: its reports are answered, then the stream is over.
  async finish(): Promise<void> {
    await this.chain;
    this.close();
  }

  // The stream is over (the client closed it, or it failed): its holds leave their buckets. The
  // units they hold go back only when their assignment lapses: Envoy keeps using them until then
  // (and reports what it used on its next stream, to this replica or another).
  close(): void {
    this.ended = true;
    for (const h of this.holdings.values()) this.service.leave(h);
    this.holdings.clear();
    this.service.closed(this);
  }

  private end(err: Error): void {
    if (this.ended) return;
    this.close();
    this.fail(err);
  }

  private async answer(pb: RateLimitQuotaUsageReports): Promise<RateLimitQuotaResponse | undefined> {
    const { d } = this.service;
    const report = validateReport(pb, d.bounds);
    const config = d.config.config;
    const known = config?.domains.has(report.domain) === true;
    d.events.report(known ? report.domain : '', report.usages.length);
    if (config === undefined) {
      d.logger.warn(
        { event: 'rlqs_no_config', domain: report.domain },
        'RLQS usage report not answered: no rate limit configuration loaded (Envoy keeps its assignments until their TTL)',
      );
      return undefined;
    }
    const actions: PbAction[] = [];
    for (const usage of report.usages) {
      const action = await this.bucketAction(report.domain, usage, known);
      if (action !== undefined) actions.push(action);
    }
    return actions.length === 0 ? undefined : { bucketAction: actions };
  }

  private holding(domain: string, usage: BucketUsage): Holding {
    const key = `${domain}\u0000${usage.id}`;
    let h = this.holdings.get(key);
    if (h === undefined) {
      const max = this.service.d.options.maxBucketsPerStream;
      if (this.holdings.size >= max) throw new ResourceExhaustedError(`stream reports more than ${max} buckets (RLQS_MAX_BUCKETS_PER_STREAM)`);
      h = { domain, usage, credit: 0, rate: 0, expiresAt: 0, assignments: 0 };
      this.resolve(h);
      this.holdings.set(key, h);
      this.service.join(h);
    }
    h.usage = usage;
    return h;
  }

  // Which rule the bucket matches now.
  private resolve(h: Holding): void {
    const config = this.service.d.config.config;
    h.entries = bucketEntries(config?.domains.get(h.domain), h.usage.bucket);
    h.rule = h.entries === undefined || config === undefined ? undefined : planRequest(config, descriptorRequest(h, 1), this.service.d.limiter).limits[0]?.rule;
    if (h.rule === undefined) h.entries = undefined;
  }

  private async bucketAction(domain: string, usage: BucketUsage, known: boolean): Promise<PbAction | undefined> {
    const { d } = this.service;
    const h = this.holding(domain, usage);
    const label = known ? domain : '';
    const now = this.service.now();
    const ttlS = Math.max(1, Math.floor(d.options.assignmentTtlMs / 1000));
    // Envoy admitted these from what this hold reserved; beyond it (before the first assignment,
    // after one expired, or in the round trip of a renewal) they are added to the counter now.
    h.credit -= usage.allowed;
    const excess = Math.max(0, -h.credit);
    h.credit = Math.max(0, h.credit);
    if (h.expiresAt <= now) this.service.lapse(h);
    h.rate = reportRate(usage.allowed, usage.denied, usage.elapsedS);
    if (h.rule === undefined) {
      d.events.unknownBucket(label);
      return this.assign(h, label, d.options.unknownBucket === 'deny' ? denyAll(usage.bucket, ttlS) : allowAll(usage.bucket, ttlS), now, ttlS);
    }
    if (h.rule.unlimited) return this.assign(h, label, allowAll(usage.bucket, ttlS), now, ttlS);
    try {
      return await this.reserve(h, label, excess, now, ttlS);
    } catch (err) {
      if (err instanceof ResourceExhaustedError) throw err;
      // Envoy keeps its assignment until its TTL, then its no_assignment_behavior decides.
      d.logger.warn(
        { event: 'rlqs_store_failed', domain, bucket: usage.bucket, err: (err as Error)?.message },
        'RLQS bucket not answered: the counter store failed',
      );
      return undefined;
    }
  }

  private async reserve(h: Holding, label: string, excess: number, now: number, ttlS: number): Promise<PbAction> {
    const first = await this.decide(h, excess, true);
    const check = first.check;
    if (check.mode === 'shadow') return this.assign(h, label, allowAll(h.usage.bucket, ttlS), now, ttlS);
    const target = targetHold(h, this.service.others(h, now), first.outcome.remaining ?? 0, ttlS);
    let want = target - h.credit;
    if (want > 0) {
      let taken = await this.decide(h, want, false);
      // All or nothing: less than asked may still be there.
      if (!taken.outcome.allowed && (taken.outcome.remaining ?? 0) > 0) {
        want = Math.min(want, taken.outcome.remaining!);
        taken = await this.decide(h, want, false);
      }
      if (taken.outcome.allowed) {
        // The oldest take names the window: a later window's units given back there are dropped
        // (fewer admitted, never more).
        if (h.credit === 0) h.takenAtMs = taken.takenAtMs;
        else if (taken.takenAtMs === undefined) h.takenAtMs = undefined;
        h.credit += want;
      }
    } else if (want < 0) {
      // The report shows less use than the Envoy holds (or others need more): the new assignment
      // replaces the old bucket at Envoy, so the rest goes back now.
      this.service.giveBack(h, -want);
      h.credit = target;
    }
    // A fixed window's units are that window's: the assignment ends with it (whole seconds at Envoy,
    // so it may reach into the next window by less than one second).
    const resetMs = first.outcome.resetMs;
    const ttl = check.algorithm === 'fixed_window' && resetMs !== undefined ? Math.min(ttlS, Math.max(1, Math.floor(resetMs / 1000))) : ttlS;
    const action = h.credit >= 1 ? tokens(h.usage.bucket, h.credit, ttl, ++h.assignments) : denyAll(h.usage.bucket, ttl);
    return this.assign(h, label, action, now, ttl);
  }

  private assign(h: Holding, label: string, action: { pb: PbAction; kind: ActionKind }, now: number, ttlS: number): PbAction {
    h.expiresAt = now + ttlS * 1000;
    clearTimeout(h.lapse);
    h.lapse = h.credit > 0 ? setTimeout(() => this.service.lapse(h), ttlS * 1000).unref() : undefined;
    this.service.d.events.action(label, action.kind);
    return action.pb;
  }

  // `hits` units of the bucket's counter, all or nothing; `force` writes them even over the limit
  // (Envoy already admitted them). 0 hits only reads the counter.
  private async decide(h: Holding, hits: number, force: boolean): Promise<{ check: LimitCheck; outcome: LimitOutcome; takenAtMs?: number }> {
    const { d } = this.service;
    const config = d.config.config;
    if (config === undefined) throw new UnavailableError('no rate limit configuration loaded');
    const plan = planRequest(config, descriptorRequest(h, hits), d.limiter);
    const check = plan.checks[0];
    if (check === undefined) throw new UnavailableError('bucket has no counter');
    // The store learns the demand of the bucket's Envoys here, not these hits (multi-region leases
    // the region's allowance for it).
    let perS = h.rate;
    for (const o of this.service.others(h, this.service.now())) perS += o.rate;
    const demand = { perS, forMs: d.options.assignmentTtlMs };
    const decision = await d.store.decide([check], {
      countDeniedHits: force || d.limiter.countDeniedHits,
      domain: h.domain,
      demand,
      deadlineAt: Date.now() + REPORT_DEADLINE_MS,
    });
    // Only what the store itself decided can be given back to it (not a fallback's or a lease's).
    return { check, outcome: decision.outcomes[0], takenAtMs: decision.degraded === undefined ? decision.storeTimeMs : undefined };
  }

  configChanged(): void {
    const gone: PbAction[] = [];
    for (const [key, h] of this.holdings) {
      const before = ruleSignature(h.rule, h.entries);
      this.resolve(h);
      const after = ruleSignature(h.rule, h.entries);
      if (before === after) continue;
      h.credit = 0;
      if (before !== '' && after === '') {
        gone.push(abandon(h.usage.bucket).pb);
        this.service.d.events.action(this.service.d.config.config?.domains.has(h.domain) ? h.domain : '', 'abandon');
        this.service.leave(h);
        this.holdings.delete(key);
      }
    }
    if (gone.length > 0 && !this.ended) this.send({ bucketAction: gone });
  }
}

// The RLS request a bucket stands for: one descriptor, its entries in the config's order.
function descriptorRequest(h: Holding, hits: number) {
  return { domain: h.domain, descriptors: [{ entries: h.entries ?? [], hitsAddend: hits }], hitsAddend: 0 };
}

// A stream that asks for more than one stream may hold (gRPC RESOURCE_EXHAUSTED).
export class ResourceExhaustedError extends Error {}
