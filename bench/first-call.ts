import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { callBytes, callOnNewConnection } from '../src/server/warm-up';
import { spawnShipped } from '../test/support/process';
import { type RedisNode, startRedis, stopAll } from '../test/support/redis';
import { percentile, waitReady } from './fleet';
import { goAvailable, peerRequest, type Running, startUpstream, UPSTREAM_MISSING, upstreamBinary, writeConfig } from './peer';

// The first decision on a new connection, as Envoy asks it (`BENCH_SECTIONS=first-call npm run
// bench`): a freshly started server, then new connections one after another, 10 ms apart, each
// writing the preface, SETTINGS and one ShouldRateLimit (3 descriptors, grpc-timeout 20m, Envoy's
// default) at once; the time from connect() to the answer's trailers. Every row restarts its
// server BENCH_FIRST_CALL_STARTS times (default 5) and opens BENCH_FIRST_CALL_CONNECTIONS (default
// 40) after each start: the cold first calls of a process are in the figures.

const ENVOY_TIMEOUT_MS = 20;

export interface FirstCallRow {
  server: string;
  calls: number;
  failed: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  // Past Envoy's 20 ms default: a decision Envoy gives up on.
  over20: number;
  // Mean of the first call after each start.
  firstMs: number;
}

interface Target {
  label: string;
  start: () => Promise<Running>;
}

async function startSluice(root: string, redis: RedisNode, workers: number): Promise<Running> {
  const server = await spawnShipped([
    '--config',
    path.join(root, 'bench', 'config'),
    '--store',
    'redis',
    '--redis-url',
    `127.0.0.1:${redis.port}`,
    '--workers',
    String(workers),
  ]);
  await waitReady(server);
  return { name: 'sluice, leases on', grpcPort: server.grpcPort, pid: server.child.pid!, stop: () => server.stop() };
}

async function measure(target: Target, starts: number, connections: number): Promise<FirstCallRow> {
  const all: number[] = [];
  const firsts: number[] = [];
  let failed = 0;
  for (let s = 0; s < starts; s++) {
    const t = await target.start();
    const bytes = callBytes(peerRequest(3), `127.0.0.1:${t.grpcPort}`, `${ENVOY_TIMEOUT_MS}m`);
    for (let i = 0; i < connections; i++) {
      try {
        const ms = await callOnNewConnection(t.grpcPort, bytes, 1, 5000);
        all.push(ms);
        if (i === 0) firsts.push(ms);
      } catch {
        failed++;
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    await t.stop();
  }
  all.sort((a, b) => a - b);
  return {
    server: target.label,
    calls: all.length,
    failed,
    p50Ms: percentile(all, 50),
    p99Ms: percentile(all, 99),
    maxMs: all.at(-1) ?? NaN,
    over20: all.filter((ms) => ms > ENVOY_TIMEOUT_MS).length,
    firstMs: firsts.reduce((a, b) => a + b, 0) / Math.max(1, firsts.length),
  };
}

export async function firstCallBench(): Promise<{ rows: FirstCallRow[]; notes: string[] }> {
  const starts = Number(process.env.BENCH_FIRST_CALL_STARTS ?? 5);
  const connections = Number(process.env.BENCH_FIRST_CALL_CONNECTIONS ?? 40);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-first-call-'));
  writeConfig(root);
  const redis = await startRedis();
  const notes: string[] = [];
  const targets: Target[] = [1, 2].map((w) => ({ label: `sluice, WORKERS=${w}`, start: () => startSluice(root, redis, w) }));
  if (goAvailable()) {
    const { binary, install } = upstreamBinary();
    notes.push(`upstream: ${install}`);
    targets.push({ label: 'upstream (GOMAXPROCS=2)', start: () => startUpstream('upstream', binary, root, redis.port, false, { GOMAXPROCS: '2' }) });
  } else notes.push(`upstream row left out: ${UPSTREAM_MISSING}`);
  try {
    const rows: FirstCallRow[] = [];
    for (const t of targets) rows.push(await measure(t, starts, connections));
    return { rows, notes };
  } finally {
    await stopAll();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

export function firstCallTable(rows: readonly FirstCallRow[]): string {
  const f = (n: number) => n.toFixed(1);
  const lines = [
    '| server | new connections | p50 ms | p99 ms | max ms | over 20 ms | first call after a start, mean ms | failed |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows)
    lines.push(`| ${r.server} | ${r.calls} | ${f(r.p50Ms)} | ${f(r.p99Ms)} | ${f(r.maxMs)} | ${r.over20} | ${f(r.firstMs)} | ${r.failed} |`);
  return lines.join('\n');
}
