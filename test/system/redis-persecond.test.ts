import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ManualClock } from '../../src/clock';
import { RateLimitResponse_Code as Code, type RateLimitResponse } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { describeSettings, loadSettings, redisStackOptions, upstreamSettingsNotRead } from '../../src/settings';
import { createPerSecondSplit } from '../../src/store/compose';
import type { StoreEvents } from '../../src/store/events';
import { PER_SECOND_LABEL } from '../../src/store/persecond';
import { RedisStore } from '../../src/store/redis';
import type { Store } from '../../src/store/store';
import { closing, d, type Running, startApp } from '../support/app';
import { runCli, spawnServer } from '../support/process';
import { counterNames, freePort, type RedisNode, startRedis, stopAll } from '../support/redis';
import { recordingEvents, redisClient, until } from '../support/stack';
import { awayFromWindowEdge } from '../support/time';

// REDIS_PERSECOND (issue 17): limits of one second or less are counted on their own Redis, the
// others on REDIS_URL's, as envoyproxy/ratelimit does; a request with both stays all-or-nothing
// (store/persecond.ts: the per-second part first, the main part only read when it denies, the
// per-second hits given back when the main part denies). Two real redis-servers per suite.

const CONFIG = [
  'domain: ps',
  'descriptors:',
  '  - key: second',
  '    rate_limit: { unit: second, requests_per_unit: 3 }',
  '  - key: minute',
  '    rate_limit: { unit: minute, requests_per_unit: 5 }',
].join('\n');

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-persecond-'));
  fs.writeFileSync(path.join(dir, 'ps.yaml'), CONFIG);
  return dir;
}

// The counters of domain ps under `prefix` in one Redis (keys, or fields of window hashes), sorted.
async function counterKeys(node: RedisNode, prefix = 'sluice:'): Promise<string[]> {
  return (await counterNames(node, `${prefix}{ps|*`)).sort();
}

const SECOND_KEY = (value: string, prefix = 'sluice:') => `${prefix}{ps|second=${value}}|fixed_window:1000`;
const MINUTE_KEY = (value: string, prefix = 'sluice:') => `${prefix}{ps|minute=${value}}|fixed_window:60000`;

const both = (value: string) => ({ domain: 'ps', descriptors: [d(['second', value]), d(['minute', value])] });
const statuses = (r: RateLimitResponse) => r.statuses.map((s) => [s.code === Code.OK ? 'OK' : 'OVER', s.limitRemaining]);
const isDegraded = (r: RateLimitResponse) => r.responseHeadersToAdd.some((h) => h.key === 'x-ratelimit-degraded' && h.value === 'true');

let main: RedisNode;
let second: RedisNode;
before(async () => {
  [main, second] = await Promise.all([startRedis(), startRedis()]);
});
after(() => stopAll());

describe('REDIS_PERSECOND settings', () => {
  const env = (extra: NodeJS.ProcessEnv) => ({ REDIS_URL: '127.0.0.1:6380', ...extra });

  test('upstream names and sluice flags are read; REDIS_PERSECOND implies the Redis store', () => {
    const s = loadSettings(
      [],
      env({
        REDIS_PERSECOND: 'true',
        REDIS_PERSECOND_URL: 'localhost:6381',
        REDIS_PERSECOND_SOCKET_TYPE: 'tcp',
        REDIS_PERSECOND_TYPE: 'SINGLE',
        REDIS_PERSECOND_AUTH: 'pw',
        REDIS_PERSECOND_TLS: 'true',
        REDIS_PERSECOND_POOL_SIZE: '4',
        REDIS_PERSECOND_TIMEOUT: '2s',
      }),
    );
    assert.equal(s.store, 'redis');
    assert.deepEqual(
      [
        s.redisPerSecond,
        s.redisPerSecondUrl,
        s.redisPerSecondType,
        s.redisPerSecondAuth,
        s.redisPerSecondTls,
        s.redisPerSecondPoolSize,
        s.redisPerSecondSocketType,
        s.redisPerSecondTimeoutMs,
      ],
      [true, 'localhost:6381', 'single', 'pw', true, 4, 'tcp', 2000],
    );
    const f = loadSettings(
      [
        '--store',
        'redis',
        '--redis-persecond',
        '--redis-persecond-url',
        '/tmp/ps.sock',
        '--redis-persecond-socket-type',
        'unix',
        '--redis-persecond-sentinel-auth',
        'spw',
      ],
      {},
    );
    assert.deepEqual([f.redisPerSecond, f.redisPerSecondUrl, f.redisPerSecondSocketType, f.redisPerSecondSentinelAuth], [true, '/tmp/ps.sock', 'unix', 'spw']);
  });

  test('secrets are redacted and only the unsupported per-second tuning is reported as not read', () => {
    const s = loadSettings(
      [],
      env({ REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: 'redis://user:secret@host:6381', REDIS_PERSECOND_AUTH: 'pw', REDIS_PERSECOND_SENTINEL_AUTH: 'spw' }),
    );
    const shown = describeSettings(s);
    assert.deepEqual(
      [shown.redisPerSecondUrl, shown.redisPerSecondAuth, shown.redisPerSecondSentinelAuth],
      ['redis://user:[redacted]@host:6381', '[redacted]', '[redacted]'],
    );
    const notRead = upstreamSettingsNotRead({
      REDIS_PERSECOND: 'true',
      REDIS_PERSECOND_URL: 'x',
      REDIS_PERSECOND_SOCKET_TYPE: 'tcp',
      REDIS_PERSECOND_TIMEOUT: '1s',
      REDIS_PERSECOND_PIPELINE_WINDOW: '150us',
      REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: 'WAIT',
    });
    assert.deepEqual(notRead, ['REDIS_PERSECOND_PIPELINE_WINDOW', 'REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR']);
  });

  const refusals: [string, NodeJS.ProcessEnv, RegExp][] = [
    ['no URL', { REDIS_PERSECOND: 'true' }, /^REDIS_PERSECOND needs REDIS_PERSECOND_URL/],
    ['the memory store', { STORE: 'memory', REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: 'localhost:6381' }, /^REDIS_PERSECOND needs STORE=redis/],
    [
      'multi-region',
      { REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: 'localhost:6381', GLOBAL_REDIS_URL: 'g:6379', REGION: 'eu' },
      /^REDIS_PERSECOND cannot be combined with GLOBAL_REDIS_URL/,
    ],
    ['an unknown socket type', { REDIS_PERSECOND_SOCKET_TYPE: 'udp' }, /^REDIS_PERSECOND_SOCKET_TYPE: expected tcp or unix, got 'udp'/],
    [
      'unix with a network address',
      { REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: 'localhost:6381', REDIS_PERSECOND_SOCKET_TYPE: 'unix' },
      /^REDIS_PERSECOND_SOCKET_TYPE=unix but REDIS_PERSECOND_URL is a network address \('localhost:6381'\); set tcp/,
    ],
    [
      'tcp with a socket path',
      { REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: '/var/run/ps.sock', REDIS_PERSECOND_SOCKET_TYPE: 'tcp' },
      /^REDIS_PERSECOND_SOCKET_TYPE=tcp but REDIS_PERSECOND_URL is a unix socket path \('\/var\/run\/ps.sock'\); set unix/,
    ],
    ['a bad pool size', { REDIS_PERSECOND_POOL_SIZE: '0' }, /^REDIS_PERSECOND_POOL_SIZE: expected an integer 1\.\./],
    ['a bad type', { REDIS_PERSECOND_TYPE: 'ring' }, /^REDIS_PERSECOND_TYPE: expected one of single, sentinel, cluster/],
  ];
  for (const [what, extra, message] of refusals) {
    test(`refused: ${what}`, () => assert.throws(() => loadSettings([], env(extra)), { name: 'SettingsError', message }));
  }

  test('a bad REDIS_PERSECOND_URL stops the process at start, naming the per-second settings', async () => {
    const r = await runCli(['serve', '--config', configDir()], {
      REDIS_URL: `127.0.0.1:${main.port}`,
      REDIS_PERSECOND: 'true',
      REDIS_PERSECOND_URL: 'redis://:6381',
      LOG_LEVEL: 'silent',
    });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^sluice: .*REDIS_PERSECOND_URL: 'redis:\/\/:6381' has no host; expected redis:\/\//);
    const cluster = await runCli(['serve', '--config', configDir()], {
      REDIS_URL: `127.0.0.1:${main.port}`,
      REDIS_PERSECOND: 'true',
      REDIS_PERSECOND_TYPE: 'cluster',
      REDIS_PERSECOND_URL: 'redis://u:p@h:1',
      LOG_LEVEL: 'silent',
    });
    assert.equal(cluster.code, 2);
    assert.match(cluster.stderr, /REDIS_PERSECOND_URL: .* has a user or password \(use REDIS_PERSECOND_AUTH with REDIS_PERSECOND_TYPE=cluster\)/);
  });
});

describe('a sluice process started with upstream environment', () => {
  test('per-second counters go to REDIS_PERSECOND_URL, the others to REDIS_URL; readiness needs both', async () => {
    const port = await freePort();
    const server = await spawnServer(['--config', configDir()], {
      // One process, so that /metrics counts every call it answered.
      WORKERS: '1',
      REDIS_SOCKET_TYPE: 'tcp',
      CACHE_KEY_PREFIX: 'proc:',
      REDIS_URL: `127.0.0.1:${main.port}`,
      REDIS_PERSECOND: 'true',
      REDIS_PERSECOND_SOCKET_TYPE: 'tcp',
      REDIS_PERSECOND_URL: `127.0.0.1:${port}`,
    });
    try {
      // Every REDIS_PERSECOND* name given is read (REDIS_SOCKET_TYPE is another matter).
      const notRead = server.logs.filter((l) => l.event === 'upstream_settings_not_read').flatMap((l) => l.names as string[]);
      assert.deepEqual(
        notRead.filter((n) => n.startsWith('REDIS_PERSECOND')),
        [],
      );
      const listening = server.logs.find((l) => l.event === 'listening')!;
      assert.match(String(listening.msg), new RegExp(`store redis 127\\.0\\.0\\.1:${main.port}, per-second limits on redis 127\\.0\\.0\\.1:${port},`));
      // No per-second Redis yet: the main one alone does not make the process ready.
      const health = () => fetch(`http://127.0.0.1:${server.httpPort}/healthcheck`, closing());
      const notReady = await health();
      assert.equal(notReady.status, 500);
      assert.match(await notReady.text(), /^NOT_SERVING: store not ready/);
      const late = await startRedis({ port });
      await until('ready once both Redis answer', async () => (await health()).status === 200);
      const body = JSON.stringify({ domain: 'ps', descriptors: [{ entries: [{ key: 'second', value: 'p' }] }, { entries: [{ key: 'minute', value: 'p' }] }] });
      // The per-second counter lives to the end of its second: ask in the first half of one, so
      // that it is still there to be listed.
      await awayFromWindowEdge(1000, 500);
      const answer = await fetch(`http://127.0.0.1:${server.httpPort}/json`, closing({ method: 'POST', body }));
      assert.equal(answer.status, 200);
      assert.deepEqual(await counterKeys(late, 'proc:'), [SECOND_KEY('p', 'proc:')]);
      assert.deepEqual(await counterKeys(main, 'proc:'), [MINUTE_KEY('p', 'proc:')]);
      const metrics = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text();
      assert.match(metrics, /sluice_store_duration_seconds_count\{operation="persecond_decide",result="ok"\} [1-9]/);
      assert.match(metrics, /sluice_store_duration_seconds_count\{operation="decide",result="ok"\} [1-9]/);
    } finally {
      await server.stop();
    }
  });
});

// The app over both Redis with a manual clock (the scripts take its time), so that windows and
// counts are exact however slow the machine is.
describe('one request, two Redis: counts and all-or-nothing', () => {
  const clock = new ManualClock(Math.floor(Date.now() / 60_000) * 60_000 + 100);
  const reasons: string[] = [];
  let seen: ReturnType<typeof recordingEvents>['seen'];
  let app: Running;
  let store: Store;

  before(async () => {
    const recorded = recordingEvents();
    seen = recorded.seen;
    const events: StoreEvents = { ...recorded.events, degraded: (_policy, reason) => reasons.push(reason) };
    const redis = (node: RedisNode) =>
      new RedisStore({ clients: [redisClient(node.port)], cluster: false, explicitClock: clock, events, keyPrefix: 'sluice:' });
    const settings = loadSettings(['--store', 'redis']);
    store = createPerSecondSplit({
      main: redis(main),
      perSecond: redis(second),
      events,
      options: { ...redisStackOptions(settings), clock },
      perSecondStalledMs: 0,
    });
    await until('both Redis ready', () => store.ready());
    app = await startApp({ store: 'redis', configPaths: [configDir()] }, { store });
  });
  after(() => app?.stop());

  test('a request over its per-second limit consumes nothing of the per-minute budget', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await app.call(both('a'))).overallCode, Code.OK);
    const denied = await app.call(both('a'));
    assert.equal(denied.overallCode, Code.OVER_LIMIT);
    // The per-minute limit was read, not consumed: 2 left, as after the third request.
    assert.deepEqual(statuses(denied), [
      ['OVER', 0],
      ['OK', 2],
    ]);
    assert.deepEqual(await counterKeys(second), [SECOND_KEY('a')]);
    assert.deepEqual(await counterKeys(main), [MINUTE_KEY('a')]);
    clock.advance(1000);
    assert.deepEqual(statuses(await app.call(both('a'))), [
      ['OK', 2],
      ['OK', 1],
    ]);
  });

  test('a request over its per-minute limit gives back what its per-second limit took', async () => {
    assert.deepEqual(statuses(await app.call(both('a'))), [
      ['OK', 1],
      ['OK', 0],
    ]);
    const refundsBefore = seen.counts.refunded ?? 0;
    const denied = await app.call(both('a'));
    assert.equal(denied.overallCode, Code.OVER_LIMIT);
    // Reported as a denial on one Redis reports it: the per-second budget as before the request.
    assert.deepEqual(statuses(denied), [
      ['OK', 1],
      ['OVER', 0],
    ]);
    await until('the refund to reach the per-second Redis', () => (seen.counts.refunded ?? 0) === refundsBefore + 1);
    // That unit is back: exactly one more request fits in this second.
    const alone = { domain: 'ps', descriptors: [d(['second', 'a'])] };
    assert.deepEqual(statuses(await app.call(alone)), [['OK', 0]]);
    assert.deepEqual(statuses(await app.call(alone)), [['OVER', 0]]);
    assert.equal(seen.counts.refundError, undefined);
  });

  test('per-second Redis down: its limits fall back, the main Redis keeps deciding the others', async () => {
    clock.advance(1000);
    await second.stop();
    await until('the per-second stack to notice', () => store.degraded?.()?.startsWith(PER_SECOND_LABEL) === true);
    const answers: RateLimitResponse[] = [];
    for (let i = 0; i < 4; i++) answers.push(await app.call(both('b')));
    // The local fallback admits the per-second limit's 3 (one replica: its whole share); the
    // per-minute counter is Redis', exact, and untouched by the denied fourth request.
    assert.deepEqual(answers.map(statuses), [
      [
        ['OK', 2],
        ['OK', 4],
      ],
      [
        ['OK', 1],
        ['OK', 3],
      ],
      [
        ['OK', 0],
        ['OK', 2],
      ],
      [
        ['OVER', 0],
        ['OK', 2],
      ],
    ]);
    assert.deepEqual(answers.map(isDegraded), [true, true, true, true]);
    assert.deepEqual(await counterKeys(main), [MINUTE_KEY('a'), MINUTE_KEY('b')]);
    assert.equal(reasons.length, 4);
    for (const reason of reasons) assert.ok(reason.startsWith(PER_SECOND_LABEL), reason);
    // A request with per-minute limits only is not touched by the outage.
    const minuteOnly = await app.call({ domain: 'ps', descriptors: [d(['minute', 'c'])] });
    assert.deepEqual([statuses(minuteOnly), isDegraded(minuteOnly)], [[['OK', 4]], false]);
    assert.equal(reasons.length, 4);
    assert.equal(app.app.health.status, 'SERVING');
    assert.deepEqual(app.app.health.notes(), ['degraded: per-second Redis: Redis unreachable; fallback policy local']);
  });
});
