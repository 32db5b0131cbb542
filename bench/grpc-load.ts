import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RateLimitRequest, RateLimitServiceClient } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls } from '../test/support/app';
import { HealthCheckRequest } from '../src/gen/grpc/health/v1/health';
import { spawnServer } from '../test/support/process';
import { startRedis } from '../test/support/redis';

// gRPC throughput of a real `sluice serve` process driven by h2load (nghttp2-client), which costs
// a fraction of the CPU a Node load generator would. Baseline: grpc.health.v1 Check on the same
// server, so the ratio is the cost of a rate limit decision over a trivial unary call.

function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  Buffer.from(message).copy(frame, 5);
  return frame;
}

function h2load(port: number, method: string, body: Buffer, requests: number): number {
  const file = path.join(os.tmpdir(), `sluice-bench-${process.pid}-${method.replace(/\W/g, '_')}.bin`);
  fs.writeFileSync(file, body);
  const out = execFileSync(
    'h2load',
    ['-n', String(requests), '-c', '4', '-m', '32', '-t', '1', '-d', file, '-H', 'content-type: application/grpc', '-H', 'te: trailers', `http://127.0.0.1:${port}${method}`],
    { encoding: 'utf8' },
  );
  const rps = /finished in [\d.]+m?s, ([\d.]+) req\/s/.exec(out);
  const ok = /status codes: (\d+) 2xx/.exec(out);
  if (!rps || !ok || Number(ok[1]) !== requests) throw new Error(`h2load failed:\n${out}`);
  return Number(rps[1]);
}

export interface GrpcRow {
  name: string;
  reqPerSec: number;
  ratio: number;
}

const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];

function benchConfig(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bench-'));
  const rules = ALGORITHMS.flatMap((a) => [`  - key: ${a}`, `    rate_limit: { unit: second, requests_per_unit: 1000000000, algorithm: ${a} }`]);
  fs.writeFileSync(path.join(dir, 'bench.yaml'), ['domain: bench', 'descriptors:', ...rules].join('\n') + '\n');
  return dir;
}

// One `sluice serve` process with `storeArgs`: the health baseline, then each algorithm.
async function serverBench(storeArgs: string[], requests: number): Promise<GrpcRow[]> {
  const server = await spawnServer(['--config', benchConfig(), '--log-level', 'info', ...storeArgs]);
  try {
    if (storeArgs.length > 0) await server.waitForLog((l) => l.event === 'redis_ready');
    const health = grpcFrame(HealthCheckRequest.encode({ service: '' }).finish());
    h2load(server.grpcPort, '/grpc.health.v1.Health/Check', health, Math.min(requests, 20_000)); // warm-up
    const baseline = h2load(server.grpcPort, '/grpc.health.v1.Health/Check', health, requests);
    const rows = [{ name: 'baseline: grpc.health.v1 Check', reqPerSec: baseline, ratio: 1 }];
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    for (const a of ALGORITHMS) {
      const message: RateLimitRequest = {
        domain: 'bench',
        descriptors: [{ entries: [{ key: a, value: 'tenant-1' }] }, { entries: [{ key: a, value: 'tenant-2' }] }],
        hitsAddend: 0,
      };
      // h2load only sees HTTP 200; make sure the call really decides (grpc-status 0, a limit found).
      const probe = await callRls(client, message);
      if (probe.statuses.some((st) => st.currentLimit === undefined)) throw new Error(`bench config does not match ${a}`);
      const req = RateLimitRequest.encode(message).finish();
      const rps = h2load(server.grpcPort, '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit', grpcFrame(req), requests);
      rows.push({ name: `ShouldRateLimit ${a} (2 descriptors)`, reqPerSec: rps, ratio: rps / baseline });
    }
    client.close();
    // Every answer must have been a real decision: no error status, no fallback.
    const metrics = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`)).text();
    const bad = /sluice_requests_total\{transport="grpc",code="(UNAVAILABLE|INTERNAL)"\} [1-9]/.exec(metrics) ?? /sluice_degraded_decisions_total\{[^}]*\} [1-9]/.exec(metrics);
    if (bad) throw new Error(`some answers were not decisions: ${bad[0]}`);
    return rows;
  } finally {
    await server.stop();
  }
}

export async function grpcBench(requests: number): Promise<{ memory: GrpcRow[]; redis: GrpcRow[] | string } | string> {
  if (spawnSync('h2load', ['--version']).error) return 'skipped: h2load not found (apt-get install nghttp2-client)';
  const memory = await serverBench([], requests);
  let redis: GrpcRow[] | string;
  try {
    const node = await startRedis();
    try {
      redis = await serverBench(['--store', 'redis', '--redis-url', `127.0.0.1:${node.port}`, '--store-deadline', '1s', '--fallback-policy', 'deny', '--lease-auto-threshold', '0'], requests);
    } finally {
      await node.stop();
    }
  } catch (err) {
    redis = `skipped: ${(err as Error).message}`;
  }
  return { memory, redis };
}
