import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { SettingsError } from '../../../src/errors';
import { compatModeLine, loadSettings, SETTINGS } from '../../../src/settings';

// Settings mistakes are the one SettingsError of the closed error set (src/errors.ts); the ones
// found while starting are in startup-errors.test.ts.

describe('Redis targets are checked with the settings', () => {
  test('a bad GLOBAL_REDIS_URL, named as such, before anything is built', () => {
    const env = { STORE: 'redis', REGION: 'eu', GLOBAL_REDIS_URL: 'redis://:6379' };
    assert.throws(
      () => loadSettings([], env),
      (err: Error) => err instanceof SettingsError && err.message.startsWith("GLOBAL_REDIS_URL: 'redis://:6379' has no host"),
    );
  });
});

describe('COMPAT_MODE=upstream follows the upstream column of the table', () => {
  const upstream = SETTINGS.filter((s) => s.upstream !== undefined);

  test('the start-up line shows every setting of the column', () => {
    const { fields } = compatModeLine(loadSettings([], { COMPAT_MODE: 'upstream' }));
    assert.deepEqual(Object.keys(fields).sort(), ['event', 'mode', ...upstream.map((s) => s.key)].sort());
  });

  test("each takes upstream's default unless given explicitly", () => {
    const s = loadSettings([], { COMPAT_MODE: 'upstream', REDIS_TIMEOUT: '250ms' }) as unknown as Record<string, unknown>;
    assert.deepEqual(Object.fromEntries(upstream.map((row) => [row.key, s[row.key]])), {
      redisTimeoutMs: 250,
      storeDeadlineMs: 250,
      overLimitCacheSize: 0,
      leaseAutoThreshold: 0,
      countDeniedHits: true,
      retryAfterEnabled: false,
    });
  });
});
