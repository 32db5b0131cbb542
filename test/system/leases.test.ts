import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, type TestContext, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, d } from '../support/app';
import { type ServerProcess, spawnServer } from '../support/process';
import { type RedisNode, scriptCalls, startRedis, stopAll } from '../support/redis';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// Hot keys served from leased batches: 4 replicas each drive one shared key far above its limit.
// Redis must see fewer than 1 script call per 20 decisions, the fleet must never admit more than
// the limit, and we measure how much of the limit it did admit (utilization).

const CONFIG = `
domain: hot
descriptors:
  - key: leased_window
    rate_limit: { unit: day, requests_per_unit: 3000, lease: { size: 100 } }
  - key: leased_bucket
    rate_limit: { unit: day, requests_per_unit: 3000, algorithm: token_bucket, lease: { size: 100 } }
  - key: auto_hot
    rate_limit: { unit: day, requests_per_unit: 3000 }
`;

after(() => stopAll());

interface Fleet {
  redis: RedisNode;
  procs: ServerProcess[];
}

async function startFleet(extraArgs: string[]): Promise<Fleet> {
  const redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-lease-'));
  fs.writeFileSync(path.join(dir, 'hot.yaml'), CONFIG);
  const procs = await Promise.all(
    Array.from({ length: 4 }, () =>
      spawnServer([
        '--config',
        dir,
        '--store',
        'redis',
        '--redis-url',
        `127.0.0.1:${redis.port}`,
        '--store-deadline',
        '2s',
        '--fallback-policy',
        'deny',
        ...extraArgs,
      ]),
    ),
  );
  for (const p of procs) await p.waitForLog((l) => l.event === 'redis_ready');
  return { redis, procs };
}

async function drive({ redis, procs }: Fleet, rule: string): Promise<{ decisions: number; admitted: number; calls: number; limit: number; ms: number }> {
  const clients = procs.map((p) => new RateLimitServiceClient(`127.0.0.1:${p.grpcPort}`, grpc.credentials.createInsecure()));
  await awayFromWindowEdge(DAY_MS, 120_000);
  const before = await scriptCalls(redis);
  const started = Date.now();
  let decisions = 0;
  let admitted = 0;
  try {
    await Promise.all(
      clients.map(async (client) => {
        for (let round = 0; round < 40; round++) {
          const batch = Array.from({ length: 64 }, () => callRls(client, { domain: 'hot', descriptors: [d([rule, 'shared'])] }));
          for (const r of await Promise.all(batch)) {
            decisions++;
            if (r.overallCode === Code.OK) admitted++;
          }
        }
      }),
    );
    return { decisions, admitted, calls: (await scriptCalls(redis)) - before, limit: 3000, ms: Date.now() - started };
  } finally {
    for (const c of clients) c.close();
  }
}

const stopFleet = (fleet: Fleet | undefined) => Promise.all(fleet?.procs.map((p) => p.stop()) ?? []);

function check(t: TestContext, rule: string, r: Awaited<ReturnType<typeof drive>>): void {
  const refill = rule === 'leased_bucket' ? Math.floor((r.ms * 3000) / 86_400_000) : 0;
  t.diagnostic(
    `${r.decisions} decisions, ${r.admitted} admitted of ${r.limit} (utilization ${((100 * r.admitted) / r.limit).toFixed(1)}%), ` +
      `${r.calls} Redis script calls (${(r.calls / r.decisions).toFixed(4)} per decision), ${r.ms} ms`,
  );
  assert.equal(r.decisions, 4 * 40 * 64);
  assert.ok(r.admitted <= r.limit + refill, `admitted ${r.admitted} > limit ${r.limit}`);
  assert.ok(r.calls / r.decisions < 1 / 20, `${r.calls} Redis calls for ${r.decisions} decisions`);
  assert.ok(r.admitted >= r.limit * 0.8, `utilization only ${r.admitted}/${r.limit}`);
}

describe('hot keys from leased batches, 4 replicas × 64 in flight', () => {
  // The two rules with leases in their config run on one fleet, started once: the same arguments,
  // each drives its own rule's key and counts the Redis calls of its own drive.
  let configured: Promise<Fleet> | undefined;
  after(async () => stopFleet(await configured));
  for (const rule of ['leased_window', 'leased_bucket']) {
    test(rule, async (t) => {
      configured ??= startFleet([]);
      check(t, rule, await drive(await configured, rule));
    });
  }

  test('auto_hot', async (t) => {
    await stopFleet(await configured);
    const fleet = await startFleet(['--lease-auto-threshold', '50', '--lease-auto-share', '0.03']);
    try {
      check(t, 'auto_hot', await drive(fleet, 'auto_hot'));
    } finally {
      await stopFleet(fleet);
    }
  });
});
