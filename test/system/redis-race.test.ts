import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, closing, d } from '../support/app';
import { type ServerProcess, spawnServer } from '../support/process';
import { freePort, startRedis, stopAll } from '../support/redis';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// The seed's race, for real: several sluice processes share one Redis and must never admit more
// than the limit, whatever the interleaving.

const CONFIG = `
domain: race
descriptors:
  - key: one_token
    rate_limit: { unit: hour, requests_per_unit: 1, algorithm: token_bucket, burst: 1 }
  - key: fixed
    rate_limit: { unit: day, requests_per_unit: 37 }
  - key: sliding
    rate_limit: { unit: day, requests_per_unit: 23, algorithm: sliding_window }
  - key: bucket
    rate_limit: { unit: day, requests_per_unit: 41, algorithm: token_bucket }
  - key: gcra
    rate_limit: { unit: day, requests_per_unit: 29, algorithm: gcra, burst: 29 }
`;

interface Replica {
  server: ServerProcess;
  client: RateLimitServiceClient;
}

async function replicas(count: number, redisPort: number): Promise<Replica[]> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-race-'));
  fs.writeFileSync(path.join(dir, 'race.yaml'), CONFIG);
  const servers = await Promise.all(
    // Redis or nothing: no local fallback (it would admit per process) and a deadline long
    // enough for two loaded cores.
    Array.from({ length: count }, () =>
      spawnServer(['--config', dir, '--store', 'redis', '--redis-url', `127.0.0.1:${redisPort}`, '--fallback-policy', 'deny', '--store-deadline', '2s']),
    ),
  );
  for (const s of servers) await s.waitForLog((l) => l.event === 'redis_ready');
  return servers.map((server) => ({ server, client: new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure()) }));
}

describe('several sluice processes sharing one Redis', () => {
  let procs: Replica[] = [];
  before(async () => {
    const redis = await startRedis();
    procs = await replicas(4, redis.port);
  });
  after(async () => {
    for (const p of procs) p.client.close();
    await Promise.all(procs.map((p) => p.server.stop()));
    await stopAll();
  });

  test('a bucket with exactly 1 token, 10 concurrent requests over 3 processes → exactly 1 OK', async () => {
    const calls = Array.from({ length: 10 }, (_, i) => callRls(procs[i % 3].client, { domain: 'race', descriptors: [d(['one_token', 'seed'])] }));
    const codes = (await Promise.all(calls)).map((r) => r.overallCode);
    assert.equal(codes.filter((c) => c === Code.OK).length, 1, JSON.stringify(codes));
  });

  test('4 processes × 64 in flight: admitted equals the limit exactly, never more', async () => {
    await awayFromWindowEdge(DAY_MS, 60_000);
    const started = Date.now();
    const limits: Record<string, number> = { fixed: 37, sliding: 23, bucket: 41, gcra: 29 };
    const admitted: Record<string, number> = { fixed: 0, sliding: 0, bucket: 0, gcra: 0 };
    let seq = 0;
    await Promise.all(
      procs.map(async (p) => {
        for (let round = 0; round < 3; round++) {
          const inFlight = Array.from({ length: 64 }, () => {
            const rule = Object.keys(limits)[seq++ % 4];
            return callRls(p.client, { domain: 'race', descriptors: [d([rule, 'shared'])] }).then((r) => {
              if (r.overallCode === Code.OK) admitted[rule]++;
            });
          });
          await Promise.all(inFlight);
        }
      }),
    );
    const elapsedMs = Date.now() - started;
    assert.equal(seq, 4 * 64 * 3);
    assert.equal(admitted.fixed, 37);
    assert.equal(admitted.sliding, 23);
    // Buckets refill during the test: at most burst + what refilled, and at least the burst.
    for (const [rule, perDay] of [
      ['bucket', 41],
      ['gcra', 29],
    ] as const) {
      const refilled = Math.floor((elapsedMs * perDay) / 86_400_000);
      assert.ok(admitted[rule] >= perDay && admitted[rule] <= perDay + refilled, `${rule}: ${admitted[rule]} admitted`);
    }
  });
});

describe('startup before Redis', () => {
  test('fallback deny: no crash loop, NOT_SERVING and UNAVAILABLE until Redis is up, then SERVING without a restart', async () => {
    const port = await freePort();
    const server = await spawnServer([
      '--config',
      path.resolve(__dirname, '../../../examples/config'),
      '--store',
      'redis',
      '--redis-url',
      `127.0.0.1:${port}`,
      '--fallback-policy',
      'deny',
    ]);
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const health = await fetch(`http://127.0.0.1:${server.httpPort}/healthcheck`, closing());
      assert.equal(health.status, 500);
      assert.match(await health.text(), /store not ready/);
      await assert.rejects(
        callRls(client, { domain: 'edge', descriptors: [d(['tenant', 'a'])] }),
        (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE,
      );
      await startRedis({ port });
      await server.waitForLog((l) => l.event === 'health' && l.status === 'SERVING', 15_000);
      const r = await callRls(client, { domain: 'edge', descriptors: [d(['tenant', 'a'])] });
      assert.equal(r.overallCode, Code.OK);
      assert.equal(server.child.exitCode, null);
    } finally {
      client.close();
      await server.stop();
      await stopAll();
    }
  });
});
