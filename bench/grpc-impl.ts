import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { freePort, type RedisNode, startRedis } from '../test/support/redis';
import { MAIN, REPO, type ServerProcess, spawnShipped } from '../test/support/process';
import { processCpuSeconds } from './cpu';
import { type ConnectionsRow, CONNECTION_PROCESSES, measureConnections } from './connections';
import { H2LOAD_MISSING, h2loadAvailable, metricSum, percentile, runH2load, waitReady } from './fleet';
import { peerRequest, pin, type Running, tasksetAvailable, writeConfig } from './peer';

// sluice on grpc-js beside sluice's own gRPC server on node:http2 (GRPC_SERVER_IMPL=http2) and on
// its own HTTP/2 (GRPC_SERVER_IMPL=sluice, the default), same
// Redis, config and requests (`BENCH_SECTIONS=grpc-impl npm run bench`): throughput rows (4
// connections x 32 streams, grpc-timeout 1S; leases off and on; 1 and 3 descriptors; rounds
// alternate, best kept) and the fleet shape of issue 18 (1,000 connections x 1 req/s, one stream
// each, h2load split into 10 processes 0.1 s apart). Each server runs as one process (WORKERS=1)
// pinned to core 1, Redis and h2load on core 0. BENCH_GRPC_IMPL_PROFILE=<dir> also writes one
// CPU profile per server (node --cpu-prof) of a throughput run and says where its time went.

const IMPLS = ['grpc-js', 'http2', 'sluice'] as const;
type Impl = (typeof IMPLS)[number];
const ROUNDS = 2;

export interface ImplRow {
  impl: Impl;
  leases: boolean;
  descriptors: 1 | 3;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerReq: number;
  // This row / the grpc-js row of the same shape.
  ratio?: number;
}

export interface GrpcImplBench {
  rows: ImplRow[];
  fleet: ConnectionsRow[];
  degraded: number;
  pinning: string;
  commands: string[];
  profiles: string[];
}

interface Server extends Running {
  impl: Impl;
  leases: boolean;
}

async function startServer(impl: Impl, leases: boolean, o: { root: string; redis: RedisNode; pinned: boolean; profileDir?: string }): Promise<Server> {
  const args = [
    ...['--config', path.join(o.root, 'bench', 'config'), '--store', 'redis', '--redis-url', `127.0.0.1:${o.redis.port}`],
    // Every answer from Redis: the caller's 1 s is the only deadline.
    ...['--store-deadline', '1s', '--workers', '1', '--grpc-server-impl', impl],
    ...(leases ? [] : ['--lease-auto-threshold', '0']),
  ];
  const name = `${impl}, leases ${leases ? 'on' : 'off'}`;
  const server =
    o.profileDir === undefined
      ? serving(await spawnShipped(args))
      : await spawnProfiled(args, path.join(o.profileDir, `${impl}-leases-${leases ? 'on' : 'off'}.cpuprofile`));
  if (o.pinned) pin(server.pid, '1');
  await waitReady({ httpPort: server.httpPort, grpcPort: server.grpcPort } as ServerProcess);
  return {
    name: name as Running['name'],
    impl,
    leases,
    grpcPort: server.grpcPort,
    pid: server.pid,
    metricsUrl: `http://127.0.0.1:${server.httpPort}/metrics`,
    stop: server.stop,
  };
}

function serving(p: ServerProcess): { pid: number; grpcPort: number; httpPort: number; stop: () => Promise<void> } {
  return { pid: p.child.pid!, grpcPort: p.grpcPort, httpPort: p.httpPort, stop: async () => void (await p.stop()) };
}

// `node --cpu-prof` (not allowed in NODE_OPTIONS) running sluice on free ports; the profile is
// written when it exits.
async function spawnProfiled(args: string[], file: string): Promise<{ pid: number; grpcPort: number; httpPort: number; stop: () => Promise<void> }> {
  const [grpcPort, httpPort, adminPort] = [await freePort(), await freePort(), await freePort()];
  const ports = [
    '--grpc-port',
    String(grpcPort),
    '--http-port',
    String(httpPort),
    '--admin-port',
    String(adminPort),
    '--host',
    '127.0.0.1',
    '--grpc-host',
    '127.0.0.1',
  ];
  const profile = ['--cpu-prof', `--cpu-prof-dir=${path.dirname(file)}`, `--cpu-prof-name=${path.basename(file)}`];
  const child = spawn(process.execPath, [...profile, MAIN, 'serve', ...args, ...ports, '--log-level', 'warn'], { cwd: REPO, stdio: 'ignore' });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return { pid: child.pid!, grpcPort, httpPort, stop: () => (child.kill('SIGTERM'), exited) };
}

async function throughput(t: Server, descriptors: 1 | 3, requests: number, cpus?: string): Promise<ImplRow> {
  const request = peerRequest(descriptors);
  await runH2load({ port: t.grpcPort, request, requests: Math.min(20_000, requests), cpus }); // warm-up
  const cpu0 = processCpuSeconds(t.pid);
  const r = await runH2load({ port: t.grpcPort, request, requests, latencies: true, cpus });
  const cpu1 = processCpuSeconds(t.pid);
  if (r.succeeded !== requests || r.status2xx !== requests) throw new Error(`${t.name}: ${requests - r.succeeded} requests failed:\n${r.output}`);
  const lat = r.latenciesMs ?? [];
  return {
    impl: t.impl,
    leases: t.leases,
    descriptors,
    reqPerSec: r.reqPerSec,
    p50Ms: percentile(lat, 50),
    p99Ms: percentile(lat, 99),
    serverCpuUsPerReq: ((cpu1 - cpu0) * 1e6) / requests,
  };
}

export async function grpcImplBench(requests: number): Promise<GrpcImplBench | string> {
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  const pinned = tasksetAvailable();
  const cpus = pinned ? '0' : undefined;
  const connections = Number(process.env.BENCH_GRPC_IMPL_CONNECTIONS ?? 1000);
  const seconds = Number(process.env.BENCH_GRPC_IMPL_SECONDS ?? 10);
  const profileDir = process.env.BENCH_GRPC_IMPL_PROFILE;
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-grpc-impl-'));
  writeConfig(root);
  const redis = await startRedis();
  if (pinned) pin(redis.process.pid!, '0');
  const servers: Server[] = [];
  const out: GrpcImplBench = {
    rows: [],
    fleet: [],
    degraded: 0,
    pinning: pinned ? 'each server pinned to core 1 (WORKERS=1, taskset), redis-server and h2load on core 0' : 'unpinned (taskset or a second core missing)',
    commands: [],
    profiles: [],
  };
  try {
    for (const leases of [false, true]) for (const impl of IMPLS) servers.push(await startServer(impl, leases, { root, redis, pinned }));
    const best = new Map<string, ImplRow>();
    for (const descriptors of [1, 3] as const) {
      for (let round = 0; round < ROUNDS; round++) {
        for (const t of servers) {
          const row = await throughput(t, descriptors, requests, cpus);
          const key = `${t.name}/${descriptors}`;
          if ((best.get(key)?.reqPerSec ?? 0) < row.reqPerSec) best.set(key, row);
        }
      }
    }
    out.rows = [...best.values()];
    for (const row of out.rows) {
      const base = out.rows.find((r) => r.impl === 'grpc-js' && r.leases === row.leases && r.descriptors === row.descriptors)!;
      row.ratio = row.reqPerSec / base.reqPerSec;
    }
    // Leases off for the fleet shape: every decision a Redis round trip, as in issue 18.
    for (const t of servers.filter((s) => !s.leases)) {
      const m = await measureConnections(t, t.impl, connections, seconds, cpus);
      out.fleet.push(m.row);
      out.commands = [
        "h2load -n N -c 4 -m 32 -t 1 -d <request> -H 'content-type: application/grpc' -H 'te: trailers' -H 'grpc-timeout: 1S' --log-file <latencies>",
        `${CONNECTION_PROCESSES} x ${m.command
          .replace(/-d \S+/, '-d <3 descriptors>')
          .replace(/127\.0\.0\.1:\d+/, '127.0.0.1:<port>')
          .replace(/--log-file=\S+/, '--log-file=<latencies>')}, started 0.1 s apart`,
        `sluice: node dist/src/main.js serve --config <dir>/bench/config --store redis --redis-url 127.0.0.1:<port> --store-deadline 1s --workers 1 --grpc-server-impl grpc-js|http2|sluice [--lease-auto-threshold 0]${pinned ? ' (then taskset -a -p -c 1 <pid>)' : ''}`,
      ];
    }
    for (const t of servers) out.degraded += metricSum(await (await fetch(t.metricsUrl!)).text(), 'sluice_degraded_decisions_total');
  } finally {
    for (const s of servers) await s.stop();
  }
  try {
    if (profileDir !== undefined)
      out.profiles = await profileRuns(profileDir, requests, { root, redis, pinned, cpus }).catch((err: Error) => [`failed: ${err.message}`]);
  } finally {
    await redis.stop();
    fs.rmSync(root, { recursive: true, force: true });
  }
  return out;
}

// One throughput run (3 descriptors, leases off) per server under --cpu-prof; the profile is
// written when the process exits.
async function profileRuns(dir: string, requests: number, o: { root: string; redis: RedisNode; pinned: boolean; cpus?: string }): Promise<string[]> {
  fs.mkdirSync(dir, { recursive: true });
  const lines: string[] = [];
  for (const impl of IMPLS) {
    const t = await startServer(impl, false, { ...o, profileDir: dir });
    try {
      await throughput(t, 3, requests, o.cpus);
    } finally {
      await t.stop();
    }
    const file = path.join(dir, `${impl}-leases-off.cpuprofile`);
    lines.push(`${impl} (${path.relative(process.cwd(), file)}): ${profileSummary(file)}`);
  }
  return lines;
}

interface ProfileNode {
  id: number;
  hitCount?: number;
  callFrame: { functionName: string; url: string };
}

// Where a process's busy time went, by part: share of the samples that were not idle.
const PARTS: [string, (url: string, fn: string) => boolean][] = [
  ['grpc-js', (url) => url.includes('@grpc/grpc-js')],
  ['h2grpc', (url) => url.includes('/server/h2grpc/')],
  ['ioredis', (url) => url.includes('ioredis') || url.includes('redis-parser')],
  ['protobuf', (url) => url.includes('/gen/') || url.includes('protobufjs') || url.includes('@bufbuild')],
  ['node http2', (url) => url.startsWith('node:internal/http2')],
  ['node net/streams/timers', (url) => /^node:(internal\/)?(net|stream|streams|timers)/.test(url)],
  ['sluice', (url) => url.includes('/dist/src/')],
  ['GC', (_url, fn) => fn === '(garbage collector)'],
  ['native (program)', (_url, fn) => fn === '(program)'],
];

export function profileSummary(file: string): string {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: ProfileNode[] };
  const byPart = new Map<string, number>();
  let busy = 0;
  for (const n of profile.nodes) {
    const hits = n.hitCount ?? 0;
    if (hits === 0 || n.callFrame.functionName === '(idle)') continue;
    busy += hits;
    const part = PARTS.find(([, test]) => test(n.callFrame.url, n.callFrame.functionName))?.[0] ?? 'other';
    byPart.set(part, (byPart.get(part) ?? 0) + hits);
  }
  return [...byPart.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([part, hits]) => `${part} ${((hits / busy) * 100).toFixed(0)}%`)
    .join(', ');
}

export function grpcImplTable(rows: readonly ImplRow[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const lines = ['| server | leases | descriptors | decisions/s | p50 ms | p99 ms | server CPU µs/request | × grpc-js |', '|---|---|---|---|---|---|---|---|'];
  for (const r of [...rows].sort((a, b) => Number(a.leases) - Number(b.leases) || a.descriptors - b.descriptors || a.impl.localeCompare(b.impl))) {
    lines.push(
      `| ${r.impl} | ${r.leases ? 'on' : 'off'} | ${r.descriptors} | ${fmt(r.reqPerSec)} | ${r.p50Ms.toFixed(2)} | ${r.p99Ms.toFixed(2)} | ${r.serverCpuUsPerReq.toFixed(1)} | ${r.ratio!.toFixed(2)} |`,
    );
  }
  return lines.join('\n');
}
