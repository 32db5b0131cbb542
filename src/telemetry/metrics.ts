import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { capacity } from '../algorithms/types';
import type { DescriptorResult } from '../limiter/limiter';
import type { OverLimitCacheStats } from '../store/over-limit-cache';
import type { UpstreamTallies } from './upstream-tallies';
import { DomainNotFound } from './domain-not-found';
import { ruleLabels, type RuleLabels, type StatKey, StatKeyMap, statKeyOf } from './rule-stats';
import { registerUpstreamSeries } from './upstream-series';
import { buildInfo } from '../version';

// sluice_request_duration_seconds' buckets (s): fine below 2.5 ms, where a decision should be.
export const REQUEST_DURATION_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25] as const;

// What a worker's scrape returns for the whole set: the exposition text, and the listener's
// tallies when it asked for them.
export interface SetScrape {
  text: string;
  tallies?: UpstreamTallies;
}

// Prometheus metrics on an own registry. Per-rule counters follow envoyproxy/ratelimit's
// Prometheus mapping (ratelimit_service_rate_limit_<stat>{domain,key1,key2}) so existing dashboards
// carry over; labels come from the rule's stats key (rule-stats.ts), which holds raw request values
// only where the rule asks for them (detailed_metric, value_to_metric), so label cardinality stays
// bounded.
export class Metrics {
  readonly registry = new Registry();
  readonly requests: Counter<'transport' | 'code'>;
  readonly requestDuration: Histogram<'transport'>;
  readonly abusiveConnections: Counter<'reason'>;
  readonly configLoads: Counter<'result'>;
  readonly configLoadTimestamp: Gauge;
  readonly memoryEvictions: Counter;
  readonly memoryOverflow: Counter;
  readonly memoryOverflowBytes: Gauge;
  memoryOverflowBytesSource?: () => number;
  readonly degraded: Counter<'policy'>;
  readonly breakerState: Gauge;
  readonly breakerTransitions: Counter<'to'>;
  readonly storeFailures: Counter<'kind'>;
  readonly ownOverload: Counter;
  readonly refundEntries: Counter<'result'>;
  readonly fleetReplicas: Gauge;
  readonly overLimitCacheHits: Counter;
  readonly writeBackHits: Counter<'result'>;
  readonly leaseUnits: Counter<'event'>;
  readonly storeDuration: Histogram<'operation' | 'result'>;
  readonly leaseServed: Counter;
  readonly memoryKeys: Gauge;
  memoryKeysSource?: () => number;
  // The over-limit caches' lookups (Redis store only; REDIS_PERSECOND has two), read when scraped.
  private readonly localCaches: OverLimitCacheStats[] = [];
  // WORKERS > 1: the whole set's series, and with USE_PROMETHEUS the listener's tallies
  // (telemetry/prometheus-listener.ts), gathered by the primary in one collection (server/workers.ts).
  setSource?: () => Promise<SetScrape>;
  // Calls for a domain no config defines (domain-not-found.ts).
  readonly domainNotFound: DomainNotFound;
  // Hits per stats key (bounded by the config's rules, see above), by RULE_STATS index.
  private readonly ruleTallies = new StatKeyMap<RuleTally>();

  constructor(options: { defaultMetrics?: boolean; extraTags?: readonly string[] } = {}) {
    const registers = [this.registry];
    this.requests = new Counter({
      name: 'sluice_requests_total',
      help: 'ShouldRateLimit calls by transport and result (OK, OVER_LIMIT, INVALID_ARGUMENT, UNAVAILABLE, INTERNAL)',
      labelNames: ['transport', 'code'],
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'sluice_request_duration_seconds',
      help: 'ShouldRateLimit latency',
      labelNames: ['transport'],
      buckets: [...REQUEST_DURATION_BUCKETS],
      registers,
    });
    this.abusiveConnections = new Counter({
      name: 'sluice_grpc_connections_closed_total',
      help: 'gRPC connections closed with GOAWAY ENHANCE_YOUR_CALM, by what the peer sent too much of (GRPC_SERVER_IMPL=sluice)',
      labelNames: ['reason'],
      registers,
    });
    this.configLoads = new Counter({ name: 'sluice_config_loads_total', help: 'Config loads by result (success, error)', labelNames: ['result'], registers });
    this.configLoadTimestamp = new Gauge({
      name: 'sluice_config_last_load_success_timestamp_seconds',
      help: 'When the running config was loaded',
      registers,
      aggregator: 'max',
    });
    this.memoryEvictions = new Counter({
      name: 'sluice_memory_store_evictions_total',
      help: 'Live counters evicted from the memory store to make room (none since keys beyond the cap go to the approximate tier; kept for dashboards)',
      registers,
    });
    this.memoryOverflow = new Counter({
      name: 'sluice_memory_store_overflow_decisions_total',
      help: 'Limits decided by the memory store approximate tier (key cap reached with every counter live; it can only over-count)',
      registers,
    });
    this.degraded = new Counter({
      name: 'sluice_degraded_decisions_total',
      help: 'Decisions made without Redis, by fallback policy (local, allow, deny)',
      labelNames: ['policy'],
      registers,
    });
    this.breakerState = new Gauge({
      name: 'sluice_breaker_state',
      help: 'Circuit breaker in front of Redis: 0 closed, 1 half-open (recovering: a background write-back/probe, not a request), 2 open (WORKERS > 1: the worst worker)',
      registers,
      aggregator: 'max',
    });
    this.breakerTransitions = new Counter({
      name: 'sluice_breaker_transitions_total',
      help: 'Circuit breaker state changes, by new state',
      labelNames: ['to'],
      registers,
    });
    this.storeFailures = new Counter({
      name: 'sluice_store_failures_total',
      help: "Redis calls that failed (error), got no answer within the caller's budget while this process was responsive (timeout), or stayed unanswered past REDIS_TIMEOUT (stalled)",
      labelNames: ['kind'],
      registers,
    });
    this.ownOverload = new Counter({
      name: 'sluice_store_own_overload_total',
      help: 'Store deadlines missed because this process was busy (event-loop lag), not counted against Redis',
      registers,
    });
    this.refundEntries = new Counter({
      name: 'sluice_refund_entries_total',
      help: 'Counter entries given back to Redis for requests denied after Redis consumed their hits (result: ok, error)',
      labelNames: ['result'],
      registers,
    });
    this.fleetReplicas = new Gauge({
      name: 'sluice_fleet_replicas',
      help: 'Live replicas registered in Redis (sharing the budget), as last counted',
      registers,
      aggregator: 'max',
    });
    this.overLimitCacheHits = new Counter({
      name: 'sluice_over_limit_cache_hits_total',
      help: 'Requests answered OVER_LIMIT from the over-limit cache, without Redis',
      registers,
    });
    this.writeBackHits = new Counter({
      name: 'sluice_fallback_write_back_hits_total',
      help: 'Hits admitted by the local fallback and written back to Redis (result: ok, error)',
      labelNames: ['result'],
      registers,
    });
    this.storeDuration = new Histogram({
      name: 'sluice_store_duration_seconds',
      help: 'Redis script calls by operation (decide, peek, refund, absorb, lease, heartbeat) and result (ok, error)',
      labelNames: ['operation', 'result'],
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1],
      registers,
    });
    this.leaseUnits = new Counter({
      name: 'sluice_lease_units_total',
      help: 'Units of hot-key leases taken from and returned to Redis',
      labelNames: ['event'],
      registers,
    });
    this.leaseServed = new Counter({
      name: 'sluice_lease_hits_served_locally_total',
      help: 'Hits served from leases without a Redis call (released reservations not counted)',
      registers,
    });
    const keys = this;
    this.memoryKeys = new Gauge({
      name: 'sluice_memory_store_keys',
      help: 'Counters held by the memory store',
      registers,
      collect() {
        if (keys.memoryKeysSource) this.set(keys.memoryKeysSource());
      },
    });
    this.memoryOverflowBytes = new Gauge({
      name: 'sluice_memory_store_overflow_bytes',
      help: 'Bytes held by the memory store approximate tier (0 while every key has an exact counter)',
      registers,
      collect() {
        if (keys.memoryOverflowBytesSource) this.set(keys.memoryOverflowBytesSource());
      },
    });
    // Per-rule hits are tallied in plain numbers per stats key (recordDescriptor runs for every
    // descriptor of every request; prom-client would hash a label object each time) and handed to
    // prom-client when it is scraped.
    const tallies = this.ruleTallies;
    const rule = (stat: RuleStat) => {
      const at = RULE_STATS.indexOf(stat);
      return new Counter({
        name: `ratelimit_service_rate_limit_${stat}`,
        help: `Hits per rule: ${stat}`,
        labelNames: ['domain', 'key1', 'key2'],
        registers,
        collect() {
          this.reset();
          for (const t of tallies.values()) if (t.counts[at] > 0) this.inc(t.labels, t.counts[at]);
        },
      });
    };
    // Upstream's per-rule over_limit_with_local_cache stat. Its Prometheus mapping has no rule for
    // it; the name follows the family above so one dashboard query covers both.
    new Counter({
      name: 'ratelimit_service_rate_limit_over_limit_with_local_cache',
      help: 'Hits per rule denied from the over-limit cache, without Redis (also in over_limit)',
      labelNames: ['domain', 'key1', 'key2'],
      registers,
      collect() {
        this.reset();
        for (const t of tallies.values()) if (t.localCache > 0) this.inc(t.labels, t.localCache);
      },
    });
    registerLocalCacheGauges(registers, () => keys.localCacheTotals());
    registerOverLimitCacheSeries(registers, () => keys.localCacheTotals());
    this.domainNotFound = new DomainNotFound(registers);
    // Registered with their collect callbacks (the tallies below); nothing else touches them.
    for (const stat of RULE_STATS) rule(stat);
    registerUpstreamSeries(this.registry, this);
    registerBuildInfo(registers);
    // EXTRA_TAGS: constant labels on every series, as upstream puts them on every stat.
    if (options.extraTags !== undefined && options.extraTags.length > 0) this.registry.setDefaultLabels(constantLabels(options.extraTags));
    if (options.defaultMetrics) collectDefaultMetrics({ register: this.registry });
  }

  // What GET /metrics answers: this process' series, or the whole set's under WORKERS > 1.
  scrape(): Promise<string> {
    return this.setSource === undefined ? this.registry.metrics() : this.setSource().then((set) => set.text);
  }

  // An over-limit cache whose lookups the local-cache series report (each store stack has one).
  addLocalCache(stats: OverLimitCacheStats): void {
    this.localCaches.push(stats);
  }

  // The over-limit caches' lookups and entries, summed as upstream's one cache would count them;
  // undefined without a cache (upstream then has no ratelimit.localcache.* stats).
  localCacheTotals(): OverLimitCacheStats | undefined {
    if (this.localCaches.length === 0) return undefined;
    const sum = (f: (s: OverLimitCacheStats) => number) => this.localCaches.reduce((n, s) => n + f(s), 0);
    return { hits: sum((s) => s.hits), misses: sum((s) => s.misses), size: sum((s) => s.size) };
  }

  // Hits per rule since start, by stats key, for sinks other than Prometheus (statsd.ts).
  ruleTotals(): Iterable<[statKey: StatKey, counts: Readonly<Record<UpstreamRuleStat, number>>]> {
    const tallies = this.ruleTallies.values();
    return (function* () {
      for (const t of tallies) {
        const counts = Object.fromEntries(RULE_STATS.map((stat, i) => [stat, t.counts[i]])) as Record<UpstreamRuleStat, number>;
        counts.over_limit_with_local_cache = t.localCache;
        yield [t.key, counts];
      }
    })();
  }

  recordDescriptor(result: DescriptorResult, nearLimitRatio: number): void {
    if (result.kind !== 'limited' || result.matched === undefined || result.rule === undefined) return;
    const key = statKeyOf(result.matched);
    let tally = this.ruleTallies.get(key);
    if (tally === undefined) {
      tally = { key, labels: ruleLabels(key), counts: RULE_STATS.map(() => 0), localCache: 0 };
      this.ruleTallies.add(key, tally);
    }
    const counts = ruleCounts(result, nearLimitRatio);
    for (let i = 0; i < RULE_STATS.length; i++) tally.counts[i] += counts[RULE_STATS[i]];
    if (result.fromLocalCache) tally.localCache += result.hits;
  }
}

interface RuleTally {
  key: StatKey;
  labels: RuleLabels;
  counts: number[];
  localCache: number;
}

export const RULE_STATS = ['total_hits', 'over_limit', 'near_limit', 'within_limit', 'shadow_mode'] as const;
export type RuleStat = (typeof RULE_STATS)[number];
// Upstream's per-rule stats: RULE_STATS and the hits denied from the over-limit cache (also in over_limit).
export const UPSTREAM_RULE_STATS = [...RULE_STATS, 'over_limit_with_local_cache'] as const;
export type UpstreamRuleStat = (typeof UPSTREAM_RULE_STATS)[number];

// Upstream's ratelimit.localcache.* gauges (freecache's counts), under the names its Prometheus sink
// gives a stat its mapping does not name (dots become underscores); 0 without a cache.
function registerLocalCacheGauges(registers: Registry[], source: () => OverLimitCacheStats | undefined): void {
  const gauges: [string, string, (s: OverLimitCacheStats) => number][] = [
    ['hitCount', 'Over-limit cache lookups that found a remembered denial', (s) => s.hits],
    ['missCount', 'Over-limit cache lookups that found none', (s) => s.misses],
    ['lookupCount', 'Over-limit cache lookups', (s) => s.hits + s.misses],
    ['entryCount', 'Keys held by the over-limit cache', (s) => s.size],
  ];
  for (const [stat, help, value] of gauges) {
    new Gauge({
      name: `ratelimit_localcache_${stat}`,
      help,
      registers,
      collect() {
        const stats = source();
        if (stats !== undefined) this.set(value(stats));
      },
    });
  }
}

// The over-limit caches' lookups under sluice's own names (upstream's gauges above say the same).
function registerOverLimitCacheSeries(registers: Registry[], source: () => OverLimitCacheStats | undefined): void {
  new Counter({
    name: 'sluice_over_limit_cache_lookups_total',
    help: 'Over-limit cache lookups, one per limit of a request: hit (a remembered denial answered it, without Redis), miss',
    labelNames: ['result'],
    registers,
    collect() {
      this.reset();
      const stats = source();
      this.inc({ result: 'hit' }, stats?.hits ?? 0);
      this.inc({ result: 'miss' }, stats?.misses ?? 0);
    },
  });
  new Gauge({
    name: 'sluice_over_limit_cache_entries',
    help: 'Denials held by the over-limit cache',
    registers,
    collect() {
      this.set(source()?.size ?? 0);
    },
  });
}

// Upstream's accounting (base_limiter.go): of a request's hits, those past the limit are over_limit,
// those past near_limit_ratio × limit but within it are near_limit.
export function ruleCounts(result: DescriptorResult, nearLimitRatio: number): Record<RuleStat, number> {
  const counts: Record<RuleStat, number> = { total_hits: result.hits, over_limit: 0, near_limit: 0, within_limit: 0, shadow_mode: 0 };
  const rule = result.rule;
  if (rule === undefined) return counts;
  const limit = capacity({ algorithm: rule.algorithm, limit: rule.requestsPerUnit, burst: rule.burst });
  const near = Math.floor(limit * nearLimitRatio);
  const before = result.usedBefore;
  const after = before + result.hits;
  if (result.wouldDeny) {
    const over = before >= limit ? result.hits : Math.max(0, after - limit);
    counts.over_limit = Math.round(over);
    counts.near_limit = before >= limit ? 0 : Math.max(0, Math.round(limit - Math.max(near, before)));
    if (rule.shadowMode) counts.shadow_mode = counts.over_limit;
  } else {
    counts.within_limit = result.hits;
    // With an unknown remaining, usedBefore is a placeholder 0: whether these hits came near the
    // limit is not known, so none are counted as near_limit.
    if (result.remaining !== undefined && after > near) counts.near_limit = Math.round(before >= near ? result.hits : after - near);
  }
  return counts;
}

// EXTRA_TAGS (k1:v1,k2:v2) as Prometheus labels: a key becomes a valid label name ('.', '-' and
// the like turn into '_').
export function constantLabels(extraTags: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const [key, value] of tagPairs(extraTags)) labels[key.replace(/[^A-Za-z0-9_]/g, '_').replace(/^(?=\d)/, '_')] = value;
  return labels;
}

// EXTRA_TAGS as [key, value] pairs, trimmed, the empty ones left out (statsd and Prometheus alike).
export function tagPairs(extraTags: readonly string[]): [string, string][] {
  const pairs: [string, string][] = [];
  for (const tag of extraTags) {
    const colon = tag.indexOf(':');
    const key = tag.slice(0, colon).trim();
    const value = tag.slice(colon + 1).trim();
    if (key !== '' && value !== '') pairs.push([key, value]);
  }
  return pairs;
}

// sluice_build_info{version,node} 1: which build answers, for dashboards and alerts on mixed
// versions. Every worker reports the same, so the set's scrape keeps one (max), not their sum.
function registerBuildInfo(registers: Registry[]): void {
  const gauge = new Gauge({
    name: 'sluice_build_info',
    help: 'Always 1; labels: the sluice version and the Node.js version running it',
    labelNames: ['version', 'node'],
    registers,
    aggregator: 'max',
  });
  gauge.set(buildInfo(), 1);
}
