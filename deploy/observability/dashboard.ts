import fs from 'node:fs';
import path from 'node:path';

// Builds deploy/observability/grafana-dashboard.json with the Grafana Foundation SDK, whose typed
// builders follow Grafana's dashboard schema. `npm run dashboard` writes the file;
// test/system/observability.test.ts checks that the committed file is what this builds and that every
// query parses as PromQL and names only metrics sluice exports.

// The SDK's entry points are package subpaths ("exports"), which this project's module resolution
// (node10) does not read for types: the types come from the files those subpaths point at.
const common = require('@grafana/grafana-foundation-sdk/common') as typeof import('@grafana/grafana-foundation-sdk/dist/common');
const dashboard = require('@grafana/grafana-foundation-sdk/dashboard') as typeof import('@grafana/grafana-foundation-sdk/dist/dashboard');
const prometheus = require('@grafana/grafana-foundation-sdk/prometheus') as typeof import('@grafana/grafana-foundation-sdk/dist/prometheus');
const timeseries = require('@grafana/grafana-foundation-sdk/timeseries') as typeof import('@grafana/grafana-foundation-sdk/dist/timeseries');
const bargauge = require('@grafana/grafana-foundation-sdk/bargauge') as typeof import('@grafana/grafana-foundation-sdk/dist/bargauge');
const statetimeline = require('@grafana/grafana-foundation-sdk/statetimeline') as typeof import('@grafana/grafana-foundation-sdk/dist/statetimeline');
const stat = require('@grafana/grafana-foundation-sdk/stat') as typeof import('@grafana/grafana-foundation-sdk/dist/stat');

type Dashboard = ReturnType<InstanceType<typeof dashboard.DashboardBuilder>['build']>;

const DATASOURCE = { type: 'prometheus', uid: '${datasource}' };
const JOB = 'job=~"$job"';

const query = (expr: string, legend: string, instant = false) => {
  const q = new prometheus.DataqueryBuilder().datasource(DATASOURCE).refId('A').expr(expr).legendFormat(legend);
  return instant ? q.instant() : q;
};
// Width and height; the dashboard builder places panels left to right, then on the next line.
const size = (w = 12, h = 8) => ({ x: 0, y: 0, w, h });

function decisions() {
  return new timeseries.PanelBuilder()
    .title('Decisions by code')
    .description(
      'ShouldRateLimit answers per second (gRPC and HTTP): OK, OVER_LIMIT, and the errors that leave the decision to Envoy (INVALID_ARGUMENT, UNAVAILABLE, INTERNAL).',
    )
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('reqps')
    .min(0)
    .withTarget(query(`sum by (code) (rate(sluice_requests_total{${JOB}}[$__rate_interval]))`, '{{code}}'));
}

function requestLatency() {
  return new timeseries.PanelBuilder()
    .title('Decision latency (p99)')
    .description('Time from request to answer inside sluice, by transport.')
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('s')
    .min(0)
    .withTarget(
      query(`histogram_quantile(0.99, sum by (le, transport) (rate(sluice_request_duration_seconds_bucket{${JOB}}[$__rate_interval])))`, '{{transport}}'),
    );
}

function topOverLimit() {
  return new bargauge.PanelBuilder()
    .title('Top over-limit rules')
    .description(
      'Hits over the limit in the time range, per rule (upstream labels: domain, key1, key2: the first two descriptor entries as key_value; a detailed_metric or value_to_metric entry carries the whole request value).',
    )
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('short')
    .displayMode(common.BarGaugeDisplayMode.Gradient)
    .reduceOptions(new common.ReduceDataOptionsBuilder().calcs(['lastNotNull']).values(false))
    .withTarget(
      query(
        `topk(10, sum by (domain, key1, key2) (increase(ratelimit_service_rate_limit_over_limit{${JOB}}[$__range])))`,
        '{{domain}}.{{key1}} {{key2}}',
        true,
      ),
    );
}

function overLimitShare() {
  return new timeseries.PanelBuilder()
    .title('Over-limit share by rule (top 10)')
    .description('Share of each rule’s hits that were over its limit.')
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('percentunit')
    .min(0)
    .max(1)
    .withTarget(
      query(
        `topk(10, sum by (domain, key1, key2) (rate(ratelimit_service_rate_limit_over_limit{${JOB}}[$__rate_interval])) / sum by (domain, key1, key2) (rate(ratelimit_service_rate_limit_total_hits{${JOB}}[$__rate_interval])))`,
        '{{domain}}.{{key1}} {{key2}}',
      ),
    );
}

function storeLatency() {
  return new timeseries.PanelBuilder()
    .title('Redis latency (p99) and failures')
    .description('Redis script calls by operation (p99), and failed calls by kind (error, timeout, stalled) on the right axis.')
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('s')
    .min(0)
    .withTarget(
      query(`histogram_quantile(0.99, sum by (le, operation) (rate(sluice_store_duration_seconds_bucket{${JOB}}[$__rate_interval])))`, 'p99 {{operation}}'),
    )
    .withTarget(query(`sum by (kind) (rate(sluice_store_failures_total{${JOB}}[$__rate_interval]))`, 'failed: {{kind}}').refId('B'))
    .overrideByQuery('B', [
      { id: 'unit', value: 'reqps' },
      { id: 'custom.axisPlacement', value: 'right' },
    ]);
}

function degraded() {
  return new timeseries.PanelBuilder()
    .title('Degraded answers')
    .description(
      'Decisions made without Redis, by fallback policy; 0 while Redis is healthy. Over-limit cache hits are exact denials answered without a Redis call.',
    )
    .datasource(DATASOURCE)
    .gridPos(size())
    .unit('reqps')
    .min(0)
    .withTarget(query(`sum by (policy) (rate(sluice_degraded_decisions_total{${JOB}}[$__rate_interval]))`, 'degraded: {{policy}}'))
    .withTarget(query(`sum(rate(sluice_over_limit_cache_hits_total{${JOB}}[$__rate_interval]))`, 'over-limit cache').refId('B'));
}

function breaker() {
  const state = (text: string, color: string, index: number) => ({ text, color, index });
  return new statetimeline.PanelBuilder()
    .title('Circuit breaker to Redis')
    .description('Per replica: closed (Redis decides), recovering (a background write-back or probe), open (the fallback decides).')
    .datasource(DATASOURCE)
    .gridPos(size(24, 6))
    .mappings([
      {
        type: dashboard.MappingType.ValueToText,
        options: { '0': state('closed', 'green', 0), '1': state('recovering', 'yellow', 1), '2': state('open', 'red', 2) },
      },
    ])
    .withTarget(query(`max by (instance) (sluice_breaker_state{${JOB}})`, '{{instance}}'));
}

function configLoads() {
  return new timeseries.PanelBuilder()
    .title('Config loads')
    .description('Config loads by result; a rejected config leaves the last good one serving (log lines with "event":"config_error" name file and line).')
    .datasource(DATASOURCE)
    .gridPos(size(16))
    .unit('short')
    .min(0)
    .drawStyle(common.GraphDrawStyle.Bars)
    .withTarget(query(`sum by (result) (increase(sluice_config_loads_total{${JOB}}[$__rate_interval]))`, '{{result}}'));
}

function configAge() {
  return new stat.PanelBuilder()
    .title('Config age (oldest replica)')
    .description('Time since the oldest replica loaded the config it runs.')
    .datasource(DATASOURCE)
    .gridPos(size(8))
    .unit('s')
    .reduceOptions(new common.ReduceDataOptionsBuilder().calcs(['lastNotNull']))
    .withTarget(query(`time() - min(sluice_config_last_load_success_timestamp_seconds{${JOB}})`, 'age', true));
}

function unknownDomains() {
  return new bargauge.PanelBuilder()
    .title('Unknown domains')
    .description(
      'Descriptors of calls for a domain no config defines, answered OK with no limit: usually a typo in Envoy’s rate limit domain (warn lines with "event":"unknown_domain"). Past 100 domains a replica counts the rest under _other_.',
    )
    .datasource(DATASOURCE)
    .gridPos(size(24, 6))
    .unit('short')
    .displayMode(common.BarGaugeDisplayMode.Gradient)
    .reduceOptions(new common.ReduceDataOptionsBuilder().calcs(['lastNotNull']).values(false))
    .withTarget(query(`topk(10, sum by (domain) (increase(ratelimit_service_rate_limit_domain_not_found{${JOB}}[$__range])))`, '{{domain}}', true));
}

export function buildDashboard(): Dashboard {
  return new dashboard.DashboardBuilder('sluice')
    .uid('sluice')
    .description('Rate-limit decisions, rules over their limit, the Redis store and config reloads of sluice (deploy/observability/dashboard.ts).')
    .tags(['sluice', 'ratelimit', 'envoy'])
    .editable()
    .refresh('30s')
    .time({ from: 'now-1h', to: 'now' })
    .timezone('browser')
    .withVariable(new dashboard.DatasourceVariableBuilder('datasource').label('Data source').type('prometheus'))
    .withVariable(
      new dashboard.QueryVariableBuilder('job')
        .label('Job')
        .datasource(DATASOURCE)
        .query('label_values(sluice_requests_total, job)')
        .refresh(dashboard.VariableRefresh.OnTimeRangeChanged)
        .multi(true)
        .includeAll(true)
        .allValue('.+'),
    )
    .withPanel(decisions().id(1))
    .withPanel(requestLatency().id(2))
    .withPanel(topOverLimit().id(3))
    .withPanel(overLimitShare().id(4))
    .withPanel(storeLatency().id(5))
    .withPanel(degraded().id(6))
    .withPanel(breaker().id(7))
    .withPanel(configLoads().id(8))
    .withPanel(configAge().id(9))
    .withPanel(unknownDomains().id(10))
    .build();
}

export function dashboardJson(): string {
  return `${JSON.stringify(buildDashboard(), null, 2)}\n`;
}

if (require.main === module) {
  const out = path.resolve(__dirname, '../../../deploy/observability/grafana-dashboard.json');
  fs.writeFileSync(out, dashboardJson());
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}
