import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitRequest,
  type RateLimitResponse,
  type RateLimitResponse_DescriptorStatus as Status,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitServiceClient,
} from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { loadSettings, SettingsError } from '../../src/settings';
import { callRls, d } from '../support/app';
import { type ServerProcess, spawnServer } from '../support/process';
import { counterNames, type Cluster, type RedisNode, type SentinelSet, startCluster, startRedis, startSentinelSet, stopAll } from '../support/redis';
import { awayFromWindowEdge, clearOfSecondEdge } from '../support/time';

// envoyproxy/ratelimit's integration scenarios (test/integration/integration_test.go), each run
// against a spawned sluice process given the environment upstream's test gives upstream (its
// RUNTIME_* layout, REDIS_*, LOCAL_CACHE_SIZE_IN_BYTES, CACHE_KEY_PREFIX,
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; ports are sluice's free ones), twice:
// - COMPAT_MODE=upstream: upstream's answers, field by field (code, current_limit,
//   limit_remaining, duration_until_reset, no headers) and its local-cache series;
// - native: the same, except sluice's documented differences (docs/migrating.md): a request
//   denied by one descriptor consumes nothing of the others, and OVER_LIMIT carries Retry-After.
// Per-second limits on their own Redis run the basic scenario once more (REDIS_PERSECOND*; the
// split's own edge cases are in test/system/redis-persecond.test.ts). Not here: gRPC certificate reload, TLS to Redis, memcached, xDS (their own suites).

type Mode = 'upstream' | 'native';
const MODES: Mode[] = ['upstream', 'native'];

const CONFIG: Record<string, string> = {
  'basic.yaml': `domain: basic
descriptors:
  - key: key1
    rate_limit: { unit: second, requests_per_unit: 50 }
  - key: key1_local
    rate_limit: { unit: second, requests_per_unit: 50 }
  - key: one_per_minute
    rate_limit: { unit: minute, requests_per_unit: 1 }
`,
  'another.yaml': `domain: another
descriptors:
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: key2_local
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key3_local
    rate_limit: { unit: hour, requests_per_unit: 10 }
`,
  'share_threshold.yaml': `domain: share-threshold-test
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: files_no_share
    value: files_no_share/*
    rate_limit: { unit: hour, requests_per_unit: 10 }
`,
};

const RELOAD = `domain: reload
descriptors:
  - key: key1
    rate_limit: { unit: second, requests_per_unit: 50 }
  - key: block
    rate_limit: { unit: second, requests_per_unit: 0 }
`;

// How far from a second's edges each call starts (see call()).
const SECOND_EDGE_MS = 50;
const PERIOD_S: Partial<Record<Unit, number>> = { [Unit.SECOND]: 1, [Unit.MINUTE]: 60, [Unit.HOUR]: 3600 };

// upstream's runtime layout: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
function runtimeRoot(): { root: string; configDir: string } {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-compat-'));
  const configDir = path.join(root, 'ratelimit', 'config');
  fs.mkdirSync(configDir, { recursive: true });
  for (const [name, text] of Object.entries(CONFIG)) fs.writeFileSync(path.join(configDir, name), text);
  return { root, configDir };
}

interface Sluice {
  server: ServerProcess;
  configDir: string;
  call(domain: string, descriptors: [string, string][][]): Promise<{ response: RateLimitResponse; sentAt: number; answeredAt: number }>;
  metric(name: string, labels?: string): Promise<number>;
  stop(): Promise<void>;
}

// A sluice process with the environment upstream's test gives upstream, plus COMPAT_MODE; ready
// (one real decision round-tripped) before it is used. One serving process, as upstream is, unless
// env says otherwise: WORKERS=auto would start a primary and a worker per core (on one core it is
// already one process), which triples the start-up these scenarios pay 30 times; workers are
// tested in workers.test.ts, and 'basic config with local cache' keeps auto here.
async function start(mode: Mode, env: Record<string, string>): Promise<Sluice> {
  const { root, configDir } = runtimeRoot();
  const upstreamEnv = { RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit', RUNTIME_APPDIRECTORY: 'config', USE_STATSD: 'false', WORKERS: '1', ...env };
  const server = await spawnServer([], mode === 'upstream' ? { ...upstreamEnv, COMPAT_MODE: 'upstream' } : upstreamEnv);
  const http = (p: string) => httpText(server.httpPort, p);
  while ((await http('/readyz')) !== 'OK') await new Promise((r) => setTimeout(r, 20));
  const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
  return {
    server,
    configDir,
    async call(domain, descriptors) {
      const request: Partial<RateLimitRequest> = { domain, descriptors: descriptors.map((e) => d(...e)), hitsAddend: 1 };
      // duration_until_reset is whole seconds by a clock read somewhere within a call (Redis' for
      // a decision, an earlier call's for a remembered denial): calls stay clear of the seconds'
      // edges, so that the seconds expected from this call's own clock readings are exact.
      await clearOfSecondEdge(SECOND_EDGE_MS);
      const sentAt = Date.now();
      const response = await callRls(client, request);
      return { response, sentAt, answeredAt: Date.now() };
    },
    async metric(name, labels = '') {
      const text = await http('/metrics');
      const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
      return line === undefined ? 0 : Number(line.split(' ').pop());
    },
    async stop() {
      client.close();
      assert.equal(await server.stop(), 0);
    },
  };
}

// A GET's body, on a connection of its own that the server closes after answering: fetch would
// keep it open, and a stop with an idle keep-alive client waits a second of quiet before closing
// it (server/http-drain.ts), a second each of this file's 30 stops would pay.
function httpText(port: number, p: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve(Buffer.concat(chunks).toString()));
      })
      .on('error', reject);
  });
}

interface Expected {
  code: Code;
  limit?: [requestsPerUnit: number, unit: Unit];
  remaining: number;
}

// A status as upstream builds it: current_limit and duration_until_reset (whole seconds to the end
// of the unit's window, by the clock: within what the clock said before and after the call) only
// when a limit applies.
function assertStatus(actual: Status, want: Expected, at: { sentAt: number; answeredAt: number }, where: string): void {
  const { durationUntilReset, ...rest } = actual;
  const currentLimit = want.limit === undefined ? undefined : { name: '', requestsPerUnit: want.limit[0], unit: want.limit[1] };
  assert.deepEqual(rest, { code: want.code, currentLimit, limitRemaining: want.remaining, quota: undefined }, where);
  if (want.limit === undefined) return assert.equal(durationUntilReset, undefined, `${where}: no duration_until_reset`);
  const period = PERIOD_S[want.limit[1]]!;
  const left = (ms: number) => period - (Math.floor(ms / 1000) % period);
  const seconds = durationUntilReset?.seconds;
  assert.ok(
    seconds !== undefined && seconds >= left(at.answeredAt) && seconds <= left(at.sentAt) && durationUntilReset?.nanos === 0,
    `${where}: duration_until_reset ${JSON.stringify(durationUntilReset)}`,
  );
}

function assertAnswer(mode: Mode, got: Awaited<ReturnType<Sluice['call']>>, overall: Code, statuses: Expected[], where: string): void {
  const r = got.response;
  assert.equal(r.overallCode, overall, `${where}: overall`);
  assert.equal(r.statuses.length, statuses.length, `${where}: statuses`);
  statuses.forEach((want, i) => assertStatus(r.statuses[i], want, got, `${where}, status ${i}`));
  assert.equal(r.dynamicMetadata, undefined, `${where}: dynamic metadata`);
  // Upstream adds no header; native mode tells a denied client when to retry.
  const headers = r.responseHeadersToAdd.map((h) => h.key);
  assert.deepEqual(headers, mode === 'native' && overall === Code.OVER_LIMIT ? ['Retry-After'] : [], `${where}: headers`);
}

interface BasicOptions {
  localCache: boolean;
  stopIncrement: boolean;
}

// testBasicBaseConfig, minus its 2 s sleep (durations are checked on every status instead).
async function basicScenario(s: Sluice, mode: Mode, o: BasicOptions): Promise<void> {
  const k = (key: string) => (o.localCache ? `${key}_local` : key);
  assertAnswer(mode, await s.call('foo', [[[k('hello'), 'world']]]), Code.OK, [{ code: Code.OK, remaining: 0 }], 'unknown domain');
  assertAnswer(mode, await s.call('basic', [[[k('key1'), 'foo']]]), Code.OK, [{ code: Code.OK, limit: [50, Unit.SECOND], remaining: 49 }], 'key1');

  await awayFromWindowEdge(3_600_000, 5_000);
  await awayFromWindowEdge(60_000, 5_000);
  const v1 = String(Math.random());
  for (let i = 0; i < 25; i++) {
    const over = i >= 20;
    const want = { code: over ? Code.OVER_LIMIT : Code.OK, limit: [20, Unit.MINUTE] as [number, Unit], remaining: over ? 0 : 19 - i };
    assertAnswer(mode, await s.call('another', [[[k('key2'), v1]]]), want.code, [want], `key2 alone, request ${i}`);
  }

  const v2 = String(Math.random());
  for (let i = 0; i < 15; i++) {
    const over = i >= 10;
    // Upstream counts key2 on every request; a request that goes over counts nothing with
    // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, and in sluice's native mode (all-or-nothing).
    const counted = mode === 'upstream' && !o.stopIncrement;
    const key2 = over && !counted ? 10 : 19 - i;
    assertAnswer(
      mode,
      await s.call('another', [[[k('key2'), v2]], [[k('key3'), v2]]]),
      over ? Code.OVER_LIMIT : Code.OK,
      [
        { code: Code.OK, limit: [20, Unit.MINUTE], remaining: key2 },
        { code: over ? Code.OVER_LIMIT : Code.OK, limit: [10, Unit.HOUR], remaining: over ? 0 : 9 - i },
      ],
      `key2 + key3, request ${i}`,
    );
  }

  const rule = (key: string) => `{domain="another",key1="${k(key)}",key2=""}`;
  assert.equal(await s.metric('ratelimit_service_rate_limit_total_hits', rule('key2')), 40);
  assert.equal(await s.metric('ratelimit_service_rate_limit_over_limit', rule('key2')), 5);
  assert.equal(await s.metric('ratelimit_service_rate_limit_total_hits', rule('key3')), 15);
  assert.equal(await s.metric('ratelimit_service_rate_limit_over_limit', rule('key3')), 5);
  // Upstream's local cache: the 4 requests after each key's first denial are answered from it. In
  // native mode the over-limit cache is on by default.
  const cached = o.localCache || mode === 'native' ? 4 : 0;
  assert.equal(await s.metric('ratelimit_service_rate_limit_over_limit_with_local_cache', rule('key2')), cached);
  assert.equal(await s.metric('ratelimit_service_rate_limit_over_limit_with_local_cache', rule('key3')), cached);
  // Upstream's gauges at the end of its test: hitCount i-6 = 8, missCount i+34 = 48 (i = 14).
  if (o.localCache) {
    assert.equal(await s.metric('ratelimit_localcache_hitCount'), 8);
    assert.equal(await s.metric('ratelimit_localcache_missCount'), 48);
  }
}

// testShareThreshold.
async function shareThresholdScenario(s: Sluice, mode: Mode): Promise<void> {
  for (let i = 0; i < 10; i++) await s.call('share-threshold-test', [[['files', 'files/a.pdf']]]);
  const shared = await s.call('share-threshold-test', [[['files', 'files/b.csv']]]);
  assertAnswer(mode, shared, Code.OVER_LIMIT, [{ code: Code.OVER_LIMIT, limit: [10, Unit.HOUR], remaining: 0 }], 'files/b.csv shares files/*');
  for (let i = 0; i < 10; i++) {
    const own = await s.call('share-threshold-test', [[['files_no_share', `files_no_share/${Math.random()}`]]]);
    assertAnswer(mode, own, Code.OK, [{ code: Code.OK, limit: [10, Unit.HOUR], remaining: 9 }], `files_no_share ${i}`);
  }
}

// testConfigReload: a new file is served once loaded, and its removal reloads too; both counted in
// upstream's config_load_success.
async function reloadScenario(s: Sluice, mode: Mode): Promise<void> {
  assertAnswer(mode, await s.call('reload', [[['block', 'foo']]]), Code.OK, [{ code: Code.OK, remaining: 0 }], 'reload domain unknown');
  const loads = await s.metric('ratelimit_service_config_load_success');
  const file = path.join(s.configDir, 'reload.yaml');
  fs.writeFileSync(file, RELOAD);
  await s.server.waitForLog((l) => l.event === 'config_loaded' && (l.domains as string[]).includes('reload'));
  assert.ok((await s.metric('ratelimit_service_config_load_success')) > loads);
  assertAnswer(mode, await s.call('reload', [[['key1', 'foo']]]), Code.OK, [{ code: Code.OK, limit: [50, Unit.SECOND], remaining: 49 }], 'reloaded key1');
  const reloaded = await s.metric('ratelimit_service_config_load_success');
  const seen = s.server.logs.length;
  fs.rmSync(file);
  await s.server.waitForLog((l) => l.event === 'config_loaded' && s.server.logs.indexOf(l) >= seen);
  assert.ok((await s.metric('ratelimit_service_config_load_success')) > reloaded);
}

async function flush(nodes: RedisNode[]): Promise<void> {
  for (const n of nodes) await n.cli('FLUSHALL');
}

describe('envoyproxy/ratelimit integration scenarios, COMPAT_MODE=upstream and native', () => {
  let redis: RedisNode;
  let authRedis: RedisNode;
  let cluster: Cluster;
  let sentinel: SentinelSet;
  let perSecond: RedisNode;
  let authPerSecond: RedisNode;

  before(async () => {
    const auth = { args: ['--requirepass', 'password123'] };
    [redis, authRedis, cluster, sentinel, perSecond, authPerSecond] = await Promise.all([
      startRedis(),
      startRedis(auth),
      startCluster(),
      startSentinelSet(),
      startRedis(),
      startRedis(auth),
    ]);
  });
  after(() => stopAll());

  const single = () => ({ REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: `localhost:${redis.port}` });

  for (const mode of MODES) {
    describe(`COMPAT_MODE=${mode}`, () => {
      const run = async (env: Record<string, string>, scenario: (s: Sluice) => Promise<void>, nodes: () => Promise<RedisNode[]> = async () => [redis]) => {
        await flush(await nodes());
        const s = await start(mode, env);
        try {
          const line = await s.server.waitForLog((l) => l.event === 'compat_mode');
          assert.equal(line.mode, mode);
          await scenario(s);
        } finally {
          await s.stop();
        }
      };
      const basic = (o: BasicOptions) => (s: Sluice) => basicScenario(s, mode, o);

      test('basic config', () => run(single(), basic({ localCache: false, stopIncrement: false })));
      // WORKERS=auto (a primary and a worker per core where there are several): the local-cache
      // series and gauges read through the primary's /metrics.
      test('basic config with local cache', () =>
        run({ ...single(), LOCAL_CACHE_SIZE_IN_BYTES: '1000', WORKERS: 'auto' }, basic({ localCache: true, stopIncrement: false })));
      test('basic config with cache prefix: every key carries it', () =>
        run({ ...single(), CACHE_KEY_PREFIX: 'prefix:' }, async (s) => {
          await basic({ localCache: false, stopIncrement: false })(s);
          const keys = (await redis.cli('KEYS', '*')).split('\n').filter((k) => k !== '' && !k.includes('replicas'));
          assert.ok(keys.length >= 3, `keys: ${keys.join(', ')}`);
          for (const key of keys) assert.ok(key.startsWith('prefix:'), key);
        }));
      test('stop cache key increment when over limit', () =>
        run({ ...single(), STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' }, basic({ localCache: false, stopIncrement: true })));
      test('local cache and stop cache key increment when over limit', () =>
        run(
          { ...single(), LOCAL_CACHE_SIZE_IN_BYTES: '1000', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' },
          basic({ localCache: true, stopIncrement: true }),
        ));
      test('Redis auth', () =>
        run(
          { REDIS_SOCKET_TYPE: 'tcp', REDIS_URL: `localhost:${authRedis.port}`, REDIS_AUTH: 'password123', LOCAL_CACHE_SIZE_IN_BYTES: '1000' },
          basic({ localCache: true, stopIncrement: false }),
          async () => [authRedis],
        ));
      // TestBasicAuthConfig's four subtests in turn: both Redis with a password, nothing flushed
      // between them, a new sluice each (issue 37: the count it lost there was a minute boundary
      // crossed mid-test by a slow harness; with REDIS_PERSECOND, the per-second cache's lookups
      // were missing from missCount).
      test("Redis auth: upstream's four subtests in sequence, a sluice each, nothing flushed", async () => {
        for (const [split, localCache] of [
          [false, false],
          [true, false],
          [false, true],
          [true, true],
        ]) {
          const env = {
            REDIS_SOCKET_TYPE: 'tcp',
            REDIS_URL: `localhost:${authRedis.port}`,
            REDIS_AUTH: 'password123',
            REDIS_PERSECOND: String(split),
            REDIS_PERSECOND_SOCKET_TYPE: 'tcp',
            REDIS_PERSECOND_URL: `localhost:${authPerSecond.port}`,
            REDIS_PERSECOND_AUTH: 'password123',
            // Upstream's default 0 is not given, as upstream's test gives it no variable.
            ...(localCache ? { LOCAL_CACHE_SIZE_IN_BYTES: '1000' } : {}),
          };
          const s = await start(mode, env);
          try {
            await basic({ localCache, stopIncrement: false })(s);
          } finally {
            await s.stop();
          }
        }
      });
      test('Redis Cluster', () =>
        run(
          { REDIS_TYPE: 'cluster', REDIS_URL: cluster.nodes.map((n) => `localhost:${n.port}`).join(',') },
          basic({ localCache: false, stopIncrement: false }),
          () => cluster.primaries(),
        ));
      test('Redis Sentinel', () =>
        run(
          { REDIS_TYPE: 'sentinel', REDIS_URL: `${sentinel.masterName},localhost:${sentinel.sentinel.port}` },
          basic({ localCache: false, stopIncrement: false }),
          async () => [sentinel.primary],
        ));
      test('config reload', () => run(single(), (s) => reloadScenario(s, mode)));
      test('share threshold', () => run(single(), (s) => shareThresholdScenario(s, mode)));
      test('per-second limits on their own Redis: the same answers; key1 (per second) there, key2 and key3 on the main one', () =>
        run(
          { ...single(), REDIS_PERSECOND: 'true', REDIS_PERSECOND_SOCKET_TYPE: 'tcp', REDIS_PERSECOND_URL: `localhost:${perSecond.port}` },
          async (s) => {
            await basic({ localCache: false, stopIncrement: false })(s);
            const counters = async (n: RedisNode) => (await counterNames(n, '*')).filter((key) => /key\d/.test(key));
            // key1's counters live one second, and the scenario takes longer than that: read the
            // per-second Redis right after a fresh key1 call (again, if that call landed at the very
            // end of its window and the key expired before KEYS ran).
            let second: string[] = [];
            for (let attempt = 0; attempt < 5 && second.length === 0; attempt++) {
              assertAnswer(
                mode,
                await s.call('basic', [[['key1', `probe${attempt}`]]]),
                Code.OK,
                [{ code: Code.OK, limit: [50, Unit.SECOND], remaining: 49 }],
                'key1 probe',
              );
              second = await counters(perSecond);
            }
            const main = await counters(redis);
            assert.ok(second.length > 0 && second.every((key) => key.includes('key1')), `per-second Redis: ${second.join(', ')}`);
            assert.ok(main.length > 0 && main.every((key) => /key[23]/.test(key)), `main Redis: ${main.join(', ')}`);
          },
          async () => [redis, perSecond],
        ));
    });
  }
});

describe('COMPAT_MODE settings', () => {
  const settings = (env: Record<string, string>) => loadSettings([], env);

  test("upstream's defaults; settings given explicitly win", () => {
    const pick = (env: Record<string, string>) => {
      const s = settings(env);
      return { c: s.countDeniedHits, r: s.retryAfterEnabled, t: s.redisTimeoutMs, d: s.storeDeadlineMs, l: s.leaseAutoThreshold, o: s.overLimitCacheSize };
    };
    assert.deepEqual(pick({}), { c: false, r: true, t: 1000, d: 100, l: 1000, o: 100_000 });
    assert.deepEqual(pick({ COMPAT_MODE: 'upstream' }), { c: true, r: false, t: 10_000, d: 10_000, l: 0, o: 0 });
    assert.deepEqual(pick({ COMPAT_MODE: 'upstream', REDIS_TIMEOUT: '2s' }), { c: true, r: false, t: 2000, d: 2000, l: 0, o: 0 });
    assert.deepEqual(
      pick({ COMPAT_MODE: 'upstream', RETRY_AFTER_HEADER_ENABLED: 'true', STORE_DEADLINE: '50ms', LEASE_AUTO_THRESHOLD: '500', OVER_LIMIT_CACHE_SIZE: '10' }),
      { c: true, r: true, t: 10_000, d: 50, l: 500, o: 10 },
    );
    assert.equal(loadSettings(['--compat-mode', 'upstream'], {}).countDeniedHits, true);
  });

  test('LOCAL_CACHE_SIZE_IN_BYTES sizes the over-limit cache in both modes; STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT stops counting', () => {
    // 512 KiB at least (upstream's cache library), 174 bytes an entry.
    assert.equal(settings({ COMPAT_MODE: 'upstream', LOCAL_CACHE_SIZE_IN_BYTES: '1000' }).overLimitCacheSize, 3013);
    assert.equal(settings({ LOCAL_CACHE_SIZE_IN_BYTES: '17400000' }).overLimitCacheSize, 100_000);
    assert.equal(settings({ LOCAL_CACHE_SIZE_IN_BYTES: '0' }).overLimitCacheSize, 0);
    assert.equal(settings({ COMPAT_MODE: 'upstream', STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' }).countDeniedHits, false);
    assert.equal(settings({ STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true' }).countDeniedHits, false);
  });

  test('contradictions and bad values are errors naming the settings', () => {
    const fails = (env: Record<string, string>, message: RegExp) =>
      assert.throws(
        () => settings(env),
        (err: Error) => err instanceof SettingsError && message.test(err.message),
      );
    fails({ COMPAT_MODE: 'envoy' }, /^COMPAT_MODE: expected one of native, upstream, got 'envoy'$/);
    fails(
      { STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true', COUNT_DENIED_HITS: 'true' },
      /STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true cannot be combined with COUNT_DENIED_HITS=true/,
    );
    fails({ LOCAL_CACHE_SIZE_IN_BYTES: '1000', OVER_LIMIT_CACHE_SIZE: '5' }, /OVER_LIMIT_CACHE_SIZE .* and LOCAL_CACHE_SIZE_IN_BYTES .* set one of them/);
    fails({ LOCAL_CACHE_SIZE_IN_BYTES: '1kb' }, /^LOCAL_CACHE_SIZE_IN_BYTES: expected an integer/);
  });
});
