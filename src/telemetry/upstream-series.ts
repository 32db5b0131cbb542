import { Counter, type Histogram, type Registry } from 'prom-client';

// envoyproxy/ratelimit's service-level series, as its Prometheus mapping names them
// (src/stats/prom/default_mapper.yaml there: statsd names turned into Prometheus ones), so that
// dashboards and alerts built on upstream keep working. They are read from sluice's own series at
// scrape time: nothing is counted twice on the request path.
//
//   ratelimit_service_config_load_success, ratelimit_service_config_load_error
//   ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}
//   ratelimit_service_should_rate_limit_error{err_type="redis_error"|"service_error"}
//   ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"} (sluice's buckets)

export interface SluiceSeries {
  requests: Counter<'transport' | 'code'>;
  requestDuration: Histogram<'transport'>;
  configLoads: Counter<'result'>;
}

const METHOD = 'ShouldRateLimit';

// Upstream's redis_error: the cache could not answer; service_error: the request or the service
// was at fault. sluice's UNAVAILABLE (store failed, or no config loaded) is the first.
export function errType(code: string): 'redis_error' | 'service_error' | undefined {
  if (code === 'UNAVAILABLE') return 'redis_error';
  if (code === 'INVALID_ARGUMENT' || code === 'INTERNAL') return 'service_error';
  return undefined;
}

export function registerUpstreamSeries(registry: Registry, s: SluiceSeries): void {
  const registers = [registry];
  const loads = (result: string) =>
    new Counter({
      name: `ratelimit_service_config_load_${result}`,
      help: `Config loads that ${result === 'success' ? 'succeeded' : 'failed'} (envoyproxy/ratelimit's name; sluice_config_loads_total{result="${result}"})`,
      registers,
      async collect() {
        this.reset();
        for (const v of (await s.configLoads.get()).values) if (v.labels.result === result) this.inc(v.value);
      },
    });
  loads('success');
  loads('error');
  new Counter({
    name: 'ratelimit_service_total_requests',
    help: "ShouldRateLimit calls over gRPC (envoyproxy/ratelimit's name)",
    labelNames: ['grpc_method'],
    registers,
    async collect() {
      this.reset();
      this.inc({ grpc_method: METHOD }, 0);
      for (const v of (await s.requests.get()).values) if (v.labels.transport === 'grpc') this.inc({ grpc_method: METHOD }, v.value);
    },
  });
  new Counter({
    name: 'ratelimit_service_should_rate_limit_error',
    help: "ShouldRateLimit calls that failed: redis_error (the store could not decide), service_error (a bad request or an internal error) (envoyproxy/ratelimit's name)",
    labelNames: ['err_type'],
    registers,
    async collect() {
      this.reset();
      for (const v of (await s.requests.get()).values) {
        const type = errType(String(v.labels.code));
        if (type !== undefined) this.inc({ err_type: type }, v.value);
      }
    },
  });
  registry.registerMetric(renamedHistogram(s.requestDuration, 'ratelimit_service_response_time_seconds'));
}

// sluice_request_duration_seconds{transport="grpc"} under upstream's name and label.
function renamedHistogram(source: Histogram<'transport'>, name: string) {
  const from = (source as unknown as { name: string }).name;
  const help = 'ShouldRateLimit latency over gRPC (envoyproxy/ratelimit\'s name; sluice_request_duration_seconds{transport="grpc"})';
  return {
    name,
    help,
    type: 'histogram',
    aggregator: 'sum',
    async get() {
      const h = await source.get();
      const values = h.values
        .filter((v) => v.labels.transport === 'grpc')
        .map((v) => {
          const { transport: _transport, ...labels } = v.labels;
          const metricName = (v as { metricName?: string }).metricName?.replace(from, name);
          return { ...v, metricName, labels: { ...labels, grpc_method: METHOD } };
        });
      return { name, help, type: h.type, aggregator: h.aggregator, values };
    },
    reset() {},
  } as unknown as Parameters<Registry['registerMetric']>[0];
}
