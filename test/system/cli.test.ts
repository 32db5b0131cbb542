import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient, RateLimitResponse_Code as Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, closing, d } from '../support/app';
import readline from 'node:readline';
import { spawn } from 'node:child_process';
import { settingsHelp } from '../../src/cli';
import { loadSettings } from '../../src/settings';
import { MAIN, REPO, runCli, spawnServer } from '../support/process';

const BAD = path.join(REPO, 'test/fixtures/config/bad');
// Fixtures whose error needs another file loaded first.
const LOADED_WITH: Record<string, string[]> = { 'duplicate_domain.yaml': ['test/fixtures/config/good/basic.yaml'] };

// Each case is its own process reading its own file: four at a time.
describe('sluice check', { concurrency: 4 }, () => {
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

  test('upstream settings sluice does not read are named in a start-up warning', async () => {
    const server = await spawnServer(['--config', 'examples/config'], {
      REDIS_PIPELINE_WINDOW: '150us',
      EXPIRATION_JITTER_MAX_SECONDS: '300',
      MEMCACHE_HOST_PORT: '127.0.0.1:11211',
      // Read by sluice: not named.
      REDIS_POOL_SIZE: '2',
    });
    try {
      const line = await server.waitForLog((l) => l.event === 'upstream_settings_not_read');
      assert.equal(line.level, 'warn');
      assert.deepEqual(line.names, ['EXPIRATION_JITTER_MAX_SECONDS', 'MEMCACHE_HOST_PORT', 'REDIS_PIPELINE_WINDOW']);
    } finally {
      await server.stop();
    }
    const quiet = await spawnServer(['--config', 'examples/config']);
    try {
      await quiet.waitForLog((l) => l.event === 'listening');
      assert.equal(
        quiet.logs.some((l) => l.event === 'upstream_settings_not_read'),
        false,
      );
    } finally {
      await quiet.stop();
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

describe('logs for a person', () => {
  test('LOG_FORMAT=pretty: one readable line per event from a real process, the listening line among them', async () => {
    const child = spawn(
      process.execPath,
      [
        MAIN,
        'serve',
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
      ],
      {
        cwd: REPO,
        env: { PATH: process.env.PATH, LOG_FORMAT: 'pretty', NO_COLOR: '1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const lines: string[] = [];
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const listening = await new Promise<RegExpExecArray>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listening line: ${lines.join('\n')}`)), 10_000);
      readline.createInterface({ input: child.stdout }).on('line', (line) => {
        lines.push(line);
        const m =
          /sluice listening: gRPC 127\.0\.0\.1:(\d+), HTTP 127\.0\.0\.1:(\d+), admin 127\.0\.0\.1:(\d+), store memory, config examples\/config \(1 domain\)/.exec(
            line,
          );
        if (m !== null) clearTimeout(timer), resolve(m);
      });
    });
    try {
      assert.equal((await fetch(`http://127.0.0.1:${listening[2]}/healthcheck`, closing())).status, 200);
      assert.equal((await fetch(`http://127.0.0.1:${listening[3]}/rlconfig`, closing())).status, 200);
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0);
    for (const line of lines) {
      assert.throws(() => JSON.parse(line), SyntaxError, `not JSON: ${line}`);
      assert.match(line, /^\[\d\d:\d\d:\d\d\.\d{3}\] (INFO|WARN): \S/, line);
    }
    assert.match(lines[0], /\] INFO: sluice \S+ starting \(Node\.js [\d.]+\)$/, 'the settings dump stays out of the pretty lines');
    assert.match(lines.at(-1)!, /\] INFO: sluice stopped$/, 'the last line is written before the exit');
  });

  test('the JSON start-up record carries the same listening line as its message', async () => {
    const server = await spawnServer(['--config', 'examples/config']);
    try {
      const listening = await server.waitForLog((l) => l.event === 'listening');
      assert.equal(
        listening.msg,
        `sluice listening: gRPC 127.0.0.1:${server.grpcPort}, HTTP 127.0.0.1:${server.httpPort}, admin 127.0.0.1:${server.adminPort}, store memory, config examples/config (1 domain)`,
      );
      assert.match(String(server.logs.find((l) => l.event === 'starting')?.msg), /^sluice \S+ starting \(Node\.js [\d.]+\)$/);
    } finally {
      await server.stop();
    }
  });

  test("LOG_FORMAT: json (default) or pretty; upstream's text means pretty", () => {
    assert.equal(loadSettings([], {}).logFormat, 'json');
    assert.equal(loadSettings([], { LOG_FORMAT: 'text' }).logFormat, 'pretty');
    assert.equal(loadSettings(['--log-format', 'PRETTY'], {}).logFormat, 'pretty');
    assert.throws(() => loadSettings([], { LOG_FORMAT: 'xml' }), /LOG_FORMAT: expected one of json, pretty, got 'xml'/);
  });
});

test('sluice help settings puts each endpoint on the listener that serves it', () => {
  const help = settingsHelp().split('\n');
  const line = (flag: string) => help.find((l) => l.startsWith(`  --${flag} `)) ?? '';
  assert.match(line('http-port'), /\/json, \/healthcheck, \/readyz, \/livez, \/metrics; \/rlconfig is on the admin port/);
  assert.match(line('admin-host'), /\/rlconfig, \/explain, \/settings/);
});
