import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Redis } from 'ioredis';
import type { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { freePort, type RedisNode, startRedis } from '../test/support/redis';
import { spawnShipped, type ServerProcess } from '../test/support/process';
import { horizontalBars } from './chart';
import { scriptFloor } from './script-floor';
import { processCpuSeconds, redisCpuSeconds } from './cpu';
import { H2LOAD_MISSING, h2loadAvailable, metricSum, percentile, runH2load, runKeysLoad, waitReady } from './fleet';

// envoyproxy/ratelimit (Go) beside sluice, in one run: the same redis-server, the same YAML (fixed
// window, limits never reached), the same requests (1 and 3 descriptors, one hot key, h2load with
// grpc-timeout 1S), each service pinned to one core (taskset -c 1; GOMAXPROCS=1 for Go), Redis and
// h2load on the other core, rounds alternating between the services; the best round of each is kept.
// An empty handler on sluice's own gRPC server runs beside them: the ceiling of sluice's rows.
// Upstream is installed once, pinned, with `go install` into a cache directory (never committed).

export const UPSTREAM_VERSION = 'v1.4.1-0.20260122083618-3fb702589d36';
export const UPSTREAM_MODULE = 'github.com/envoyproxy/ratelimit/src/service_cmd';
// BENCH_PEER_ROUNDS: more rounds when comparing builds (BENCH_PEER_BASELINE) on a noisy host.
export function peerRounds(value = process.env.BENCH_PEER_ROUNDS): number {
  if (value === undefined || value === '') return 2;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`BENCH_PEER_ROUNDS=${value}: expected a whole number above 0`);
  return n;
}
// One hot key, and distinct keys: every request touches counters no other request of the row did.
const KEY_COUNTS = [1, 100_000];
const PACED_CONNECTIONS = 16;

export const UPSTREAM_MISSING =
  `Go not found (go version): install Go (https://go.dev/dl/, or apt-get install golang-go) and rerun; ` +
  `the section then runs GOBIN=<cache> go install ${UPSTREAM_MODULE}@${UPSTREAM_VERSION} once`;

// The empty handler: sluice's own gRPC server answering a fixed OK (bench/empty-server.ts h2grpc),
// what any sluice row costs before it decides anything: its ceiling.
export const EMPTY_HANDLER = "empty handler, sluice's gRPC server";

export type PeerServer =
  | 'upstream'
  | 'upstream, pipeline 150us'
  | 'sluice, leases off'
  | 'sluice, leases on'
  | typeof EMPTY_HANDLER
  | `baseline ${string}, leases ${'off' | 'on'}`;

// BENCH_PEER_BASELINE=<checkout>: another build of sluice (its `npm run build` done) runs beside
// this one in the same rounds, leases off and on: what a change costs, measured in the same minutes
// on the same noisy host, instead of two runs some minutes apart.
export interface Baseline {
  dir: string;
  main: string;
  label: string;
}

export function peerBaseline(dir = process.env.BENCH_PEER_BASELINE): Baseline | undefined {
  if (dir === undefined || dir === '') return undefined;
  const main = path.resolve(dir, 'dist', 'src', 'main.js');
  if (!fs.existsSync(main)) throw new Error(`BENCH_PEER_BASELINE=${dir}: no ${main}; run npm ci && npm run build in that checkout first`);
  const rev = spawnSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  return { dir, main, label: rev.status === 0 ? rev.stdout.trim() : path.basename(path.resolve(dir)) };
}

export interface PeerRow {
  server: PeerServer;
  descriptors: number;
  // 1: one hot key (every request the same; h2load); more: that many distinct requests in turn
  // (bench/keys-load.ts), each touching counters no other request of the row touched.
  keys: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerReq: number;
  redisCpuUsPerDescriptor: number;
  // Redis commands (all but INFO, counting those run inside scripts) per request: upstream
  // pipelines INCRBY + EXPIRE per descriptor.
  redisCommandsPerReq: number;
  // sluice: requests per script call (its batches).
  requestsPerScriptCall?: number;
  // Ratios to the better upstream row (defaults or pipeline window) of the same descriptor count.
  rateRatio: number;
  cpuRatio: number;
  redisRatio: number;
  // sluice only: answers not decided by Redis (must be 0), and hits served from leases.
  degraded?: number;
  leaseServed?: number;
  // Every round of the row, in order (the row's figures are its best one): what baselineLines pairs.
  rounds?: RoundFigures[];
}

export interface RoundFigures {
  reqPerSec: number;
  serverCpuUsPerReq: number;
}

export interface PeerBench {
  rows: PeerRow[];
  // 3 descriptors x 100k keys: Redis CPU of a function that only reads and creates the counters,
  // in batches of sluice's size (bench/script-floor.ts), and its ratio to upstream's row.
  floor?: { batchRequests: number; redisCpuUsPerDescriptor: number; redisRatio: number };
  // Paced at half upstream's best rate (1 descriptor): p50/p99 of each service.
  halfRate: { server: PeerServer; reqPerSec: number; p50Ms: number; p99Ms: number }[];
  binary: string;
  install: string;
  pinning: string;
  commands: string[];
  baseline?: Baseline;
}

export interface Running {
  name: PeerServer;
  grpcPort: number;
  pid: number;
  // sluice only: its /metrics.
  metricsUrl?: string;
  stop(): Promise<unknown>;
}

function cacheDir(): string {
  const base = process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache');
  return path.join(base, 'sluice-bench', `ratelimit-${UPSTREAM_VERSION}`);
}

export function goAvailable(): boolean {
  const r = spawnSync('go', ['version']);
  return !r.error && r.status === 0;
}

// The pinned upstream binary, installed on first use.
export function upstreamBinary(): { binary: string; install: string } {
  const dir = cacheDir();
  const binary = path.join(dir, 'service_cmd');
  const install = `GOBIN=${dir} go install ${UPSTREAM_MODULE}@${UPSTREAM_VERSION}`;
  if (!fs.existsSync(binary)) {
    fs.mkdirSync(dir, { recursive: true });
    console.log(`  installing upstream once: ${install}`);
    execFileSync('go', ['install', `${UPSTREAM_MODULE}@${UPSTREAM_VERSION}`], { env: { ...process.env, GOBIN: dir }, stdio: 'inherit', cwd: os.tmpdir() });
  }
  return { binary, install };
}

export function tasksetAvailable(): boolean {
  return !spawnSync('taskset', ['--version']).error && os.cpus().length >= 2;
}

// Moves every thread of a process to the given CPU list; threads it starts later inherit it.
export function pin(pid: number, cpus: string): void {
  execFileSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
}

function affinityMask(pid: number): string {
  return /: ([0-9a-f]+)\s*$/.exec(execFileSync('taskset', ['-p', String(pid)], { encoding: 'utf8' }))![1];
}

async function redisCounters(node: RedisNode): Promise<{ cpu: number; commands: number; scripts: number }> {
  const cpu = await redisCpuSeconds(node);
  const stats = [...(await node.cli('INFO', 'commandstats')).matchAll(/cmdstat_(\w+):calls=(\d+)/g)];
  const commands = stats.filter((m) => m[1] !== 'info').reduce((a, m) => a + Number(m[2]), 0);
  const scripts = stats.filter((m) => m[1] === 'fcall' || m[1] === 'evalsha').reduce((a, m) => a + Number(m[2]), 0);
  return { cpu, commands, scripts };
}

// The same file for both services: upstream's format, nothing else (upstream rejects unknown
// keys), so the default algorithm, fixed window, applies; limits far above what is sent.
// Requests a minute per descriptor: never reached.
const PEER_LIMIT_PER_MINUTE = 1_000_000_000;

export function writeConfig(root: string): void {
  const limit = `{ unit: minute, requests_per_unit: ${PEER_LIMIT_PER_MINUTE} }`;
  const dir = path.join(root, 'bench', 'config');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'bench.yaml'),
    [
      'domain: bench',
      'descriptors:',
      '  - key: tenant',
      `    rate_limit: ${limit}`,
      '    descriptors:',
      '      - key: route',
      `        rate_limit: ${limit}`,
      '  - key: remote_address',
      `    rate_limit: ${limit}`,
      '',
    ].join('\n'),
  );
}

// 1 descriptor: a tenant; 3: the tenant, the tenant on a route, the client address.
export function peerRequest(descriptors: 1 | 3): RateLimitRequest {
  const tenant = { key: 'tenant', value: 'cust_ent_9942' };
  const all = [
    { entries: [tenant] },
    { entries: [tenant, { key: 'route', value: '/v1/payments/checkout' }] },
    { entries: [{ key: 'remote_address', value: '198.51.100.7' }] },
  ];
  return { domain: 'bench', descriptors: all.slice(0, descriptors), hitsAddend: 0 };
}

export async function startUpstream(
  name: PeerServer,
  binary: string,
  root: string,
  redisPort: number,
  pinned: boolean,
  extraEnv: Record<string, string>,
): Promise<Running> {
  const [grpcPort, httpPort, debugPort] = [await freePort(), await freePort(), await freePort()];
  const env = {
    PATH: process.env.PATH ?? '',
    GOMAXPROCS: '1',
    USE_STATSD: 'false',
    BACKEND_TYPE: 'redis',
    REDIS_SOCKET_TYPE: 'tcp',
    REDIS_URL: `127.0.0.1:${redisPort}`,
    RUNTIME_ROOT: root,
    RUNTIME_SUBDIRECTORY: 'bench',
    RUNTIME_WATCH_ROOT: 'false',
    HOST: '127.0.0.1',
    GRPC_HOST: '127.0.0.1',
    DEBUG_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    PORT: String(httpPort),
    DEBUG_PORT: String(debugPort),
    LOG_LEVEL: 'warn',
    ...extraEnv,
  };
  const [cmd, args] = pinned ? ['taskset', ['-c', '1', binary]] : [binary, []];
  const child: ChildProcess = spawn(cmd, args, { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited with ${child.exitCode}: ${stderr}`);
    try {
      const res = await fetch(`http://127.0.0.1:${httpPort}/healthcheck`);
      await res.text();
      if (res.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${name} not healthy on :${httpPort} after 20 s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { name, grpcPort, pid: child.pid!, stop };
}

async function startSluice(name: PeerServer, root: string, redisPort: number, pinned: boolean, leases: boolean, main?: string): Promise<Running> {
  const server: ServerProcess = await spawnShipped(
    [
      // One process, so that pinning it pins all of sluice (WORKERS=auto would start a worker per core).
      ...['--config', path.join(root, 'bench', 'config'), '--log-level', 'info', '--store', 'redis', '--redis-url', `127.0.0.1:${redisPort}`, '--workers', '1'],
      ...(leases ? [] : ['--lease-auto-threshold', '0']),
    ],
    {},
    [],
    main,
  );
  if (pinned) pin(server.child.pid!, '1');
  await waitReady(server);
  return { name, grpcPort: server.grpcPort, pid: server.child.pid!, metricsUrl: `http://127.0.0.1:${server.httpPort}/metrics`, stop: () => server.stop() };
}

export async function startEmpty(pinned: boolean): Promise<Running> {
  const script = path.join(__dirname, 'empty-server.js');
  const [cmd, args] = pinned ? ['taskset', ['-c', '1', process.execPath, script, 'h2grpc']] : [process.execPath, [script, 'h2grpc']];
  const child: ChildProcess = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${EMPTY_HANDLER} exited with ${code}`)));
    readline.createInterface({ input: child.stdout! }).once('line', (line) => resolve(Number(line)));
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
  };
  return { name: EMPTY_HANDLER, grpcPort: port, pid: child.pid!, stop };
}

type Measured = Omit<PeerRow, 'rateRatio' | 'cpuRatio' | 'redisRatio' | 'degraded' | 'leaseServed'>;

// The hot key by h2load; distinct keys by keys-load (a Node client: compare its rows with each other).
async function load(
  t: Running,
  descriptors: 1 | 3,
  keys: number,
  requests: number,
  latencies: boolean,
): Promise<{ reqPerSec: number; p50Ms: number; p99Ms: number }> {
  const request = peerRequest(descriptors);
  if (keys > 1) return runKeysLoad({ port: t.grpcPort, requests, descriptors, keys, template: request, label: t.name });
  const r = await runH2load({ port: t.grpcPort, request, requests, latencies });
  if (r.succeeded !== requests || r.status2xx !== requests) throw new Error(`${t.name}: ${requests - r.succeeded} requests failed:\n${r.output}`);
  const lat = r.latenciesMs ?? [];
  return { reqPerSec: r.reqPerSec, p50Ms: percentile(lat, 50), p99Ms: percentile(lat, 99) };
}

// Counters of earlier rows expire (60 s windows) while later rows run, and Redis' CPU for deleting
// them would land on whichever row is measured then: every row starts without them.
export async function clearCounters(redis: RedisNode): Promise<void> {
  const conn = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true });
  await conn.connect();
  try {
    for (const match of ['sluice:{bench|*', 'sluice:{}windows|*', 'bench_*', 'floor:*']) {
      let cursor = '0';
      do {
        const [next, keys] = await conn.scan(cursor, 'MATCH', match, 'COUNT', 5000);
        if (keys.length > 0) await conn.unlink(...keys);
        cursor = next;
      } while (cursor !== '0');
    }
  } finally {
    conn.disconnect();
  }
}

async function measureRow(t: Running, redis: RedisNode, descriptors: 1 | 3, keys: number, requests: number): Promise<Measured> {
  await clearCounters(redis);
  await load(t, descriptors, keys, Math.min(20_000, requests), false); // warm-up
  const cpu0 = processCpuSeconds(t.pid);
  const r0 = await redisCounters(redis);
  const r = await load(t, descriptors, keys, requests, true);
  const cpu1 = processCpuSeconds(t.pid);
  const r1 = await redisCounters(redis);
  return {
    server: t.name,
    descriptors,
    keys,
    reqPerSec: r.reqPerSec,
    p50Ms: r.p50Ms,
    p99Ms: r.p99Ms,
    serverCpuUsPerReq: ((cpu1 - cpu0) * 1e6) / requests,
    redisCpuUsPerDescriptor: ((r1.cpu - r0.cpu) * 1e6) / (requests * descriptors),
    redisCommandsPerReq: (r1.commands - r0.commands) / requests, // INFO itself excluded by name
    requestsPerScriptCall: r1.scripts > r0.scripts ? requests / (r1.scripts - r0.scripts) : undefined,
  };
}

export async function peerBench(requests: number): Promise<PeerBench | string> {
  const baseline = peerBaseline();
  const rounds = peerRounds();
  if (!goAvailable()) return `skipped: ${UPSTREAM_MISSING}`;
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  let upstream: { binary: string; install: string };
  try {
    upstream = upstreamBinary();
  } catch (err) {
    return `skipped: installing upstream failed (${(err as Error).message.split('\n')[0]}); ${UPSTREAM_MISSING.replace(/^Go not found \(go version\): /, '')}`;
  }
  const { binary, install } = upstream;
  const pinned = tasksetAvailable();
  const pinning = pinned
    ? 'each service pinned to core 1 (taskset -c 1; GOMAXPROCS=1 for upstream), redis-server and h2load on core 0'
    : `unpinned: ${os.cpus().length < 2 ? 'fewer than 2 cores' : 'taskset not found (util-linux)'}`;
  // This process on core 0 while the section runs, so that redis-server and every h2load it starts
  // inherit core 0; the services are moved (or started) on core 1.
  const ownMask = pinned ? affinityMask(process.pid) : '';
  if (pinned) pin(process.pid, '0');
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-peer-'));
  writeConfig(root);
  const redis = await startRedis();
  const servers: Running[] = [];
  try {
    servers.push(await startUpstream('upstream', binary, root, redis.port, pinned, {}));
    servers.push(await startUpstream('upstream, pipeline 150us', binary, root, redis.port, pinned, { REDIS_PIPELINE_WINDOW: '150us' }));
    servers.push(await startSluice('sluice, leases off', root, redis.port, pinned, false));
    servers.push(await startSluice('sluice, leases on', root, redis.port, pinned, true));
    if (baseline !== undefined) {
      servers.push(await startSluice(`baseline ${baseline.label}, leases off`, root, redis.port, pinned, false, baseline.main));
      servers.push(await startSluice(`baseline ${baseline.label}, leases on`, root, redis.port, pinned, true, baseline.main));
    }
    servers.push(await startEmpty(pinned));

    // Rounds alternate between the services; the best (highest rate) round of each is kept. The
    // distinct-key rows send half as many requests (each a key of its own, as in `decisions`).
    const best = new Map<string, Measured>();
    const every = new Map<string, RoundFigures[]>();
    const shapes = ([1, 3] as const).flatMap((descriptors) => KEY_COUNTS.map((keys) => ({ descriptors, keys })));
    for (const { descriptors, keys } of shapes) {
      for (let round = 0; round < rounds; round++) {
        for (const t of servers) {
          const m = await measureRow(t, redis, descriptors, keys, keys > 1 ? Math.round(requests / 2) : requests);
          const k = `${t.name}/${descriptors}/${keys}`;
          if (!best.has(k) || best.get(k)!.reqPerSec < m.reqPerSec) best.set(k, m);
          const seen = every.get(k) ?? [];
          seen.push({ reqPerSec: m.reqPerSec, serverCpuUsPerReq: m.serverCpuUsPerReq });
          every.set(k, seen);
        }
      }
    }

    const rows: PeerRow[] = [];
    for (const { descriptors, keys } of shapes) {
      const ups = servers.filter((s) => s.name.startsWith('upstream')).map((s) => best.get(`${s.name}/${descriptors}/${keys}`)!);
      const ref = ups.reduce((a, b) => (b.reqPerSec > a.reqPerSec ? b : a));
      for (const t of servers) {
        const m = best.get(`${t.name}/${descriptors}/${keys}`)!;
        rows.push({
          ...m,
          rounds: every.get(`${t.name}/${descriptors}/${keys}`),
          rateRatio: m.reqPerSec / ref.reqPerSec,
          cpuRatio: m.serverCpuUsPerReq / ref.serverCpuUsPerReq,
          redisRatio: m.redisCpuUsPerDescriptor / ref.redisCpuUsPerDescriptor,
        });
      }
    }

    // Redis' floor for new counters, on the same Redis: what deciding adds is the row above it.
    const off = rows.find((r) => r.server === 'sluice, leases off' && r.descriptors === 3 && r.keys > 1);
    const up3 = rows.find((r) => r.server.startsWith('upstream') && r.descriptors === 3 && r.keys > 1 && r.redisRatio === 1);
    let floor: PeerBench['floor'];
    if (off?.requestsPerScriptCall !== undefined && up3 !== undefined) {
      await clearCounters(redis);
      const us = await scriptFloor(redis, {
        template: peerRequest(3),
        limitPerMinute: PEER_LIMIT_PER_MINUTE,
        batchRequests: off.requestsPerScriptCall,
        requests: Math.round(requests / 2),
        windowHashes: true,
      });
      floor = { batchRequests: off.requestsPerScriptCall, redisCpuUsPerDescriptor: us, redisRatio: us / up3.redisCpuUsPerDescriptor };
    }

    // Latency at half upstream's best rate (1 descriptor, hot key), paced (h2load --rps) on 16
    // connections x 1 stream: one stream per connection, so no bursts, and each connection's pace
    // (a request every ~2 ms here) stays above either service's latency.
    const ref1 = rows
      .filter((r) => r.descriptors === 1 && r.keys === 1 && r.server.startsWith('upstream'))
      .reduce((a, b) => (b.reqPerSec > a.reqPerSec ? b : a));
    const perConnection = Math.max(1, Math.round(ref1.reqPerSec / 2 / PACED_CONNECTIONS));
    const halfRate: PeerBench['halfRate'] = [];
    for (const t of servers.filter((s) => s.name === ref1.server || s.name.startsWith('sluice'))) {
      const r = await runH2load({
        port: t.grpcPort,
        request: peerRequest(1),
        requests: perConnection * PACED_CONNECTIONS * 10,
        connections: PACED_CONNECTIONS,
        streams: 1,
        rpsPerConnection: perConnection,
        latencies: true,
      });
      const lat = r.latenciesMs ?? [];
      halfRate.push({ server: t.name, reqPerSec: r.reqPerSec, p50Ms: percentile(lat, 50), p99Ms: percentile(lat, 99) });
    }

    // Every sluice answer must have come from Redis (or a lease granted by Redis).
    for (const t of servers.filter((s) => s.metricsUrl)) {
      const metrics = await (await fetch(t.metricsUrl!)).text();
      const degraded = metricSum(metrics, 'sluice_degraded_decisions_total');
      const failed = metricSum(metrics, 'sluice_requests_total', { code: 'UNAVAILABLE' }) + metricSum(metrics, 'sluice_requests_total', { code: 'INTERNAL' });
      for (const r of rows.filter((x) => x.server === t.name)) {
        r.degraded = degraded;
        r.leaseServed = metricSum(metrics, 'sluice_lease_hits_served_locally_total');
      }
      if (degraded > 0 || failed > 0)
        throw new Error(`${t.name} answered ${degraded} requests without Redis (degraded) and failed ${failed}: its rows are not Redis decisions`);
    }
    return {
      rows,
      floor,
      halfRate,
      binary,
      install,
      pinning,
      commands: [
        "h2load -n N -c 4 -m 32 -t 1 -d <request> -H 'content-type: application/grpc' -H 'te: trailers' -H 'grpc-timeout: 1S' --log-file <latencies>",
        `upstream: GOMAXPROCS=1 USE_STATSD=false BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:<port> RUNTIME_ROOT=<dir> RUNTIME_SUBDIRECTORY=bench RUNTIME_WATCH_ROOT=false LOG_LEVEL=warn [REDIS_PIPELINE_WINDOW=150us] ${pinned ? 'taskset -c 1 ' : ''}service_cmd`,
        `sluice: node dist/src/main.js serve --config <dir>/bench/config --store redis --redis-url 127.0.0.1:<port> [--lease-auto-threshold 0]${pinned ? ' (then taskset -a -p -c 1 <pid>)' : ''}`,
        `${EMPTY_HANDLER}: ${pinned ? 'taskset -c 1 ' : ''}node dist/bench/empty-server.js h2grpc`,
        ...(baseline === undefined ? [] : [`baseline ${baseline.label}: as sluice, with node ${baseline.main}`]),
      ],
      baseline,
    };
  } finally {
    for (const s of servers) await s.stop();
    await redis.stop();
    fs.rmSync(root, { recursive: true, force: true });
    if (pinned) execFileSync('taskset', ['-a', '-p', ownMask, String(process.pid)], { stdio: 'ignore' });
  }
}

// This build against the baseline's, per row and leases setting: rate and server CPU per request of
// the best rounds, and each round's CPU against the baseline's in the same round (the two run a few
// seconds apart, so a noisy minute moves both): the median of those ratios and their range. Last,
// the median of every such ratio of the run: the one figure for "what did this change cost".
export function baselineLines(rows: readonly PeerRow[], baseline: Baseline): string[] {
  const out: string[] = [];
  const all: number[] = [];
  for (const r of rows.filter((x) => x.server.startsWith('sluice, '))) {
    const leases = r.server.slice('sluice, '.length);
    const b = rows.find((x) => x.server === `baseline ${baseline.label}, ${leases}` && x.descriptors === r.descriptors && x.keys === r.keys);
    if (b === undefined) continue;
    const shape = `${r.descriptors} descriptor${r.descriptors === 1 ? '' : 's'}, ${r.keys === 1 ? 'one hot key' : `${r.keys.toLocaleString('en-US')} keys`}, ${leases}`;
    const ratios = pairedCpuRatios(r.rounds, b.rounds);
    all.push(...ratios);
    const paired = ratios.length === 0 ? '' : `; paired rounds: CPU ${ratioSpread(ratios)}`;
    out.push(
      `${shape}: decisions/s ${(r.reqPerSec / b.reqPerSec).toFixed(2)}×, server CPU per request ${(r.serverCpuUsPerReq / b.serverCpuUsPerReq).toFixed(2)}× the baseline's (best rounds)${paired}`,
    );
  }
  if (all.length > 0) out.push(`every row and round: server CPU per request ${ratioSpread(all)} the baseline's`);
  return out;
}

// This build's CPU per request over the baseline's, round by round (none unless both have rounds).
function pairedCpuRatios(own: readonly RoundFigures[] | undefined, base: readonly RoundFigures[] | undefined): number[] {
  if (own === undefined || base === undefined) return [];
  const n = Math.min(own.length, base.length);
  return Array.from({ length: n }, (_, i) => own[i].serverCpuUsPerReq / base[i].serverCpuUsPerReq);
}

// "median 1.02× (n 10, 0.91–1.14)": the median of the ratios, how many, and their range.
function ratioSpread(ratios: readonly number[]): string {
  const sorted = [...ratios].sort((a, b) => a - b);
  const mid = sorted.length / 2;
  const median = sorted.length % 2 === 1 ? sorted[Math.floor(mid)] : (sorted[mid - 1] + sorted[mid]) / 2;
  return `median ${median.toFixed(2)}× (n ${sorted.length}, ${sorted[0].toFixed(2)}–${sorted[sorted.length - 1].toFixed(2)})`;
}

// The README's table: one row per service and request, ratios to the better upstream row.
export function peerTable(rows: readonly PeerRow[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const lines = [
    '| server | descriptors | keys | decisions/s (1 core) | × upstream | p50 ms | p99 ms | server CPU µs/req (× upstream) | Redis CPU µs/descriptor (× upstream) | Redis commands/req (incl. in scripts) | degraded |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.server} | ${r.descriptors} | ${r.keys === 1 ? 'one hot key' : fmt(r.keys)} | ${fmt(r.reqPerSec)} | ${r.rateRatio.toFixed(2)} | ${r.p50Ms.toFixed(2)} | ${r.p99Ms.toFixed(2)} | ${r.serverCpuUsPerReq.toFixed(1)} (${r.cpuRatio.toFixed(2)}×) | ${r.server === EMPTY_HANDLER ? '–' : `${r.redisCpuUsPerDescriptor.toFixed(2)} (${r.redisRatio.toFixed(2)}×)`} | ${r.server === EMPTY_HANDLER ? '–' : r.redisCommandsPerReq.toFixed(2)} | ${r.degraded ?? '–'} |`,
    );
  }
  return lines.join('\n');
}

// Decisions/s per core of each row, with its ratio to upstream, grouped by descriptors.
export function peerChart(rows: readonly PeerRow[], caption: string): string {
  const colours: Record<string, string> = {
    upstream: '#9e9e9e',
    'upstream, pipeline 150us': '#bdbdbd',
    'sluice, leases off': '#e45756',
    'sluice, leases on': '#4c78a8',
    [EMPTY_HANDLER]: '#f2cf5b',
  };
  // (Baseline rows are never charted: a comparison run leaves docs/peer.svg as it is.)
  const colour = (server: PeerServer) => colours[server] ?? '#9e9e9e';
  const group = (r: PeerRow) => `${r.descriptors}/${r.keys}`;
  const sorted = [...new Set(rows.map(group))].flatMap((g) => rows.filter((r) => group(r) === g));
  return horizontalBars({
    title: 'Decisions/s on one core: sluice beside envoyproxy/ratelimit (same Redis, config and requests)',
    caption,
    left: 420,
    width: 1100,
    bars: sorted.map((r, i) => ({
      label: `${r.server}, ${r.descriptors} descriptor${r.descriptors === 1 ? '' : 's'}${r.keys === 1 ? '' : `, ${r.keys.toLocaleString('en-US')} keys`}`,
      value: r.reqPerSec,
      text: `${Math.round(r.reqPerSec).toLocaleString('en-US')}/s (${r.rateRatio.toFixed(2)}× upstream)`,
      colour: colour(r.server),
      groupStart: i > 0 && group(sorted[i - 1]) !== group(r),
    })),
  });
}
