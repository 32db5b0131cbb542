import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient, type RateLimitQuotaUsageReports } from '../../src/gen/envoy/service/rate_limit_quota/v3/rlqs';
import type { Settings } from '../../src/settings';
import { d, type Running, startApp } from '../support/app';
import { QuotaStream, summary } from '../support/quota-stream';
import { startCluster, startRedis, stopAll } from '../support/redis';

// Day-long windows: no test here runs into a window edge.
const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: { unit: day, requests_per_unit: 30 }
    descriptors:
      - key: route
        value: /checkout
        rate_limit: { unit: day, requests_per_unit: 5 }
  - key: plan
    value: gold
    rate_limit: { unlimited: true }
  - key: doomed
    rate_limit: { unit: day, requests_per_unit: 7 }
`;

function configDir(text: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rlqs-'));
  fs.writeFileSync(path.join(dir, 'quota.yaml'), text);
  return dir;
}

async function remainingViaRls(s: Running, entries: [string, string][]): Promise<number> {
  const r = await s.call({ domain: 'quota', descriptors: [{ ...d(...entries), hitsAddend: 0 }] });
  return r.statuses[0].limitRemaining;
}

// Polls `read` until `done` says yes (at most 5 s), and returns the last value read: the caller
// asserts on it, so a value that never comes fails with what was seen.
async function until<T>(read: () => Promise<T>, done: (v: T) => boolean): Promise<T> {
  const deadline = Date.now() + 5_000;
  let v = await read();
  while (!done(v) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    v = await read();
  }
  return v;
}

async function metric(s: Running, name: string, labels: string): Promise<number> {
  const text = await (await s.http('/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

// Where the counters live: the same tests run on each.
type Variant = 'memory' | 'redis' | 'cluster';

async function storeSettings(variant: Variant): Promise<Partial<Settings>> {
  if (variant === 'memory') return {};
  if (variant === 'redis') return { store: 'redis', redisUrl: `redis://127.0.0.1:${(await startRedis()).port}` };
  return { store: 'redis', redisType: 'cluster', redisUrl: `127.0.0.1:${(await startCluster({ replicasPerPrimary: 0 })).nodes[0].port}` };
}

function suite(store: Variant): void {
  describe(`RLQS on the gRPC port (${store})`, { timeout: 60_000 }, () => {
    let s: Running;
    // The same store and config, assignments of 1 s: for what happens when they lapse.
    let short: Running;
    let client: RateLimitQuotaServiceClient;
    let dir: string;
    const open: QuotaStream[] = [];
    const stream = () => {
      const q = new QuotaStream(client);
      open.push(q);
      return q;
    };

    before(async () => {
      dir = configDir(CONFIG);
      const overrides: Partial<Settings> = { configPaths: [dir], cacheKeyPrefix: `rlqs-${process.pid}-${Date.now()}:` };
      Object.assign(overrides, await storeSettings(store));
      s = await startApp(overrides);
      short = await startApp({ ...overrides, rlqsAssignmentTtlMs: 1000 });
      // Ready: a real decision has round-tripped (with Redis, answers before that are the fallback's).
      const deadline = Date.now() + 20_000;
      for (const app of [s, short]) {
        while (app.app.health.status !== 'SERVING' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
        assert.equal(app.app.health.status, 'SERVING');
      }
      client = new RateLimitQuotaServiceClient(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
    });
    after(async () => {
      for (const q of open) q.call.cancel();
      client.close();
      await s.stop();
      await short.stop();
      if (store !== 'memory') await stopAll();
    });

    test("a first report gets a token bucket from the bucket's own limit, with a TTL", async () => {
      const [action] = await stream().report('quota', [{ bucket: { tenant: 'first' }, denied: 1 }]);
      const got = summary(action);
      assert.deepEqual(action.bucketId?.bucket, { tenant: 'first' });
      assert.ok(got.tokens !== undefined && got.tokens >= 1 && got.tokens <= 30, JSON.stringify(got));
      assert.equal(got.ttlS, 10);
      // What the Envoy was given is gone from the counter RLS decides on.
      assert.equal(await remainingViaRls(s, [['tenant', 'first']]), 30 - got.tokens);
    });

    test('several Envoys of one bucket: each holds its share, and the shares sum within what the counter had', async () => {
      // Envoys seeing 1 request a second each ask for 10 s of it (RLQS_ASSIGNMENT_TTL): 10 units.
      const calm = { tenant: 'calm' };
      const envoys = [stream(), stream(), stream(), stream()];
      const got: (number | string)[] = [];
      for (const e of envoys) {
        const a = summary((await e.report('quota', [{ bucket: calm, denied: 5, elapsedS: 5 }]))[0]);
        got.push(a.tokens ?? a.blanket!);
      }
      assert.deepEqual(got, [10, 10, 10, 'DENY_ALL']);
      assert.equal(await remainingViaRls(s, [['tenant', 'calm']]), 0);
      // Busy Envoys (100 a second) ask for more than the limit: together they still hold at most it,
      // and the counter says exactly what they hold is gone.
      const busy = { tenant: 'busy' };
      let held = 0;
      for (const e of envoys.slice(0, 3)) held += summary((await e.report('quota', [{ bucket: busy, denied: 500, elapsedS: 5 }]))[0]).tokens ?? 0;
      assert.ok(held >= 1 && held <= 30, `held ${held}`);
      assert.equal(await remainingViaRls(s, [['tenant', 'busy']]), 30 - held);
    });

    test('RLS and RLQS draw from one counter: usage beyond an assignment is counted, and RLS sees it', async () => {
      const e = stream();
      // A nested rule: the bucket's entries are ordered as the YAML nests them (tenant, then route),
      // whatever order the map came in.
      const bucket = { route: '/checkout', tenant: 'acme' };
      const first = summary((await e.report('quota', [{ bucket, denied: 1 }]))[0]);
      assert.ok(first.tokens !== undefined);
      const rls = () =>
        remainingViaRls(s, [
          ['tenant', 'acme'],
          ['route', '/checkout'],
        ]);
      assert.equal(await rls(), 5 - first.tokens);
      // Envoy admitted 2 more than it held (its no-assignment behaviour let them through): counted.
      const second = summary((await e.report('quota', [{ bucket, allowed: first.tokens + 2, elapsedS: 5 }]))[0]);
      assert.equal(await rls(), Math.max(0, 5 - first.tokens - 2 - (second.tokens ?? 0)));
      // An RLS caller spends one of what is left; the Envoy's next assignment cannot include it.
      const left = await rls();
      if (left > 0) assert.equal((await s.call({ domain: 'quota', descriptors: [d(['tenant', 'acme'], ['route', '/checkout'])] })).overallCode, 1);
      const third = summary((await e.report('quota', [{ bucket, allowed: 0, denied: 50, elapsedS: 5 }]))[0]);
      assert.ok((third.tokens ?? 0) <= (second.tokens ?? 0) + Math.max(0, left - 1), JSON.stringify({ second, third, left }));
    });

    test('units an Envoy was assigned and did not use go back: shown by a report, and when the assignment lapses after its stream ended', async () => {
      const quota = new RateLimitQuotaServiceClient(`127.0.0.1:${short.grpcPort}`, grpc.credentials.createInsecure());
      const e = new QuotaStream(quota);
      const bucket = { tenant: 'unused' };
      const rls = () => remainingViaRls(short, [['tenant', 'unused']]);
      try {
        // 10 requests a second, assignments of 1 s: 10 units.
        const n = summary((await e.report('quota', [{ bucket, denied: 50, elapsedS: 5 }]))[0]).tokens;
        assert.equal(n, 10);
        assert.equal(await rls(), 30 - 10);
        // It used 3 of them in a second: it is assigned what it uses (3), the other 4 left go back.
        const renewed = summary((await e.report('quota', [{ bucket, allowed: 3, elapsedS: 1 }]))[0]).tokens;
        assert.equal(renewed, 3);
        assert.equal(await until(rls, (r) => r === 30 - 10 + 4), 30 - 10 + 4);
        // The stream ends with those 3 unused: they come back when the assignment lapses.
        e.call.end();
        await e.ended;
        assert.equal(await until(rls, (r) => r === 30 - 3), 30 - 3);
        // ... and RLS admits them: exactly the limit minus what the Envoy used.
        const all = await short.call({ domain: 'quota', descriptors: [{ ...d(['tenant', 'unused']), hitsAddend: 27 }] });
        assert.equal(all.overallCode, 1);
        assert.equal(await rls(), 0);
      } finally {
        e.call.cancel();
        quota.close();
      }
    });

    test('an unlimited rule is ALLOW_ALL; an unknown bucket gets RLQS_UNKNOWN_BUCKET (allow) and is counted', async () => {
      const before = await metric(s, 'sluice_rlqs_unknown_buckets_total', 'domain="quota"');
      const beforeUnknownDomain = await metric(s, 'sluice_rlqs_unknown_buckets_total', 'domain="(unknown)"');
      const e = stream();
      const actions = await e.report('quota', [{ bucket: { plan: 'gold' } }, { bucket: { nobody: 'x' } }, { bucket: { tenant: 'a', extra: 'b' } }]);
      assert.deepEqual(
        actions.map((a) => summary(a).blanket),
        ['ALLOW_ALL', 'ALLOW_ALL', 'ALLOW_ALL'],
      );
      assert.equal(await metric(s, 'sluice_rlqs_unknown_buckets_total', 'domain="quota"'), before + 2);
      const [other] = await e.report('not-configured', [{ bucket: { tenant: 'a' } }]);
      assert.equal(summary(other).blanket, 'ALLOW_ALL');
      assert.equal(await metric(s, 'sluice_rlqs_unknown_buckets_total', 'domain="(unknown)"'), beforeUnknownDomain + 1);
    });

    test('a malformed report ends the stream with INVALID_ARGUMENT and a message', async () => {
      for (const [report, message] of [
        [
          { domain: '', bucketQuotaUsages: [{ bucketId: { bucket: { tenant: 'a' } }, numRequestsAllowed: 0, numRequestsDenied: 0 }] },
          /domain must not be empty/,
        ],
        [{ domain: 'quota', bucketQuotaUsages: [] }, /no bucket_quota_usages/],
        [
          { domain: 'quota', bucketQuotaUsages: [{ bucketId: { bucket: {} }, numRequestsAllowed: 0, numRequestsDenied: 0 }] },
          /bucket_quota_usages\[0\] has no bucket_id entries/,
        ],
      ] as const) {
        const e = stream();
        e.call.write(report as unknown as RateLimitQuotaUsageReports);
        const err = await e.ended;
        assert.equal(err?.code, grpc.status.INVALID_ARGUMENT, String(err));
        assert.match(err!.details, message);
      }
    });

    test('a reload that removes a rule abandons its buckets; the stream stays open', async () => {
      const e = stream();
      const [kept] = await e.report('quota', [{ bucket: { doomed: 'x' }, denied: 1 }]);
      assert.ok(summary(kept).tokens !== undefined);
      await e.report('quota', [{ bucket: { tenant: 'stays' }, denied: 1 }]);
      fs.writeFileSync(path.join(dir, 'quota.yaml'), CONFIG.replace(/ {2}- key: doomed\n.*\n/, ''));
      assert.equal(s.app.reloadConfig().ok, true);
      const pushed = await e.next();
      assert.deepEqual(
        pushed.bucketAction.map((a) => [a.bucketId?.bucket, summary(a).abandon]),
        [[{ doomed: 'x' }, true]],
      );
      // Same stream, after the reload: still answered.
      const [after] = await e.report('quota', [{ bucket: { tenant: 'stays' }, allowed: 1, elapsedS: 5 }]);
      assert.ok(summary(after).tokens !== undefined || summary(after).blanket === 'DENY_ALL');
      fs.writeFileSync(path.join(dir, 'quota.yaml'), CONFIG);
      assert.equal(s.app.reloadConfig().ok, true);
    });
  });
}

suite('memory');
suite('redis');
suite('cluster');
