import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitRequest,
  type RateLimitResponse,
  RateLimitResponse_Code as Code,
  RateLimitServiceClient,
} from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { metricSum, waitReady } from '../../bench/fleet';
import { closing, d } from '../support/app';
import { type ServerProcess, spawnServer } from '../support/process';
import { type RedisNode, startRedis, stopAll } from '../support/redis';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// "Exact first": with a healthy Redis and the DEFAULT settings (no --store-deadline, no
// --fallback-policy), a fleet must give exactly the limit, never a degraded answer — even for a
// burst that starts the moment the replicas report ready (cold connections, JIT, 64 callers at once
// on two cores). Our own slowness is no Redis failure; the caller's 2 s gRPC deadline is the budget.

const REPLICAS = 3;
const LIMIT = 50;
const REQUESTS = 200;
const IN_FLIGHT = 64;
const GRPC_DEADLINE_MS = 2000;
const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'] as const;
type Algorithm = (typeof ALGORITHMS)[number];

const BUCKETS: readonly Algorithm[] = ['token_bucket', 'gcra'];

const CONFIG = ['domain: fleet', 'descriptors:']
  .concat(
    ALGORITHMS.flatMap((a) => [
      `  - key: ${a}`,
      `    rate_limit: { unit: day, requests_per_unit: ${LIMIT}, algorithm: ${a}${BUCKETS.includes(a) ? `, burst: ${LIMIT}` : ''} }`,
    ]),
  )
  .join('\n');

interface Replica {
  server: ServerProcess;
  client: RateLimitServiceClient;
}

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-fleet-'));
  fs.writeFileSync(path.join(dir, 'fleet.yaml'), `${CONFIG}\n`);
  return dir;
}

async function metricsOf(server: ServerProcess): Promise<string> {
  return (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text();
}

function call(client: RateLimitServiceClient, request: Partial<RateLimitRequest>): Promise<RateLimitResponse> {
  const full: RateLimitRequest = { domain: '', descriptors: [], hitsAddend: 0, ...request };
  return new Promise((resolve, reject) => {
    client.shouldRateLimit(full, new grpc.Metadata(), { deadline: Date.now() + GRPC_DEADLINE_MS }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

const isDegraded = (r: RateLimitResponse) => r.responseHeadersToAdd.some((h) => h.key === 'x-ratelimit-degraded' && h.value === 'true');

// The whole fleet is started and made ready here, so the burst below begins right after readiness.
async function startFleet(redisPort: number): Promise<Replica[]> {
  const dir = configDir();
  const servers = await Promise.all(
    Array.from({ length: REPLICAS }, () => spawnServer(['--config', dir, '--store', 'redis', '--redis-url', `127.0.0.1:${redisPort}`])),
  );
  await Promise.all(servers.map((s) => waitReady(s)));
  return servers.map((server) => ({ server, client: new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure()) }));
}

async function stopFleet(fleet: Replica[]): Promise<void> {
  for (const r of fleet) r.client.close();
  await Promise.all(fleet.map((r) => r.server.stop()));
}

describe(`${REPLICAS} replicas on one healthy Redis, default settings, ${IN_FLIGHT} callers with ${GRPC_DEADLINE_MS} ms gRPC deadlines`, () => {
  let redis: RedisNode;
  before(async () => {
    redis = await startRedis();
  });
  after(() => stopAll());

  for (const algorithm of ALGORITHMS) {
    test(`${algorithm}: admitted equals the limit of ${LIMIT}, 0 degraded, 0 failed`, async (t) => {
      await awayFromWindowEdge(DAY_MS, 120_000);
      const fleet = await startFleet(redis.port);
      try {
        // A fresh key per run, so nothing a previous run left in Redis counts.
        const request = { domain: 'fleet', descriptors: [d([algorithm, `k-${process.pid}-${Date.now()}`])] };
        let admitted = 0;
        let denied = 0;
        let degraded = 0;
        const failures: string[] = [];
        let next = 0;
        const started = Date.now();
        // IN_FLIGHT callers, each taking the next request; request i goes to replica i mod REPLICAS.
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async () => {
            for (let i = next++; i < REQUESTS; i = next++) {
              try {
                const r = await call(fleet[i % REPLICAS].client, request);
                if (r.overallCode === Code.OK) admitted++;
                else if (r.overallCode === Code.OVER_LIMIT) denied++;
                else failures.push(`overall code ${Code[r.overallCode]}`);
                if (isDegraded(r)) degraded++;
              } catch (err) {
                failures.push((err as Error).message);
              }
            }
          }),
        );
        const elapsedMs = Date.now() - started;
        const metrics = await Promise.all(fleet.map((r) => metricsOf(r.server)));
        const degradedMetric = metrics.map((m) => metricSum(m, 'sluice_degraded_decisions_total'));
        const transitions = metrics.map((m) => metricSum(m, 'sluice_breaker_transitions_total'));
        t.diagnostic(
          `${algorithm}: ${REQUESTS} requests in ${elapsedMs} ms, ${admitted} admitted, ${denied} denied, ${failures.length} failed, ` +
            `${degraded} degraded answers; per replica degraded metric ${degradedMetric.join('/')}, breaker transitions ${transitions.join('/')}`,
        );

        assert.equal(failures.length, 0, `${failures.length} failed RPCs, first: ${failures[0]}`);
        assert.equal(admitted + denied, REQUESTS);
        assert.equal(degraded, 0, `${degraded} answers carried x-ratelimit-degraded`);
        degradedMetric.forEach((n, i) => assert.equal(n, 0, `replica ${i}: sluice_degraded_decisions_total ${n}`));
        if (BUCKETS.includes(algorithm)) {
          // A day's worth of refill over the test's elapsed time: 0 unless the test ran for half an hour.
          const refilled = Math.floor((elapsedMs * LIMIT) / DAY_MS);
          assert.ok(admitted >= LIMIT && admitted <= LIMIT + refilled, `${algorithm}: ${admitted} admitted, want ${LIMIT}..${LIMIT + refilled}`);
        } else {
          assert.equal(admitted, LIMIT);
        }
      } finally {
        await stopFleet(fleet);
      }
    });
  }
});
