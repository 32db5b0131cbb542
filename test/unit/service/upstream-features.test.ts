import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import { RateLimitResponse_Code as Code, RateLimitResponse_RateLimit_Unit as Unit } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { RateLimitUnit } from '../../../src/gen/envoy/type/v3/ratelimit_unit';
import { d, type Running, startApp } from '../../support/app';

// Upstream features end to end, through gRPC to the real server.
const RULES = `
domain: feat
descriptors:
  - key: api
    metadata: { team: payments, tier: { name: gold } }
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: other
    metadata: { team: search, extra: 1 }
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    value: /users/*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    value: /orders/*
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: user
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: half_minute
    rate_limit: { unit: second, unit_multiplier: 30, requests_per_unit: 1 }
`;
const MORE = `
domain: feat
descriptors:
  - key: merged
    rate_limit: { unit: hour, requests_per_unit: 4 }
`;

describe('upstream features', () => {
  let s: Running;
  const clock = new ManualClock(1_800_000_000_000);
  before(async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-feat-'));
    fs.writeFileSync(path.join(dir, 'a.yaml'), RULES);
    fs.writeFileSync(path.join(dir, 'b.yaml'), MORE);
    s = await startApp({ configPaths: [dir], responseDynamicMetadata: true, mergeDomainConfig: true, responseHeadersEnabled: true }, { clock });
  });
  after(() => s.stop());

  test('RESPONSE_DYNAMIC_METADATA: domain, descriptors, hits and the passed rules metadata', async () => {
    const r = await s.call({ domain: 'feat', descriptors: [d(['api', 'x']), { ...d(['other', 'y']), hitsAddend: 2 }], hitsAddend: 1 });
    assert.deepEqual(r.dynamicMetadata, {
      domain: 'feat',
      descriptors: [{ entries: ['api=x'] }, { entries: ['other=y'], hitsAddend: 2 }],
      hitsAddend: 1,
      metadata: { team: 'payments', tier: { name: 'gold' }, extra: 1 },
    });
    await s.call({ domain: 'feat', descriptors: [d(['api', 'x'])] });
    const over = await s.call({ domain: 'feat', descriptors: [d(['api', 'x']), d(['other', 'y'])] });
    assert.equal(over.statuses[0].code, Code.OVER_LIMIT);
    assert.deepEqual(over.dynamicMetadata?.metadata, { team: 'search', extra: 1 });
  });

  test('request-side limit override replaces the configured limit', async () => {
    const desc = { ...d(['api', 'override']), limit: { requestsPerUnit: 1, unit: RateLimitUnit.HOUR } };
    const first = await s.call({ domain: 'feat', descriptors: [desc] });
    assert.deepEqual(first.statuses[0].currentLimit, { name: '', requestsPerUnit: 1, unit: Unit.HOUR });
    assert.equal((await s.call({ domain: 'feat', descriptors: [desc] })).overallCode, Code.OVER_LIMIT);
  });

  test('share_threshold: all values matching the wildcard share one counter; without it each has its own', async () => {
    const codes = async (paths: string[]) => {
      const out: Code[] = [];
      for (const p of paths) out.push((await s.call({ domain: 'feat', descriptors: [d(['path', p])] })).overallCode);
      return out;
    };
    assert.deepEqual(await codes(['/users/1', '/users/2', '/users/3', '/users/4']), [Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT]);
    assert.deepEqual(await codes(['/orders/1', '/orders/2', '/orders/3', '/orders/4']), [Code.OK, Code.OK, Code.OK, Code.OK]);
  });

  test('MERGE_DOMAIN_CONFIG joins two files of one domain', async () => {
    const r = await s.call({ domain: 'feat', descriptors: [d(['merged', 'm'])] });
    assert.deepEqual(r.statuses[0].currentLimit, { name: '', requestsPerUnit: 4, unit: Unit.HOUR });
  });

  test('unit_multiplier: a 30-second window', async () => {
    clock.set(1_800_000_010_000);
    const call = () => s.call({ domain: 'feat', descriptors: [d(['half_minute', 'h'])] });
    const first = await call();
    assert.equal(first.statuses[0].durationUntilReset?.seconds, 20);
    assert.equal((await call()).overallCode, Code.OVER_LIMIT);
    clock.set(1_800_000_030_000);
    assert.equal((await call()).overallCode, Code.OK);
  });

  test('detailed_metric puts the value in the stats labels; other rules do not', async () => {
    await s.call({ domain: 'feat', descriptors: [d(['user', 'alice'])] });
    const metrics = await (await s.http('/metrics')).text();
    assert.match(metrics, /ratelimit_service_rate_limit_total_hits\{domain="feat",key1="user_alice",key2=""\} 1/);
    assert.match(metrics, /ratelimit_service_rate_limit_total_hits\{domain="feat",key1="path_\/users\/\*",key2=""\} 4/);
    assert.doesNotMatch(metrics, /orders\/1/);
  });
});
