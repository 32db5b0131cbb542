import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { SETTINGS, settingsReference } from '../../../src/settings';

// docs/settings.md is written from the settings table (src/settings/table.ts): it cannot drift.

const REPO = path.join(__dirname, '../../..', '..');
const FILE = path.join(REPO, 'docs', 'settings.md');

test('docs/settings.md is what the settings table produces', () => {
  const written = fs.readFileSync(FILE, 'utf8');
  assert.ok(written === settingsReference(), 'docs/settings.md differs from the settings table: run `npm run docs:settings` and commit the file');
});

test('the reference has one row per setting, naming its variables and flag', () => {
  const rows = settingsReference()
    .split('\n')
    .filter((l) => l.startsWith('| `'));
  assert.equal(rows.length, SETTINGS.length);
  for (const [i, s] of SETTINGS.entries()) {
    for (const name of [...s.env, `--${s.flag}`]) assert.ok(rows[i].includes(`\`${name}\``), `${s.key}: ${name}`);
  }
});

test("the COMPAT_MODE=upstream column shows envoyproxy/ratelimit's defaults", () => {
  const row = (env: string) =>
    settingsReference()
      .split('\n')
      .find((l) => l.startsWith(`| \`${env}\``))!;
  assert.match(row('REDIS_TIMEOUT'), /\| `1s` \| 10s \|/);
  assert.match(row('STORE_DEADLINE'), /\| as `REDIS_TIMEOUT` \|/);
  assert.match(row('COUNT_DENIED_HITS'), /\| not `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` \|/);
  assert.match(row('HTTP_PORT'), /\| `8080` \| {2}\|/);
});
