import type { Clock } from '../clock';
import type { BreakerOptions } from './breaker';
import type { StoreEvents } from './events';
import { MemoryStore } from './memory';
import { PerSecondSplit, perSecondEvents } from './persecond';
import type { RedisStore } from './redis';
import { createRegion, type RegionOptions } from './region';
import { DemandStage } from './region/demand';
import { BreakerStage } from './stages/breaker';
import { callerBudget, DeadlineStage } from './stages/deadline';
import { DataEpoch } from './stages/epoch';
import { type FallbackPolicy, FallbackStage } from './stages/fallback';
import { Journal } from './stages/journal';
import { LagMonitor } from './stages/lag';
import { LastKnown } from './stages/last-known';
import { LeaseStage } from './stages/leases';
import { OwnHits } from './stages/own-hits';
import { LateCalls, Recovery } from './stages/recovery';
import type { OverLimitCacheStats } from './over-limit-cache';
import { OverLimitCacheStage } from './stages/over-limit';
import { ReplicaRegistry } from './stages/replicas';
import { Stage } from './stages/stage';
import { StoreClock } from './stages/store-clock';
import type { Store } from './store';

export interface RedisStackOptions {
  // Local time, for durations only (tests pass a manual clock).
  clock: Clock;
  storeDeadlineMs: number;
  deadlineMarginMs: number;
  // REDIS_TIMEOUT: a call unanswered this long opens the breaker.
  stalledMs: number;
  breaker: Omit<BreakerOptions, 'clock' | 'onChange' | 'recover'>;
  policy: FallbackPolicy;
  domainPolicies: ReadonlyMap<string, FallbackPolicy>;
  share: number | 'auto';
  replicaTtlMs: number;
  replicaId: string;
  overLimitCacheSize: number;
  // LOCAL_CACHE_SIZE_IN_BYTES asks for upstream's local cache: it answers with upstream counting
  // too, leaving a remembered key uncounted as upstream does. Otherwise counting bypasses it.
  overLimitCacheWhenCounting: boolean;
  // Hands the over-limit cache's lookup counts to whoever reports them (metrics).
  onOverLimitCache?: (stats: OverLimitCacheStats) => void;
  // undefined: no leases at all.
  leases?: { autoThreshold: number; autoShare: number; ttlMs: number; lowWater: number };
  memoryMaxKeys: number;
  // While the breaker is closed, journal entries left by single timeouts are written back this
  // often, ms.
  journalFlushMs: number;
  // Multi-region (GLOBAL_REDIS_URL): the regional Redis decides against leased allowances.
  region?: RegionOptions;
}

// The production Redis stack, composed in this one place, built bottom-up:
//
//   Redis (or the multi-region layer on it) ← deadline ← breaker ← fallback (+ journal)
//     ← leases ← over-limit cache (← regional demand)
//
// Only what the breaker lets through reaches Redis, within the caller's budget; whatever Redis
// cannot decide the fallback does, journaling what it admits; the breaker closes again only after
// recovery (stages/recovery.ts): a real decision round-tripped and the journal (and pending
// refunds) reached Redis.
export function createRedisStack(regional: RedisStore, events: StoreEvents, o: RedisStackOptions): Store {
  const { clock } = o;
  // The caller's time, read by everything below that waits for Redis.
  const budgetMs = callerBudget({ storeDeadlineMs: o.storeDeadlineMs, marginMs: o.deadlineMarginMs });
  const lag = new LagMonitor();
  const storeClock = new StoreClock(clock);
  const epoch = new DataEpoch();
  // The registry heartbeats the regional Redis (the multi-region layer passes them through).
  const replicas = new ReplicaRegistry(regional, {
    epoch,
    id: o.replicaId,
    ttlMs: o.replicaTtlMs,
    events,
    clock,
    observe: (nowMs, sent, received) => storeClock.observe(nowMs, sent, received),
  });
  // Multi-region: the regional Redis decides against the region's allowances.
  const region = o.region === undefined ? undefined : createRegion(regional, o.region, { clock, replicas: () => replicas.count ?? 1, budgetMs });
  const redis = region ?? regional;

  // What the fallback needs beside Redis.
  const local = new MemoryStore({ clock: storeClock, maxKeys: o.memoryMaxKeys });
  const own = new OwnHits();
  // What the journal wrote back is this process' own, as what Redis decided for it.
  const journal = new Journal(redis, clock, events, undefined, (e, hits, ageMs) => own.add(e, hits, e.windowStartMs ?? storeClock.now() - ageMs));
  const lastKnown = new LastKnown();
  const late = new LateCalls();
  const recovery = new Recovery({ redis, clock, stalledMs: o.stalledMs, replicaId: o.replicaId, replicaTtlMs: o.replicaTtlMs, epoch, storeClock, own, lastKnown, journal, local, late, replicas, events });

  const deadline = new DeadlineStage(redis, { budgetMs, lag });
  const breaker = new BreakerStage(deadline, { clock, breaker: o.breaker, stalledMs: o.stalledMs, recover: () => recovery.run(), connected: () => redis.connected(), events });
  recovery.reportTo(breaker.breaker);
  const closed = () => breaker.closedNow;
  const fallback = new FallbackStage(breaker, {
    policy: o.policy,
    domainPolicies: o.domainPolicies,
    local,
    journal,
    lastKnown,
    own,
    clock,
    storeClock,
    share: () => (o.share === 'auto' ? 1 / (replicas.count ?? 1) : o.share),
    refund: (entries) => redis.refunds.add(entries),
    late,
    events,
  });
  // A replica's lease of the allowance answers without the regional Redis; a request it cannot
  // serve goes the ordinary way at once (one regional round trip, as without leases).
  const replicaLeases = region?.replicaLeases === true;
  const leases =
    o.leases === undefined
      ? undefined
      : new LeaseStage(fallback, redis, {
          ...o.leases,
          clock,
          usable: () => closed(),
          waitMs: (options) => (replicaLeases ? 0 : budgetMs(options)),
          sizeFor: replicaLeases ? (c) => region!.replicaLeaseSize(c) : undefined,
          denyLocally: region === undefined ? undefined : () => region.globalReachable(),
          exhaustedMaxMs: replicaLeases ? o.region!.leaseTtlMs : undefined,
          exhaustedMinMs: replicaLeases ? () => region!.globalRoundTripMs() : undefined,
          retakeIfAsked: replicaLeases ? (c) => region!.asked(c) : undefined,
          onGrant: (check, grant) => {
            lastKnown.recordOne(check, grant.remaining, grant.takenAtMs);
            own.add(check, grant.granted, grant.takenAtMs);
          },
          events,
        });
  const overLimit = new OverLimitCacheStage(leases ?? fallback, {
    clock,
    size: o.overLimitCacheSize,
    whenCounting: o.overLimitCacheWhenCounting,
    isLeased: (c) => leases?.isLeased(c) ?? false,
    leaseTtlMs: replicaLeases ? o.region!.leaseTtlMs : (o.leases?.ttlMs ?? Infinity),
    events,
    onCache: o.onOverLimitCache,
  });
  const top = region === undefined ? overLimit : new DemandStage(overLimit, region);

  // Single timeouts leave journal entries while the breaker stays closed: write them back too.
  const flusher = setInterval(() => {
    if (closed() && journal.size > 0) journal.flush().catch(() => undefined);
  }, o.journalFlushMs);
  flusher.unref();
  // A region cut off from the global Redis answers (from its allowances, then by its policy) with
  // its own Redis healthy: that is said beside what the stages say about the regional Redis.
  const regionDegraded = region === undefined ? undefined : () => region.degraded();
  return new Lifecycle(top, regionDegraded, async () => {
    clearInterval(flusher);
    lag.close();
    if (closed()) await journal.flush().catch(() => undefined);
    await replicas.close();
    await local.close();
  });
}

// REDIS_PERSECOND: one whole stack per Redis, and the split that sends each limit to its own
// (store/persecond.ts). The per-second stack waits REDIS_PERSECOND_TIMEOUT (or REDIS_TIMEOUT)
// before its breaker opens.
export function createPerSecondSplit(o: { main: RedisStore; perSecond: RedisStore; events: StoreEvents; options: RedisStackOptions; perSecondStalledMs: number }): Store {
  const main = createRedisStack(o.main, o.events, o.options);
  // Both over-limit caches report their lookups: upstream's one local cache serves both Redis.
  const options = { ...o.options, stalledMs: o.perSecondStalledMs || o.options.stalledMs };
  const perSecond = createRedisStack(o.perSecond, perSecondEvents(o.events), options);
  return new PerSecondSplit({ store: main, refund: (e) => o.main.refunds.add(e) }, { store: perSecond, refund: (e) => o.perSecond.refunds.add(e) });
}

// The outermost wrapper: closes the stack's own timers and helpers before the stages.
class Lifecycle extends Stage {
  constructor(
    inner: Store,
    private readonly alsoDegraded: (() => string | undefined) | undefined,
    private readonly before: () => Promise<void>,
  ) {
    super(inner);
  }

  override degraded(): string | undefined {
    return this.inner.degraded?.() ?? this.alsoDegraded?.();
  }

  override async close(): Promise<void> {
    await this.before();
    await this.inner.close();
  }
}
