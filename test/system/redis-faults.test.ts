import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  RateLimitResponse_Code as Code,
  type RateLimitRequest,
  type RateLimitResponse,
  RateLimitServiceClient,
} from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, d } from '../support/app';
import { type ServerProcess, spawnServer, spawnServers } from '../support/process';
import { type RedisNode, startCluster, startRedis, stopAll } from '../support/redis';

// The fault suite: real sluice processes under steady load from several clients while their
// Redis is killed, frozen, or loses a cluster primary. Every caller gives a gRPC deadline, as
// Envoy does: no RPC may fail (an answer after the deadline would be DEADLINE_EXCEEDED), no answer
// may be degraded while Redis is healthy, degraded answers must say so, and the service must be
// back on Redis soon after Redis is, without a restart. Latency is reported, not asserted.

const CALLER_DEADLINE_MS = 500;
const COOLDOWN_MS = 1000;
// What the servers keep back from the caller's deadline for an answer to reach it. With Redis gone,
// an answer comes from the fallback when the store budget ends (the deadline minus this); the
// default, a tenth of the time left (50 ms here), is less than a process of this shared 2-core
// machine may wait for a core while six Redis nodes, two servers and the load run on it (CI runs
// answered after 538 ms). The assertion stays: no RPC may fail.
const DEADLINE_MARGIN = '150ms';

const CONFIG = `
domain: fault
descriptors:
  - key: tenant
    rate_limit: { unit: second, requests_per_unit: 100000 }
  - key: exhausted
    rate_limit: { unit: hour, requests_per_unit: 5 }
`;

interface Sample {
  at: number;
  ms: number;
  ok: boolean;
  degraded: boolean;
  error?: string;
}

after(() => stopAll());

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fault-'));
  fs.writeFileSync(path.join(dir, 'fault.yaml'), CONFIG);
  return dir;
}

async function servers(redisArgs: string[], count: number): Promise<ServerProcess[]> {
  const dir = configDir();
  const procs = await spawnServers(
    Array.from(
      { length: count },
      () => () =>
        spawnServer(['--config', dir, '--store', 'redis', ...redisArgs, '--breaker-cooldown', `${COOLDOWN_MS}ms`, '--deadline-margin', DEADLINE_MARGIN]),
    ),
  );
  for (const p of procs) await waitReady(p);
  return procs;
}

// Connection: close: no idle keep-alive connection for a server's graceful stop to wait out (its
// drain closes one only after a quiet second, src/server/http-drain.ts).
const get = (p: ServerProcess, route: string) => fetch(`http://127.0.0.1:${p.httpPort}${route}`, { headers: { connection: 'close' } });

async function waitReady(p: ServerProcess): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!(await get(p, '/healthcheck')).ok) {
    if (Date.now() > deadline) throw new Error('replica never became ready');
    await sleep(50);
  }
}

function callWithDeadline(client: RateLimitServiceClient, request: Parameters<typeof callRls>[1]): Promise<RateLimitResponse> {
  const full: RateLimitRequest = { domain: '', descriptors: [], hitsAddend: 0, ...request };
  return new Promise((resolve, reject) =>
    client.shouldRateLimit(full, new grpc.Metadata(), { deadline: Date.now() + CALLER_DEADLINE_MS }, (err, r) => (err ? reject(err) : resolve(r))),
  );
}

// Steady load: `clients` loops, each sending one request at a time, until stop() is called.
function load(procs: ServerProcess[], clients: number): { stop(): Promise<Sample[]> } {
  const samples: Sample[] = [];
  let running = true;
  const conns = procs.map((p) => new RateLimitServiceClient(`127.0.0.1:${p.grpcPort}`, grpc.credentials.createInsecure()));
  const loops = Array.from({ length: clients }, async (_, i) => {
    const client = conns[i % conns.length];
    let n = 0;
    while (running) {
      const start = performance.now();
      try {
        const r = await callWithDeadline(client, { domain: 'fault', descriptors: [d(['tenant', `t${i}-${n++ % 50}`])] });
        const degraded = r.responseHeadersToAdd.some((h) => h.key === 'x-ratelimit-degraded' && h.value === 'true');
        samples.push({ at: Date.now(), ms: performance.now() - start, ok: r.overallCode === Code.OK, degraded });
      } catch (err) {
        samples.push({ at: Date.now(), ms: performance.now() - start, ok: false, degraded: false, error: (err as Error).message });
      }
    }
  });
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const c of conns) c.close();
      return samples;
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function summary(samples: Sample[]): string {
  const ms = samples.map((s) => s.ms).sort((a, b) => a - b);
  const q = (p: number) => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))].toFixed(1);
  return `${samples.length} answers, ${samples.filter((s) => s.degraded).length} degraded; latency p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, max ${q(1)} ms`;
}

function assertHealthy(samples: Sample[], outageStart: number, redisBack: number, label: string): void {
  const failed = samples.filter((s) => s.error !== undefined);
  assert.equal(failed.length, 0, `${label}: ${failed.length} failed RPCs, first: ${failed[0]?.error}`);
  assert.ok(
    samples.every((s) => s.ok),
    `${label}: a request was denied`,
  );
  // Before the fault Redis answers every call within the caller's deadline: not one degraded answer.
  const before = samples.filter((s) => s.at < outageStart);
  const degradedBefore = before.filter((s) => s.degraded).length;
  assert.ok(before.length > 0, `${label}: no answer before the fault`);
  assert.equal(degradedBefore, 0, `${label}: ${degradedBefore} of ${before.length} degraded while Redis was healthy`);
  assert.ok(
    samples.some((s) => s.degraded && s.at > outageStart),
    `${label}: no degraded answer during the fault`,
  );
  const backOnRedis = samples.find((s) => s.at > redisBack && !s.degraded && samples.filter((x) => x.at > s.at).every((x) => !x.degraded));
  assert.ok(backOnRedis, `${label}: never back on Redis`);
  const recoveryMs = backOnRedis.at - redisBack;
  assert.ok(recoveryMs <= COOLDOWN_MS + 1500, `${label}: back on Redis only ${recoveryMs} ms after it returned`);
}

describe('fault suite', () => {
  test('kill -9 of Redis under load, then restart on the same port', async (t) => {
    let redis: RedisNode = await startRedis();
    const port = redis.port;
    const procs = await servers(['--redis-url', `127.0.0.1:${port}`], 2);
    const run = load(procs, 4);
    await sleep(800);
    const outageStart = Date.now();
    await redis.stop('SIGKILL');
    await sleep(1500);
    redis = await startRedis({ port });
    const redisBack = Date.now();
    await sleep(2500);
    const samples = await run.stop();
    t.diagnostic(summary(samples));
    await Promise.all(procs.map((p) => p.stop()));
    assertHealthy(samples, outageStart, redisBack, 'kill -9');
    assert.ok(
      procs.some((p) => p.logs.some((l) => l.event === 'breaker' && l.to === 'open')),
      'breaker never opened',
    );
    assert.ok(
      procs.some((p) => p.logs.some((l) => l.event === 'write_back' && Number(l.hits) > 0)),
      'no write-back after recovery',
    );
  });

  test('SIGSTOP of Redis (it hangs instead of refusing), then SIGCONT', async (t) => {
    const redis = await startRedis();
    const procs = await servers(['--redis-url', `127.0.0.1:${redis.port}`], 2);
    const run = load(procs, 4);
    await sleep(800);
    const outageStart = Date.now();
    redis.pause();
    await sleep(1500);
    redis.resume();
    const redisBack = Date.now();
    await sleep(2500);
    const samples = await run.stop();
    t.diagnostic(summary(samples));
    await Promise.all(procs.map((p) => p.stop()));
    assertHealthy(samples, outageStart, redisBack, 'SIGSTOP');
  });

  test('Redis Cluster: kill a primary under load; its replica is promoted; no failed RPC', async (t) => {
    const cluster = await startCluster();
    const procs = await servers(['--redis-type', 'cluster', '--redis-url', `127.0.0.1:${cluster.nodes[0].port}`], 2);
    const run = load(procs, 4);
    await sleep(800);
    const [victim] = await cluster.primaries();
    const outageStart = Date.now();
    await victim.stop('SIGKILL');
    const deadline = Date.now() + 15_000;
    let promoted = false;
    while (!promoted && Date.now() < deadline) {
      await sleep(100);
      const alive = cluster.nodes.filter((n) => n !== victim);
      const info = await alive[0].cli('CLUSTER', 'INFO');
      promoted = info.includes('cluster_state:ok') && (await cluster.primaries()).length === 3;
    }
    assert.ok(promoted, 'no replica was promoted');
    const redisBack = Date.now();
    await sleep(3000);
    const samples = await run.stop();
    t.diagnostic(summary(samples));
    await Promise.all(procs.map((p) => p.stop()));
    const failed = samples.filter((s) => s.error !== undefined);
    assert.equal(failed.length, 0, `${failed.length} failed RPCs, first: ${failed[0]?.error}`);
    assert.ok(samples.every((s) => s.ok));
    const late = samples.filter((s) => s.at > redisBack + COOLDOWN_MS + 1500);
    assert.ok(late.length > 0 && late.every((s) => !s.degraded), `still degraded after the failover (${outageStart})`);
  });

  test('over-limit flood on an exhausted key costs Redis nothing', async () => {
    const redis = await startRedis();
    const [proc] = await servers(['--redis-url', `127.0.0.1:${redis.port}`], 1);
    const client = new RateLimitServiceClient(`127.0.0.1:${proc.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const req = { domain: 'fault', descriptors: [d(['exhausted', 'k'])] };
      for (let i = 0; i < 5; i++) assert.equal((await callRls(client, req)).overallCode, Code.OK);
      assert.equal((await callRls(client, req)).overallCode, Code.OVER_LIMIT);
      // Decide calls as sluice counts them: Redis' own count (INFO commandstats) also has the
      // replica heartbeat's script, once a second, which a flood may overlap.
      const decideCalls = async () => {
        const metrics = await (await get(proc, '/metrics')).text();
        return [...metrics.matchAll(/^sluice_store_duration_seconds_count\{operation="decide",[^}]*\} (\d+)$/gm)].reduce((a, m) => a + Number(m[1]), 0);
      };
      const before = await decideCalls();
      assert.ok(before >= 6, `the first six requests were decided by Redis (${before} decide calls)`);
      const flood = await Promise.all(Array.from({ length: 1000 }, () => callRls(client, req)));
      assert.ok(flood.every((r) => r.overallCode === Code.OVER_LIMIT));
      assert.equal(await decideCalls(), before, 'the flood reached Redis');
      const metrics = await (await get(proc, '/metrics')).text();
      assert.match(metrics, /^sluice_over_limit_cache_hits_total 1000$/m);
    } finally {
      client.close();
      await proc.stop();
    }
  });
});
