import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { d, startApp } from '../support/app';
import { parseExposition, value } from '../support/exposition';
import { startRedis, stopAll } from '../support/redis';

// /metrics is read by Prometheus: it must parse as the text exposition format, and its counters
// must equal what was sent.

after(() => stopAll());

describe('/metrics', () => {
  test('parses, and its counters match the requests sent (Redis store)', async () => {
    const redis = await startRedis();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-metrics-'));
    fs.writeFileSync(path.join(dir, 'm.yaml'), 'domain: m\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 7 }\n');
    const s = await startApp({ configPaths: [dir], store: 'redis', redisUrl: `127.0.0.1:${redis.port}`, storeDeadlineMs: 2000, fallbackPolicy: 'deny' });
    try {
      while (!(await s.http('/healthcheck')).ok) await new Promise((r) => setTimeout(r, 20));
      for (let i = 0; i < 12; i++) await s.call({ domain: 'm', descriptors: [d(['k', 'v'])] });
      await s.call({ domain: 'nope', descriptors: [d(['k', 'v'])] });
      await s.call({ domain: '', descriptors: [d(['k', 'v'])] }).catch(() => undefined);
      await s.http('/json', { method: 'POST', body: JSON.stringify({ domain: 'm', descriptors: [{ entries: [{ key: 'k', value: 'w' }] }] }) });
      const samples = parseExposition(await (await s.http('/metrics')).text());
      assert.equal(value(samples, 'sluice_requests_total', { transport: 'grpc', code: 'OK' }), 8);
      assert.equal(value(samples, 'sluice_requests_total', { transport: 'grpc', code: 'OVER_LIMIT' }), 5);
      assert.equal(value(samples, 'sluice_requests_total', { transport: 'grpc', code: 'INVALID_ARGUMENT' }), 1);
      assert.equal(value(samples, 'sluice_requests_total', { transport: 'http', code: 'OK' }), 1);
      assert.equal(value(samples, 'sluice_request_duration_seconds_count', { transport: 'grpc' }), 14);
      const rule = { domain: 'm', key1: 'k' };
      assert.equal(value(samples, 'ratelimit_service_rate_limit_total_hits', rule), 13);
      assert.equal(value(samples, 'ratelimit_service_rate_limit_within_limit', rule), 8);
      assert.equal(value(samples, 'ratelimit_service_rate_limit_over_limit', rule), 5);
      // near_limit: hits past floor(0.8 × 7) = 5 within the limit (6th, 7th), and the step from 5 to 7 of the first denial.
      assert.equal(value(samples, 'ratelimit_service_rate_limit_near_limit', rule), 2);
      // 7 admitted + the first denial + the JSON call reach Redis; the other 4 denials come from the
      // over-limit cache.
      assert.equal(value(samples, 'sluice_store_duration_seconds_count', { operation: 'decide', result: 'ok' }), 9);
      assert.equal(value(samples, 'sluice_over_limit_cache_hits_total'), 4);
      assert.equal(value(samples, 'sluice_config_loads_total', { result: 'success' }), 1);
      assert.ok(value(samples, 'sluice_config_last_load_success_timestamp_seconds') > 1.7e9);
      assert.equal(value(samples, 'sluice_breaker_state'), 0);
      // envoyproxy/ratelimit's service-level series, from the same counts.
      assert.equal(value(samples, 'ratelimit_service_config_load_success'), 1);
      assert.equal(value(samples, 'ratelimit_service_config_load_error'), 0);
      assert.equal(value(samples, 'ratelimit_service_total_requests', { grpc_method: 'ShouldRateLimit' }), 14);
      assert.equal(value(samples, 'ratelimit_service_should_rate_limit_error', { err_type: 'service_error' }), 1);
      assert.equal(value(samples, 'ratelimit_service_response_time_seconds_count', { grpc_method: 'ShouldRateLimit' }), 14);
      assert.equal(
        value(samples, 'ratelimit_service_response_time_seconds_bucket', { grpc_method: 'ShouldRateLimit', le: '+Inf' }),
        value(samples, 'sluice_request_duration_seconds_bucket', { transport: 'grpc', le: '+Inf' }),
      );
    } finally {
      await s.stop();
    }
  });

  test('EXTRA_TAGS are constant labels on every series; a rejected reload counts as upstream counts it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-metrics-'));
    fs.writeFileSync(path.join(dir, 'm.yaml'), 'domain: m\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 7 }\n');
    const s = await startApp({ configPaths: [dir], extraTags: ['cluster:eu-1', 'team.name:edge'] });
    try {
      await s.call({ domain: 'm', descriptors: [d(['k', 'v'])] });
      fs.writeFileSync(path.join(dir, 'm.yaml'), 'domain: m\ndescriptors: [oops\n');
      s.app.reloadConfig();
      const samples = parseExposition(await (await s.http('/metrics')).text());
      const ours = samples.filter((x) => x.name.startsWith('sluice_') || x.name.startsWith('ratelimit_'));
      assert.ok(ours.length > 0);
      assert.deepEqual(
        ours.filter((x) => x.labels.cluster !== 'eu-1' || x.labels.team_name !== 'edge').map((x) => x.name),
        [],
      );
      assert.equal(value(samples, 'ratelimit_service_config_load_error'), 1);
      assert.equal(value(samples, 'ratelimit_service_config_load_success'), 1);
    } finally {
      await s.stop();
    }
  });
});
