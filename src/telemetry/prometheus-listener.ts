import type http from 'node:http';
import type { Logger } from '../logger';
import { listenAddress, settingName, type Settings } from '../settings';
import { listenAs } from '../server/listen-error';
import { createHttpServer, type HttpDeps, type HttpServerOptions, listenHttp, send } from '../server/http';
import { constantLabels, type Metrics } from './metrics';
import { loadMapperFile, type Mapped, PromMapper, type StatsdType } from './prom-mapper';
import { upstreamCounters } from './statsd';
import { defaultMapping } from './upstream-mapping';
import type { Observation, UpstreamTallies } from './upstream-tallies';

// USE_PROMETHEUS: upstream's dedicated metrics listener (PROMETHEUS_ADDR, PROMETHEUS_PATH). Upstream
// hands its statsd stats to an embedded statsd_exporter, so its series are named by a statsd_exporter
// mapping; here the same statsd names (statsd.ts) go through the same kind of mapping
// (prom-mapper.ts: the default of upstream-mapping.ts, or PROMETHEUS_MAPPER_YAML). Everything is
// read from sluice's own tallies at scrape time: nothing is added to the request path. As with
// statsd_exporter, a stat appears once it is non-zero. sluice's own series (sluice_*, process_*,
// nodejs_*) follow, as on /metrics; its fixed upstream-named ones (ratelimit_*) are left to the mapping.

const RESPONSE_TIME = 'ratelimit_server.ShouldRateLimit.response_time';

// Upstream's timers are in milliseconds; sluice's histogram is in seconds.
const MS_PER_SECOND = 1000;

export async function upstreamTallies(metrics: Metrics): Promise<UpstreamTallies> {
  return { counters: [...(await upstreamCounters(metrics))], responseTime: await grpcResponseTime(metrics) };
}

interface Family {
  type: 'counter' | 'histogram' | 'summary';
  help: string;
  // Label text ("{a=\"1\"}") → a counter's value or a timer's observations (already scaled).
  series: Map<string, number | Observation>;
}

export interface PrometheusListener {
  // Resolves with the port bound.
  start(): Promise<number>;
  stop(): Promise<void>;
}

export function createPrometheusListener(o: {
  settings: Settings;
  metrics: Metrics;
  deps: HttpDeps;
  http: HttpServerOptions;
  logger: Logger;
}): PrometheusListener | undefined {
  const { settings, metrics, logger } = o;
  if (!settings.prometheusEnabled) {
    if (settings.prometheusMapperYaml !== '')
      logger.warn({ event: 'prometheus_mapper_unused' }, 'PROMETHEUS_MAPPER_YAML is set but USE_PROMETHEUS is not: no metrics listener, the file is not read');
    return undefined;
  }
  // Read now, so that a file sluice cannot apply stops the start (a SettingsError naming it).
  const mapper = new PromMapper(
    settings.prometheusMapperYaml === '' ? defaultMapping(settings.prometheusResponseTimeAsMs) : loadMapperFile(settings.prometheusMapperYaml),
  );
  const extra = constantLabels(settings.extraTags);
  const handle = async (_req: http.IncomingMessage, res: http.ServerResponse) => {
    send(res, 200, await exposition(metrics, mapper, extra), metrics.registry.contentType);
  };
  const server = createHttpServer(o.deps, { [settings.prometheusPath]: { method: 'GET', handle } }, o.http);
  const { host, port } = listenAddress(settings.prometheusAddr, 'PROMETHEUS_ADDR');
  return {
    async start() {
      const addr = `${settingName(settings, 'prometheusAddr')}=${settings.prometheusAddr}`;
      const bound = await listenAs({ portSetting: addr, hostSetting: addr, host, port }, listenHttp(server, host, port));
      logger.info(
        {
          event: 'prometheus_listening',
          addr: settings.prometheusAddr,
          port: bound,
          path: settings.prometheusPath,
          mapping: settings.prometheusMapperYaml || 'default',
        },
        `metrics listener on ${host || '*'}:${bound}${settings.prometheusPath}`,
      );
      return bound;
    },
    stop: () => new Promise<void>((resolve) => (server.close(() => resolve()), server.closeIdleConnections())),
  };
}

async function exposition(metrics: Metrics, mapper: PromMapper, extra: Record<string, string>): Promise<string> {
  const families = new Map<string, Family>();
  const add = (statsdName: string, type: StatsdType, value: number | Observation) => {
    const mapped = mapper.map(statsdName, type);
    if (mapped !== undefined) addSample(families, mapped, { ...extra, ...mapped.labels }, type, value);
  };
  // A worker asks the primary once for the whole set's series and tallies (server/workers.ts).
  const set = await metrics.setSource?.();
  const { counters, responseTime } = set?.tallies ?? (await upstreamTallies(metrics));
  for (const [name, total] of counters) if (total > 0) add(name, 'counter', total);
  if (responseTime.count > 0) add(RESPONSE_TIME, 'observer', responseTime);
  let text = '';
  for (const [name, family] of families) text += renderFamily(name, family);
  return text + ownSeries(set?.text ?? (await metrics.registry.metrics()), families);
}

// statsd_exporter's registry: a name keeps the type it was first seen with (an event of another type
// is dropped), and events with the same name and labels add up.
function addSample(families: Map<string, Family>, mapped: Mapped, labels: Record<string, string>, type: StatsdType, value: number | Observation): void {
  const familyType = type === 'observer' ? mapped.observerType : 'counter';
  let family = families.get(mapped.name);
  if (family === undefined) {
    family = { type: familyType, help: mapped.help, series: new Map() };
    families.set(mapped.name, family);
  }
  if (family.type !== familyType) return;
  const key = labelText(labels);
  const before = family.series.get(key);
  if (typeof value === 'number') {
    family.series.set(key, ((before as number | undefined) ?? 0) + value * mapped.scale);
  } else {
    // One timer exists (RESPONSE_TIME), so a series holds one set of observations. The unit
    // factor first: 1000 × 0.001 is exactly 1, so upstream's default scale keeps the bounds exact.
    const factor = MS_PER_SECOND * mapped.scale;
    family.series.set(key, { buckets: value.buckets.map(([le, n]) => [le * factor, n]), sum: value.sum * factor, count: value.count });
  }
}

// gRPC ShouldRateLimit latency, upstream's timer, from sluice_request_duration_seconds{transport="grpc"}
// (in seconds, with its buckets: single observations are not kept).
async function grpcResponseTime(metrics: Metrics): Promise<Observation> {
  const out: Observation = { buckets: [], sum: 0, count: 0 };
  for (const v of (await metrics.requestDuration.get()).values) {
    if (v.labels.transport !== 'grpc') continue;
    const metricName = (v as { metricName?: string }).metricName ?? '';
    const le = (v.labels as { le?: string | number }).le;
    if (metricName.endsWith('_bucket')) out.buckets.push([le === '+Inf' ? Infinity : Number(le), v.value]);
    else if (metricName.endsWith('_sum')) out.sum = v.value;
    else if (metricName.endsWith('_count')) out.count = v.value;
  }
  return out;
}

function renderFamily(name: string, family: Family): string {
  let text = `# HELP ${name} ${family.help.replace(/\\/g, '\\\\').replace(/\n/g, '\\n')}\n# TYPE ${name} ${family.type}\n`;
  for (const [labels, value] of family.series) {
    if (typeof value === 'number') {
      text += `${name}${labels} ${num(value)}\n`;
      continue;
    }
    if (family.type === 'histogram') {
      const inner = labels === '' ? '' : `${labels.slice(1, -1)},`;
      for (const [le, n] of value.buckets) text += `${name}_bucket{${inner}le="${le === Infinity ? '+Inf' : num(le)}"} ${n}\n`;
    }
    // A summary's quantiles cannot be derived from the histogram: its sum and count only.
    text += `${name}_sum${labels} ${num(value.sum)}\n${name}_count${labels} ${value.count}\n`;
  }
  return text;
}

function labelText(labels: Record<string, string>): string {
  const keys = Object.keys(labels).sort();
  if (keys.length === 0) return '';
  return `{${keys.map((k) => `${k}="${labels[k].replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`).join(',')}}`;
}

function num(n: number): string {
  return Number.isFinite(n) ? String(n) : n > 0 ? '+Inf' : n < 0 ? '-Inf' : 'NaN';
}

// /metrics' families minus the upstream-named ones and any name the mapping produced. prom-client
// writes HELP and TYPE before each family's samples, so a family is known from its HELP line on.
function ownSeries(text: string, mapped: Map<string, Family>): string {
  let keep = true;
  const out: string[] = [];
  for (const line of text.split('\n')) {
    const help = /^# HELP (\S+)/.exec(line);
    if (help !== null) keep = !help[1].startsWith('ratelimit_') && !mapped.has(help[1]);
    if (keep && line !== '') out.push(line);
  }
  return out.length === 0 ? '' : `${out.join('\n')}\n`;
}
