import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { conflictingNames, loadSettings } from '../../src/settings';
import { runCli, spawnServer } from '../support/process';

// Upstream's names beside sluice's: REDIS_SOCKET_TYPE is checked against REDIS_URL as its
// REDIS_PERSECOND twin is, and a setting given under both names with different values is warned
// about at start, naming both and the one used.

describe('REDIS_SOCKET_TYPE', () => {
  const refusals: [string, NodeJS.ProcessEnv, string][] = [
    [
      'unix with a host:port URL',
      { REDIS_URL: 'redis:6379', REDIS_SOCKET_TYPE: 'unix' },
      "REDIS_SOCKET_TYPE=unix but REDIS_URL is a network address ('redis:6379'); set tcp or leave it empty",
    ],
    [
      'unix with a redis:// URL, password redacted',
      { REDIS_URL: 'redis://:pw@redis:6379', REDIS_SOCKET_TYPE: 'UNIX' },
      "REDIS_SOCKET_TYPE=unix but REDIS_URL is a network address ('redis://:[redacted]@redis:6379'); set tcp or leave it empty",
    ],
    [
      'tcp with a socket path',
      { REDIS_URL: '/var/run/redis.sock', REDIS_SOCKET_TYPE: 'tcp' },
      "REDIS_SOCKET_TYPE=tcp but REDIS_URL is a unix socket path ('/var/run/redis.sock'); set unix or leave it empty",
    ],
    ['an unknown type', { REDIS_URL: 'redis:6379', REDIS_SOCKET_TYPE: 'udp' }, "REDIS_SOCKET_TYPE: expected tcp or unix, got 'udp'"],
  ];
  for (const [name, env, message] of refusals) {
    test(`refused: ${name}`, () => {
      assert.throws(
        () => loadSettings([], env),
        (e: Error) => e.message === message,
      );
    });
  }

  test('as its per-second twin, which names its own settings', () => {
    assert.throws(
      () => loadSettings([], { REDIS_URL: 'redis:6379', REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: 'ps:6379', REDIS_PERSECOND_SOCKET_TYPE: 'unix' }),
      /REDIS_PERSECOND_SOCKET_TYPE=unix but REDIS_PERSECOND_URL is a network address/,
    );
  });

  test("accepted when it agrees with the URL (Envoy Gateway's tcp with host:port), and read by its flag", () => {
    assert.equal(loadSettings([], { REDIS_URL: 'redis:6379', REDIS_SOCKET_TYPE: 'tcp' }).redisSocketType, 'tcp');
    assert.equal(loadSettings([], { REDIS_URL: '/var/run/redis.sock', REDIS_SOCKET_TYPE: 'unix' }).store, 'redis');
    assert.equal(loadSettings(['--redis-socket-type', 'tcp'], { REDIS_URL: 'redis:6379' }).redisSocketType, 'tcp');
    // A sentinel or cluster list is always TCP; the memory store reads no Redis setting.
    assert.equal(loadSettings([], { REDIS_TYPE: 'sentinel', REDIS_URL: 'm,s:26379', REDIS_SOCKET_TYPE: 'tcp' }).redisType, 'sentinel');
    assert.equal(loadSettings([], { STORE: 'memory', REDIS_SOCKET_TYPE: 'unix' }).store, 'memory');
  });

  test('the start is refused with that one line, exit 2', async () => {
    const { code, stderr } = await runCli(['serve', '--config', 'examples/config'], { REDIS_URL: 'redis:6379', REDIS_SOCKET_TYPE: 'unix' });
    assert.equal(code, 2);
    assert.equal(stderr, "sluice: REDIS_SOCKET_TYPE=unix but REDIS_URL is a network address ('redis:6379'); set tcp or leave it empty\n");
  });
});

describe('PORT and HTTP_PORT both set', () => {
  test('different values: a warning at start names both and the one used (HTTP_PORT, as before)', () => {
    const env = { HTTP_PORT: '8080', PORT: '9090' };
    const s = loadSettings([], env);
    assert.equal(s.httpPort, 8080);
    assert.deepEqual(conflictingNames(s, env), [
      { names: ['HTTP_PORT', 'PORT'], used: 'HTTP_PORT', message: 'HTTP_PORT=8080 and PORT=9090 are both set: HTTP_PORT is used' },
    ]);
  });

  test('the warning is a log line of the running process', async () => {
    // The test harness passes --http-port 0 (a free port), which wins over both.
    const server = await spawnServer(['--config', 'examples/config'], { HTTP_PORT: '1', PORT: '2' });
    try {
      const warning = await server.waitForLog((l) => l.event === 'settings_conflict');
      assert.equal(warning.level, 'warn');
      assert.deepEqual(
        [warning.names, warning.used, warning.msg],
        [['HTTP_PORT', 'PORT'], '--http-port', 'HTTP_PORT=1 and PORT=2 are both set: --http-port is used (a flag wins over the environment)'],
      );
    } finally {
      await server.stop();
    }
  });

  test('the same value twice is no conflict; every setting with two names is covered', () => {
    assert.deepEqual(conflictingNames(loadSettings([], { HTTP_PORT: '8080', PORT: '8080' }), { HTTP_PORT: '8080', PORT: '8080' }), []);
    const admin = { ADMIN_PORT: '6070', DEBUG_PORT: '6071' };
    assert.deepEqual(
      conflictingNames(loadSettings([], admin), admin).map((c) => c.used),
      ['ADMIN_PORT'],
    );
  });
});
