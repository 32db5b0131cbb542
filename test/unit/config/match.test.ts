import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { loadConfig } from '../../../src/config/load';
import { match, wildcardMatch } from '../../../src/config/match';
import type { CompiledConfig, MatchedLimit } from '../../../src/config/types';
import type { Descriptor, LimitOverride } from '../../../src/model';

const GOOD = path.resolve(__dirname, '../../../../test/fixtures/config/good');

function load(file: string): CompiledConfig {
  const result = loadConfig([path.join(GOOD, file)], { mergeDomains: false });
  assert.deepEqual(result.errors, []);
  assert.ok(result.config);
  return result.config;
}

function descriptor(pairs: [string, string][], limitOverride?: LimitOverride): Descriptor {
  return { entries: pairs.map(([key, value]) => ({ key, value })), limitOverride };
}

function find(config: CompiledConfig, domain: string, pairs: [string, string][]): MatchedLimit | undefined {
  return match(config, domain, descriptor(pairs));
}

function must(config: CompiledConfig, domain: string, pairs: [string, string][]): MatchedLimit {
  const m = find(config, domain, pairs);
  assert.ok(m, `expected a limit for ${JSON.stringify(pairs)}`);
  return m;
}

const basic = load('basic.yaml');
const T = 'test-domain';

test('unknown domain and empty descriptor have no limit', () => {
  assert.equal(find(basic, 'foo_domain', [['key2', 'x']]), undefined);
  assert.equal(find(basic, T, []), undefined);
});

test('nested, default and specific values (upstream basic config)', () => {
  assert.equal(find(basic, T, [['key1', 'something']]), undefined);
  assert.equal(find(basic, T, [['key1', 'value1']]), undefined);
  assert.equal(
    find(basic, T, [
      ['key2', 'value2'],
      ['subkey', 'subvalue'],
    ]),
    undefined,
  );
  assert.equal(
    find(basic, T, [
      ['key5', 'value5'],
      ['subkey5', 'subvalue'],
    ]),
    undefined,
  );
  assert.equal(find(basic, T, [['key2', 'value3']]), undefined, 'listed value without a limit is exempt');

  const sub = must(basic, T, [
    ['key1', 'value1'],
    ['subkey1', 'something'],
  ]);
  assert.equal(sub.rule.requestsPerUnit, 5);
  assert.equal(sub.rule.unit, 'second');
  assert.equal(sub.rule.fullKey, 'test-domain.key1_value1.subkey1');
  assert.equal(sub.statKey, 'test-domain.key1_value1.subkey1');
  assert.equal(sub.fromOverride, false);

  const specific = must(basic, T, [
    ['key1', 'value1'],
    ['subkey1', 'subvalue1'],
  ]);
  assert.equal(specific.rule.requestsPerUnit, 10);
  assert.equal(specific.statKey, 'test-domain.key1_value1.subkey1_subvalue1');

  const dflt = must(basic, T, [['key2', 'something']]);
  assert.deepEqual([dflt.rule.requestsPerUnit, dflt.rule.unit, dflt.statKey], [20, 'minute', 'test-domain.key2']);
  assert.equal(must(basic, T, [['key2', 'value2']]).rule.requestsPerUnit, 30);
  assert.equal(must(basic, T, [['key5', 'value5']]).rule.requestsPerUnit, 15);
  assert.equal(
    must(basic, T, [
      ['key5', 'value5'],
      ['subkey5', 'subvalue5'],
    ]).rule.requestsPerUnit,
    25,
  );
});

test('rule fields: unit case, name, unlimited, zero limit, defaults of our extensions', () => {
  const k3 = must(basic, T, [['key3', 'foo']]).rule;
  assert.deepEqual([k3.unit, k3.name, k3.periodMs], ['hour', '', 3_600_000]);
  const k4 = must(basic, T, [['key4', 'foo']]).rule;
  assert.deepEqual([k4.unit, k4.name], ['day', 'key4_rate_limit']);
  assert.equal(must(basic, T, [['key6', 'foo']]).rule.unlimited, true);
  assert.equal(must(basic, T, [['blocked', 'x']]).rule.requestsPerUnit, 0);
  const k2 = must(basic, T, [['key2', 'x']]).rule;
  assert.deepEqual([k2.algorithm, k2.burst, k2.periodMs], ['fixed_window', 20, 60_000]);
  assert.deepEqual(k2.source, { file: path.join(GOOD, 'basic.yaml'), line: 18 });
  assert.equal(must(basic, T, [['500', '0x1F']]).rule.fullKey, 'test-domain.500_0x1F');
});

test('detailed_metric puts request values in the stats key, not in fullKey', () => {
  const a = must(basic, T, [['key7', 'unspecified_value']]);
  assert.equal(a.statKey, 'test-domain.key7_unspecified_value');
  assert.equal(a.rule.fullKey, 'test-domain.key7');
  assert.equal(must(basic, T, [['key7', 'another_value']]).statKey, 'test-domain.key7_another_value');
});

test('counterEntries are the request entries when no share_threshold applies', () => {
  const d = descriptor([['key2', 'abc']]);
  assert.equal(match(basic, T, d)?.counterEntries, d.entries);
});

test('a request override is used as is, without looking at config', () => {
  const override = { requestsPerUnit: 42, unit: 'hour' as const };
  assert.equal(match(basic, 'foo_domain', descriptor([['key1', 'value1']], override)), undefined);
  const m = match(
    basic,
    T,
    descriptor(
      [
        ['key1', 'value1'],
        ['subkey1', 'something'],
      ],
      override,
    ),
  );
  assert.ok(m);
  assert.equal(m.fromOverride, true);
  assert.equal(m.rule.fullKey, 'test-domain.key1_value1.subkey1_something');
  assert.equal(m.statKey, 'test-domain.key1_value1.subkey1_something');
  const r = m.rule;
  assert.deepEqual(
    [r.requestsPerUnit, r.unit, r.periodMs, r.burst, r.algorithm, r.name, r.shadowMode, r.unlimited],
    [42, 'hour', 3_600_000, 42, 'fixed_window', '', false, false],
  );
  const unconfigured = match(
    basic,
    T,
    descriptor(
      [
        ['nokey', 'x'],
        ['empty', ''],
      ],
      override,
    ),
  );
  assert.equal(unconfigured?.statKey, 'test-domain.nokey_x.empty');
});

const wild = load('wildcard.yaml');
const W = 'wildcard-domain';

test('wildcards: exact value first, then patterns in declaration order, then default', () => {
  const foo1 = must(wild, W, [['wild', 'foo1']]);
  assert.equal(foo1.rule, must(wild, W, [['wild', 'foo2']]).rule);
  assert.equal(foo1.rule.requestsPerUnit, 20);
  assert.equal(foo1.statKey, 'wildcard-domain.wild_foo*');
  assert.equal(foo1.rule.fullKey, 'wildcard-domain.wild_foo*');
  assert.equal(must(wild, W, [['wild', 'foo']]).rule.requestsPerUnit, 20, 'foo* is declared before fo*');
  assert.equal(must(wild, W, [['wild', 'fox']]).rule.requestsPerUnit, 21);
  assert.equal(must(wild, W, [['wild', 'foo-exact']]).rule.requestsPerUnit, 22);
  assert.equal(must(wild, W, [['wild', 'bar']]).rule.requestsPerUnit, 23);
  assert.equal(find(wild, W, [['noWild', 'foo1']]), undefined);
  const nested = must(wild, W, [
    ['nestedWild', 'val1'],
    ['wild', 'goo2'],
  ]);
  assert.equal(nested.statKey, 'wildcard-domain.nestedWild_val1.wild_goo*');
});

test('wildcards: middle and multiple stars', () => {
  for (const v of ['barab', 'bar123b', 'barb']) assert.ok(find(wild, W, [['midWild', v]]), v);
  for (const v of ['bara', 'xbarb']) assert.equal(find(wild, W, [['midWild', v]]), undefined, v);
  for (const v of ['foo123bar456baz', 'foobarbaz']) {
    assert.equal(must(wild, W, [['multiWild', v]]).statKey, 'wildcard-domain.multiWild_foo*bar*baz');
  }
  for (const v of ['foo123baz', 'bar456baz', 'foobaz']) assert.equal(find(wild, W, [['multiWild', v]]), undefined, v);
  assert.ok(find(wild, W, [['any', '']]), "'*' matches an empty value");
  assert.ok(find(wild, W, [['any', 'x.y/z']]));
});

test('wildcardMatch edge cases', () => {
  assert.equal(wildcardMatch(['a', 'a'], 'a'), false, 'prefix and suffix may not overlap');
  assert.equal(wildcardMatch(['a', 'a'], 'aa'), true);
  assert.equal(wildcardMatch(['ab', 'ba'], 'aba'), false);
  assert.equal(wildcardMatch(['', 'x', ''], 'axb'), true);
  assert.equal(wildcardMatch(['a', 'x', 'b'], 'axb'), true);
  assert.equal(wildcardMatch(['a', 'x', 'b'], 'ab'), false);
  assert.equal(wildcardMatch(['a', 'b', 'b'], 'ab'), false, 'middle part must fit before the suffix');
  assert.equal(wildcardMatch(['exact'], 'exact'), true);
});

const share = load('share_threshold.yaml');
const S = 'share-domain';

function counterValues(m: MatchedLimit): string[] {
  return m.counterEntries.map((e) => e.value);
}

test('share_threshold: all values matching the pattern share one counter and stats key', () => {
  for (const v of ['files/a', 'files/b/c']) {
    const m = must(share, S, [['files', v]]);
    assert.equal(m.statKey, 'share-domain.files_files/*');
    assert.deepEqual(counterValues(m), ['files/*']);
  }
  const nested = must(share, S, [
    ['nested', 'parent'],
    ['files', 'nested/x'],
  ]);
  assert.equal(nested.statKey, 'share-domain.nested_parent.files_nested/*');
  assert.deepEqual(counterValues(nested), ['parent', 'nested/*']);
  const both = must(share, S, [
    ['files', 'top/a'],
    ['files', 'nested/b'],
  ]);
  assert.equal(both.statKey, 'share-domain.files_top/*.files_nested/*');
  assert.deepEqual(counterValues(both), ['top/*', 'nested/*']);
  const mid = must(share, S, [
    ['tenant', 't1prod'],
    ['resource', 'res-a-v2'],
  ]);
  assert.equal(mid.statKey, 'share-domain.tenant_t*prod.resource_res*v2');
});

test('share_threshold wins over value_to_metric and detailed_metric', () => {
  const route = must(share, S, [
    ['route', 'api/v1'],
    ['method', 'GET'],
  ]);
  assert.equal(route.statKey, 'share-domain.route_api/*.method');
  assert.deepEqual(counterValues(route), ['api/*', 'GET']);
  const svc = must(share, S, [
    ['service', 'svc/a'],
    ['endpoint', 'get'],
  ]);
  assert.equal(svc.statKey, 'share-domain.service_svc/*.endpoint_get');
});

test('share_threshold: only where set; exact values keep their own counter', () => {
  const mixed = must(share, S, [
    ['path', 'path/a'],
    ['file', 'file/b'],
    ['type', 'x'],
  ]);
  assert.equal(mixed.statKey, 'share-domain.path_path/*.file_file/*.type');
  assert.deepEqual(counterValues(mixed), ['path/*', 'file/b', 'x']);
  const exact = descriptor([['file', 'test1']]);
  const m = match(share, S, exact);
  assert.equal(m?.rule.requestsPerUnit, 50);
  assert.equal(m?.statKey, 'share-domain.file_test1');
  assert.equal(m?.counterEntries, exact.entries);
  const other = must(share, S, [['file', 'test2']]);
  assert.equal(other.rule.requestsPerUnit, 100);
  assert.deepEqual(counterValues(other), ['test*']);
});

const metrics = load('metrics.yaml');
const M = 'metrics-domain';

test('value_to_metric puts request values of flagged levels in the stats key', () => {
  const m = must(metrics, M, [
    ['route', 'draw'],
    ['http_method', 'GET'],
    ['subject_id', '123'],
  ]);
  assert.equal(m.statKey, 'metrics-domain.route_draw.http_method_GET.subject_id');
  assert.equal(m.rule.fullKey, 'metrics-domain.route.http_method.subject_id');
  const empty = must(metrics, M, [
    ['route', ''],
    ['http_method', ''],
    ['subject_id', '1'],
  ]);
  assert.equal(empty.statKey, 'metrics-domain.route.http_method.subject_id');
  assert.equal(
    must(metrics, M, [
      ['k1', 'X'],
      ['k2', 'Y'],
      ['k3', 'Z'],
    ]).statKey,
    'metrics-domain.k1.k2_Y.k3',
  );
  assert.equal(
    must(metrics, M, [
      ['plain', 'X'],
      ['leaf', 'Y'],
    ]).statKey,
    'metrics-domain.plain.leaf',
  );
  const wildcard = must(metrics, M, [
    ['user', 'alice'],
    ['action', 'readfile'],
    ['resource', 'docs'],
  ]);
  assert.equal(wildcard.statKey, 'metrics-domain.user_alice.action_readfile.resource');
  const configured = must(metrics, M, [
    ['configured', 'api'],
    ['http_method', 'GET'],
  ]);
  assert.equal(configured.statKey, 'metrics-domain.configured_api.http_method_GET');
});

test('a value_to_metric stats key holds its own request values only, whatever was matched before', () => {
  // match() keeps the shown values in one array reused across calls: a longer descriptor, and one
  // that stopped matching half way, leave values that a later, shorter key must not pick up.
  must(metrics, M, [
    ['route', 'draw'],
    ['http_method', 'GET'],
    ['subject_id', '123'],
  ]);
  assert.equal(
    find(metrics, M, [
      ['user', 'bob'],
      ['nothing', 'here'],
    ]),
    undefined,
  );
  const shorter = must(metrics, M, [
    ['configured', 'api'],
    ['http_method', 'GET'],
  ]);
  assert.equal(shorter.statKey, 'metrics-domain.configured_api.http_method_GET');
  assert.deepEqual(shorter.statParts, ['metrics-domain', 'configured_api', 'http_method_GET']);
  const unflagged = must(metrics, M, [
    ['plain', 'X'],
    ['leaf', 'Y'],
  ]);
  assert.equal(unflagged.statKey, 'metrics-domain.plain.leaf');
  assert.equal(unflagged.statParts, undefined);
});

test('detailed_metric overrides value_to_metric and works on a node with children', () => {
  const d = must(metrics, M, [
    ['detailed_route', 'draw'],
    ['subject_id', '123'],
  ]);
  assert.equal(d.statKey, 'metrics-domain.detailed_route_draw.subject_id_123');
  assert.equal(must(metrics, M, [['key-1', 'value-1']]).statKey, 'metrics-domain.key-1_value-1');
  const both = must(metrics, M, [
    ['key-1', 'value-1'],
    ['key-2', 'value-2'],
  ]);
  assert.equal(both.statKey, 'metrics-domain.key-1_value-1.key-2_value-2');
  // Upstream keeps the '_' of an empty value in detailed keys.
  assert.equal(must(metrics, M, [['key-1', '']]).statKey, 'metrics-domain.key-1_');
});

test('shadow_mode, quota_mode, replaces and metadata are read', () => {
  const modes = load('modes.yaml');
  const D = 'modes-domain';
  const shadow = must(modes, D, [['shadowed', 'x']]).rule;
  assert.deepEqual([shadow.shadowMode, shadow.quotaMode], [true, false]);
  const quota = must(modes, D, [['quota', 'x']]).rule;
  assert.deepEqual([quota.shadowMode, quota.quotaMode], [false, true]);
  const replacer = must(modes, D, [['replacer', 'x']]).rule;
  assert.equal(replacer.name, 'specific');
  assert.deepEqual(replacer.replaces, ['general', 'other']);
  assert.deepEqual(must(modes, D, [['with_metadata', 'x']]).rule.metadata, {
    name: 'service_1',
    nested: { list: [1, 'two', { three: 3 }] },
  });
  assert.equal(must(modes, D, [['quota', 'x']]).rule.metadata, undefined);
  const yesNo = must(modes, D, [['yes_no', 'x']]).rule;
  assert.deepEqual([yesNo.shadowMode, yesNo.quotaMode], [true, false], 'YAML 1.1 booleans, as yaml.v2');
});

test('extensions: algorithm, burst, unit_multiplier and window', () => {
  const ext = load('extensions.yaml');
  const rule = (key: string) => must(ext, 'ext-domain', [[key, 'v']]).rule;
  const cases: [string, string, string, number, number][] = [
    ['tb', 'token_bucket', 'second', 1_000, 50],
    ['gcra_default_burst', 'gcra', 'minute', 60_000, 60],
    ['sliding', 'sliding_window', 'minute', 60_000, 100],
    ['multiplied', 'fixed_window', 'minute', 300_000, 100],
    ['windowed', 'fixed_window', 'hour', 5_400_000, 100],
    ['short_window', 'fixed_window', 'second', 500, 3],
    ['window_with_unit', 'fixed_window', 'minute', 60_000, 7],
    ['week_window', 'fixed_window', 'week', 1_209_600_000, 7],
  ];
  for (const [key, algorithm, unit, periodMs, burst] of cases) {
    const r = rule(key);
    assert.deepEqual([r.algorithm, r.unit, r.periodMs, r.burst], [algorithm, unit, periodMs, burst], key);
  }
});

test('YAML anchors, aliases and merge keys', () => {
  const anchors = load('anchors.yaml');
  const rpu = (key: string) => must(anchors, 'anchor-domain', [[key, 'v']]).rule.requestsPerUnit;
  assert.deepEqual([rpu('a'), rpu('b'), rpu('c')], [10, 10, 99]);
  assert.equal(must(anchors, 'anchor-domain', [['c', 'v']]).rule.unit, 'minute');
});
