import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { type RateLimitResponse, RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { waitReady } from '../../bench/fleet';
import { d } from '../support/app';
import { spawnServer } from '../support/process';
import { startRedis, stopAll } from '../support/redis';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// Issue 34, item 1, as a user saw it: 2 replicas x WORKERS=2 on one Redis, a limit of 5 a day;
// two calls, Redis SHUTDOWN NOSAVE, degraded calls, Redis back empty on the same port, then calls
// until the window is spent. The in-between restart points are driven in test/system/restore.test.ts.

after(() => stopAll());
const LIMIT = 5;

test('2 replicas x 2 workers, Redis restarted empty: the window admits at most its limit, and Redis holds what was admitted', async () => {
  let redis = await startRedis();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-restore-'));
  fs.writeFileSync(path.join(dir, 'r.yaml'), `domain: r\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: ${LIMIT} }\n`);
  const servers = await Promise.all(
    [0, 1].map(() =>
      spawnServer(['--config', dir, '--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`, '--window-counters', 'keys'], { WORKERS: '2' }),
    ),
  );
  const clients = servers.map((s) => new RateLimitServiceClient(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure()));
  try {
    await Promise.all(servers.map((s) => waitReady(s)));
    await awayFromWindowEdge(DAY_MS, 120_000);
    const value = `v${process.pid}${Date.now()}`;
    let next = 0;
    const call = () =>
      new Promise<RateLimitResponse>((resolve, reject) =>
        clients[next++ % 2].shouldRateLimit(
          { domain: 'r', descriptors: [d(['k', value])], hitsAddend: 0 },
          new grpc.Metadata(),
          { deadline: Date.now() + 2000 },
          (e, r) => (e ? reject(e) : resolve(r)),
        ),
      );
    let admitted = 0;
    const calls = async (n: number) => {
      for (let i = 0; i < n; i++) if ((await call().catch(() => undefined))?.overallCode === Code.OK) admitted++;
    };
    // Every worker has heartbeated (and read the epoch) before the loss.
    await new Promise((r) => setTimeout(r, 3000));
    await calls(2);
    assert.equal(admitted, 2);
    await redis.cli('SHUTDOWN', 'NOSAVE').catch(() => '');
    await redis.stop();
    await calls(8);
    redis = await startRedis({ port: redis.port });
    // Time for every worker to recover (restore, write-back), then spend the window.
    await new Promise((r) => setTimeout(r, 5000));
    await calls(12);
    const key = (await redis.cli('--scan', '--pattern', `*${value}*`)).split('\n').filter((k) => k !== '' && !k.includes('restored:'));
    assert.equal(key.length, 1, `one counter key: ${key.join(', ')}`);
    const held = Number((await redis.cli('GET', key[0])).split(':')[1]);
    assert.ok(admitted <= LIMIT, `the window admitted ${admitted} against a limit of ${LIMIT}`);
    assert.equal(held, admitted, 'Redis holds what the fleet admitted');
  } finally {
    for (const c of clients) c.close();
    await Promise.all(servers.map((s) => s.stop()));
  }
});
