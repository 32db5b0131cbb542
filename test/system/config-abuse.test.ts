import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { ConfigHolder } from '../../src/config/holder';
import { loadConfig, loadConfigSources } from '../../src/config/load';
import { ConfigWatcher } from '../../src/config/watcher';
import { RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../src/logger';
import { loadSettings } from '../../src/settings';
import { callRls, d } from '../support/app';
import { REPO, runCli, spawnServer, type ServerProcess } from '../support/process';

// Issue 9, items 2, 4 and 6: no config file can take the service down or stall it, and the config
// watch survives every way editors, git and Kubernetes replace files.

const BAD = path.join(REPO, 'test/fixtures/config/bad');
const rules = (n: number, domain = 'ops') => `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: ${n} }\n`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tmp = (prefix: string) => fs.mkdtempSync(path.join(os.tmpdir(), `sluice-${prefix}-`));

function captureLogger(): { logger: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger('info', sink), lines };
}

async function until(check: () => boolean | Promise<boolean>, ms: number, what: string): Promise<void> {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (await check()) return;
    await sleep(20);
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

describe('config loading cannot be weaponised', () => {
  test('an alias bomb dropped next to a good config is rejected; the holder never throws and keeps the last good config', () => {
    const dir = tmp('bomb');
    fs.writeFileSync(path.join(dir, 'ops.yaml'), rules(10));
    const { logger, lines } = captureLogger();
    const holder = new ConfigHolder([dir], { mergeDomains: false, logger });
    assert.equal(holder.reload().ok, true);
    const good = holder.config;
    const bomb = path.join(dir, 'bomb.yaml');
    fs.copyFileSync(path.join(BAD, 'alias_bomb.yaml'), bomb);
    const result = holder.reload('watch');
    assert.equal(result.ok, false);
    assert.deepEqual(
      result.errors.map((e) => [e.file, e.line]),
      [[bomb, 8]],
    );
    assert.equal(holder.config, good);
    const events = lines.map((l) => [l.event, l.trigger]);
    assert.deepEqual(
      events.filter(([e]) => e === 'config_reload'),
      [
        ['config_reload', 'startup'],
        ['config_reload', 'watch'],
      ],
    );
    const rejected = lines.find((l) => l.event === 'config_rejected');
    assert.equal(rejected?.keptPrevious, true);
    assert.ok(lines.some((l) => l.event === 'config_error' && l.file === bomb && l.line === 8));
  });

  test('a descriptor tree built from anchors is refused in bounded time, whatever CONFIG_MAX_DESCRIPTORS says', () => {
    const file = path.join(BAD, 'alias_descriptor_tree.yaml');
    for (const maxDescriptors of [100_000, 1_000_000_000]) {
      const start = Date.now();
      const result = loadConfig([file], { mergeDomains: false, limits: { maxFileBytes: 1 << 20, maxDescriptors } });
      assert.ok(Date.now() - start < 3000, `took ${Date.now() - start} ms`);
      assert.equal(result.config, undefined);
      assert.equal(result.errors.length, 1);
      assert.equal(result.errors[0].file, file);
      assert.match(result.errors[0].detail, /^config limit: (more than 100000 descriptors|aliases expand to more than 1000000 YAML nodes)/);
    }
  });

  test('descriptors nested deeper than 32 levels through aliases are refused (compile recursion stays bounded)', () => {
    let text = 'domain: d\ndescriptors:\n  - key: d0\n    descriptors: &a0 [{key: x}]\n';
    for (let i = 1; i < 40; i++) text += `  - key: d${i}\n    descriptors: &a${i} [{key: x, descriptors: *a${i - 1}}]\n`;
    const result = loadConfigSources([{ file: 'chain.yaml', text }], { mergeDomains: false });
    assert.equal(result.config, undefined);
    assert.deepEqual(
      result.errors.map((e) => e.detail),
      ['config limit: descriptors nested deeper than 32 levels'],
    );
    assert.equal(result.errors[0].file, 'chain.yaml');
    assert.equal(typeof result.errors[0].line, 'number');
  });

  test('legitimate anchors, aliases and merge keys still load, metadata included', () => {
    const text = [
      'domain: d',
      'descriptors:',
      '  - key: a',
      '    rate_limit: &std {unit: minute, requests_per_unit: 10}',
      '    metadata: &meta {team: payments, tags: [x, z], nested: {deep: 1}}',
      '  - key: b',
      '    rate_limit: *std',
      '    metadata: {<<: *meta, team: search, __proto__: {polluted: true}}',
    ].join('\n');
    const result = loadConfigSources([{ file: 'ok.yaml', text }], { mergeDomains: false });
    assert.deepEqual(result.errors, []);
    const b = result.config?.domains.get('d')?.children.get('b')?.defaultNode?.rule;
    assert.equal(b?.requestsPerUnit, 10);
    assert.deepEqual({ ...b?.metadata }, { team: 'search', tags: ['x', 'z'], nested: { deep: 1 }, ['__proto__']: { polluted: true } });
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
  });

  test('a file over CONFIG_MAX_FILE_BYTES is refused without being parsed', () => {
    const dir = tmp('large');
    const big = path.join(dir, 'big.yaml');
    // Valid YAML: a domain and 3 MiB of comments (the default cap is 2 MiB).
    fs.writeFileSync(big, `${rules(1)}${'# padding padding padding padding padding padding padding padding\n'.repeat(48 * 1024)}`);
    const start = Date.now();
    const result = loadConfig([dir], { mergeDomains: false });
    assert.ok(Date.now() - start < 500, `took ${Date.now() - start} ms`);
    assert.equal(result.config, undefined);
    assert.deepEqual(
      result.errors.map((e) => [e.file, e.line, e.detail]),
      [[big, undefined, `config limit: file is ${fs.statSync(big).size} bytes, more than 2097152 (CONFIG_MAX_FILE_BYTES)`]],
    );
    const small = loadConfigSources([{ file: 's.yaml', text: rules(1) }], { mergeDomains: false, limits: { maxFileBytes: 50, maxDescriptors: 10 } });
    assert.match(small.errors[0]?.message ?? '', /^s\.yaml: config limit: file is \d+ bytes, more than 50 \(CONFIG_MAX_FILE_BYTES\)$/);
  });

  test('CONFIG_MAX_DESCRIPTORS counts every file of the config', () => {
    const three = (domain: string) => `domain: ${domain}\ndescriptors:\n  - key: a\n  - key: b\n  - key: c\n`;
    const sources = [
      { file: 'one.yaml', text: three('one') },
      { file: 'two.yaml', text: three('two') },
    ];
    const limits = { maxFileBytes: 1 << 20, maxDescriptors: 5 };
    const result = loadConfigSources(sources, { mergeDomains: false, limits });
    assert.deepEqual(
      result.errors.map((e) => [e.file, e.line, e.detail]),
      [['two.yaml', 5, 'config limit: more than 5 descriptors (CONFIG_MAX_DESCRIPTORS; an alias counts each time it is used)']],
    );
    assert.deepEqual(loadConfigSources(sources, { mergeDomains: false, limits: { ...limits, maxDescriptors: 6 } }).errors, []);
  });

  test('the caps are settings with defaults far above real configs', () => {
    const s = loadSettings([], {});
    assert.equal(s.configMaxFileBytes, 2 * 1024 * 1024);
    assert.equal(s.configMaxDescriptors, 100_000);
    assert.equal(s.configPollIntervalMs, 5000);
    const env = loadSettings([], { CONFIG_MAX_FILE_BYTES: '1000', CONFIG_MAX_DESCRIPTORS: '7', CONFIG_POLL_INTERVAL: '0' });
    assert.deepEqual([env.configMaxFileBytes, env.configMaxDescriptors, env.configPollIntervalMs], [1000, 7, 0]);
    assert.equal(loadSettings(['--config-poll-interval', '250ms']).configPollIntervalMs, 250);
  });
});

describe('sluice check on hostile files', () => {
  test('prints errors, never a stack trace, and exits 1', async () => {
    for (const fixture of ['alias_bomb.yaml', 'alias_descriptor_tree.yaml', 'alias_cycle.yaml', 'deep_nesting_parser.yaml']) {
      const rel = path.join('test/fixtures/config/bad', fixture);
      const { code, stderr } = await runCli(['check', rel]);
      assert.equal(code, 1, `${fixture}: ${stderr}`);
      assert.doesNotMatch(stderr, /\n\s+at /, fixture);
      assert.match(stderr, new RegExp(`^${rel.replace(/[.]/g, '\\.')}:\\d+: `), fixture);
    }
  });

  test('takes the caps from its flags and the environment', async () => {
    const file = 'test/fixtures/config/good/basic.yaml';
    const env = await runCli(['check', file], { CONFIG_MAX_FILE_BYTES: '20' });
    assert.equal(env.code, 1);
    assert.match(env.stderr, /basic\.yaml: config limit: file is \d+ bytes, more than 20 \(CONFIG_MAX_FILE_BYTES\)/);
    const flag = await runCli(['check', '--config-max-descriptors', '1', file]);
    assert.equal(flag.code, 1);
    assert.match(flag.stderr, /basic\.yaml:\d+: config limit: more than 1 descriptors/);
    const bad = await runCli(['check', '--config-max-descriptors=many', file]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--config-max-descriptors: expected an integer/);
    assert.equal((await runCli(['check', file])).code, 0);
  });
});

async function limitOf(client: RateLimitServiceClient, domain = 'ops'): Promise<number | undefined> {
  const r = await callRls(client, { domain, descriptors: [d(['k', `probe-${Math.random()}`])] });
  return r.statuses[0].currentLimit?.requestsPerUnit;
}

async function serve(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ server: ServerProcess; client: RateLimitServiceClient; close: () => Promise<void> }> {
  const server = await spawnServer(args, env);
  const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
  return {
    server,
    client,
    async close() {
      client.close();
      await server.stop();
    },
  };
}

// Reloads of the spawned process, by trigger.
const reloads = (server: ServerProcess, trigger: string) => server.logs.filter((l) => l.event === 'config_reload' && l.trigger === trigger).length;

describe('the running service keeps serving whatever lands in its config directory', () => {
  test('an alias bomb, an anchor-built descriptor tree and a 3 MiB file are rejected; the last good config keeps serving', async () => {
    const dir = tmp('hostile');
    fs.writeFileSync(path.join(dir, 'ops.yaml'), rules(10));
    const { server, client, close } = await serve(['--config', dir], { CONFIG_POLL_INTERVAL: '0' });
    try {
      assert.equal(await limitOf(client), 10);
      const hostile: [string, string][] = [
        ['bomb.yaml', fs.readFileSync(path.join(BAD, 'alias_bomb.yaml'), 'utf8')],
        ['tree.yaml', fs.readFileSync(path.join(BAD, 'alias_descriptor_tree.yaml'), 'utf8')],
        ['big.yaml', `domain: big\n${'# padding padding padding padding padding padding padding padding\n'.repeat(48 * 1024)}`],
      ];
      for (const [name, text] of hostile) {
        const before = server.logs.filter((l) => l.event === 'config_rejected').length;
        const start = Date.now();
        fs.writeFileSync(path.join(dir, name), text);
        await until(() => server.child.exitCode !== null || server.logs.filter((l) => l.event === 'config_rejected').length > before, 5000, name);
        assert.equal(server.child.exitCode, null, `${name} took the service down`);
        assert.ok(Date.now() - start < 5000);
        const errors = server.logs.filter((l) => l.event === 'config_error' && l.file === path.join(dir, name));
        assert.ok(errors.length >= 1, name);
        assert.equal(server.child.exitCode, null);
        assert.equal(await limitOf(client), 10, name);
        fs.unlinkSync(path.join(dir, name));
      }
      await until(() => server.logs.filter((l) => l.event === 'config_loaded').length >= 2, 3000, 'reload after cleanup');
    } finally {
      await close();
    }
  });
});

describe('the config watch survives every way files are replaced', () => {
  test('sed -i (twice), git checkout, and a deleted and recreated directory are all live within a bounded time', async () => {
    const root = tmp('saves');
    const dir = path.join(root, 'conf');
    fs.mkdirSync(dir);
    const file = path.join(dir, 'ops.yaml');
    fs.writeFileSync(file, rules(10));
    // Polling off: the watch alone must see every change.
    const { server, client, close } = await serve(['--config', dir], { CONFIG_POLL_INTERVAL: '0' });
    const live = (n: number, what: string) => until(async () => (await limitOf(client)) === n, 3000, what);
    try {
      assert.equal(await limitOf(client), 10);
      const sedInPlace = (n: number) => {
        const temp = path.join(dir, `sed${Math.random().toString(36).slice(2, 8)}`);
        fs.writeFileSync(temp, rules(n));
        fs.renameSync(temp, file);
      };
      sedInPlace(20);
      await live(20, 'first sed -i');
      sedInPlace(30);
      await live(30, 'second sed -i');
      fs.unlinkSync(file);
      await sleep(50);
      fs.writeFileSync(file, rules(40));
      await live(40, 'git checkout (unlink + create)');
      fs.rmSync(dir, { recursive: true });
      await sleep(300);
      fs.mkdirSync(dir);
      fs.writeFileSync(file, rules(50));
      await live(50, 'directory deleted and recreated');
      fs.writeFileSync(file, rules(60));
      await live(60, 'edit inside the recreated directory');
      sedInPlace(70);
      await live(70, 'sed -i inside the recreated directory');
      assert.equal(reloads(server, 'poll'), 0);
      assert.ok(reloads(server, 'watch') >= 6);
      assert.equal(reloads(server, 'startup'), 1);
      const last = server.logs.filter((l) => l.event === 'config_loaded').at(-1);
      assert.equal(last?.trigger, 'watch');
    } finally {
      await close();
    }
  });

  const swap = (link: string, target: string) => {
    fs.symlinkSync(target, `${link}_tmp`);
    fs.renameSync(`${link}_tmp`, link);
  };
  const version = (dir: string, n: number) => {
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'ops.yaml'), rules(n));
  };

  test('a ConfigMap ..data symlink swap that keeps the old directory, twice, then an edit behind the link', async () => {
    const mount = tmp('configmap');
    version(path.join(mount, '..v1'), 10);
    fs.symlinkSync('..v1', path.join(mount, '..data'));
    fs.symlinkSync('..data/ops.yaml', path.join(mount, 'ops.yaml'));
    const { server, client, close } = await serve(['--config', mount], { CONFIG_POLL_INTERVAL: '0' });
    const live = (n: number, what: string) => until(async () => (await limitOf(client)) === n, 3000, what);
    try {
      assert.equal(await limitOf(client), 10);
      version(path.join(mount, '..v2'), 20);
      swap(path.join(mount, '..data'), '..v2');
      await live(20, 'first ..data swap');
      version(path.join(mount, '..v3'), 30);
      swap(path.join(mount, '..data'), '..v3');
      await live(30, 'second ..data swap');
      fs.writeFileSync(path.join(mount, '..v3', 'ops.yaml'), rules(35));
      await live(35, 'in-place edit behind ..data');
      assert.ok(fs.existsSync(path.join(mount, '..v1')) && fs.existsSync(path.join(mount, '..v2')));
      assert.equal(reloads(server, 'poll'), 0);
    } finally {
      await close();
    }
  });

  test('a config path that is a symlink to a directory, swapped twice with the old directories kept', async () => {
    const root = tmp('swap');
    version(path.join(root, 'v1'), 100);
    fs.symlinkSync('v1', path.join(root, 'current'));
    const { server, client, close } = await serve(['--config', path.join(root, 'current')], { CONFIG_POLL_INTERVAL: '0' });
    const live = (n: number, what: string) => until(async () => (await limitOf(client)) === n, 3000, what);
    try {
      assert.equal(await limitOf(client), 100);
      version(path.join(root, 'v2'), 200);
      swap(path.join(root, 'current'), 'v2');
      await live(200, 'first swap');
      version(path.join(root, 'v3'), 300);
      swap(path.join(root, 'current'), 'v3');
      await live(300, 'second swap');
      fs.writeFileSync(path.join(root, 'v3', 'ops.yaml'), rules(310));
      await live(310, 'edit in the new directory');
      assert.equal(reloads(server, 'poll'), 0);
    } finally {
      await close();
    }
  });

  test('the periodic fingerprint check reloads what the watch missed, with trigger poll; 0 turns it off', async () => {
    const dir = tmp('poll');
    const file = path.join(dir, 'ops.yaml');
    fs.writeFileSync(file, rules(1));
    const { logger } = captureLogger();
    const calls: string[] = [];
    // A debounce of an hour: no watch event can lead to a reload during this test.
    const polled = new ConfigWatcher({ paths: [dir], reload: (t) => calls.push(t), logger, debounceMs: 3_600_000, pollIntervalMs: 50 });
    const off = new ConfigWatcher({ paths: [dir], reload: (t) => calls.push(`off:${t}`), logger, debounceMs: 3_600_000, pollIntervalMs: 0 });
    polled.start();
    off.start();
    try {
      fs.writeFileSync(file, rules(2));
      await until(() => calls.length > 0, 2000, 'poll');
      assert.deepEqual(calls, ['poll']);
      await sleep(200);
      assert.deepEqual(calls, ['poll'], 'one reload per change, none from the watcher with polling off');
    } finally {
      polled.stop();
      off.stop();
    }
  });

  test('every reload attempt is logged with its trigger: startup, watch, signal', async () => {
    const dir = tmp('triggers');
    const file = path.join(dir, 'ops.yaml');
    fs.writeFileSync(file, rules(1));
    const { server, client, close } = await serve(['--config', dir]);
    try {
      assert.equal(reloads(server, 'startup'), 1);
      fs.writeFileSync(`${file}.tmp`, rules(2));
      fs.renameSync(`${file}.tmp`, file);
      await until(() => server.logs.some((l) => l.event === 'config_loaded' && l.trigger === 'watch'), 3000, 'watch reload');
      server.child.kill('SIGHUP');
      await until(() => reloads(server, 'signal') === 1, 3000, 'signal reload');
      const loaded = server.logs.filter((l) => l.event === 'config_loaded').map((l) => l.trigger);
      assert.equal(loaded[0], 'startup');
      assert.equal(loaded.at(-1), 'signal');
      assert.ok(
        loaded.slice(1, -1).every((t) => t === 'watch'),
        String(loaded),
      );
      // Every attempt has its config_reload line, and every config_reload ends in loaded or rejected.
      const attempts = server.logs.filter((l) => l.event === 'config_reload').length;
      const outcomes = server.logs.filter((l) => l.event === 'config_loaded' || l.event === 'config_rejected').length;
      assert.equal(attempts, outcomes);
      assert.equal(await limitOf(client), 2);
      const watch = server.logs.find((l) => l.event === 'config_watch');
      assert.equal(watch?.pollIntervalMs, 5000);
    } finally {
      await close();
    }
  });
});
