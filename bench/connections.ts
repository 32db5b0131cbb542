import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type RedisNode, startRedis } from '../test/support/redis';
import { spawnShipped } from '../test/support/process';
import { processCpuSeconds } from './cpu';
import { H2LOAD_MISSING, h2loadAvailable, metricSum, percentile, runH2load, waitReady } from './fleet';
import {
  EMPTY_HANDLER,
  goAvailable,
  peerRequest,
  pin,
  type Running,
  startEmpty,
  startUpstream,
  tasksetAvailable,
  UPSTREAM_MISSING,
  upstreamBinary,
  writeConfig,
} from './peer';

// A fleet of Envoys in front of one replica: many connections, each sending 1 request a second
// (`BENCH_SECTIONS=connections npm run bench`). Every client holds its own HTTP/2 connection with
// one stream and grpc-timeout 1S; h2load is split into processes started 0.1 s apart so that
// requests spread over each second. 3 descriptors, one Redis, the store deadline raised so
// every answer comes from Redis. Rows: sluice pinned to one core (WORKERS=1) and as deployed
// (WORKERS=auto), envoyproxy/ratelimit pinned (GOMAXPROCS=1) and unpinned, when its binary is there.

// h2load processes a row's connections are split over.
export const CONNECTION_PROCESSES = 10;
const CONNECTIONS = [500, 1000, 4000];
const DEADLINE_MS = 1000;

export interface ConnectionsRow {
  server: string;
  connections: number;
  expected: number;
  // Answered with HTTP 200 at all, and within the caller's deadline.
  answered: number;
  inTime: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  // Growth of the server's resident memory (all its processes) under load, per connection.
  kibPerConnection: number;
  // sluice only: answers not from Redis (must be 0).
  degraded?: number;
}

export interface ConnectionsBench {
  command: string;
  rows: ConnectionsRow[];
  setup: SetupRow[];
  notes: string[];
}

// What a new connection costs a pinned server in CPU: the same SETUP_REQUESTS requests (3
// descriptors) on 4 connections, then each on a connection of its own (opened, one request, closed
// by h2load), CONNECTION_PROCESSES h2load processes at once. The difference per connection is the
// setup and teardown of one HTTP/2 connection: what the first second of a fleet connecting costs.
const SETUP_REQUESTS = 4000;

export interface SetupRow {
  server: string;
  fewMs: number;
  newMs: number;
  usPerConnection: number;
}

async function measureSetup(t: Running, label: string, cpus: string): Promise<SetupRow> {
  const request = peerRequest(3);
  await runH2load({ port: t.grpcPort, request, requests: 2000, cpus }); // warm-up
  const cpu = async (run: () => Promise<unknown>) => {
    const before = treeCpuSeconds(t.pid);
    await run();
    return (treeCpuSeconds(t.pid) - before) * 1000;
  };
  const fewMs = await cpu(() => runH2load({ port: t.grpcPort, request, requests: SETUP_REQUESTS, connections: 4, streams: 1, cpus }));
  const per = SETUP_REQUESTS / CONNECTION_PROCESSES;
  const newMs = await cpu(() =>
    Promise.all(
      Array.from({ length: CONNECTION_PROCESSES }, () => runH2load({ port: t.grpcPort, request, requests: per, connections: per, streams: 1, cpus })),
    ),
  );
  return { server: label, fewMs, newMs, usPerConnection: ((newMs - fewMs) * 1000) / SETUP_REQUESTS };
}

function treeCpuSeconds(pid: number): number {
  return [pid, ...childPids(pid)].reduce((sum, p) => {
    try {
      return sum + processCpuSeconds(p);
    } catch {
      return sum; // exited meanwhile
    }
  }, 0);
}

export function setupTable(rows: readonly SetupRow[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const lines = [
    `| server | CPU ms, ${fmt(SETUP_REQUESTS)} requests on 4 connections | on ${fmt(SETUP_REQUESTS)} new connections | CPU µs per new connection |`,
    '|---|---|---|---|',
  ];
  for (const r of rows) lines.push(`| ${r.server} | ${fmt(r.fewMs)} | ${fmt(r.newMs)} | ${fmt(r.usPerConnection)} |`);
  return lines.join('\n');
}

// BENCH_CONNECTIONS_SCALE (default 1) scales the connection counts, BENCH_CONNECTIONS_SECONDS
// (default 20) the length of each row: `BENCH_CONNECTIONS_SCALE=0.1 BENCH_CONNECTIONS_SECONDS=5`
// is a quick run.
export function connectionsScale(): { scale: number; seconds: number } {
  const scale = Number(process.env.BENCH_CONNECTIONS_SCALE ?? 1);
  const seconds = Number(process.env.BENCH_CONNECTIONS_SECONDS ?? 20);
  if (!(scale > 0) || !(seconds >= 1)) throw new Error('BENCH_CONNECTIONS_SCALE must be > 0 and BENCH_CONNECTIONS_SECONDS at least 1');
  return { scale, seconds };
}

// A process' children (a sluice primary's workers).
function childPids(pid: number): number[] {
  // ps exits 1 when there is no child.
  return spawnSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
    .stdout.split('\n')
    .map((s) => Number(s.trim()))
    .filter((n) => n > 0);
}

// Resident memory of a process and its children, KiB.
function treeRssKiB(pid: number): number {
  let kib = 0;
  for (const p of [pid, ...childPids(pid)]) {
    try {
      kib += Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${p}/status`, 'utf8'))?.[1] ?? 0);
    } catch {
      // exited meanwhile
    }
  }
  return kib;
}

async function startSluice(root: string, redisPort: number, pinned: boolean): Promise<Running> {
  const server = await spawnShipped([
    ...['--config', path.join(root, 'bench', 'config'), '--store', 'redis', '--redis-url', `127.0.0.1:${redisPort}`],
    // Every answer from Redis: the caller's 1 s is the only deadline.
    ...['--store-deadline', '1s', '--workers', pinned ? '1' : 'auto'],
  ]);
  if (pinned) pin(server.child.pid!, '1');
  await waitReady(server);
  return {
    name: 'sluice, leases on',
    grpcPort: server.grpcPort,
    pid: server.child.pid!,
    metricsUrl: `http://127.0.0.1:${server.httpPort}/metrics`,
    stop: () => server.stop(),
  };
}

async function degradedNow(t: Pick<Running, 'metricsUrl'>): Promise<number | undefined> {
  if (t.metricsUrl === undefined) return undefined;
  return metricSum(await (await fetch(t.metricsUrl)).text(), 'sluice_degraded_decisions_total');
}

// One row: CONNECTION_PROCESSES h2load processes, 0.1 s apart, each with its share of the
// connections (also bench/grpc-impl.ts's fleet rows).
export async function measureConnections(
  t: Pick<Running, 'grpcPort' | 'pid' | 'metricsUrl'>,
  label: string,
  connections: number,
  seconds: number,
  cpus?: string,
): Promise<{ row: ConnectionsRow; command: string }> {
  const request = peerRequest(3);
  await runH2load({ port: t.grpcPort, request, requests: 2000, cpus }); // warm-up
  const degraded0 = await degradedNow(t);
  const rss0 = treeRssKiB(t.pid);
  let rssMax = rss0;
  const sampler = setInterval(() => (rssMax = Math.max(rssMax, treeRssKiB(t.pid))), 250);
  const per = Math.ceil(connections / CONNECTION_PROCESSES);
  const runs = await Promise.all(
    Array.from({ length: CONNECTION_PROCESSES }, async (_, i) => {
      await new Promise((r) => setTimeout(r, i * 100));
      return runH2load({ port: t.grpcPort, request, requests: per * seconds, connections: per, streams: 1, rpsPerConnection: 1, latencies: true, cpus });
    }),
  );
  clearInterval(sampler);
  const latencies = runs.flatMap((r) => r.latenciesMs ?? []).sort((a, b) => a - b);
  const degraded1 = await degradedNow(t);
  const row: ConnectionsRow = {
    server: label,
    connections: per * CONNECTION_PROCESSES,
    expected: per * CONNECTION_PROCESSES * seconds,
    answered: runs.reduce((a, r) => a + r.status2xx, 0),
    inTime: latencies.filter((ms) => ms < DEADLINE_MS).length,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    maxMs: latencies.at(-1) ?? NaN,
    kibPerConnection: (rssMax - rss0) / (per * CONNECTION_PROCESSES),
    degraded: degraded0 === undefined ? undefined : degraded1! - degraded0,
  };
  return { row, command: runs[0].command };
}

interface Target {
  label: string;
  start: () => Promise<Running>;
  // h2load's CPUs when the server is pinned to core 1.
  cpus?: string;
  // Only the cost of a new connection (the empty handler: the floor under sluice's row).
  setupOnly?: boolean;
}

function targets(root: string, redis: RedisNode, notes: string[]): Target[] {
  const pinned = tasksetAvailable();
  if (!pinned) notes.push('taskset or a second core missing: the pinned rows are left out');
  const list: Target[] = [];
  if (pinned) list.push({ label: 'sluice, 1 core (WORKERS=1)', start: () => startSluice(root, redis.port, true), cpus: '0' });
  if (pinned) list.push({ label: EMPTY_HANDLER, start: () => startEmpty(true), cpus: '0', setupOnly: true });
  list.push({ label: `sluice, as deployed (WORKERS=auto: ${os.availableParallelism()})`, start: () => startSluice(root, redis.port, false) });
  if (!goAvailable()) {
    notes.push(`upstream rows left out: ${UPSTREAM_MISSING}`);
    return list;
  }
  const { binary, install } = upstreamBinary();
  notes.push(`upstream: ${install}`);
  if (pinned) list.push({ label: 'upstream, 1 core (GOMAXPROCS=1)', start: () => startUpstream('upstream', binary, root, redis.port, true, {}), cpus: '0' });
  const cores = String(os.availableParallelism());
  list.push({
    label: `upstream, as deployed (GOMAXPROCS=${cores})`,
    start: () => startUpstream('upstream', binary, root, redis.port, false, { GOMAXPROCS: cores }),
  });
  return list;
}

export async function connectionsBench(): Promise<ConnectionsBench | string> {
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  const { scale, seconds } = connectionsScale();
  const redis = await startRedis();
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-connections-'));
  writeConfig(root);
  const notes: string[] = [];
  const rows: ConnectionsRow[] = [];
  const setup: SetupRow[] = [];
  let command = '';
  try {
    for (const target of targets(root, redis, notes)) {
      if (target.cpus !== undefined) {
        const t = await target.start();
        try {
          setup.push(await measureSetup(t, target.label, target.cpus));
        } finally {
          await t.stop();
        }
      }
      for (const n of target.setupOnly ? [] : CONNECTIONS) {
        const t = await target.start();
        try {
          const m = await measureConnections(t, target.label, Math.max(CONNECTION_PROCESSES, Math.round(n * scale)), seconds, target.cpus);
          rows.push(m.row);
          command = m.command;
        } finally {
          await t.stop();
        }
      }
    }
  } finally {
    await redis.stop();
  }
  return {
    command: command.replace(/-d \S+/, '-d <ShouldRateLimit frame, 3 descriptors>').replace(/127\.0\.0\.1:\d+/, '127.0.0.1:<port>'),
    rows,
    setup,
    notes,
  };
}

export function connectionsTable(rows: readonly ConnectionsRow[]): string {
  const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
  const lines = [
    '| server | connections × 1 req/s | answered / expected | within 1 s | p50 ms | p99 ms | max ms | KiB per connection | degraded |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.server} | ${fmt(r.connections)} | ${fmt(r.answered)} / ${fmt(r.expected)} | ${fmt(r.inTime)} | ${r.p50Ms.toFixed(1)} | ${r.p99Ms.toFixed(1)} | ${fmt(r.maxMs)} | ${r.kibPerConnection.toFixed(0)} | ${r.degraded ?? '—'} |`,
    );
  }
  return lines.join('\n');
}
