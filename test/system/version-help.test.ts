import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import { defaultText } from '../../src/cli-help';
import { createLogger } from '../../src/logger';
import { SETTINGS } from '../../src/settings';
import { closing, startApp } from '../support/app';
import { REPO, runCli, spawnServer } from '../support/process';

const VERSION = (JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
const EXAMPLE = path.join(REPO, 'examples/config');

function buildInfo(exposition: string): { version: string; node: string; value: number }[] {
  return [...exposition.matchAll(/^sluice_build_info\{(.*)\} (\S+)$/gm)].map((m) => {
    const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="([^"]*)"/g)].map((l) => [l[1], l[2]]));
    return { version: labels.version, node: labels.node, value: Number(m[2]) };
  });
}

describe('the version', () => {
  for (const flag of ['--version', '-v']) {
    test(`sluice ${flag} prints package.json's version`, async () => {
      const { code, stdout, stderr } = await runCli([flag]);
      assert.equal(code, 0, stderr);
      assert.equal(stdout, `sluice ${VERSION}\n`);
    });
  }

  test('in the start-up log, /settings and sluice_build_info', async () => {
    let logs = '';
    const sink = new Writable({ write: (c: Buffer, _e, done) => ((logs += c.toString()), done()) });
    const s = await startApp({ configPaths: [EXAMPLE] }, { logger: createLogger('info', sink) });
    try {
      const starting = logs
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .find((l) => l.event === 'starting');
      assert.deepEqual(starting?.build, { version: VERSION, node: process.versions.node });
      assert.match(String(starting?.msg), new RegExp(`sluice ${VERSION.replace(/\./g, '\\.')} starting`));
      const settings = (await (await s.admin('/settings')).json()) as Record<string, unknown>;
      assert.equal(settings.version, VERSION);
      assert.equal(settings.node, process.versions.node);
      assert.deepEqual(buildInfo(await (await s.http('/metrics')).text()), [{ version: VERSION, node: process.versions.node, value: 1 }]);
    } finally {
      await s.stop();
    }
  });

  test('WORKERS=2: sluice_build_info is 1 for the set, not one per process', async () => {
    const server = await spawnServer(['--config', EXAMPLE], { WORKERS: '2', STORE: 'redis', REDIS_URL: '127.0.0.1:1' });
    try {
      await server.waitForLog((l) => l.event === 'listening' && l.worker === 2);
      await server.waitForLog((l) => l.event === 'listening' && l.worker === 1);
      const text = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text();
      assert.deepEqual(buildInfo(text), [{ version: VERSION, node: process.versions.node, value: 1 }]);
    } finally {
      await server.stop();
    }
  });
});

describe('--help', () => {
  test('short, grouped, with the defaults of the settings table, pointing to the full list', async () => {
    const { code, stdout } = await runCli(['--help']);
    assert.equal(code, 0);
    const lines = stdout.trimEnd().split('\n');
    assert.ok(lines.length <= 60, `${lines.length} lines`);
    for (const group of ['Listeners:', 'Config:', 'Store:', 'Logs, metrics, traces:']) assert.ok(lines.includes(group), group);
    const rows = lines.filter((l) => l.startsWith('  --'));
    assert.ok(rows.length >= 20, `${rows.length} settings shown`);
    for (const row of rows) {
      const flag = row.trim().split(' ')[0].slice(2);
      const spec = SETTINGS.find((s) => s.flag === flag);
      assert.ok(spec, row);
      // The column after the environment names is the table's default.
      assert.ok(row.includes(`  ${defaultText(spec)}  `), `${flag}: default ${defaultText(spec)} not shown in '${row}'`);
    }
    assert.match(stdout, /GRPC_PORT +8081 /);
    assert.match(stdout, /DRAIN_TIMEOUT +10s /);
    assert.match(stdout, /README\.md/);
    assert.match(stdout, /sluice help settings/);
    // `serve --help` and `help` are the same text.
    assert.equal((await runCli(['serve', '--help'])).stdout, stdout);
    assert.equal((await runCli(['help'])).stdout, stdout);
  });

  test('sluice help settings lists every setting with its default', async () => {
    const { code, stdout } = await runCli(['help', 'settings']);
    assert.equal(code, 0);
    for (const s of SETTINGS) assert.match(stdout, new RegExp(`^  --${s.flag}  .*  ${defaultText(s).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}  `, 'm'), s.flag);
  });

  for (const args of [
    ['check', '--help'],
    ['check', '-h'],
    ['help', 'check'],
  ]) {
    test(`sluice ${args.join(' ')} prints check's usage`, async () => {
      const { code, stdout } = await runCli(args);
      assert.equal(code, 0);
      assert.match(stdout, /^usage: sluice check/);
      assert.match(stdout, /--config-max-file-bytes/);
      assert.doesNotMatch(stdout, /--grpc-port/);
    });
  }

  for (const args of [
    ['simulate', '--help'],
    ['help', 'simulate'],
  ]) {
    test(`sluice ${args.join(' ')} prints simulate's usage`, async () => {
      const { code, stdout } = await runCli(args);
      assert.equal(code, 0);
      assert.match(stdout, /sluice simulate/);
      assert.doesNotMatch(stdout, /--grpc-port/);
    });
  }

  test('help on something unknown is a usage error naming the topics', async () => {
    const { code, stderr } = await runCli(['help', 'nope']);
    assert.equal(code, 2);
    assert.equal(stderr, "sluice: no help on 'nope' (serve, check, simulate, settings)\n");
  });
});
