import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { entriesForBytes } from '../../src/store/over-limit-cache';
import { d, type Running, startApp } from '../support/app';
import { startRedis, stopAll } from '../support/redis';
import { awayFromWindowEdge } from '../support/time';

// Upstream's local-cache statistics (issue 37): one lookup per limit of every request, a hit when
// a remembered denial answers it, a miss otherwise; the per-rule over_limit_with_local_cache counts
// the hits so denied. With REDIS_PERSECOND the per-second limits' lookups count too, as upstream's
// one cache serves both Redis. The sequence is the start of upstream's integration test
// (testBasicBaseConfig with LOCAL_CACHE_SIZE_IN_BYTES and REDIS_PERSECOND), read from /metrics under
// upstream's and sluice's names and from statsd under upstream's.

const CONFIG: Record<string, string> = {
  'basic.yaml': 'domain: basic\ndescriptors:\n  - key: key1_local\n    rate_limit: { unit: second, requests_per_unit: 50 }\n',
  'another.yaml': 'domain: another\ndescriptors:\n  - key: key2_local\n    rate_limit: { unit: minute, requests_per_unit: 20 }\n',
};

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-localcache-'));
for (const [name, text] of Object.entries(CONFIG)) fs.writeFileSync(path.join(dir, name), text);
after(async () => {
  await stopAll();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function metric(s: Running, name: string, labels = ''): Promise<number | undefined> {
  const text = await (await s.http('/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

describe("over-limit cache statistics with upstream's semantics", () => {
  test('REDIS_PERSECOND with LOCAL_CACHE_SIZE_IN_BYTES: both caches counted, in Prometheus and statsd', async () => {
    const [main, perSecond] = [await startRedis(), await startRedis()];
    const socket = dgram.createSocket('udp4');
    const packets: string[] = [];
    socket.on('message', (msg) => packets.push(msg.toString('utf8')));
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    // Closed whatever happens: an open socket would keep the test process alive.
    after(() => new Promise<void>((resolve) => socket.close(() => resolve())));
    const s = await startApp({
      configPaths: [dir],
      store: 'redis',
      redisUrl: `127.0.0.1:${main.port}`,
      redisPerSecond: true,
      redisPerSecondUrl: `127.0.0.1:${perSecond.port}`,
      compatMode: 'upstream',
      countDeniedHits: true,
      retryAfterEnabled: false,
      localCacheSizeBytes: 1000,
      overLimitCacheSize: entriesForBytes(1000),
      statsdEnabled: true,
      statsdHost: '127.0.0.1',
      statsdPort: socket.address().port,
      // Nothing is sent before stop() makes the last flush.
      statsFlushIntervalMs: 3_600_000,
    });
    try {
      while ((await (await s.http('/readyz')).text()) !== 'OK') await new Promise((r) => setTimeout(r, 20));
      // The per-second limit: one lookup in the per-second stack's cache, a miss.
      await s.call({ domain: 'basic', descriptors: [d(['key1_local', 'foo'])] });
      assert.equal(await metric(s, 'ratelimit_localcache_missCount'), 1);
      // 25 hits on 20 per minute, in one window: 21 misses (the 21st is Redis' denial, then
      // remembered), then 4 hits answered from the cache.
      await awayFromWindowEdge(60_000, 5_000);
      const value = `v${Math.random()}`;
      for (let i = 0; i < 25; i++) await s.call({ domain: 'another', descriptors: [d(['key2_local', value])] });
      const rule = '{domain="another",key1="key2_local",key2=""}';
      assert.deepEqual(
        {
          hitCount: await metric(s, 'ratelimit_localcache_hitCount'),
          missCount: await metric(s, 'ratelimit_localcache_missCount'),
          lookupCount: await metric(s, 'ratelimit_localcache_lookupCount'),
          hits: await metric(s, 'sluice_over_limit_cache_lookups_total', '{result="hit"}'),
          misses: await metric(s, 'sluice_over_limit_cache_lookups_total', '{result="miss"}'),
          withLocalCache: await metric(s, 'ratelimit_service_rate_limit_over_limit_with_local_cache', rule),
          overLimit: await metric(s, 'ratelimit_service_rate_limit_over_limit', rule),
        },
        { hitCount: 4, missCount: 22, lookupCount: 26, hits: 4, misses: 22, withLocalCache: 4, overLimit: 5 },
      );
    } finally {
      await s.stop();
    }
    const until = Date.now() + 5000;
    const lines = () =>
      packets
        .join('\n')
        .split('\n')
        .filter((l) => l !== '');
    while (!lines().some((l) => l.startsWith('ratelimit.localcache.')) && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    const sent = lines();
    for (const expected of [
      'ratelimit.localcache.hitCount:4|g',
      'ratelimit.localcache.missCount:22|g',
      'ratelimit.localcache.lookupCount:26|g',
      'ratelimit.service.rate_limit.another.key2_local.over_limit_with_local_cache:4|c',
      'ratelimit.service.rate_limit.another.key2_local.over_limit:5|c',
    ]) {
      assert.ok(sent.includes(expected), `statsd: ${expected} in ${JSON.stringify(sent)}`);
    }
  });
});
