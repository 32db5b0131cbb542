import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { dumpConfig } from '../../../src/config/dump';
import { listConfigFiles, loadConfig } from '../../../src/config/load';
import { match } from '../../../src/config/match';

const FIXTURES = path.resolve(__dirname, '../../../../test/fixtures/config');
const TREE = path.join(FIXTURES, 'tree');
const MERGE = path.join(FIXTURES, 'merge');

test('a directory lists *.yaml and *.yml recursively, sorted, skipping dot entries', () => {
  const { files, errors } = listConfigFiles([TREE]);
  assert.deepEqual(errors, []);
  assert.deepEqual(files, [path.join(TREE, 'a.yaml'), path.join(TREE, 'sub/b.yml'), path.join(TREE, 'sub/deeper/c.YAML')]);
});

test('paths keep their order; a file is taken whatever its name', () => {
  const notes = path.join(TREE, 'sub/notes.txt');
  const { files } = listConfigFiles([notes, TREE]);
  assert.equal(files[0], notes);
  assert.equal(files.length, 4);
});

test('a missing path or a directory without YAML files is an error naming it', () => {
  const missing = path.join(FIXTURES, 'does-not-exist');
  const empty = path.join(FIXTURES, 'empty-dir');
  const result = loadConfig([missing, empty, path.join(MERGE, 'a.yaml')], { mergeDomains: false });
  assert.equal(result.config, undefined);
  assert.deepEqual(
    result.errors.map((e) => e.file),
    [missing, empty],
  );
  assert.match(result.errors[0].message, /^.*does-not-exist: cannot read config path: ENOENT/);
  assert.equal(result.errors[1].message, `${empty}: no config files (*.yaml, *.yml) in directory`);
});

test('Kubernetes ConfigMap mounts load each file once, through its symlink', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cm-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const stamp = path.join(dir, '..2024_01_01_00_00_00.123');
  fs.mkdirSync(stamp);
  fs.writeFileSync(path.join(stamp, 'limits.yaml'), 'domain: cm\n');
  fs.symlinkSync(path.basename(stamp), path.join(dir, '..data'));
  fs.symlinkSync(path.join('..data', 'limits.yaml'), path.join(dir, 'limits.yaml'));
  fs.symlinkSync('nowhere.yaml', path.join(dir, 'dangling.yaml'));
  fs.symlinkSync('.', path.join(dir, 'loop'));
  const { files, errors } = listConfigFiles([dir]);
  assert.deepEqual(errors, []);
  assert.deepEqual(files, [path.join(dir, 'limits.yaml')]);
  const result = loadConfig([dir], { mergeDomains: false });
  assert.deepEqual([...(result.config?.domains.keys() ?? [])], ['cm']);
});

test('the same domain in two files is an error unless merging', () => {
  const files = [path.join(MERGE, 'a.yaml'), path.join(MERGE, 'b.yaml')];
  const strict = loadConfig(files, { mergeDomains: false });
  assert.deepEqual(
    strict.errors.map((e) => e.message),
    [
      `${files[1]}:1: duplicate domain 'merged' in config file (already declared in ${files[0]}:1): ` +
        'one file per domain, or pass --merge-domain-config (MERGE_DOMAIN_CONFIG=true) to merge their descriptors',
    ],
  );
  const merged = loadConfig(files, { mergeDomains: true });
  assert.deepEqual(merged.errors, []);
  assert.ok(merged.config);
  const rpu = (key: string, value: string) => match(merged.config!, 'merged', { entries: [{ key, value }] })?.rule.requestsPerUnit;
  assert.equal(rpu('key1', 'value1'), 10);
  assert.equal(rpu('key2', 'value2'), 20);
  assert.deepEqual(merged.config.files, files);
});

test('merging domains still refuses a key defined in both files', () => {
  const dup = path.join(MERGE, 'dup.yaml');
  const result = loadConfig([path.join(MERGE, 'a.yaml'), dup], { mergeDomains: true });
  assert.deepEqual(
    result.errors.map((e) => e.message),
    [`${dup}:3: duplicate descriptor composite key 'merged.key1_value1'`],
  );
});

test('dumpConfig prints one upstream-style line per rule, with our extensions when not default', () => {
  const good = path.join(FIXTURES, 'good');
  const result = loadConfig([path.join(good, 'basic.yaml'), path.join(good, 'extensions.yaml')], {
    mergeDomains: false,
  });
  assert.ok(result.config);
  const lines = dumpConfig(result.config).split('\n');
  assert.equal(lines.at(-1), '');
  const flags = 'shadow_mode: false, quota_mode: false';
  assert.equal(lines[0], `test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, ${flags}`);
  assert.equal(lines[1], `test-domain.key1_value1.subkey1_subvalue1: unit=SECOND requests_per_unit=10, ${flags}`);
  assert.ok(lines.includes(`test-domain.key6: unlimited, ${flags}`));
  assert.ok(lines.includes(`ext-domain.tb: unit=SECOND requests_per_unit=10, ${flags}, algorithm=token_bucket period=1s burst=50`));
  assert.ok(lines.includes(`ext-domain.multiplied: unit=MINUTE requests_per_unit=100, ${flags}, algorithm=fixed_window period=300s`));
  assert.ok(lines.includes(`ext-domain.short_window: unit=SECOND requests_per_unit=3, ${flags}, algorithm=fixed_window period=0.5s`));
  assert.ok(lines.includes(`ext-domain.sliding: unit=MINUTE requests_per_unit=100, ${flags}, algorithm=sliding_window period=60s`));
  assert.equal(lines.length - 1, 12 + 8);
});
