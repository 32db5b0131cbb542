import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { ManualClock } from '../../../src/clock';
import { RateLimitResponse_Code as Code, RateLimitResponse_RateLimit_Unit as Unit } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { HealthClient, HealthCheckResponse_ServingStatus as Serving } from '../../../src/gen/grpc/health/v1/health';
import { MAX_UINT32 } from '../../../src/model';
import { d, type Running, startApp } from '../../support/app';

const EXAMPLE = path.resolve(__dirname, '../../../../examples/config');
const T0 = 1_800_000_000_000; // a multiple of 5 minutes

describe('gRPC ShouldRateLimit against the example config', () => {
  let s: Running;
  const clock = new ManualClock(T0);
  before(async () => {
    s = await startApp({ configPaths: [EXAMPLE] }, { clock });
  });
  after(() => s.stop());

  test('free tenant: 10 a minute, then OVER_LIMIT with the rule and a reset', async () => {
    const codes: Code[] = [];
    let last: Awaited<ReturnType<typeof s.call>> | undefined;
    for (let i = 0; i < 12; i++) {
      last = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'acme'])] });
      codes.push(last.overallCode);
      if (i === 0) {
        assert.deepEqual(last.statuses[0].currentLimit, { name: 'tenant_free', requestsPerUnit: 10, unit: Unit.MINUTE });
        assert.equal(last.statuses[0].limitRemaining, 9);
        assert.equal(last.statuses[0].durationUntilReset?.seconds, 60);
      }
    }
    assert.deepEqual(codes, [...Array(10).fill(Code.OK), Code.OVER_LIMIT, Code.OVER_LIMIT]);
    assert.equal(last?.statuses[0].code, Code.OVER_LIMIT);
    assert.equal(last?.statuses[0].limitRemaining, 0);
    assert.deepEqual(
      last?.responseHeadersToAdd.map((h) => [h.key, h.value]),
      [['Retry-After', '60']],
    );
    clock.advance(60_000);
    assert.equal((await s.call({ domain: 'edge', descriptors: [d(['tenant', 'acme'])] })).overallCode, Code.OK);
  });

  test('enterprise tenant: token bucket with burst 100', async () => {
    let ok = 0;
    for (let i = 0; i < 110; i++) {
      const r = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'cust_ent_9942'])] });
      if (r.overallCode === Code.OK) ok++;
    }
    assert.equal(ok, 100);
    clock.advance(600); // 1000/min refills one token every 60 ms
    const r = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'cust_ent_9942'])] });
    assert.equal(r.overallCode, Code.OK);
    assert.equal(r.statuses[0].limitRemaining, 9);
  });

  test('unlimited tenant and unknown descriptors are OK', async () => {
    const r = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'internal']), d(['nothing', 'here'])] });
    assert.equal(r.overallCode, Code.OK);
    assert.equal(r.statuses[0].limitRemaining, MAX_UINT32);
    assert.equal(r.statuses[0].currentLimit, undefined);
    assert.equal(r.statuses[1].limitRemaining, 0);
    assert.equal(r.statuses[1].currentLimit, undefined);
    const unknown = await s.call({ domain: 'nope', descriptors: [d(['tenant', 'acme'])] });
    assert.equal(unknown.overallCode, Code.OK);
  });

  test('all-or-nothing: a denied checkout does not use up the tenant budget', async () => {
    const req = { domain: 'edge', descriptors: [d(['tenant', 'beta']), d(['tenant', 'beta'], ['route', '/v1/payments/checkout'])] };
    for (let i = 0; i < 3; i++) assert.equal((await s.call(req)).overallCode, Code.OK);
    const denied = await s.call(req);
    assert.equal(denied.overallCode, Code.OVER_LIMIT);
    assert.equal(denied.statuses[0].code, Code.OK);
    assert.equal(denied.statuses[0].limitRemaining, 7);
    assert.equal(denied.statuses[1].code, Code.OVER_LIMIT);
    assert.deepEqual(denied.statuses[1].currentLimit, { name: 'checkout_free', requestsPerUnit: 3, unit: Unit.MINUTE });
    const tenantOnly = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'beta'])] });
    assert.equal(tenantOnly.statuses[0].limitRemaining, 6);
  });

  test('shadow-mode rule reports OK even past its limit', async () => {
    for (let i = 0; i < 25; i++) {
      const r = await s.call({ domain: 'edge', descriptors: [d(['route', '/v1/search/items'])] });
      assert.equal(r.overallCode, Code.OK);
    }
  });

  test('anonymous callers are limited per masked address', async () => {
    const anon = (ip: string) => ({ domain: 'edge', descriptors: [d(['auth', 'anonymous'], ['masked_remote_address', ip])] });
    for (let i = 0; i < 5; i++) assert.equal((await s.call(anon(`198.51.100.${i + 1}/32`))).overallCode, Code.OK);
    assert.equal((await s.call(anon('198.51.100.0/24'))).overallCode, Code.OVER_LIMIT);
    assert.equal((await s.call(anon('203.0.113.0/24'))).overallCode, Code.OK);
  });

  test('descriptor hits_addend: 0 checks without consuming, N consumes N', async () => {
    const desc = (hits?: number) => ({ ...d(['tenant', 'gamma']), hitsAddend: hits });
    const check = await s.call({ domain: 'edge', descriptors: [desc(0)] });
    assert.equal(check.statuses[0].limitRemaining, 10);
    const four = await s.call({ domain: 'edge', descriptors: [desc(4)] });
    assert.equal(four.statuses[0].limitRemaining, 6);
    const viaRequest = await s.call({ domain: 'edge', descriptors: [desc()], hitsAddend: 6 });
    assert.equal(viaRequest.statuses[0].limitRemaining, 0);
  });

  test('malformed requests are INVALID_ARGUMENT with a message', async () => {
    const cases: [object, RegExp][] = [
      [{ domain: '', descriptors: [d(['a', 'b'])] }, /domain must not be empty/],
      [{ domain: 'edge', descriptors: [] }, /descriptor list must not be empty/],
      [{ domain: 'edge', descriptors: [d(['', 'b'])] }, /empty key/],
      [{ domain: 'edge', descriptors: [{ entries: [] }] }, /no entries/],
    ];
    for (const [req, message] of cases) {
      await assert.rejects(s.call(req), (err: grpc.ServiceError) => {
        assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, message);
        return true;
      });
    }
  });

  test('health: SERVING for "" and "ratelimit", NOT_FOUND for other names', async () => {
    const health = new HealthClient(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
    const check = (service: string) => new Promise<{ status: Serving }>((resolve, reject) => health.check({ service }, (e, r) => (e ? reject(e) : resolve(r))));
    assert.equal((await check('')).status, Serving.SERVING);
    assert.equal((await check('ratelimit')).status, Serving.SERVING);
    await assert.rejects(check('other'), (e: grpc.ServiceError) => e.code === grpc.status.NOT_FOUND);
    health.close();
  });
});

describe('no decision possible', () => {
  test('no valid config → UNAVAILABLE, never UNKNOWN', async () => {
    const bad = path.resolve(__dirname, '../../../../test/fixtures/config/bad');
    const s = await startApp({ configPaths: [bad] });
    try {
      await assert.rejects(s.call({ domain: 'edge', descriptors: [d(['a', 'b'])] }), (e: grpc.ServiceError) => {
        assert.equal(e.code, grpc.status.UNAVAILABLE);
        assert.match(e.details, /no rate limit configuration loaded/);
        return true;
      });
      const res = await s.http('/healthcheck');
      assert.equal(res.status, 500);
    } finally {
      await s.stop();
    }
  });
});
