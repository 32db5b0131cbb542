import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { formatDuration, parseDuration } from '../../../src/config/duration';
import { loadConfig, loadConfigSources } from '../../../src/config/load';

const FIXTURES = path.resolve(__dirname, '../../../../test/fixtures/config');
const BAD = path.join(FIXTURES, 'bad');
const GOOD = path.join(FIXTURES, 'good');

const VALID_ALGORITHMS = 'valid: fixed_window, sliding_window, token_bucket, gcra';
const VALID_UNITS = 'valid: second, minute, hour, day, week, month, year';
const MERGE_HINT = 'one file per domain, or pass --merge-domain-config (MERGE_DOMAIN_CONFIG=true) to merge their descriptors';
const NOT_A_DURATION = 'expected one like "500ms", "30s", "5m", "1h", "2d", "1w" or "1h30m"';

// fixture → the [line, detail] of every error it must produce, in order.
const BAD_CASES: Record<string, [number | undefined, string][]> = {
  'yaml_syntax.yaml': [[1, "YAML syntax error at column 1: the string opened here with ' is never closed (no matching ' before the end of the file)"]],
  'bad_lease.yaml': [
    [7, "'lease' must be a map {size: N}, got '5'"],
    [12, "'size' must be a positive integer, got '0'"],
    [12, "'lease' needs a positive integer 'size'"],
  ],
  'bad_ip_prefix.yaml': [
    [7, "'ip_prefix' v4 must be 0..32, got 33"],
    [12, "'ip_prefix' must be true or a map {v4: 0..32, v6: 0..128}, got '/24'"],
  ],
  'top_level_not_map.yaml': [[1, "error loading config file: the top level must be a map with 'domain' and 'descriptors', got a list"]],
  'empty_domain.yaml': [[undefined, 'config file cannot have empty domain']],
  'duplicate_domain.yaml': [[2, `duplicate domain 'test-domain' in config file (already declared in ${path.join(GOOD, 'basic.yaml')}:2): ${MERGE_HINT}`]],
  'empty_key.yaml': [[3, 'descriptor has empty key']],
  'duplicate_key.yaml': [
    [9, "duplicate descriptor composite key 'd.key1.sub_x*'"],
    [11, "duplicate descriptor composite key 'd.key1_value1'"],
    [13, "duplicate descriptor composite key 'd.key1'"],
  ],
  'unknown_key.yaml': [
    [5, "config error, unknown key 'ratelimit' (did you mean 'rate_limit'?)"],
    [11, "config error, unknown key 'requestsperunit' (did you mean 'requests_per_unit'?)"],
    [16, "config error, unknown key 'shadow_mode' (allowed only in a descriptor)"],
  ],
  'non_string_key.yaml': [
    [1, 'config error, key is not of type string: 0.25'],
    [5, 'config error, key is not of type string: true'],
  ],
  'non_map_list.yaml': [
    [3, 'config error, yaml file contains list of type other than map: a'],
    [9, 'config error, yaml file contains list of type other than map: just-a-name'],
  ],
  'bad_unit.yaml': [[6, `invalid rate limit unit 'foo' (${VALID_UNITS})`]],
  'unlimited_with_unit.yaml': [[6, 'should not specify rate limit unit when unlimited']],
  'replaces_empty.yaml': [[9, 'should not have an empty replaces entry']],
  'replaces_self.yaml': [[8, 'replaces should not contain name of same descriptor']],
  'share_threshold_without_wildcard.yaml': [[3, "share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files/a'"]],
  'wrong_type_integer.yaml': [
    [6, "'requests_per_unit' must be an integer from 0 to 4294967295, got 'ten'"],
    [10, "'requests_per_unit' must be an integer from 0 to 4294967295, got '-1'"],
    [14, "'requests_per_unit' must be an integer from 0 to 4294967295, got '1.5'"],
    [18, "'requests_per_unit' must be an integer from 0 to 4294967295, got '4294967296'"],
    [22, `'requests_per_unit' must be an integer from 0 to 4294967295, got the string "10"`],
  ],
  'wrong_type_bool.yaml': [
    [4, "'shadow_mode' must be true or false, got 'maybe'"],
    [8, "'unlimited' must be true or false, got '1'"],
  ],
  'wrong_type_list.yaml': [
    [4, "'descriptors' must be a list of descriptors (maps), got a map"],
    [10, "'replaces' must be a list of {name: ...} maps, got 'general'"],
  ],
  'wrong_type_map.yaml': [
    [4, "'rate_limit' must be a map, got '10/minute'"],
    [6, "'metadata' must be a map, got 'service_1'"],
  ],
  'wrong_type_string.yaml': [
    [1, "'domain' must be a string, got a list"],
    [3, "'key' must be a string, got a map"],
    [4, "'value' must be a string, got a list"],
    [6, "'unit' must be a string, got a list"],
  ],
  'unknown_algorithm.yaml': [[5, `invalid rate limit algorithm 'leaky_bucket' (${VALID_ALGORITHMS})`]],
  'burst_without_bucket.yaml': [
    [7, "'burst' only applies to algorithm token_bucket or gcra, not fixed_window"],
    [13, "'burst' only applies to algorithm token_bucket or gcra, not sliding_window"],
  ],
  'not_positive_integer.yaml': [
    [8, "'burst' must be a positive integer, got '0'"],
    [12, "'unit_multiplier' must be a positive integer, got '-2'"],
  ],
  'bad_window.yaml': [
    [5, `invalid window: "5 minutes" is not a duration: ${NOT_A_DURATION}`],
    [9, 'invalid window: "0s" must be longer than zero'],
    [13, `invalid window: "300" is not a duration: ${NOT_A_DURATION}`],
  ],
  'window_and_multiplier.yaml': [[7, "'window' and 'unit_multiplier' are mutually exclusive"]],
  // A window next to a unit must be exactly one unit: Envoy is told N per that unit (issue 34, item 4).
  'window_unit_disagree.yaml': [
    [
      6,
      "'window: 90s' disagrees with 'unit: hour': given together, the window must be exactly one hour. Drop 'unit' (Envoy is then told 4 per MINUTE) or write 'window: 1h'",
    ],
    [
      10,
      "'window: 2h' disagrees with 'unit: hour': given together, the window must be exactly one hour. Drop 'unit' (Envoy is then told 4 per HOUR) or write 'window: 1h'",
    ],
    [
      21,
      "'window: 500ms' disagrees with 'unit: month': given together, the window must be exactly one month. Drop 'unit' (Envoy is then told 4 per SECOND) or write 'window: 30d'",
    ],
  ],
  'missing_unit.yaml': [
    [4, "invalid rate limit unit '': a rate_limit needs 'unit' (second, minute, hour, day, week, month, year) or 'window' (or 'unlimited: true')"],
  ],
  'unlimited_with_extension.yaml': [
    [6, "should not specify 'window' when unlimited"],
    [7, "should not specify 'algorithm' when unlimited"],
  ],
  'many_errors.yaml': [
    [6, `invalid rate limit unit 'fortnight' (${VALID_UNITS})`],
    [8, 'descriptor has empty key'],
    [15, `invalid rate limit algorithm 'nope' (${VALID_ALGORITHMS})`],
    [16, "duplicate descriptor composite key 'd.b.c'"],
  ],
  // Config that would take the process down or stall it (issue 9, item 2).
  'alias_bomb.yaml': [[8, 'config limit: aliases expand to more than 1000000 YAML nodes (an alias bomb?)']],
  'alias_descriptor_tree.yaml': [[5, 'config limit: more than 100000 descriptors (CONFIG_MAX_DESCRIPTORS; an alias counts each time it is used)']],
  'alias_cycle.yaml': [[5, 'error loading config file: alias *all refers to a node that contains it']],
  'unknown_anchor.yaml': [[4, "error loading config file: unknown anchor 'standard' referenced"]],
  'deep_nesting.yaml': [[5, 'config limit: YAML nested deeper than 64 levels']],
  'deep_nesting_parser.yaml': [[5, 'config limit: YAML nested too deeply to parse (more than 64 levels are refused)']],
};

function pathsFor(fixture: string): string[] {
  const file = path.join(BAD, fixture);
  // A duplicate domain needs a first file that already declares it.
  return fixture === 'duplicate_domain.yaml' ? [path.join(GOOD, 'basic.yaml'), file] : [file];
}

for (const [fixture, expected] of Object.entries(BAD_CASES)) {
  test(`bad fixture ${fixture} reports every error with file and line`, () => {
    const file = path.join(BAD, fixture);
    const result = loadConfig(pathsFor(fixture), { mergeDomains: false });
    assert.equal(result.config, undefined);
    assert.deepEqual(
      result.errors.map((e) => [e.line, e.detail]),
      expected,
    );
    for (const e of result.errors) {
      assert.equal(e.file, file);
      const where = e.line === undefined ? file : `${file}:${e.line}`;
      assert.equal(e.message, `${where}: ${e.detail}`);
    }
  });
}

test('every bad fixture has a test case', () => {
  assert.deepEqual(fs.readdirSync(BAD).sort(), Object.keys(BAD_CASES).sort());
});

test('errors of several files are all collected, in load order', () => {
  const files = ['bad_unit.yaml', 'empty_key.yaml', 'replaces_self.yaml'].map((f) => path.join(BAD, f));
  const result = loadConfig(files, { mergeDomains: false });
  assert.equal(result.config, undefined);
  assert.deepEqual(
    result.errors.map((e) => [path.basename(e.file), e.line, e.detail]),
    [
      ['bad_unit.yaml', 6, `invalid rate limit unit 'foo' (${VALID_UNITS})`],
      ['empty_key.yaml', 1, `duplicate domain 'd' in config file (already declared in ${files[0]}:1): ${MERGE_HINT}`],
      ['empty_key.yaml', 3, 'descriptor has empty key'],
      ['replaces_self.yaml', 1, `duplicate domain 'd' in config file (already declared in ${files[0]}:1): ${MERGE_HINT}`],
      ['replaces_self.yaml', 8, 'replaces should not contain name of same descriptor'],
    ],
  );
});

test('the good fixtures load without errors, together', () => {
  const result = loadConfig([GOOD], { mergeDomains: false });
  assert.deepEqual(result.errors, []);
  assert.ok(result.config);
  assert.equal(result.config.files.length, fs.readdirSync(GOOD).length);
});

test('an empty file has an empty domain; a file without descriptors is fine', () => {
  const empty = loadConfigSources([{ file: 'empty.yaml', text: '' }], { mergeDomains: false });
  assert.deepEqual(
    empty.errors.map((e) => e.message),
    ['empty.yaml: config file cannot have empty domain'],
  );
  const comments = loadConfigSources([{ file: 'c.yaml', text: '# nothing\n' }], { mergeDomains: false });
  assert.equal(comments.errors.length, 1);
  const bare = loadConfigSources([{ file: 'b.yaml', text: 'domain: x\n' }], { mergeDomains: false });
  assert.deepEqual(bare.errors, []);
  assert.equal(bare.config?.domains.get('x')?.children.size, 0);
});

test('null values take upstream zero values', () => {
  const text = 'domain: d\ndescriptors:\n  - key: k\n    value:\n    shadow_mode:\n    rate_limit:\n';
  const result = loadConfigSources([{ file: 'n.yaml', text }], { mergeDomains: false });
  assert.deepEqual(result.errors, []);
  const node = result.config?.domains.get('d')?.children.get('k')?.defaultNode;
  assert.ok(node);
  assert.equal(node.rule, undefined);
});

test('parseDuration accepts compound durations and rejects anything else', () => {
  const ok: [string, number][] = [
    ['500ms', 500],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h', 3_600_000],
    ['2d', 172_800_000],
    ['1w', 604_800_000],
    ['1h30m', 5_400_000],
    ['1m30s250ms', 90_250],
    ['0s', 0],
  ];
  for (const [text, ms] of ok) assert.equal(parseDuration(text), ms, text);
  for (const bad of ['', '5', 'm', '1.5h', '30m1h', '1h1h', ' 5m', '5m ', '-5m', '5 m', '5min', '1y']) {
    assert.throws(() => parseDuration(bad), /duration/, bad);
  }
  assert.equal(formatDuration(5_400_000), '1h30m');
  assert.equal(formatDuration(500), '500ms');
  assert.equal(formatDuration(0), '0s');
});
