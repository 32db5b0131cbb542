import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { type RateLimitRequest, type RateLimitResponse, RateLimitResponse_Code as Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import type { Settings } from '../../src/settings';
import { type Running, startApp } from './app';
import { type DelayProxy, startDelayProxy } from './delay-proxy';
import { type RedisNode, startRedis } from './redis';

// A multi-region deployment in one process, on loopback, for tests and benchmarks.
//
//   startRegions({ regions: [{ name: 'a', replicas: 2 }, { name: 'b', replicas: 2 }], configYaml, delayMs: 40 })
//     → Deployment { regions: [{ name, redis, proxy?, apps }], global?, stop() }
//   drive({ deployment, durationMs, ratePerSecond: (region, t) => n, request: (region, i) => req })
//     → DriveResult { perSecond, latency, totals, regionTotals, samples }
//   admittedInWindows(result, windowSeconds), percentile(values, p), redisInfoCalls(node)
//
// global: true (default): every region has its own redis-server and its own DelayProxy to one
//   global redis-server, so one region's WAN link can be cut alone; apps get
//   { region, globalRedisUrl: that proxy }. Until sluice reads those settings, each region simply
//   limits on its own Redis.
// global: false: the single-region baseline, every replica on one shared redis-server, no region
//   settings. With sharedOverWan, each region reaches that shared Redis through its own DelayProxy
//   (one central Redis across the WAN: the design multi-region replaces).

// The multi-region keys (region, globalRedisUrl, globalPartitionPolicy, globalLeaseHorizonMs) may
// not be in Settings yet; they pass through to the app untouched either way.
export type Overrides = Partial<Settings> & Record<string, unknown>;

export interface RegionSpec {
  name: string;
  replicas: number;
}

export interface StartRegionsOptions {
  regions: RegionSpec[];
  configYaml: string;
  // One way, per region link; a global-store round trip costs twice this.
  delayMs: number;
  settings?: Overrides;
  // Per region name, applied over `settings`.
  regionSettings?: Record<string, Overrides>;
  global?: boolean;
  sharedOverWan?: boolean;
  readyTimeoutMs?: number;
}

export interface Region {
  name: string;
  redis: RedisNode;
  proxy?: DelayProxy;
  apps: Running[];
}

export interface Deployment {
  regions: Region[];
  global?: RedisNode;
  degradedHeader: string;
  region(name: string): Region;
  stop(): Promise<void>;
}

export async function startRegions(opts: StartRegionsOptions): Promise<Deployment> {
  const useGlobal = opts.global ?? true;
  const cleanup: (() => Promise<unknown>)[] = [];
  const stop = async () => {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  };
  try {
    const configDir = writeConfig(opts.configYaml);
    cleanup.push(async () => fs.rmSync(configDir, { recursive: true, force: true }));
    const central = await startRedis();
    cleanup.push(() => central.stop());
    const regions: Region[] = [];
    for (const spec of opts.regions) {
      const region = await startRegion({ spec, opts, central, useGlobal, configDir, cleanup });
      regions.push(region);
    }
    await Promise.all(regions.flatMap((r) => r.apps.map((app) => waitReady(app, opts.readyTimeoutMs ?? 20_000))));
    return {
      regions,
      global: useGlobal ? central : undefined,
      degradedHeader: String(opts.settings?.degradedHeader ?? 'x-ratelimit-degraded'),
      region: (name) => regions.find((r) => r.name === name) ?? fail(`no region ${name}`),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function writeConfig(yaml: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-regions-'));
  fs.writeFileSync(path.join(dir, 'config.yaml'), yaml.endsWith('\n') ? yaml : `${yaml}\n`);
  return dir;
}

interface RegionStart {
  spec: RegionSpec;
  opts: StartRegionsOptions;
  // The global redis-server, or with global: false the one every replica shares.
  central: RedisNode;
  useGlobal: boolean;
  configDir: string;
  cleanup: (() => Promise<unknown>)[];
}

async function startRegion(r: RegionStart): Promise<Region> {
  const { spec, opts, central, useGlobal, cleanup } = r;
  const wan = useGlobal || opts.sharedOverWan;
  const proxy = wan ? await startDelayProxy({ targetPort: central.port, delayMs: opts.delayMs }) : undefined;
  if (proxy) cleanup.push(() => proxy.close());
  const local = useGlobal ? await startRedis() : undefined;
  if (local) cleanup.push(() => local.stop());
  const redisPort = local?.port ?? proxy?.port ?? central.port;
  const overrides: Overrides = {
    store: 'redis',
    redisUrl: `127.0.0.1:${redisPort}`,
    configPaths: [r.configDir],
    ...(useGlobal ? { region: spec.name, globalRedisUrl: `127.0.0.1:${proxy!.port}` } : {}),
    ...opts.settings,
    ...opts.regionSettings?.[spec.name],
  };
  const apps: Running[] = [];
  for (let i = 0; i < spec.replicas; i++) {
    const app = await startApp(overrides as Partial<Settings>);
    cleanup.push(() => app.stop());
    apps.push(app);
  }
  return { name: spec.name, redis: local ?? central, proxy, apps };
}

async function waitReady(app: Running, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    try {
      const res = await app.http('/healthcheck');
      last = `${res.status} ${(await res.text()).trim()}`;
      if (res.status === 200) return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`replica on gRPC port ${app.grpcPort} not ready after ${timeoutMs} ms: ${last}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

function fail(message: string): never {
  throw new Error(message);
}

export interface DriveOptions {
  deployment: Deployment;
  durationMs: number;
  // Requests per second region should send at tSeconds since the start.
  ratePerSecond: (region: string, tSeconds: number) => number;
  // i counts from 0 per region.
  request: (region: string, i: number) => Partial<RateLimitRequest>;
  // gRPC deadline per call.
  deadlineMs?: number;
  tickMs?: number;
}

export interface Sample {
  region: string;
  // Whole seconds since the start, by send time.
  second: number;
  sentAtMs: number;
  latencyMs: number;
  admitted: boolean;
  denied: boolean;
  degraded: boolean;
  // gRPC status name (DEADLINE_EXCEEDED, UNAVAILABLE, ...), or overall:<code> for an answer neither OK nor OVER_LIMIT.
  error?: string;
}

export interface Counts {
  sent: number;
  admitted: number;
  denied: number;
  errors: number;
  degraded: number;
}

export interface Totals extends Counts {
  errorCodes: Record<string, number>;
}

export interface LatencyStats {
  region: string;
  p50: number;
  p99: number;
  max: number;
  count: number;
}

export interface DriveResult {
  perSecond: (Counts & { region: string; second: number })[];
  // Over every call, failed ones included (a DEADLINE_EXCEEDED costs its deadline).
  latency: LatencyStats[];
  totals: Totals;
  regionTotals: (Totals & { region: string })[];
  samples: Sample[];
  // Wall-clock time (ms since the epoch) of the run's start: sentAtMs + startedAtMs is when a
  // request left, on the clock the limiter's windows follow.
  startedAtMs: number;
}

// Open loop: requests leave on schedule whether or not earlier ones were answered, so a slow
// store shows up as latency and errors rather than as a politely lower request rate.
export async function drive(opts: DriveOptions): Promise<DriveResult> {
  const names = opts.deployment.regions.map((r) => r.name);
  const pending: Promise<Sample>[] = [];
  const senders = opts.deployment.regions.map((region) => makeSender({ region, opts, pending }));
  const startedAtMs = Date.now();
  const start = process.hrtime.bigint();
  const sinceStartMs = () => Number(process.hrtime.bigint() - start) / 1e6;
  await new Promise<void>((done) => {
    let lastMs = 0;
    const timer = setInterval(() => {
      const nowMs = Math.min(sinceStartMs(), opts.durationMs);
      for (const send of senders) send(lastMs, nowMs, sinceStartMs);
      lastMs = nowMs;
      if (nowMs >= opts.durationMs) {
        clearInterval(timer);
        done();
      }
    }, opts.tickMs ?? 5);
  });
  const samples = await Promise.all(pending);
  return { ...summarize(samples, names, Math.ceil(opts.durationMs / 1000)), startedAtMs };
}

interface SenderSetup {
  region: Region;
  opts: DriveOptions;
  pending: Promise<Sample>[];
}

// The fractional budget carries over between ticks, so 15 req/s on a 5 ms tick is 15 requests
// spread over the second, not 0 per tick. Starting at one half puts each request mid-slot, so a
// run sends rate × duration requests, not one short.
function makeSender({ region, opts, pending }: SenderSetup) {
  let carry = 0.5;
  let sent = 0;
  const deadlineMs = opts.deadlineMs ?? 1000;
  // The last tick may run a few ms past the end; what it sends belongs to the run's last second.
  const lastSecond = Math.ceil(opts.durationMs / 1000) - 1;
  return (fromMs: number, toMs: number, clockMs: () => number) => {
    carry += (opts.ratePerSecond(region.name, fromMs / 1000) * (toMs - fromMs)) / 1000;
    for (; carry >= 1; carry--, sent++) {
      const app = region.apps[sent % region.apps.length];
      const sentAtMs = clockMs();
      const at = { region: region.name, sentAtMs, second: Math.min(Math.floor(sentAtMs / 1000), lastSecond) };
      pending.push(timedCall({ app, request: opts.request(region.name, sent), deadlineMs, at, degradedHeader: opts.deployment.degradedHeader }));
    }
  };
}

interface CallSetup {
  app: Running;
  request: Partial<RateLimitRequest>;
  deadlineMs: number;
  at: Pick<Sample, 'region' | 'second' | 'sentAtMs'>;
  degradedHeader: string;
}

function timedCall(c: CallSetup): Promise<Sample> {
  const full: RateLimitRequest = { domain: '', descriptors: [], hitsAddend: 0, ...c.request };
  const t0 = process.hrtime.bigint();
  return new Promise((resolve) => {
    c.app.client.shouldRateLimit(full, new grpc.Metadata(), { deadline: Date.now() + c.deadlineMs }, (err, res) => {
      const latencyMs = Number(process.hrtime.bigint() - t0) / 1e6;
      if (err) return resolve({ ...c.at, latencyMs, admitted: false, denied: false, degraded: false, error: grpc.status[err.code] ?? String(err.code) });
      resolve({ ...c.at, latencyMs, ...outcome(res, c.degradedHeader) });
    });
  });
}

function outcome(res: RateLimitResponse, degradedHeader: string): Pick<Sample, 'admitted' | 'denied' | 'degraded' | 'error'> {
  const degraded = res.responseHeadersToAdd.some((h) => h.key === degradedHeader && h.value === 'true');
  const admitted = res.overallCode === Code.OK;
  const denied = res.overallCode === Code.OVER_LIMIT;
  return { admitted, denied, degraded, error: admitted || denied ? undefined : `overall:${Code[res.overallCode] ?? res.overallCode}` };
}

// One pass into buckets: a benchmark run can hold hundreds of thousands of samples.
function summarize(samples: Sample[], regions: string[], seconds: number): Omit<DriveResult, 'startedAtMs'> {
  const byRegion = new Map<string, Sample[]>(regions.map((r) => [r, []]));
  const bySecond = new Map<string, Sample[]>();
  for (const s of samples) {
    byRegion.get(s.region)!.push(s);
    const key = `${s.region}/${s.second}`;
    const bucket = bySecond.get(key);
    if (bucket) bucket.push(s);
    else bySecond.set(key, [s]);
  }
  const perSecond = regions.flatMap((region) =>
    Array.from({ length: seconds }, (_, second) => ({ region, second, ...count(bySecond.get(`${region}/${second}`) ?? []) })),
  );
  return {
    perSecond,
    latency: regions.map((region) => latencyOf(region, byRegion.get(region)!)),
    totals: totalsOf(samples),
    regionTotals: regions.map((region) => ({ region, ...totalsOf(byRegion.get(region)!) })),
    samples,
  };
}

function count(samples: Sample[]): Counts {
  const c: Counts = { sent: samples.length, admitted: 0, denied: 0, errors: 0, degraded: 0 };
  for (const s of samples) {
    if (s.admitted) c.admitted++;
    if (s.denied) c.denied++;
    if (s.error) c.errors++;
    if (s.degraded) c.degraded++;
  }
  return c;
}

function totalsOf(samples: Sample[]): Totals {
  const errorCodes: Record<string, number> = {};
  for (const s of samples) if (s.error) errorCodes[s.error] = (errorCodes[s.error] ?? 0) + 1;
  return { ...count(samples), errorCodes };
}

function latencyOf(region: string, samples: Sample[]): LatencyStats {
  const sorted = samples.map((s) => s.latencyMs).sort((a, b) => a - b);
  return { region, p50: nearestRank(sorted, 50), p99: nearestRank(sorted, 99), max: sorted.length ? sorted[sorted.length - 1] : NaN, count: sorted.length };
}

// Nearest rank; NaN for no values, so "no samples" cannot pass for "fast".
export function percentile(values: readonly number[], p: number): number {
  return nearestRank([...values].sort((a, b) => a - b), p);
}

function nearestRank(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil((Math.min(Math.max(p, 0), 100) / 100) * sorted.length);
  return sorted[Math.max(rank, 1) - 1];
}

export interface WindowAdmitted {
  window: number;
  // Seconds since the start, [fromSecond, toSecond).
  fromSecond: number;
  toSecond: number;
  admitted: number;
  byRegion: Record<string, number>;
}

// Windows are relative to the drive's start, not aligned to the limiter's own windows: a bound
// checked on them must allow for a limiter window straddling two of these.
export function admittedInWindows(result: DriveResult, windowSeconds: number): WindowAdmitted[] {
  const windows: WindowAdmitted[] = [];
  for (const row of result.perSecond) {
    const index = Math.floor(row.second / windowSeconds);
    windows[index] ??= { window: index, fromSecond: index * windowSeconds, toSecond: (index + 1) * windowSeconds, admitted: 0, byRegion: {} };
    const w = windows[index];
    w.admitted += row.admitted;
    w.byRegion[row.region] = (w.byRegion[row.region] ?? 0) + row.admitted;
  }
  return windows;
}

// Commands the node has processed since it started (INFO stats total_commands_processed); the
// INFO behind this call counts too, on the next reading. Diff two readings around a run and divide
// by decisions for store calls per decision.
export async function redisInfoCalls(node: RedisNode): Promise<number> {
  const stats = await node.cli('INFO', 'stats');
  const line = stats.split(/\r?\n/).find((l) => l.startsWith('total_commands_processed:'));
  if (!line) throw new Error(`redis-server ${node.port}: no total_commands_processed in INFO stats`);
  return Number(line.slice('total_commands_processed:'.length));
}
