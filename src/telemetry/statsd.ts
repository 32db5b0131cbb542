import StatsDClient, { type StatsD } from 'hot-shots';
import type { Logger } from '../logger';
import { type Metrics, tagPairs, UPSTREAM_RULE_STATS } from './metrics';
import { sanitizeStatName, statName } from './rule-stats';
import { errType } from './upstream-series';

// envoyproxy/ratelimit's statsd output, so statsd_exporter mappings and dashboards built on its
// series keep working. Names as its stats manager writes them through lyft/gostats:
//   ratelimit.service.rate_limit.<stats key>.<total_hits|over_limit|near_limit|within_limit|shadow_mode|over_limit_with_local_cache>
//   ratelimit.service.rate_limit.<domain>.domain_not_found
//   ratelimit.service.config_load_success, ratelimit.service.config_load_error
//   ratelimit.service.call.should_rate_limit.<redis_error|service_error>
//   ratelimit_server.ShouldRateLimit.total_requests
//   ratelimit.localcache.<hitCount|missCount|lookupCount|entryCount> (gauges, with a local cache)
// Like gostats, counters are sent every flush interval as the change since the last flush, and a
// counter that did not move is not sent. Nothing is done per request: the counts are the tallies
// Metrics already keeps for Prometheus, read at flush time.

export interface StatsdOptions {
  host: string;
  port: number;
  protocol: 'udp' | 'tcp';
  flushIntervalMs: number;
  // EXTRA_TAGS entries, "key:value".
  extraTags: readonly string[];
  logger: Logger;
}

const ERROR_LOG_EVERY_MS = 60_000;

export class StatsdSink {
  private readonly client: StatsD;
  private readonly suffix: string;
  // Name → total already sent.
  private readonly sent = new Map<string, number>();
  private timer?: NodeJS.Timeout;
  private lastErrorLog = 0;

  constructor(
    private readonly metrics: Metrics,
    private readonly options: StatsdOptions,
  ) {
    this.suffix = tagSuffix(options.extraTags);
    this.client = new StatsDClient({
      host: options.host,
      port: options.port,
      protocol: options.protocol,
      // Lines are joined into datagrams of at most this many bytes (a datagram that fits one
      // Ethernet frame); what is left after a flush goes out within bufferFlushInterval.
      maxBufferSize: options.protocol === 'udp' ? 1432 : 8192,
      bufferFlushInterval: Math.min(1000, options.flushIntervalMs),
      // Plain statsd: no Datadog tags or extensions taken from DD_* variables.
      includeDataDogTags: false,
      datadog: false,
      errorHandler: (err) => this.logError(err),
    });
  }

  start(): void {
    this.timer = setInterval(() => void this.flush(), this.options.flushIntervalMs);
    this.timer.unref();
  }

  async flush(): Promise<void> {
    try {
      for (const [name, total] of await upstreamCounters(this.metrics)) {
        const delta = total - (this.sent.get(name) ?? 0);
        if (delta <= 0) continue;
        this.sent.set(name, total);
        this.client.increment(name + this.suffix, delta);
      }
      for (const [name, value] of localCacheGauges(this.metrics)) this.client.gauge(name + this.suffix, value);
    } catch (err) {
      this.logError(err as Error);
    }
  }

  // A last flush (after in-flight calls have drained), then the socket closes.
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flush();
    await new Promise<void>((resolve) => this.client.close(() => resolve()));
  }

  private logError(err: Error): void {
    const now = Date.now();
    if (now - this.lastErrorLog < ERROR_LOG_EVERY_MS) return;
    this.lastErrorLog = now;
    const { host, port, protocol } = this.options;
    this.options.logger.warn(
      { event: 'statsd_error', host, port, protocol, error: err.message },
      `statsd: could not send to ${protocol}://${host}:${port}: ${err.message}`,
    );
  }
}

// Upstream's statsd counters as totals since start, by statsd name: the statsd sink sends their
// change at each flush, the Prometheus listener maps them (prometheus-listener.ts).
export async function upstreamCounters(metrics: Metrics): Promise<Map<string, number>> {
  const totals = new Map<string, number>();
  const add = (name: string, n: number) => totals.set(name, (totals.get(name) ?? 0) + n);
  for (const [statKey, counts] of metrics.ruleTotals()) {
    const base = `ratelimit.service.rate_limit.${statName(statKey)}.`;
    for (const stat of UPSTREAM_RULE_STATS) add(base + stat, counts[stat]);
  }
  for (const [domain, n] of metrics.domainNotFound.totals()) add(`ratelimit.service.rate_limit.${sanitizeStatName(domain)}.domain_not_found`, n);
  for (const { labels, value } of (await metrics.configLoads.get()).values) {
    add(`ratelimit.service.config_load_${labels.result}`, value);
  }
  for (const { labels, value } of (await metrics.requests.get()).values) {
    // Upstream counts gRPC calls in its gRPC interceptor; its /json handler is not counted there.
    if (labels.transport === 'grpc') add('ratelimit_server.ShouldRateLimit.total_requests', value);
    const type = errType(String(labels.code));
    if (type !== undefined) add(`ratelimit.service.call.should_rate_limit.${type}`, value);
  }
  return totals;
}

// Upstream's local-cache gauges (its freecache's counts), set at every flush as gostats sends
// gauges; none without a local cache, as upstream registers them only with one.
export function localCacheGauges(metrics: Metrics): [string, number][] {
  const stats = metrics.localCacheTotals();
  if (stats === undefined) return [];
  return [
    ['ratelimit.localcache.hitCount', stats.hits],
    ['ratelimit.localcache.missCount', stats.misses],
    ['ratelimit.localcache.lookupCount', stats.hits + stats.misses],
    ['ratelimit.localcache.entryCount', stats.size],
  ];
}

// gostats' tag serialisation for its statsd sink: ".__key=value" per tag, sorted by key, with
// '.', ':' and '|' in values replaced by '_'.
export function tagSuffix(extraTags: readonly string[]): string {
  const tags = new Map<string, string>();
  for (const [key, value] of tagPairs(extraTags)) tags.set(key, value.replace(/[.:|]/g, '_'));
  return [...tags.keys()]
    .sort()
    .map((k) => `.__${k}=${tags.get(k)}`)
    .join('');
}
