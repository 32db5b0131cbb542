import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { type RateLimitResponse, RateLimitResponse_Code as Code, RateLimitResponse_RateLimit_Unit as Unit } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import type { Settings } from '../../src/settings';
import { d, type Running, startApp } from '../support/app';
import { type RedisNode, scriptCalls, startRedis, stopAll } from '../support/redis';
import { awayFromWindowEdge } from '../support/time';

// Issue 17: when the over-limit cache knows one descriptor of a request is over its limit, the
// request's other descriptors are still evaluated (read only, or counted with upstream counting),
// so their statuses are exact: never OK with limit_remaining 0, never without duration_until_reset.
// The sequence is upstream's integration test (key2 20/min and key3 10/hour in one request).

const CONFIG = `
domain: another
descriptors:
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 10 }
`;

after(() => stopAll());

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-olc-'));
  fs.writeFileSync(path.join(dir, 'another.yaml'), CONFIG);
  return dir;
}

interface Status {
  code: Code;
  limit: number | undefined;
  unit: Unit | undefined;
  remaining: number;
}

function statuses(r: RateLimitResponse): Status[] {
  return r.statuses.map((s) => ({ code: s.code, limit: s.currentLimit?.requestsPerUnit, unit: s.currentLimit?.unit, remaining: s.limitRemaining }));
}

// Seconds until the end of the current window of `periodS`, read before and after the call: the
// status must say one of them (a bound, not a timing).
function resetBounds(periodS: number, beforeMs: number, afterMs: number): [number, number] {
  const left = (ms: number) => periodS - (Math.floor(ms / 1000) % periodS);
  return [left(afterMs), left(beforeMs)].sort((a, b) => a - b) as [number, number];
}

function header(r: RateLimitResponse, name: string): string | undefined {
  return r.responseHeadersToAdd.find((h) => h.key === name)?.value;
}

async function metric(s: Running, name: string, labels = ''): Promise<number> {
  const text = await (await s.http('/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

// Redis-backed and ready: one real decision has round-tripped, so no answer comes from a fallback.
async function startOnRedis(redis: RedisNode, settings: Partial<Settings> = {}): Promise<Running> {
  const s = await startApp({ configPaths: [configDir()], store: 'redis', redisUrl: `127.0.0.1:${redis.port}`, ...settings });
  while ((await (await s.http('/readyz')).text()) !== 'OK') await new Promise((r) => setTimeout(r, 20));
  return s;
}

async function run(redis: RedisNode, settings: Partial<Settings>, expectKey2: (i: number) => number): Promise<void> {
  const s = await startOnRedis(redis, { responseHeadersEnabled: true, ...settings });
  try {
    // The 15 requests must share one window of each key.
    await awayFromWindowEdge(3_600_000, 5_000);
    await awayFromWindowEdge(60_000, 5_000);
    const value = `v${Math.random()}`;
    const request = { domain: 'another', descriptors: [d(['key2', value]), d(['key3', value])] };
    for (let i = 0; i < 15; i++) {
      const before = Date.now();
      const r = await s.call(request);
      const afterMs = Date.now();
      const over = i >= 10;
      assert.deepEqual(
        { overall: r.overallCode, statuses: statuses(r) },
        {
          overall: over ? Code.OVER_LIMIT : Code.OK,
          statuses: [
            { code: Code.OK, limit: 20, unit: Unit.MINUTE, remaining: expectKey2(i) },
            { code: over ? Code.OVER_LIMIT : Code.OK, limit: 10, unit: Unit.HOUR, remaining: over ? 0 : 9 - i },
          ],
        },
        `request ${i}`,
      );
      const [minute, hour] = r.statuses.map((st) => st.durationUntilReset?.seconds);
      const [m0, m1] = resetBounds(60, before, afterMs);
      const [h0, h1] = resetBounds(3600, before, afterMs);
      assert.ok(minute !== undefined && minute >= m0 && minute <= m1, `request ${i}: key2 reset ${minute}, expected ${m0}..${m1}`);
      assert.ok(hour !== undefined && hour >= h0 && hour <= h1, `request ${i}: key3 reset ${hour}, expected ${h0}..${h1}`);
      assert.equal(r.dynamicMetadata?.unknownRemaining, undefined, `request ${i}: every number known`);
      // RateLimit-* describe the descriptor over its limit, else the one with the least remaining.
      const shown = over ? { limit: '10', remaining: '0', reset: String(hour) } : { limit: '10', remaining: String(9 - i), reset: String(hour) };
      assert.deepEqual(
        { limit: header(r, 'RateLimit-Limit'), remaining: header(r, 'RateLimit-Remaining'), reset: header(r, 'RateLimit-Reset') },
        shown,
        `request ${i}: headers`,
      );
      assert.equal(header(r, 'Retry-After'), settings.retryAfterEnabled === false || !over ? undefined : String(hour), `request ${i}: Retry-After`);
    }
    // Requests 11..14 found key3 in the cache: its per-rule and lookup series say so; each still
    // asked Redis about key2, so none was answered wholly without Redis.
    assert.equal(await metric(s, 'ratelimit_service_rate_limit_over_limit_with_local_cache', '{domain="another",key1="key3",key2=""}'), 4);
    assert.equal(await metric(s, 'ratelimit_localcache_hitCount'), 4);
    assert.equal(await metric(s, 'ratelimit_localcache_missCount'), 2 * 11 + 4);
    assert.equal(await metric(s, 'sluice_over_limit_cache_hits_total'), 0);
  } finally {
    await s.stop();
  }
}

describe('statuses of a request one of whose descriptors the over-limit cache denies', () => {
  test('all-or-nothing (native): the others are read, exact and unconsumed', async () => {
    const redis = await startRedis();
    await run(redis, {}, (i) => (i >= 10 ? 10 : 19 - i));
  });

  test('upstream counting with LOCAL_CACHE_SIZE_IN_BYTES: the others are evaluated and counted, as upstream with its local cache', async () => {
    const redis = await startRedis();
    await run(redis, { countDeniedHits: true, retryAfterEnabled: false, localCacheSizeBytes: 1000 }, (i) => 19 - i);
  });

  test('a request of the cached key alone is answered without Redis, exactly', async () => {
    const redis = await startRedis();
    const s = await startOnRedis(redis);
    try {
      const request = { domain: 'another', descriptors: [d(['key3', 'alone'])] };
      for (let i = 0; i < 11; i++) await s.call(request);
      const calls = await scriptCalls(redis);
      const before = Date.now();
      const r = await s.call(request);
      const [h0, h1] = resetBounds(3600, before, Date.now());
      assert.equal(await scriptCalls(redis), calls);
      assert.deepEqual(statuses(r), [{ code: Code.OVER_LIMIT, limit: 10, unit: Unit.HOUR, remaining: 0 }]);
      const reset = r.statuses[0].durationUntilReset?.seconds ?? -1;
      assert.ok(reset >= h0 && reset <= h1, `reset ${reset}, expected ${h0}..${h1}`);
      assert.equal(await metric(s, 'sluice_over_limit_cache_hits_total'), 1);
    } finally {
      await s.stop();
    }
  });
});
