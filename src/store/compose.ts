import { randomUUID } from 'node:crypto';
import { type Clock, monotonicClock } from '../clock';
import type { Settings } from '../settings';
import type { BreakerOptions } from './breaker';
import type { StoreEvents } from './events';
import type { OwnEntry, SharedOps } from './shared';
import { MemoryStore } from './memory';
import { PerSecondSplit, perSecondEvents } from './persecond';
import type { RedisStore } from './redis';
import { createRegion, RegionalStore, type RegionOptions } from './region';
import { DemandStage } from './region/demand';
import { BreakerStage } from './stages/breaker';
import { DeadlineStage } from './stages/deadline';
import { DataEpoch } from './stages/epoch';
import { type FallbackPolicy, FallbackStage } from './stages/fallback';
import { Journal } from './stages/journal';
import { LagMonitor } from './stages/lag';
import { LastKnown } from './stages/last-known';
import { LeaseStage } from './stages/leases';
import { OwnHits } from './stages/own-hits';
import type { OverLimitCacheStats } from './over-limit-cache';
import { OverLimitCacheStage } from './stages/over-limit';
import { ReplicaRegistry } from './stages/replicas';
import { Stage } from './stages/stage';
import { StoreClock } from './stages/store-clock';
import { answeredWithin } from './timeout';
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

export function redisStackOptions(s: Settings): RedisStackOptions {
  const domainPolicies = new Map<string, FallbackPolicy>();
  for (const entry of s.fallbackDomainPolicies) {
    const eq = entry.lastIndexOf('=');
    domainPolicies.set(entry.slice(0, eq), entry.slice(eq + 1) as FallbackPolicy);
  }
  return {
    clock: monotonicClock,
    storeDeadlineMs: s.storeDeadlineMs,
    deadlineMarginMs: s.deadlineMarginMs,
    stalledMs: s.redisTimeoutMs,
    breaker: { windowMs: s.breakerWindowMs, minCalls: s.breakerMinCalls, failureRatio: s.breakerFailureRatio, cooldownMs: s.breakerCooldownMs },
    policy: s.fallbackPolicy,
    domainPolicies,
    share: s.fallbackShare,
    replicaTtlMs: s.replicaTtlMs,
    replicaId: randomUUID(),
    overLimitCacheSize: s.overLimitCacheSize,
    overLimitCacheWhenCounting: s.localCacheSizeBytes > 0,
    leases: { autoThreshold: s.leaseAutoThreshold, autoShare: s.leaseAutoShare, ttlMs: s.leaseTtlMs, lowWater: s.leaseLowWater },
    memoryMaxKeys: s.memoryMaxKeys,
    journalFlushMs: 1000,
  };
}

// The production Redis stack, composed in this one place, outermost first:
//
//   over-limit cache → leases → fallback (+ journal) → breaker → deadline → Redis
//
// Only what the breaker lets through reaches Redis, within the caller's budget; whatever Redis
// cannot decide the fallback does, journaling what it admits; the breaker closes again only after
// a real decision round-tripped and the journal (and pending refunds) reached Redis.
export function createRedisStack(regional: RedisStore, events: StoreEvents, o: RedisStackOptions): Store {
  const lag = new LagMonitor();
  let replicas: ReplicaRegistry | undefined;
  let deadline: DeadlineStage | undefined;
  const redis =
    o.region === undefined
      ? regional
      : createRegion(regional, o.region, { clock: o.clock, replicas: () => replicas?.count ?? 1, budgetMs: (options) => deadline?.budgetMs(options) ?? o.storeDeadlineMs });
  const storeClock = new StoreClock(o.clock);
  const local = new MemoryStore({ clock: storeClock, maxKeys: o.memoryMaxKeys });
  const own = new OwnHits();
  // What the journal wrote back is this process' own, as what Redis decided for it.
  const journal = new Journal(redis, o.clock, events, undefined, (e, hits, ageMs) => own.add(e, hits, e.windowStartMs ?? storeClock.now() - ageMs));
  const lastKnown = new LastKnown();
  let breaker: BreakerStage | undefined;
  const epoch = new DataEpoch((reason) => breaker?.breaker.trip(reason));
  replicas = new ReplicaRegistry(redis, {
    epoch,
    id: o.replicaId,
    ttlMs: o.replicaTtlMs,
    events,
    clock: o.clock,
    observe: (nowMs, sent, received) => storeClock.observe(nowMs, sent, received),
  });
  deadline = new DeadlineStage(redis, { storeDeadlineMs: o.storeDeadlineMs, marginMs: o.deadlineMarginMs, lag });
  let fallback: FallbackStage | undefined;
  const recover = async () => {
    const sent = o.clock.now();
    const probing = redis.probe();
    // A frozen Redis answers the probe when it thaws, long after this attempt gave up: recover
    // then, at once, rather than a cool-down later (replicas recovering together keep the window
    // where one decides on Redis before another's write-back lands short).
    probing.then(() => breaker?.breaker.probeNow('Redis answered a late probe'), () => undefined);
    const probe = await answeredWithin(probing, o.stalledMs, 'recovery probe');
    storeClock.observe(probe.nowMs, sent, o.clock.now());
    const beat = await answeredWithin(redis.heartbeat(o.replicaId, o.replicaTtlMs, epoch.proposal), o.stalledMs, 'recovery heartbeat');
    if (epoch.lost(beat.epoch)) await restore(redis, own.current(beat.nowMs), o.replicaId, events);
    epoch.adopt(beat.epoch);
    // Calls sent before the probe have answered by now (one connection keeps order); let their
    // outcomes reach the journal before it is written.
    await fallback?.settleLate(o.stalledMs);
    await redis.refunds.drain();
    await journal.flush();
    // Redis has the truth again; the next outage starts from what it says then.
    local.clear();
    void replicas.beat();
  };
  breaker = new BreakerStage(deadline, { clock: o.clock, breaker: o.breaker, stalledMs: o.stalledMs, recover, connected: () => redis.connected(), events });
  const closed = () => breaker?.closedNow === true;
  const share = () => (o.share === 'auto' ? 1 / (replicas.count ?? 1) : o.share);
  fallback = new FallbackStage(breaker, {
    policy: o.policy,
    domainPolicies: o.domainPolicies,
    local,
    journal,
    lastKnown,
    own,
    clock: o.clock,
    storeClock,
    share,
    refund: (entries) => redis.refunds.add(entries),
    events,
  });
  // Multi-region: the regional Redis decides against the region's allowances.
  const region = redis instanceof RegionalStore ? redis : undefined;
  // A replica's lease of the allowance answers without the regional Redis; a request it cannot
  // serve goes the ordinary way at once (one regional round trip, as without leases).
  const replicaLeases = region?.replicaLeases === true;
  let top: Store = fallback;
  let leases: LeaseStage | undefined;
  if (o.leases !== undefined) {
    leases = new LeaseStage(fallback, redis, {
      ...o.leases,
      clock: o.clock,
      usable: () => closed(),
      waitMs: (options) => (replicaLeases ? 0 : deadline.budgetMs(options)),
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
    top = leases;
  }
  top = new OverLimitCacheStage(top, {
    clock: o.clock,
    size: o.overLimitCacheSize,
    whenCounting: o.overLimitCacheWhenCounting,
    isLeased: (c) => leases?.isLeased(c) ?? false,
    leaseTtlMs: replicaLeases ? o.region!.leaseTtlMs : (o.leases?.ttlMs ?? Infinity),
    events,
    onCache: o.onOverLimitCache,
  });
  if (region !== undefined) top = new DemandStage(top, region);
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
    await replicas?.close();
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

// After Redis lost its data: puts back the hits this process had put in itself (every process
// does, so the fleet's add up), exactly once per data lifetime (see lua/restore_own.lua).
async function restore(shared: Pick<SharedOps, 'restoreOwn'>, entries: OwnEntry[], owner: string, events: StoreEvents): Promise<void> {
  await shared.restoreOwn(entries, owner);
  events.restored(entries.length);
}
