import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { createApp } from '../../src/app';
import { createLogger } from '../../src/logger';
import { describeSettings, loadSettings, validatePerSecondUrl } from '../../src/settings';
import { redisUrlParts, validateRedisUrl } from '../../src/store/redis/connection';

// A password, however it is written (unencoded in a URL as people paste it, with '@', ':', '%',
// '/', '#', '?', ',' and any Unicode), never shows in a log line, /settings or an error message,
// in whole or in part; and an unencoded one still connects (the last '@' ends the userinfo).
// Each generated password holds a marker (letters no output contains otherwise) somewhere among
// the hostile characters, so a partial leak on either side of an '@' or ':' shows the marker.

const SEED = Number(process.env.SLUICE_FC_SEED ?? 20_261_203);
const MARKERS = ['Kx9Q', 'Zw7J', 'Pv3M'];
const FRAGMENTS = [
  '@',
  ':',
  '%',
  '/',
  '#',
  '?',
  ',',
  '//',
  '@@',
  '%40',
  '%2',
  '%zz',
  '%41',
  'é',
  '密码',
  '🔑',
  ' ',
  '"',
  "'",
  '\\',
  '[',
  ']',
  'a',
  '1',
  ':6379',
  '@127.0.0.1',
];
const fragments = fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 6 });
const password = fc.tuple(fragments, fc.constantFrom(...MARKERS), fragments).map(([a, m, b]) => [...a, m, ...b].join(''));

function assertHidden(text: string, where: string): void {
  for (const m of MARKERS) assert.ok(!text.includes(m), `${where} shows the password (${m}): ${text}`);
}

const HOST = '127.0.0.1:1';
// Every setting a password can be given in, each in the forms a user would write it.
const valid = (pw: string): NodeJS.ProcessEnv[] => [
  { REDIS_URL: `redis://:${pw}@${HOST}/0` },
  { REDIS_URL: `redis://sluice:${pw}@${HOST}` },
  { REDIS_URL: `rediss://:${pw}@${HOST}` },
  { REDIS_URL: HOST, REDIS_AUTH: pw },
  { REDIS_URL: HOST, REDIS_AUTH: `sluice:${pw}` },
  { REDIS_TYPE: 'sentinel', REDIS_URL: `mymaster,${HOST}`, REDIS_AUTH: pw, REDIS_SENTINEL_AUTH: pw },
  { REDIS_TYPE: 'cluster', REDIS_URL: HOST, REDIS_AUTH: pw },
  { REDIS_URL: HOST, REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: `redis://:${pw}@${HOST}`, REDIS_PERSECOND_AUTH: pw, REDIS_PERSECOND_SENTINEL_AUTH: pw },
  { REDIS_URL: HOST, GLOBAL_REDIS_URL: `redis://:${pw}@${HOST}`, REGION: 'eu', GLOBAL_REDIS_AUTH: pw },
  {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://otel:${pw}@${HOST}`,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `https://otel:${pw}@${HOST}/v1/traces`,
    OTEL_EXPORTER_OTLP_HEADERS: `authorization=${encodeURIComponent(pw)}`,
  },
  { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: `authorization:${pw.replace(/,/g, '')}` },
];
// Settings refused with a message that shows the URL.
const refused = (pw: string): NodeJS.ProcessEnv[] => [
  { REDIS_TYPE: 'cluster', REDIS_URL: `redis://:${pw}@${HOST}` },
  { REDIS_TYPE: 'cluster', REDIS_URL: `${HOST},redis://:${pw}@${HOST}` },
  { REDIS_TYPE: 'sentinel', REDIS_URL: `mymaster,:${pw}@${HOST}` },
  { REDIS_URL: `:${pw}@${HOST}` },
  { REDIS_URL: `redis://:${pw}@127.0.0.1:99999` },
  { REDIS_URL: `redis://:${pw}@` },
  { REDIS_URL: `redis://:${pw}@${HOST}/x` },
  { REDIS_URL: `http://:${pw}@${HOST}` },
  { REDIS_URL: HOST, REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: `redis://:${pw}@${HOST}`, REDIS_PERSECOND_SOCKET_TYPE: 'unix' },
  { REDIS_URL: HOST, REDIS_PERSECOND: 'true', REDIS_PERSECOND_URL: `redis://:${pw}@:1` },
  { OTEL_EXPORTER_OTLP_ENDPOINT: `ftp://otel:${pw}@${HOST}` },
];

// What a start with `env` says before serving: its settings error, or the store's.
function startupError(env: NodeJS.ProcessEnv): string | undefined {
  try {
    const s = loadSettings([], env);
    validateRedisUrl(s);
    if (s.redisPerSecond) validatePerSecondUrl(s);
  } catch (err) {
    return (err as Error).message;
  }
  return undefined;
}

describe('passwords never shown', () => {
  test('in /settings (describeSettings) for every setting that can hold one', () => {
    fc.assert(
      fc.property(password, (pw) => {
        for (const env of valid(pw)) assertHidden(JSON.stringify(describeSettings(loadSettings([], env))), `settings of ${Object.keys(env).join(',')}`);
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  test('in the error refusing a setting', () => {
    fc.assert(
      fc.property(password, (pw) => {
        for (const env of refused(pw)) {
          const message = startupError(env);
          assert.ok(message !== undefined, `refused: ${JSON.stringify(env)}`);
          assertHidden(message, 'the error');
        }
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  test('in the start-up log, the listening line, Redis connection errors and GET /settings of a running service', async () => {
    await fc.assert(
      fc.asyncProperty(password, async (pw) => {
        for (const env of valid(pw).slice(0, 9)) {
          let logs = '';
          const sink = new Writable({ write: (c: Buffer, _e, done) => ((logs += c.toString()), done()) });
          const settings = loadSettings(
            [
              '--config',
              'examples/config',
              '--grpc-port',
              '0',
              '--http-port',
              '0',
              '--admin-port',
              '0',
              '--host',
              '127.0.0.1',
              '--grpc-host',
              '127.0.0.1',
              '--workers',
              '1',
            ],
            env,
          );
          const app = createApp(settings, { logger: createLogger('debug', sink) });
          const { adminPort } = await app.start();
          try {
            // The first connection error is logged at once (then at most one per 5 s).
            for (let i = 0; i < 100 && !logs.includes('"redis_error"'); i++) await new Promise((r) => setTimeout(r, 10));
            // Connection: close, so that stop() has no idle keep-alive connection to wait out
            // (its drain closes one only after a quiet second, src/server/http-drain.ts).
            const res = await fetch(`http://127.0.0.1:${adminPort}/settings`, { headers: { connection: 'close' } });
            assertHidden(await res.text(), '/settings');
          } finally {
            await app.stop();
          }
          assert.match(logs, /"event":"listening"/);
          assertHidden(logs, `the log of ${Object.keys(env).join(',')}`);
        }
      }),
      // Each run starts and stops 9 services; the passwords themselves are covered by
      // the 300-run properties above, this one covers the paths a running service logs through.
      { seed: SEED, numRuns: 3 },
    );
  });
});

describe('an unencoded password in a redis:// URL', () => {
  // Percent-escapes are decoded (a URL's rule); a '%' not followed by two hex digits is itself.
  const unescaped = password.filter((pw) => !/%[0-9A-Fa-f]{2}/.test(pw));

  test('the last @ ends the userinfo: user, password, host, port and database are what was meant', () => {
    fc.assert(
      fc.property(unescaped, fc.constantFrom('', 'sluice'), (pw, user) => {
        const parts = redisUrlParts(`redis://${user}:${pw}@10.0.0.7:6390/3`);
        assert.deepEqual(parts, { tls: false, username: user === '' ? undefined : user, password: pw, host: '10.0.0.7', port: 6390, db: 3 });
      }),
      { seed: SEED, numRuns: 500 },
    );
  });

  test('an encoded one is decoded, whatever it holds', () => {
    fc.assert(
      fc.property(password, (pw) => {
        assert.deepEqual(redisUrlParts(`rediss://:${encodeURIComponent(pw)}@[::1]:6390`), {
          tls: true,
          username: undefined,
          password: pw,
          host: '::1',
          port: 6390,
          db: 0,
        });
      }),
      { seed: SEED, numRuns: 500 },
    );
  });
});
