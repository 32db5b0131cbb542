import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, type RateLimitRequest, type RateLimitResponse } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { HealthClient, HealthCheckResponse_ServingStatus as Serving } from '../../src/gen/grpc/health/v1/health';
import type { Settings } from '../../src/settings';
import { d, type Running, startApp } from '../support/app';
import { MAIN, REPO } from '../support/process';
import { freePort, startRedis, stopAll } from '../support/redis';

// Regression tests for issue 8 ("exact first, then available"), app-level against a real
// redis-server; each names the defect it covers.

const dirs: string[] = [];
after(async () => {
  await stopAll();
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

const TENANT_10_PER_HOUR = 'descriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n';

function configDir(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-res-'));
  dirs.push(dir);
  for (const [domain, body] of Object.entries(files)) fs.writeFileSync(path.join(dir, `${domain}.yaml`), `domain: ${domain}\n${body}`);
  return dir;
}

const edgeOtherPay = () => configDir({ edge: TENANT_10_PER_HOUR, other: TENANT_10_PER_HOUR, pay: TENANT_10_PER_HOUR });
const onRedis = (port: number, extra: Partial<Settings> = {}): Partial<Settings> => ({
  configPaths: [edgeOtherPay()],
  store: 'redis',
  redisUrl: `127.0.0.1:${port}`,
  ...extra,
});

async function withApp(overrides: Partial<Settings>, body: (s: Running) => Promise<void>): Promise<void> {
  const s = await startApp(overrides);
  try {
    await body(s);
  } finally {
    await s.stop();
  }
}

// Bounded poll: `check` returns a description of what is still wrong, or true.
async function until(what: string, check: () => Promise<true | string>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    const state = await check().catch((e: Error) => e.message);
    if (state === true) return;
    last = state;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}; last: ${last}`);
}

async function healthBody(s: Running): Promise<{ status: number; body: string }> {
  const res = await s.http('/healthcheck');
  return { status: res.status, body: (await res.text()).trim() };
}

function grpcHealth(s: Running): Promise<Serving> {
  const client = new HealthClient(`127.0.0.1:${s.grpcPort}`, grpc.credentials.createInsecure());
  return new Promise<Serving>((resolve, reject) => client.check({ service: '' }, (e, r) => (e ? reject(e) : resolve(r.status)))).finally(() => client.close());
}

async function ready(s: Running): Promise<void> {
  await until('SERVING, not degraded', async () => {
    const h = await healthBody(s);
    return h.body === 'OK' || `${h.status} ${h.body}`;
  });
}

function callWithin(s: Running, request: Omit<RateLimitRequest, 'hitsAddend'>, ms: number): Promise<RateLimitResponse> {
  return new Promise((resolve, reject) =>
    s.client.shouldRateLimit({ hitsAddend: 0, ...request }, new grpc.Metadata(), { deadline: Date.now() + ms }, (e, r) => (e ? reject(e) : resolve(r))),
  );
}

const header = (r: RateLimitResponse, key: string) => r.responseHeadersToAdd.find((h) => h.key.toLowerCase() === key.toLowerCase())?.value;
const degraded = (r: RateLimitResponse) => header(r, 'x-ratelimit-degraded') === 'true';
const tenant = (domain: string, value: string) => ({ domain, descriptors: [d(['tenant', value])] });

// An unknown remaining on the wire: limit_remaining 0, duration_until_reset unset, listed in
// dynamic metadata `unknownRemaining`.
function assertUnknown(r: RateLimitResponse, i: number): void {
  assert.equal(r.statuses[i].limitRemaining, 0);
  assert.equal(r.statuses[i].durationUntilReset, undefined, `status ${i} must carry no duration_until_reset`);
  assert.ok((r.dynamicMetadata?.unknownRemaining as number[] | undefined)?.includes(i), `unknownRemaining lists ${i}: ${JSON.stringify(r.dynamicMetadata)}`);
}

async function cacheHits(s: Running): Promise<number> {
  const text = await (await s.http('/metrics')).text();
  return Number(/^sluice_over_limit_cache_hits_total (\S+)$/m.exec(text)?.[1] ?? 0);
}

// Redis is inside a DEBUG SLEEP once a PING on a connection of our own goes unanswered.
async function waitUntilRedisBusy(port: number): Promise<void> {
  const socket = net.connect(port, '127.0.0.1');
  let replies = 0;
  socket.on('data', (c: Buffer) => (replies += (c.toString().match(/\+PONG/g) ?? []).length));
  try {
    await until(
      'Redis to be busy (DEBUG SLEEP)',
      async () => {
        const before = replies;
        socket.write('PING\r\n');
        await new Promise((r) => setTimeout(r, 30));
        return replies === before || 'Redis still answers PING';
      },
      5_000,
    );
  } finally {
    socket.destroy();
  }
}

// `sluice <args>` to completion, killed if it outlives `ms` (a serve that wrongly starts must not
// hang the suite).
function runSluice(args: string[], ms = 10_000): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [MAIN, ...args], { cwd: REPO, env: { PATH: process.env.PATH }, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), ms);
    child.on('exit', (code) => (clearTimeout(timer), resolve({ code, stderr })));
  });
}

describe('readiness and the fallback policies (defect 9)', () => {
  test('unreachable at start: NOT_SERVING but answering degraded; SERVING once Redis decides; a later outage stays SERVING', async () => {
    const port = await freePort();
    await withApp(onRedis(port, { fallbackShare: 0.5, fallbackDomainPolicies: ['other=allow', 'pay=deny'] }), async (s) => {
      // Old code: SERVING from the start although Redis had never answered.
      assert.equal(s.app.health.status, 'NOT_SERVING');
      const h = await healthBody(s);
      assert.equal(h.status, 500);
      assert.match(h.body, /^NOT_SERVING: .*store not ready/);
      assert.equal(await grpcHealth(s), Serving.NOT_SERVING);
      assert.equal((await s.http('/livez')).status, 200);

      // local, FALLBACK_SHARE 0.5: half of a never-seen 10/hour key.
      const codes: Code[] = [];
      for (let i = 0; i < 7; i++) {
        const r = await s.call(tenant('edge', 'x'));
        assert.ok(degraded(r));
        assert.equal(r.dynamicMetadata?.degradedPolicy, 'local');
        codes.push(r.overallCode);
      }
      assert.deepEqual(codes, [Code.OK, Code.OK, Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);

      // allow: admitted, nothing claimed about what remains.
      const allowed = await s.call(tenant('other', 'x'));
      assert.equal(allowed.overallCode, Code.OK);
      assert.ok(degraded(allowed));
      assert.equal(allowed.statuses[0].currentLimit?.requestsPerUnit, 10);
      assertUnknown(allowed, 0);

      await assert.rejects(s.call(tenant('pay', 'x')), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE);

      // Redis comes up on that port: ready without a restart, and what the fallback admitted (5)
      // was written back before Redis decided again.
      const redis = await startRedis({ port });
      await ready(s);
      assert.equal(await grpcHealth(s), Serving.SERVING);
      const exact = await s.call(tenant('edge', 'x'));
      assert.equal(degraded(exact), false);
      assert.deepEqual([exact.overallCode, exact.statuses[0].limitRemaining], [Code.OK, 4]);

      // A later outage: still SERVING, degraded and saying so.
      await redis.stop();
      await until('a degraded /healthcheck', async () => {
        const now = await healthBody(s);
        return (now.status === 200 && /^OK \(degraded: .+\)$/.test(now.body)) || `${now.status} ${now.body}`;
      });
      assert.equal(s.app.health.status, 'SERVING');
      assert.equal(await grpcHealth(s), Serving.SERVING);
      assert.ok(degraded(await s.call(tenant('edge', 'y'))));
    });
  });

  // The old code started with any REDIS_URL and retried a nonsense address forever.
  test('an invalid REDIS_URL is a startup error that names REDIS_URL', async () => {
    const ports = ['--grpc-port', '0', '--http-port', '0', '--admin-port', '0', '--host', '127.0.0.1', '--grpc-host', '127.0.0.1'];
    for (const url of ['127.0.0.1:63x79', 'redis://:6379', 'http://127.0.0.1:6379']) {
      const r = await runSluice(['serve', '--store', 'redis', '--redis-url', url, '--config', 'examples/config', ...ports]);
      assert.equal(r.code, 2, `${url}: exit code ${r.code}, stderr: ${r.stderr}`);
      assert.match(r.stderr, /REDIS_URL/, url);
    }
  });
});

describe("the caller's gRPC deadline", () => {
  // Main defect of issue 8: the old layer gave Redis a fixed 10 ms whatever the caller allowed,
  // so a Redis pause of a few hundred ms turned answers Redis would have given in time into
  // fallback (degraded) answers.
  test('a caller that gives 2 s is answered by Redis, not the fallback, while Redis answers within it', async () => {
    const redis = await startRedis({ args: ['--enable-debug-command', 'local'] });
    await withApp(onRedis(redis.port), async (s) => {
      await ready(s);
      assert.equal(degraded(await s.call(tenant('edge', 'warm'))), false);
      const sleeping = redis.cli('DEBUG', 'SLEEP', '0.3');
      await waitUntilRedisBusy(redis.port);
      const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => callWithin(s, tenant('edge', `slow-${i}`), 2000)));
      assert.equal(await sleeping, 'OK');
      assert.equal(answers.filter(degraded).length, 0);
      assert.deepEqual(
        answers.map((r) => r.overallCode),
        answers.map(() => Code.OK),
      );
      for (const r of answers) assert.equal(r.statuses[0].limitRemaining, 9);
    });
  });

  // Kept from before (the old code passed it too): the longer wait must still end before the
  // caller's own deadline.
  test('a hung Redis is abandoned before the caller gives up, even with a long store deadline', async () => {
    const redis = await startRedis();
    try {
      await withApp(onRedis(redis.port, { storeDeadlineMs: 5000, deadlineMarginMs: 20 }), async (s) => {
        await ready(s);
        assert.equal((await s.call(tenant('edge', 'warm'))).overallCode, Code.OK);
        redis.pause();
        const started = Date.now();
        const r = await callWithin(s, tenant('edge', 'y'), 200);
        assert.ok(Date.now() - started < 200);
        assert.ok(degraded(r));
        redis.resume();
      });
    } finally {
      redis.resume();
    }
  });
});

describe('the over-limit cache', () => {
  // Defect 8: a cached denial reported the request's other limits as remaining 0, reset 0.
  // Issue 17: a cached denial answered the request's other descriptors with limit_remaining 0 (the
  // RLS answer cannot say "unknown"), a wrong answer for a client with budget left.
  test('a request with a cached denial and other limits asks Redis: every status exact, nothing consumed', async () => {
    const redis = await startRedis();
    const dir = configDir({
      multi:
        'descriptors:\n  - key: route\n    rate_limit: { unit: hour, requests_per_unit: 100 }\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 1 }\n',
    });
    await withApp(onRedis(redis.port, { configPaths: [dir] }), async (s) => {
      await ready(s);
      const req = { domain: 'multi', descriptors: [d(['route', '/a']), d(['tenant', 't'])] };
      assert.equal((await s.call(req)).overallCode, Code.OK);
      for (let i = 0; i < 3; i++) {
        const denied = await s.call(req);
        assert.equal(denied.overallCode, Code.OVER_LIMIT);
        assert.equal(degraded(denied), false);
        assert.deepEqual([denied.statuses[0].code, denied.statuses[0].limitRemaining], [Code.OK, 99]);
        assert.notEqual(denied.statuses[0].durationUntilReset, undefined);
        assert.deepEqual([denied.statuses[1].code, denied.statuses[1].limitRemaining], [Code.OVER_LIMIT, 0]);
        assert.equal(denied.dynamicMetadata?.unknownRemaining, undefined);
      }
      assert.equal(await cacheHits(s), 0);

      // A request of the denied key alone is answered from the cache, exactly.
      const alone = await s.call({ domain: 'multi', descriptors: [d(['tenant', 't'])] });
      assert.equal(await cacheHits(s), 1);
      assert.deepEqual([alone.overallCode, alone.statuses[0].limitRemaining], [Code.OVER_LIMIT, 0]);
      assert.ok((alone.statuses[0].durationUntilReset?.seconds ?? 0) > 0);
      assert.equal(alone.dynamicMetadata?.unknownRemaining, undefined);
    });
  });

  // Defect 7b: denials cached under the old limits outlived a config reload.
  test('a config reload forgets cached denials', async () => {
    const redis = await startRedis();
    const dir = configDir({ reload: 'descriptors:\n  - key: tenant\n    rate_limit: { unit: day, requests_per_unit: 2 }\n' });
    await withApp(onRedis(redis.port, { configPaths: [dir] }), async (s) => {
      await ready(s);
      const req = tenant('reload', 'r');
      const codes = [];
      for (let i = 0; i < 4; i++) codes.push((await s.call(req)).overallCode);
      assert.deepEqual(codes, [Code.OK, Code.OK, Code.OVER_LIMIT, Code.OVER_LIMIT]);
      assert.equal(await cacheHits(s), 1);

      fs.writeFileSync(path.join(dir, 'reload.yaml'), 'domain: reload\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: day, requests_per_unit: 5 }\n');
      s.app.reloadConfig();
      const after = await s.call(req);
      assert.deepEqual([after.overallCode, after.statuses[0].currentLimit?.requestsPerUnit, after.statuses[0].limitRemaining], [Code.OK, 5, 2]);
      assert.equal(degraded(after), false);
    });
  });
});

describe('Redis down: explain and answers follow the fallback policy (defect 8)', () => {
  const settings = async () => onRedis(await freePort(), { fallbackPolicy: 'allow', fallbackDomainPolicies: ['pay=deny'], responseHeadersEnabled: true });
  const explain = (s: Running, domain: string) =>
    s.admin('/explain', { method: 'POST', body: JSON.stringify({ domain, descriptors: [{ entries: [{ key: 'tenant', value: 'x' }] }] }) });

  // The old explain always peeked at the local fallback and showed its made-up numbers.
  test('explain: deny → 503; allow → degraded with unknown remaining', async () => {
    await withApp(await settings(), async (s) => {
      const denied = await explain(s, 'pay');
      assert.deepEqual([denied.status, ((await denied.json()) as { code: string }).code], [503, 'UNAVAILABLE']);

      const res = await explain(s, 'edge');
      assert.equal(res.status, 200);
      const out = (await res.json()) as { degraded: { policy: string } | null; descriptors: Record<string, unknown>[] };
      assert.equal(out.degraded?.policy, 'allow');
      const { remainingKnown, remaining, resetMs } = out.descriptors[0];
      assert.deepEqual({ remainingKnown, remaining, resetMs }, { remainingKnown: false, remaining: null, resetMs: null });
    });
  });

  // The old allow policy answered remaining = the full limit, reset 0, and put that in headers.
  test('allow: statuses unknown and no RateLimit-Remaining header, even with response headers on', async () => {
    await withApp(await settings(), async (s) => {
      const r = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'x']), d(['tenant', 'y'])] });
      assert.equal(r.overallCode, Code.OK);
      assert.ok(degraded(r));
      assert.equal(r.dynamicMetadata?.degradedPolicy, 'allow');
      for (const i of [0, 1]) {
        assert.equal(r.statuses[i].currentLimit?.requestsPerUnit, 10);
        assertUnknown(r, i);
      }
      assert.equal(header(r, 'RateLimit-Remaining'), undefined);
      assert.equal(header(r, 'RateLimit-Reset'), undefined);
    });
  });
});
