import { RULE_STATS } from './metrics';
import type { MapperConfig, MappingSpec } from './prom-mapper';

// sluice's counterpart of envoyproxy/ratelimit's default Prometheus mapping (its
// src/stats/prom/default_mapper.yaml), used when no PROMETHEUS_MAPPER_YAML is given: the same
// Prometheus names and labels for every statsd name sluice produces (statsd.ts).
//   ratelimit.service.rate_limit.<domain>.<key1>.<stat>            → {domain, key1}
//   ratelimit.service.rate_limit.<domain>.<key1>.<key2>[.…].<stat> → {domain, key1, key2} (later parts are no label, as upstream)
//   ratelimit.service.call.should_rate_limit.<err_type>, ratelimit_server.<method>.total_requests,
//   ratelimit_server.<method>.response_time (ms, served in seconds), ratelimit.service.config_load_<result>
export function defaultMapping(responseTimeAsMs: boolean): MapperConfig {
  const perRule = RULE_STATS.flatMap((stat): MappingSpec[] => [
    { match: `ratelimit.service.rate_limit.*.*.${stat}`, name: `ratelimit_service_rate_limit_${stat}`, labels: { domain: '$1', key1: '$2' } },
    {
      match: `^ratelimit\\.service\\.rate_limit\\.([^.]*)\\.([^.]*)\\.([^.]*)(?:\\..*)?\\.${stat}$`,
      matchType: 'regex',
      name: `ratelimit_service_rate_limit_${stat}`,
      labels: { domain: '$1', key1: '$2', key2: '$3' },
    },
  ]);
  return {
    mappings: [
      ...perRule,
      {
        match: 'ratelimit.service.call.should_rate_limit.*',
        metricType: 'counter',
        name: 'ratelimit_service_should_rate_limit_error',
        labels: { err_type: '$1' },
      },
      { match: 'ratelimit_server.*.total_requests', metricType: 'counter', name: 'ratelimit_service_total_requests', labels: { grpc_method: '$1' } },
      // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS keeps the name but not the scale, as upstream.
      {
        match: 'ratelimit_server.*.response_time',
        observerType: 'histogram',
        name: 'ratelimit_service_response_time_seconds',
        labels: { grpc_method: '$1' },
        scale: responseTimeAsMs ? undefined : 0.001,
      },
      { match: 'ratelimit.service.config_load_success', metricType: 'counter', name: 'ratelimit_service_config_load_success' },
      { match: 'ratelimit.service.config_load_error', metricType: 'counter', name: 'ratelimit_service_config_load_error' },
    ],
  };
}
