import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient, RateLimitResponse_Code as Code } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, d } from './support/app';
import { REPO, runCli, spawnServer } from './support/process';

const BAD = path.join(REPO, 'test/fixtures/config/bad');
// Fixtures whose error needs another file loaded first.
const LOADED_WITH: Record<string, string[]> = { 'duplicate_domain.yaml': ['test/fixtures/config/good/basic.yaml'] };

describe('sluice check', () => {
  for (const fixture of fs.readdirSync(BAD).filter((f) => f.endsWith('.yaml'))) {
    test(`exits non-zero naming the file: ${fixture}`, async () => {
      const rel = path.join('test/fixtures/config/bad', fixture);
      const { code, stderr } = await runCli(['check', ...(LOADED_WITH[fixture] ?? []), rel]);
      assert.equal(code, 1);
      const lines = stderr.trim().split('\n');
      assert.match(lines[lines.length - 1], /error\(s\)$/);
      assert.ok(lines.length >= 2, stderr);
      for (const line of lines.slice(0, -1)) assert.ok(line.startsWith(`${rel}`), line);
    });
  }

  test('the example config is valid', async () => {
    const { code, stdout } = await runCli(['check', 'examples/config']);
    assert.equal(code, 0);
    assert.match(stdout, /OK: 1 file\(s\), domains: edge/);
  });

  test('every error of several files is printed', async () => {
    const { code, stderr } = await runCli(['check', 'test/fixtures/config/bad/unknown_key.yaml', 'test/fixtures/config/bad/empty_key.yaml']);
    assert.equal(code, 1);
    assert.match(stderr, /unknown_key\.yaml:\d+: config error, unknown key/);
    assert.match(stderr, /empty_key\.yaml(:\d+)?: descriptor has empty key/);
  });
});

describe('sluice serve (spawned process)', () => {
  test('serves the example config, logs JSON lines, reloads on SIGHUP, exits 0 on SIGTERM', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cli-'));
    const file = path.join(dir, 'rules.yaml');
    fs.writeFileSync(file, 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n');
    const server = await spawnServer(['--config', file]);
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const loaded = await server.waitForLog((l) => l.event === 'config_loaded');
      assert.deepEqual(loaded.domains, ['d']);
      assert.equal(loaded.level, 'info');
      assert.equal((await callRls(client, { domain: 'd', descriptors: [d(['k', 'x'])] })).statuses[0].currentLimit?.requestsPerUnit, 1);

      fs.writeFileSync(file, 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: oops }\n');
      server.child.kill('SIGHUP');
      const rejected = await server.waitForLog((l) => l.event === 'config_rejected');
      assert.equal(rejected.keptPrevious, true);
      assert.ok(server.logs.some((l) => l.event === 'config_error' && String(l.error).startsWith(file)));
      assert.equal((await callRls(client, { domain: 'd', descriptors: [d(['k', 'y'])] })).statuses[0].currentLimit?.requestsPerUnit, 1);

      fs.writeFileSync(file, 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 7 }\n');
      const before = server.logs.filter((l) => l.event === 'config_loaded').length;
      server.child.kill('SIGHUP');
      await server.waitForLog((l) => l.event === 'config_loaded' && server.logs.filter((x) => x.event === 'config_loaded').length > before);
      const r = await callRls(client, { domain: 'd', descriptors: [d(['k', 'z'])] });
      assert.equal(r.overallCode, Code.OK);
      assert.equal(r.statuses[0].currentLimit?.requestsPerUnit, 7);
    } finally {
      client.close();
      assert.equal(await server.stop('SIGTERM'), 0);
    }
    assert.ok(server.logs.some((l) => l.event === 'stopped'));
  });

  test('upstream environment names work (PORT, GRPC_PORT, RUNTIME_ROOT layout, LOG_LEVEL)', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-runtime-'));
    fs.mkdirSync(path.join(root, 'ratelimit', 'config'), { recursive: true });
    fs.copyFileSync(path.join(REPO, 'examples/config/edge.yaml'), path.join(root, 'ratelimit', 'config', 'edge.yaml'));
    const server = await spawnServer([], { RUNTIME_ROOT: root, RUNTIME_SUBDIRECTORY: 'ratelimit', LOG_LEVEL: 'DEBUG' });
    try {
      const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
      const r = await callRls(client, { domain: 'edge', descriptors: [d(['tenant', 'acme'])] });
      client.close();
      assert.equal(r.statuses[0].currentLimit?.name, 'tenant_free');
      const line = await server.waitForLog((l) => l.event === 'decision');
      assert.equal(line.level, 'debug');
      assert.equal(line.overall, 'OK');
    } finally {
      await server.stop();
    }
  });

  test('bad settings stop startup with a message naming the setting', async () => {
    const bad = await runCli(['serve', '--config', 'examples/config', '--grpc-port', 'eighty']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--grpc-port: expected an integer/);
    const env = await runCli(['serve', '--config', 'examples/config'], { COUNT_DENIED_HITS: 'maybe' });
    assert.match(env.stderr, /COUNT_DENIED_HITS: expected true or false, got 'maybe'/);
    const none = await runCli(['serve']);
    assert.match(none.stderr, /no config: pass --config/);
    const unknown = await runCli(['serve', '--nope']);
    assert.match(unknown.stderr, /unknown flag --nope/);
  });
});

test('README lists every setting', () => {
  const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
  const { SETTINGS } = require('../src/settings') as typeof import('../src/settings');
  for (const s of SETTINGS) {
    assert.ok(readme.includes(`\`--${s.flag}\``), `README lacks --${s.flag}`);
    for (const env of s.env) assert.ok(readme.includes(`\`${env}\``), `README lacks ${env}`);
  }
});
