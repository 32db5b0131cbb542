import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ManualClock } from '../../src/clock';
import { plainDegradedReason } from '../../src/server/health';
import { type Running, startApp } from '../support/app';
import { freePort } from '../support/redis';

const EXAMPLE = path.resolve(__dirname, '../../../examples/config');

describe('HTTP endpoints', () => {
  let s: Running;
  before(async () => {
    s = await startApp({ configPaths: [EXAMPLE], responseHeadersEnabled: true }, { clock: new ManualClock(1_800_000_000_000) });
  });
  after(() => s.stop());

  const post = (body: string) => s.http('/json', { method: 'POST', body, headers: { 'content-type': 'application/json' } });

  test('POST /json: 200 while under the limit, 429 over it, with protobuf-style JSON', async () => {
    const body = JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: 'http-t' }] }] });
    const statuses: number[] = [];
    let json: any;
    let res!: Response;
    for (let i = 0; i < 11; i++) {
      res = await post(body);
      statuses.push(res.status);
      json = await res.json();
      if (i === 0) {
        assert.equal(res.headers.get('ratelimit-remaining'), '9', 'RateLimit-* are real HTTP headers');
        assert.equal(json.overallCode, 'OK');
        assert.equal(json.statuses[0].currentLimit.name, 'tenant_free');
        assert.equal(json.statuses[0].currentLimit.unit, 'MINUTE');
        assert.equal(json.statuses[0].limitRemaining, 9);
        assert.equal(json.statuses[0].durationUntilReset, '60s');
        const headers = Object.fromEntries(json.responseHeadersToAdd.map((h: any) => [h.key, h.value]));
        assert.deepEqual(headers, { 'RateLimit-Limit': '10', 'RateLimit-Remaining': '9', 'RateLimit-Reset': '60' });
      }
    }
    assert.deepEqual(statuses, [...Array(10).fill(200), 429]);
    assert.equal(json.overallCode, 'OVER_LIMIT');
    const headers = Object.fromEntries(json.responseHeadersToAdd.map((h: any) => [h.key, h.value]));
    assert.equal(headers['Retry-After'], '60');
    assert.equal(headers['RateLimit-Remaining'], '0');
    // The same as real HTTP headers, and a remaining of 0 written out rather than left out.
    assert.deepEqual(
      ['retry-after', 'ratelimit-limit', 'ratelimit-remaining', 'ratelimit-reset'].map((h) => res.headers.get(h)),
      ['60', '10', '0', '60'],
    );
    assert.equal(json.statuses[0].limitRemaining, 0);
    assert.deepEqual(Object.keys(json.statuses[0]), ['code', 'currentLimit', 'limitRemaining', 'durationUntilReset']);
  });

  test('POST /json accepts snake_case field names, as protobuf JSON does', async () => {
    const res = await post(JSON.stringify({ domain: 'edge', hits_addend: 4, descriptors: [{ entries: [{ key: 'tenant', value: 'snake' }] }] }));
    assert.equal(res.status, 200);
    assert.equal(((await res.json()) as any).statuses[0].limitRemaining, 6);
  });

  test('POST /json: 400 with a message for bad input', async () => {
    for (const [body, message] of [
      ['{not json', /not JSON/],
      ['[1,2]', /JSON object/],
      [JSON.stringify({ domain: 'edge' }), /descriptor list must not be empty/],
      [JSON.stringify({ descriptors: [{ entries: [{ key: 'a', value: 'b' }] }] }), /domain must not be empty/],
    ] as const) {
      const res = await post(body);
      assert.equal(res.status, 400, body);
      const json = (await res.json()) as any;
      assert.equal(json.code, 'INVALID_ARGUMENT');
      assert.match(json.error, message);
    }
  });

  test('GET /healthcheck, /rlconfig, /metrics', async () => {
    const health = await s.http('/healthcheck');
    assert.equal(health.status, 200);
    assert.equal(await health.text(), 'OK');
    assert.equal((await s.http('/rlconfig')).status, 404, 'admin endpoints are not on the public port');
    const config = await (await s.admin('/rlconfig')).text();
    assert.match(config, /edge\.tenant: unit=MINUTE requests_per_unit=10/);
    assert.match(config, /edge\.tenant_cust_ent_9942: .*algorithm=token_bucket/);
    assert.match(config, /^edge\.tenant_internal: unlimited, shadow_mode: false, quota_mode: false$/m);
    const metrics = await (await s.http('/metrics')).text();
    assert.match(metrics, /sluice_requests_total\{transport="http",code="OVER_LIMIT"\} 1/);
    assert.match(metrics, /sluice_request_duration_seconds_count\{transport="http"\} \d+/);
    assert.match(metrics, /ratelimit_service_rate_limit_over_limit\{domain="edge",key1="tenant",key2=""\} 1/);
    assert.equal((await s.http('/nope')).status, 404);
    assert.equal((await s.http('/json')).status, 405);
  });
});

describe('POST /json while Redis cannot answer', () => {
  const body = JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: 'redis-down' }] }] });
  // The Redis client's own texts, which must not reach a client.
  const CLIENT_TEXT = /Stream isn't writeable|enableOfflineQueue|ECONNREFUSED|Connection is closed|store error/;

  test("degraded answers give the reason in sluice's words; unknown numbers are left out", async () => {
    for (const policy of ['local', 'allow'] as const) {
      const s = await startApp({ configPaths: [EXAMPLE], store: 'redis', redisUrl: `redis://127.0.0.1:${await freePort()}`, fallbackPolicy: policy });
      try {
        const res = await s.http('/json', { method: 'POST', body });
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('x-ratelimit-degraded'), 'true');
        const json = (await res.json()) as any;
        const reason = String(json.dynamicMetadata.degradedReason);
        assert.match(reason, /^(Redis connection down|Redis did not answer within the deadline \(\d+ ms\))/, reason);
        assert.doesNotMatch(reason, CLIENT_TEXT);
        if (policy === 'local') assert.equal(json.statuses[0].limitRemaining, 9);
        else {
          assert.deepEqual(json.dynamicMetadata.unknownRemaining, [0]);
          assert.equal('limitRemaining' in json.statuses[0], false, 'an unknown remaining is left out, not 0');
        }
      } finally {
        await s.stop();
      }
    }
  });

  test('the deny policy answers 503 in the same words', async () => {
    const s = await startApp({ configPaths: [EXAMPLE], store: 'redis', redisUrl: `redis://127.0.0.1:${await freePort()}`, fallbackPolicy: 'deny' });
    try {
      const res = await s.http('/json', { method: 'POST', body });
      assert.equal(res.status, 503);
      const json = (await res.json()) as { error: string; code: string };
      assert.equal(json.code, 'UNAVAILABLE');
      assert.match(
        json.error,
        /^counter store unavailable \((Redis connection down|Redis did not answer within the deadline)[^)]*\)+; fallback policy is deny$/,
        json.error,
      );
      assert.doesNotMatch(json.error, CLIENT_TEXT);
    } finally {
      await s.stop();
    }
  });

  test("the reasons the store stages give, in sluice's words", () => {
    const cases: [string, string | undefined, string][] = [
      ["store error: Stream isn't writeable and enableOfflineQueue options is false", undefined, 'Redis connection down'],
      ['store error: connect ECONNREFUSED 127.0.0.1:6380', undefined, 'Redis connection down'],
      ['store error: Connection is closed.', undefined, 'Redis connection down'],
      ["store error: OOM command not allowed when used memory > 'maxmemory'.", undefined, 'Redis answered with an error (OOM)'],
      ['store error: something else', undefined, 'the Redis call failed'],
      ['no answer from Redis within 18 ms', undefined, 'Redis did not answer within the deadline (18 ms)'],
      [
        'no answer from Redis within 100 ms (this process was busy: event-loop lag 230 ms)',
        undefined,
        'Redis did not answer within the deadline (100 ms) (sluice itself was busy: event-loop lag 230 ms)',
      ],
      ['no time left before the caller deadline', undefined, "the caller's deadline left no time to ask Redis"],
      ['circuit breaker open', 'Redis unreachable', 'Redis connection down (circuit breaker open)'],
      ['circuit breaker open', 'circuit breaker open', 'Redis calls suspended after repeated failures (circuit breaker open)'],
      ['store error: Connection is closed.; write-back journal full', undefined, "Redis connection down; the fallback's write-back journal is full"],
      ['Redis unreachable; fallback policy local', undefined, 'Redis unreachable; fallback policy local'],
    ];
    for (const [raw, storeNow, plain] of cases) assert.equal(plainDegradedReason(raw, storeNow), plain, raw);
  });
});

describe('gRPC server reflection', () => {
  test('lists the services and serves their descriptors, so grpcurl needs no proto files', async () => {
    const s = await startApp({ configPaths: [EXAMPLE] });
    const reflectionProto = path.resolve(__dirname, '../../../proto/grpc/reflection/v1/reflection.proto');
    const def = protoLoader.loadSync(reflectionProto, { keepCase: true });
    const pkg = grpc.loadPackageDefinition(def) as any;
    const client = new pkg.grpc.reflection.v1.ServerReflection(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const ask = (request: object) =>
        new Promise<any>((resolve, reject) => {
          const stream = client.ServerReflectionInfo();
          stream.on('data', (r: any) => (resolve(r), stream.end()));
          stream.on('error', reject);
          stream.write(request);
        });
      const list = await ask({ list_services: '' });
      const names = list.list_services_response.service.map((x: any) => x.name);
      assert.ok(names.includes('envoy.service.ratelimit.v3.RateLimitService'), names.join());
      assert.ok(names.includes('grpc.health.v1.Health'), names.join());
      const file = await ask({ file_containing_symbol: 'envoy.service.ratelimit.v3.RateLimitService' });
      assert.ok(file.file_descriptor_response.file_descriptor_proto.length > 0);
    } finally {
      client.close();
      await s.stop();
    }
  });
});
