import { execFile, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { type ServerProcess, spawnShipped } from '../test/support/process';
import { startRedis } from '../test/support/redis';

// A fleet of real `sluice serve` replicas on one Redis, each driven by its own h2load process at
// the same time (h2load costs a fraction of the CPU a Node load generator would). Used by
// test/system/h2load.test.ts (which asserts) and by `npm run bench` (which prints). The replicas run with
// the default settings apart from the store: automatic leases, deadline from grpc-timeout.

export const H2LOAD_MISSING = 'h2load not found on PATH: apt-get install nghttp2-client (Debian/Ubuntu), brew install nghttp2 (macOS)';
const METHOD = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

export function h2loadAvailable(): boolean {
  return !spawnSync('h2load', ['--version']).error;
}

// The i-th of a template's distinct requests: every entry's value with `-<i>` appended (keys-load's
// 100,000-key rows, and the peer section's floor, which must name the same counters).
export function distinctRequest(template: RateLimitRequest, i: number): RateLimitRequest {
  return { ...template, descriptors: template.descriptors.map((d) => ({ ...d, entries: d.entries.map((e) => ({ ...e, value: `${e.value}-${i}` })) })) };
}

export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  Buffer.from(message).copy(frame, 5);
  return frame;
}

export const FLEET_ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const;

// One rule per algorithm, high enough never to deny: the figures are the cost of deciding.
export function fleetConfigDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fleet-'));
  const rules = FLEET_ALGORITHMS.flatMap((a) => [`  - key: ${a}`, `    rate_limit: { unit: second, requests_per_unit: 1000000000, algorithm: ${a} }`]);
  fs.writeFileSync(path.join(dir, 'bench.yaml'), ['domain: bench', 'descriptors:', ...rules].join('\n') + '\n');
  return dir;
}

export interface H2loadRun {
  command: string;
  requests: number;
  succeeded: number;
  status2xx: number;
  reqPerSec: number;
  // Longest request as h2load saw it, ms.
  maxRequestMs: number;
  // Each request's latency in ms, sorted (with `latencies`).
  latenciesMs?: number[];
  output: string;
}

// The p-th percentile (0..100) of sorted values.
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export interface H2loadOptions {
  port: number;
  request: RateLimitRequest;
  requests: number;
  connections?: number;
  streams?: number;
  // gRPC's header: "1S" = one second.
  grpcTimeout?: string;
  // Requests per second per connection (h2load --rps); unset = as fast as answers come.
  rpsPerConnection?: number;
  // Collect every request's latency (h2load --log-file) for percentiles.
  latencies?: boolean;
  // Run h2load on these CPUs only (taskset -c), away from a pinned server.
  cpus?: string;
}

// Distinct file names for h2load runs at once against one port.
let runs = 0;

function toMs(value: string, unit: string): number {
  return Number(value) * ({ us: 0.001, ms: 1, s: 1000 } as Record<string, number>)[unit];
}

// Runs h2load asynchronously (so that several can run at once) and parses its summary. h2load sees
// HTTP statuses only; grpc-status is in the trailers, which it does not report.
export function runH2load(opts: H2loadOptions): Promise<H2loadRun> {
  const run = runs++;
  const file = path.join(os.tmpdir(), `sluice-fleet-${process.pid}-${opts.port}-${run}.bin`);
  const log = path.join(os.tmpdir(), `sluice-fleet-${process.pid}-${opts.port}-${run}.log`);
  fs.writeFileSync(file, grpcFrame(RateLimitRequest.encode(opts.request).finish()));
  const args = [
    ...['-n', String(opts.requests), '-c', String(opts.connections ?? 4), '-m', String(opts.streams ?? 32), '-t', '1', '-d', file],
    ...(opts.rpsPerConnection === undefined ? [] : [`--rps=${opts.rpsPerConnection}`]),
    ...(opts.latencies ? [`--log-file=${log}`] : []),
    ...['-H', 'content-type: application/grpc', '-H', 'te: trailers', '-H', `grpc-timeout: ${opts.grpcTimeout ?? '1S'}`],
    `http://127.0.0.1:${opts.port}${METHOD}`,
  ];
  const command = `h2load ${args.map((a) => (/[\s:]/.test(a) && !a.startsWith('http') ? `'${a}'` : a)).join(' ')}`;
  return new Promise((resolve, reject) => {
    const [cmd, argv] = opts.cpus === undefined ? ['h2load', args] : ['taskset', ['-c', opts.cpus, 'h2load', ...args]];
    const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.once('error', (err) => reject(new Error(`${command}: ${err.message}`)));
    child.once('close', (code) => {
      fs.rmSync(file, { force: true });
      let latenciesMs: number[] | undefined;
      if (opts.latencies && fs.existsSync(log)) {
        // Tab-separated: start (us since the epoch), HTTP status, us until the response ended.
        latenciesMs = fs
          .readFileSync(log, 'utf8')
          .split('\n')
          .filter((l) => l !== '')
          .map((l) => Number(l.split('\t')[2]) / 1000)
          .sort((a, b) => a - b);
        fs.rmSync(log, { force: true });
      }
      const rps = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(output);
      const done = /requests: (\d+) total, \d+ started, \d+ done, (\d+) succeeded/.exec(output);
      const status = /status codes: (\d+) 2xx/.exec(output);
      const time = /time for request:\s+[\d.]+(?:us|ms|s)\s+([\d.]+)(us|ms|s)/.exec(output);
      if (code !== 0 || !rps || !done || !status || !time) return reject(new Error(`${command} exited with ${code}:\n${output}`));
      resolve({
        command,
        requests: Number(done[1]),
        succeeded: Number(done[2]),
        status2xx: Number(status[1]),
        reqPerSec: Number(rps[1]),
        maxRequestMs: toMs(time[1], time[2]),
        latenciesMs,
        output,
      });
    });
  });
}

// GET /healthcheck until 200: for a Redis-backed replica, one real decision has round-tripped.
export async function waitReady(server: ServerProcess, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    try {
      const res = await fetch(`http://127.0.0.1:${server.httpPort}/healthcheck`);
      last = `${res.status} ${(await res.text()).trim()}`;
      if (res.status === 200) return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`replica on ${server.grpcPort} not ready after ${timeoutMs} ms: ${last}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Sum of the series of `name` whose labels include `labels`, from a Prometheus text exposition.
export function metricSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

export interface ReplicaFigures {
  run: H2loadRun;
  degraded: number;
  breakerTransitions: number;
  // Hits served from automatic leases without a Redis call.
  leaseServed: number;
  // sluice_requests_total{transport="grpc"} by code.
  grpcCodes: Record<string, number>;
}

export interface FleetOptions {
  replicas: number;
  requests: number;
  request: RateLimitRequest;
  // h2load runs per replica before the measured one (bench only); their answers count in the figures.
  warmUpRequests?: number;
}

function grpcCodes(metrics: string): Record<string, number> {
  const codes: Record<string, number> = {};
  for (const m of metrics.matchAll(/^sluice_requests_total\{([^}]*)\} (\S+)$/gm)) {
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (labels.transport === 'grpc') codes[labels.code] = (codes[labels.code] ?? 0) + Number(m[2]);
  }
  return codes;
}

// Starts Redis and the replicas (defaults apart from the store), waits until every replica is
// ready, then runs one h2load per replica, all at once.
export async function runFleet(opts: FleetOptions): Promise<ReplicaFigures[]> {
  if (!h2loadAvailable()) throw new Error(H2LOAD_MISSING);
  const redis = await startRedis();
  const servers: ServerProcess[] = [];
  try {
    const dir = fleetConfigDir();
    servers.push(
      ...(await Promise.all(
        Array.from({ length: opts.replicas }, () => spawnShipped(['--config', dir, '--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`])),
      )),
    );
    await Promise.all(servers.map((s) => waitReady(s)));
    if (opts.warmUpRequests) await Promise.all(servers.map((s) => runH2load({ port: s.grpcPort, request: opts.request, requests: opts.warmUpRequests! })));
    const runs = await Promise.all(servers.map((s) => runH2load({ port: s.grpcPort, request: opts.request, requests: opts.requests })));
    const metrics = await Promise.all(servers.map(async (s) => (await fetch(`http://127.0.0.1:${s.httpPort}/metrics`)).text()));
    return runs.map((run, i) => ({
      run,
      degraded: metricSum(metrics[i], 'sluice_degraded_decisions_total'),
      breakerTransitions: metricSum(metrics[i], 'sluice_breaker_transitions_total'),
      leaseServed: metricSum(metrics[i], 'sluice_lease_hits_served_locally_total'),
      grpcCodes: grpcCodes(metrics[i]),
    }));
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
    await redis.stop();
  }
}

export interface FleetBench {
  command: string;
  perReplica: number[];
  total: number;
  degraded: number;
  breakerTransitions: number;
  leaseServed: number;
  failedOrNot2xx: number;
}

// The bench's request: two fixed-window descriptors, each a hot key (the case leases are for).
export async function fleetBench(requests: number, replicas = 2): Promise<FleetBench | string> {
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  const request: RateLimitRequest = {
    domain: 'bench',
    descriptors: [{ entries: [{ key: 'fixed_window', value: 'tenant-1' }] }, { entries: [{ key: 'fixed_window', value: 'tenant-2' }] }],
    hitsAddend: 0,
  };
  const figures = await runFleet({ replicas, requests, request, warmUpRequests: Math.min(requests, 10_000) });
  const perReplica = figures.map((f) => f.run.reqPerSec);
  return {
    command: figures[0].run.command.replace(/-d \S+/, '-d <ShouldRateLimit frame>').replace(/127\.0\.0\.1:\d+/, '127.0.0.1:<replica port>'),
    perReplica,
    total: perReplica.reduce((a, b) => a + b, 0),
    degraded: figures.reduce((a, f) => a + f.degraded, 0),
    breakerTransitions: figures.reduce((a, f) => a + f.breakerTransitions, 0),
    leaseServed: figures.reduce((a, f) => a + f.leaseServed, 0),
    failedOrNot2xx: figures.reduce((a, f) => a + (f.run.requests - f.run.succeeded) + (f.run.requests - f.run.status2xx), 0),
  };
}

const KEYS_LOAD = path.join(__dirname, 'keys-load.js');

// bench/keys-load.ts as its own process: `keys` distinct requests in turn, 4 connections x 32
// streams; every call must end with grpc-status 0.
export async function runKeysLoad(o: {
  port: number;
  requests: number;
  descriptors: number;
  keys: number;
  template?: RateLimitRequest;
  label: string;
}): Promise<{ reqPerSec: number; p50Ms: number; p99Ms: number }> {
  const args = { port: o.port, requests: o.requests, connections: 4, streams: 32, descriptors: o.descriptors, keys: o.keys, template: o.template };
  const { stdout } = await promisify(execFile)(process.execPath, [KEYS_LOAD, JSON.stringify(args)], { maxBuffer: 1 << 20 });
  const r = JSON.parse(stdout) as { reqPerSec: number; p50: number; p99: number; failed: number };
  if (r.failed > 0) throw new Error(`${o.label}: ${r.failed} of ${o.requests} calls did not end with grpc-status 0`);
  return { reqPerSec: r.reqPerSec, p50Ms: r.p50, p99Ms: r.p99 };
}
