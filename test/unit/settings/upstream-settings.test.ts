import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import { SETTINGS, UPSTREAM_SETTINGS, upstreamSettingsNotRead, upstreamSettingsTable } from '../../../src/settings';

const REPO = path.join(__dirname, '../../..', '..');
// envoyproxy/ratelimit's names, taken from its settings.go (the fixture's first line says which).
const UPSTREAM = fs
  .readFileSync(path.join(REPO, 'test', 'fixtures', 'upstream-settings.txt'), 'utf8')
  .split('\n')
  .filter((l) => l !== '' && !l.startsWith('#'));
const listed = UPSTREAM_SETTINGS.flatMap((s) => s.names);
// Read outside the SETTINGS table: the upstream config layout (settings.ts runtimeConfigPath).
const READ_ELSEWHERE = ['RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_APPDIRECTORY'];
const read = new Set([...SETTINGS.flatMap((s) => s.env), ...READ_ELSEWHERE]);

test('every setting of envoyproxy/ratelimit has exactly one status, and nothing else is listed', () => {
  assert.ok(UPSTREAM.length > 100, `the fixture lists ${UPSTREAM.length} names`);
  assert.deepEqual([...listed].sort(), [...UPSTREAM].sort());
  assert.equal(new Set(listed).size, listed.length, 'a name is listed twice');
});

test('what is honoured is read, and what is not honoured is not', () => {
  for (const s of UPSTREAM_SETTINGS) {
    for (const name of s.names) {
      // RUNTIME_WATCH_ROOT and RUNTIME_IGNOREDOTFILES are honoured by what sluice always does.
      const implicit = s.status === 'honoured differently' && !read.has(name);
      if (s.status === 'not honoured') assert.ok(!read.has(name), `${name} is read but listed as not honoured`);
      else assert.ok(read.has(name) || (implicit && s.note !== ''), `${name} is listed as ${s.status} but sluice does not read it`);
      if (s.status !== 'honoured') assert.notEqual(s.note, '', `${name}: say how it differs or why it is not honoured`);
    }
  }
});

test('the start-up warning names the unhonoured settings that are set, and no other', () => {
  const notHonoured = UPSTREAM_SETTINGS.filter((s) => s.status === 'not honoured').flatMap((s) => s.names);
  const env: NodeJS.ProcessEnv = Object.fromEntries(UPSTREAM.map((n) => [n, 'x']));
  env.RUNTIME_IGNOREDOTFILES = 'true';
  env.GRPC_SERVER_TLS_CA_CERT = '/certs/ca.crt';
  env.SOMETHING_ELSE = '1';
  assert.deepEqual(upstreamSettingsNotRead(env), [...notHonoured, 'GRPC_SERVER_TLS_CA_CERT'].sort());
  assert.deepEqual(upstreamSettingsNotRead({ RUNTIME_IGNOREDOTFILES: 'false' }), ['RUNTIME_IGNOREDOTFILES']);
  assert.deepEqual(upstreamSettingsNotRead({ REDIS_URL: 'r:6379', USE_STATSD: 'false' }), []);
});

test("docs/migrating.md's table of upstream's settings is the list's", () => {
  const readme = fs.readFileSync(path.join(REPO, 'docs/migrating.md'), 'utf8');
  const table = upstreamSettingsTable();
  assert.ok(readme.includes(table), `docs/migrating.md should contain, between its upstream-settings markers:\n${table}`);
});
