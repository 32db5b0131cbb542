import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { hasUpstreamKey, type KeyParts, upstreamKey } from '../../src/keys';
import { d, type Running, startApp } from '../support/app';
import { type RedisNode, startRedis, stopAll } from '../support/redis';
import { awayFromWindowEdge } from '../support/time';

// KEY_LAYOUT=upstream: fixed windows keep envoyproxy/ratelimit's keys and integer counts, so its
// replicas and sluice's share counters on one Redis during a migration.

const parts = (entries: [string, string][], periodMs = 60_000): KeyParts => ({
  domain: 'edge',
  entries: entries.map(([key, value]) => ({ key, value })),
  algorithm: 'fixed_window',
  periodMs,
});
// 2027-01-15T08:00:30Z: 30 s into a minute, an hour and (with the day's 08:00) a day.
const NOW = Date.UTC(2027, 0, 15, 8, 0, 30);
const SEC = NOW / 1000;

describe("upstream's key format (its cache_key.go: prefix, domain_, key_value_ per entry, window start in Unix seconds)", () => {
  test('one entry, a minute', () => {
    assert.equal(upstreamKey(parts([['tenant', 'acme']]), '', NOW), `edge_tenant_acme_${SEC - 30}`);
  });
  test('two entries, the prefix as given, every unit', () => {
    const two = (periodMs: number) =>
      parts(
        [
          ['tenant', 'acme'],
          ['route', '/v1/pay'],
        ],
        periodMs,
      );
    assert.equal(upstreamKey(two(1_000), 'ratelimit_', NOW), `ratelimit_edge_tenant_acme_route_/v1/pay_${SEC}`);
    assert.equal(upstreamKey(two(60_000), 'ratelimit_', NOW), `ratelimit_edge_tenant_acme_route_/v1/pay_${SEC - 30}`);
    assert.equal(upstreamKey(two(3_600_000), 'ratelimit_', NOW), `ratelimit_edge_tenant_acme_route_/v1/pay_${SEC - 30}`);
    assert.equal(upstreamKey(two(86_400_000), 'ratelimit_', NOW), `ratelimit_edge_tenant_acme_route_/v1/pay_${SEC - 30 - 8 * 3600}`);
    // A week, a month (30 days) and a year (365 days) count from the Unix epoch, as upstream's do.
    for (const days of [7, 30, 365]) {
      const d = days * 86_400;
      assert.equal(upstreamKey(two(d * 1000), 'ratelimit_', NOW), `ratelimit_edge_tenant_acme_route_/v1/pay_${Math.floor(SEC / d) * d}`);
    }
  });
  test("values as sent, unescaped (upstream's 'a_b'='c' and 'a'='b_c' share a key, as they do there)", () => {
    assert.equal(upstreamKey(parts([['a_b', 'c']]), '', NOW), upstreamKey(parts([['a', 'b_c']]), '', NOW));
  });
  test("only fixed windows of upstream's units have one", () => {
    assert.equal(hasUpstreamKey('fixed_window', 60_000), true);
    assert.equal(hasUpstreamKey('fixed_window', 604_800_000), true);
    assert.equal(hasUpstreamKey('fixed_window', 31_536_000_000), true);
    assert.equal(hasUpstreamKey('fixed_window', 300_000), false);
    assert.equal(hasUpstreamKey('sliding_window', 60_000), false);
    assert.equal(hasUpstreamKey('gcra', 1_000), false);
  });
});

describe('sluice and an upstream replica share one counter on one Redis', () => {
  let node: RedisNode;
  let app: Running;
  let redis: Redis;
  before(async () => {
    node = await startRedis();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-upstream-layout-'));
    fs.writeFileSync(
      path.join(dir, 'edge.yaml'),
      [
        'domain: edge',
        'descriptors:',
        '  - key: tenant',
        '    rate_limit: { unit: minute, requests_per_unit: 5 }',
        '  - key: user',
        '    rate_limit: { unit: minute, requests_per_unit: 5, algorithm: sliding_window }',
        '',
      ].join('\n'),
    );
    app = await startApp({
      configPaths: [dir],
      store: 'redis',
      redisUrl: `127.0.0.1:${node.port}`,
      cacheKeyPrefix: '',
      keyLayout: 'upstream',
      leaseAutoThreshold: 0,
    });
    redis = new Redis({ port: node.port, host: '127.0.0.1' });
    const until = Date.now() + 10_000;
    while (app.app.health.status !== 'SERVING' && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
  });
  after(async () => {
    redis.disconnect();
    await app.stop();
    await stopAll();
  });

  test("upstream's INCRBY counts for sluice, sluice's decisions count for upstream", async () => {
    await awayFromWindowEdge(60_000, 5_000);
    const key = `edge_tenant_acme_${Math.floor(Date.now() / 60_000) * 60}`;
    // An upstream replica admits 2 hits: its pipeline is INCRBY then EXPIRE (unit seconds).
    await redis.incrby(key, 2);
    await redis.expire(key, 60);
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await app.call({ domain: 'edge', descriptors: [d(['tenant', 'acme'])] }));
    assert.deepEqual(
      answers.map((a) => a.statuses[0].limitRemaining),
      [2, 1, 0, 0],
    );
    assert.deepEqual(
      answers.map((a) => a.overallCode),
      [1, 1, 1, 2],
    );
    // The count is a plain integer: upstream's next INCRBY goes on from it.
    assert.equal(await redis.get(key), '5');
    assert.equal(await redis.incrby(key, 1), 6);
    const ttl = await redis.pttl(key);
    assert.ok(ttl > 0 && ttl <= 60_000, `ttl ${ttl}`);
  });

  test("rules upstream has no key for keep sluice's layout", async () => {
    await app.call({ domain: 'edge', descriptors: [d(['user', 'u1'])] });
    const keys = await redis.keys('*user*');
    assert.equal(keys.length, 1);
    assert.match(keys[0], /^\{edge\|user=u1\}\|sliding_window:60000$/);
  });
});
