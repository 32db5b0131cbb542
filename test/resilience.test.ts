import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import { monotonicClock } from '../src/clock';
import { RateLimitResponse_Code as Code, type RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { MemoryStore } from '../src/store/memory';
import { RedisStore } from '../src/store/redis';
import { ResilientStore, type ResilienceOptions } from '../src/store/resilient';
import type { LimitCheck } from '../src/store/store';
import { d, startApp } from './support/app';
import { freePort, startRedis, stopAll } from './support/redis';

after(() => stopAll());

const RULES = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: { unit: hour, requests_per_unit: 10 }
`;

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-res-'));
  for (const domain of ['edge', 'other', 'pay']) fs.writeFileSync(path.join(dir, `${domain}.yaml`), RULES.replace('domain: edge', `domain: ${domain}`));
  return dir;
}

const header = (r: { responseHeadersToAdd: { key: string; value: string }[] }, key: string) =>
  r.responseHeadersToAdd.find((h) => h.key === key)?.value;

describe('fallback policies with Redis unreachable', () => {
  test('local (scaled by FALLBACK_SHARE), allow and deny per domain; degraded answers say so', async () => {
    const s = await startApp({
      configPaths: [configDir()],
      store: 'redis',
      redisUrl: `127.0.0.1:${await freePort()}`,
      fallbackShare: 0.5,
      fallbackDomainPolicies: ['other=allow', 'pay=deny'],
    });
    try {
      assert.equal(s.app.health.status, 'SERVING');
      const ready = await s.http('/healthcheck');
      assert.equal(ready.status, 200);
      assert.match(await ready.text(), /^OK \(degraded: Redis unreachable; fallback policy local\)$/);
      assert.equal((await s.http('/livez')).status, 200);
      const call = (domain: string) => s.call({ domain, descriptors: [d(['tenant', 'x'])] });
      const local: Code[] = [];
      let last;
      for (let i = 0; i < 7; i++) local.push((last = await call('edge')).overallCode);
      assert.deepEqual(local, [Code.OK, Code.OK, Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);
      assert.equal(header(last!, 'x-ratelimit-degraded'), 'true');
      assert.equal(last!.dynamicMetadata?.degraded, true);
      assert.equal(last!.dynamicMetadata?.degradedPolicy, 'local');
      assert.equal(last!.statuses[0].currentLimit?.requestsPerUnit, 10);
      for (let i = 0; i < 20; i++) assert.equal((await call('other')).overallCode, Code.OK);
      assert.equal(header(await call('other'), 'x-ratelimit-degraded'), 'true');
      await assert.rejects(call('pay'), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE && /fallback policy is deny/.test(e.details));
      const metrics = await (await s.http('/metrics')).text();
      assert.match(metrics, /^sluice_degraded_decisions_total\{policy="local"\} 7$/m);
      assert.match(metrics, /^sluice_degraded_decisions_total\{policy="deny"\} 1$/m);
    } finally {
      await s.stop();
    }
  });
});

describe("the caller's gRPC deadline", () => {
  test('a hung Redis is abandoned before the caller gives up, even with a long store deadline', async () => {
    const redis = await startRedis();
    const s = await startApp({ configPaths: [configDir()], store: 'redis', redisUrl: `127.0.0.1:${redis.port}`, storeDeadlineMs: 5000, deadlineMarginMs: 20 });
    try {
      while (!(await s.http('/healthcheck')).ok) await new Promise((r) => setTimeout(r, 20));
      assert.equal((await s.call({ domain: 'edge', descriptors: [d(['tenant', 'warm'])] })).overallCode, Code.OK);
      redis.pause();
      const req: RateLimitRequest = { domain: 'edge', descriptors: [d(['tenant', 'y'])], hitsAddend: 0 };
      const started = Date.now();
      const r = await new Promise<{ responseHeadersToAdd: { key: string; value: string }[] }>((resolve, reject) =>
        s.client.shouldRateLimit(req, new grpc.Metadata(), { deadline: Date.now() + 200 }, (e, res) => (e ? reject(e) : resolve(res))),
      );
      assert.ok(Date.now() - started < 200);
      assert.equal(header(r, 'x-ratelimit-degraded'), 'true');
    } finally {
      redis.resume();
      await s.stop();
    }
  });
});

describe('leases keep a request all-or-nothing', () => {
  test('units reserved for a request that another limit denies go back into the lease', async () => {
    const redis = await startRedis();
    const options: ResilienceOptions = {
      clock: monotonicClock,
      deadlineMs: 2000,
      marginMs: 0,
      breaker: { windowMs: 10_000, minCalls: 10, failureRatio: 0.5, cooldownMs: 1000 },
      policy: 'deny',
      domainPolicies: new Map(),
      share: 1,
      overLimitCacheSize: 0,
      leases: { autoThreshold: 0, autoShare: 0.02, ttlMs: 60_000, lowWater: 0, events: { taken() {}, returned() {}, servedLocally() {}, exhausted() {} } },
      events: { breaker() {}, degraded() {}, storeFailure() {}, overLimitCacheHit() {}, writeBack() {} },
    };
    const store = new ResilientStore(new RedisStore({ clients: [new Redis({ port: redis.port })], cluster: false }), new MemoryStore(), options);
    const check = (key: string, limit: number, lease?: number): LimitCheck => ({ key, algorithm: 'fixed_window', limit, periodMs: 3_600_000, burst: limit, hits: 1, mode: 'enforce', lease });
    const leased = check('leased:{a}', 10, 10);
    const tight = check('tight:{b}', 1);
    const opts = { countDeniedHits: false };
    try {
      assert.equal((await store.decide([leased, tight], opts)).admitted, true);
      for (let i = 0; i < 5; i++) {
        const denied = await store.decide([leased, tight], opts);
        assert.equal(denied.admitted, false);
        assert.equal(denied.outcomes[0].consumed, false);
      }
      let admitted = 0;
      for (let i = 0; i < 15; i++) if ((await store.decide([leased], opts)).admitted) admitted++;
      assert.equal(admitted, 9);
    } finally {
      await store.close();
    }
  });
});
