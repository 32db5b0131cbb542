import type { Clock } from '../clock';
import type { BreakerOptions } from './breaker';
import type { StoreEvents } from './events';
import { MemoryStore } from './memory';
import { PerSecondSplit, perSecondEvents } from './persecond';
import type { RedisStore } from './redis';
import { BreakerStage } from './stages/breaker';
import { type CallerBudget, callerBudget, DeadlineStage } from './stages/deadline';
import { DataEpoch } from './stages/epoch';
import { type FallbackPolicy, FallbackStage } from './stages/fallback';
import { Journal } from './stages/journal';
import { KeyMemory } from './stages/key-memory';
import { LagMonitor } from './stages/lag';
import { AutoLeases, type AutoLeaseOptions, type LeasePolicy } from './stages/lease-policy';
import { LeaseStage } from './stages/leases';
import { LateCalls, Recovery } from './stages/recovery';
import type { OverLimitCacheStats } from './over-limit-cache';
import { OverLimitCacheStage } from './stages/over-limit';
import { ReplicaRegistry } from './stages/replicas';
import { Stage } from './stages/stage';
import { StoreClock } from './stages/store-clock';
import type { RefundEntry, SharedOps } from './shared';
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
}

// What the stages sit on: the Redis store, or a layer over it that is a shared store too (the
// multi-region layer, store/region/).
export interface SharedStore extends Store, SharedOps {
  readonly refunds: { add(entries: readonly RefundEntry[]): void; drain(): Promise<void> };
  connected(): boolean;
}

// What the stack knows that a layer between Redis and the stages needs (store/region/).
export interface StackContext {
  clock: Clock;
  // Live replicas of this Redis (the replica registry's count; 1 before it has one).
  replicas: () => number;
  // The caller's budget for one decision, ms (the deadline stage's).
  budgetMs: CallerBudget;
}

// The bottom of a stack and the lease policy that goes with it. A wrapper (store/region/) builds
// its own on the Redis store; the plain stack is onRedis below.
export interface StackBase {
  store: SharedStore;
  leasePolicy(defaults: AutoLeaseOptions): LeasePolicy;
}

const onRedis = (redis: RedisStore): StackBase => ({ store: redis, leasePolicy: (defaults) => new AutoLeases(defaults) });

// The production Redis stack, composed in this one place, built bottom-up:
//
//   Redis (or a base over it) ← deadline ← breaker ← fallback (+ journal) ← leases ← over-limit cache
//
// Only what the breaker lets through reaches Redis, within the caller's budget; whatever Redis
// cannot decide the fallback does, journaling what it admits; the breaker closes again only after
// recovery (stages/recovery.ts): a real decision round-tripped and the journal (and pending
// refunds) reached Redis. Multi-region (store/region/stack.ts) passes its own base and wraps the
// result.
export function createRedisStack(redis: RedisStore, events: StoreEvents, o: RedisStackOptions): Store {
  return buildRedisStack(redis, events, o, onRedis).store;
}

export function buildRedisStack<B extends StackBase>(
  redisStore: RedisStore,
  events: StoreEvents,
  o: RedisStackOptions,
  base: (redis: RedisStore, ctx: StackContext) => B,
): { store: Store; base: B } {
  const { clock } = o;
  // The caller's time, read by everything below that waits for Redis.
  const budgetMs = callerBudget({ storeDeadlineMs: o.storeDeadlineMs, marginMs: o.deadlineMarginMs });
  const lag = new LagMonitor();
  const storeClock = new StoreClock(clock);
  const epoch = new DataEpoch();
  // The registry heartbeats the Redis itself (a base over it passes them through anyway).
  const replicas = new ReplicaRegistry(redisStore, {
    epoch,
    id: o.replicaId,
    ttlMs: o.replicaTtlMs,
    events,
    clock,
    observe: (nowMs, sent, received) => storeClock.observe(nowMs, sent, received),
  });
  // The store every stage below talks to: the Redis store, or the base a wrapper put over it.
  const bottom = base(redisStore, { clock, replicas: () => replicas.count ?? 1, budgetMs });
  const redis = bottom.store;

  // What the fallback needs beside Redis; recovery puts it all back once Redis answers again.
  const local = new MemoryStore({ clock: storeClock, maxKeys: o.memoryMaxKeys });
  const memory = new KeyMemory();
  // What the journal wrote back is this process' own, as what Redis decided for it.
  const journal = new Journal(redis, clock, events, undefined, (e, hits, ageMs) => memory.addOwn(e, hits, e.windowStartMs ?? storeClock.now() - ageMs));
  const late = new LateCalls();
  const recovery = new Recovery({
    redis,
    clock,
    stalledMs: o.stalledMs,
    replicaId: o.replicaId,
    replicaTtlMs: o.replicaTtlMs,
    epoch,
    storeClock,
    memory,
    journal,
    local,
    late,
    replicas,
    events,
  });

  // The deadline sits right on Redis: a late answer is the breaker's failure, and the fallback's.
  const deadline = new DeadlineStage(redis, { budgetMs, lag });
  const breaker = new BreakerStage(deadline, {
    clock,
    breaker: o.breaker,
    stalledMs: o.stalledMs,
    recover: () => recovery.run(),
    connected: () => redis.connected(),
    events,
  });
  recovery.reportTo(breaker.breaker);
  const closed = () => breaker.closedNow;
  // Above the breaker: whatever the breaker refuses or Redis fails, the fallback decides.
  const fallback = new FallbackStage(breaker, {
    policy: o.policy,
    domainPolicies: o.domainPolicies,
    local,
    journal,
    memory,
    clock,
    storeClock,
    share: () => (o.share === 'auto' ? 1 / (replicas.count ?? 1) : o.share),
    refund: (entries) => redis.refunds.add(entries),
    late,
    events,
  });
  // Above the fallback: a request its lease cannot serve goes the ordinary way, fallback included;
  // takes and give-backs go to Redis directly, only while the breaker is closed.
  const leases =
    o.leases === undefined
      ? undefined
      : new LeaseStage(fallback, redis, {
          clock,
          policy: bottom.leasePolicy({ clock, autoThreshold: o.leases.autoThreshold, autoShare: o.leases.autoShare, ttlMs: o.leases.ttlMs, budgetMs }),
          ttlMs: o.leases.ttlMs,
          lowWater: o.leases.lowWater,
          budgetMs,
          usable: closed,
          onGrant: (check, grant) => {
            memory.granted(check, grant.remaining, grant.granted, grant.takenAtMs);
          },
          events,
        });
  // On top: a remembered denial costs nothing below; a leased key's lasts no longer than units held
  // elsewhere stay away.
  const overLimit = new OverLimitCacheStage(leases ?? fallback, {
    clock,
    size: o.overLimitCacheSize,
    whenCounting: o.overLimitCacheWhenCounting,
    isLeased: (c) => leases?.isLeased(c) ?? false,
    leaseTtlMs: leases?.unitsBackWithinMs ?? Infinity,
    events,
    onCache: o.onOverLimitCache,
  });

  // Single timeouts leave journal entries while the breaker stays closed: write them back too.
  const flusher = setInterval(() => {
    if (closed() && journal.size > 0) journal.flush().catch(() => undefined);
  }, o.journalFlushMs);
  flusher.unref();
  const store = new Lifecycle(overLimit, async () => {
    clearInterval(flusher);
    lag.close();
    if (closed()) await journal.flush().catch(() => undefined);
    await replicas.close();
    await local.close();
  });
  return { store, base: bottom };
}

// REDIS_PERSECOND: one whole stack per Redis, and the split that sends each limit to its own
// (store/persecond.ts). The per-second stack waits REDIS_PERSECOND_TIMEOUT (or REDIS_TIMEOUT)
// before its breaker opens.
export function createPerSecondSplit(o: {
  main: RedisStore;
  perSecond: RedisStore;
  events: StoreEvents;
  options: RedisStackOptions;
  perSecondStalledMs: number;
}): Store {
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
    private readonly before: () => Promise<void>,
  ) {
    super(inner);
  }

  override async close(): Promise<void> {
    await this.before();
    await this.inner.close();
  }
}
