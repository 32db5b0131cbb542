import * as grpc from '@grpc/grpc-js';
import { type RateLimitRequest, type RateLimitResponse, RateLimitResponse_Code as Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import type { Deployment, Region, Replica } from './regions';

// The load of a multi-region simulation (test/support/regions.ts): an open-loop generator per
// region and what it measured, per second, per region and per limiter window.

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
  // The i passed to request(region, i).
  requestIndex: number;
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
      const at = { region: region.name, sentAtMs, requestIndex: sent, second: Math.min(Math.floor(sentAtMs / 1000), lastSecond) };
      pending.push(timedCall({ app, request: opts.request(region.name, sent), deadlineMs, at, degradedHeader: opts.deployment.degradedHeader }));
    }
  };
}

interface CallSetup {
  app: Replica;
  request: Partial<RateLimitRequest>;
  deadlineMs: number;
  at: Pick<Sample, 'region' | 'second' | 'sentAtMs' | 'requestIndex'>;
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
  return nearestRank(
    [...values].sort((a, b) => a - b),
    p,
  );
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
