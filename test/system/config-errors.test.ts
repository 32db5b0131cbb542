import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { describe, test } from 'node:test';
import { ManualClock } from '../../src/clock';
import { loadConfigSources } from '../../src/config/load';
import { closest, editDistance } from '../../src/config/suggest';
import { RateLimitResponse_RateLimit_Unit as Unit } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../src/logger';
import { d, startApp } from '../support/app';
import { REPO, runCli } from '../support/process';

// Config errors that say how to fix them, warnings for what upstream accepts but is surely a
// mistake, and a rejected config that is reported rather than hidden (issue 11).

const opts = { mergeDomains: false };

function errorsOf(text: string, file = 'c.yaml'): string[] {
  return loadConfigSources([{ file, text }], opts).errors.map((e) => e.message);
}

function tempConfig(t: { after: (fn: () => void) => void }, text: string): { dir: string; file: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-cfgerr-'));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'rules.yaml');
  fs.writeFileSync(file, text);
  return { dir, file };
}

// Every JSON line a logger writes, parsed.
function captureLogs(): { logger: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger('info', stream), lines };
}

describe('config errors say how to fix them', () => {
  test('an unknown key names the closest valid key at its place, or lists the valid ones', () => {
    const text = [
      'domain: d',
      'descriptors:',
      '  - key: a',
      '    vaule: x',
      '    rate_limit: {unit: minute, request_per_unit: 3}',
      '  - key: b',
      '    rate_limit: {unit: minute, requests_per_unit: 3, lease: {sise: 2}, replaces: [{nmae: x}]}',
      '  - key: c',
      '    rate_limit: {unit: minute, requests_per_unit: 3, colour: red}',
      '  - key: e',
      '    rate_limit: {unit: minute, requestsPerUnit: 3}',
      '  - key: f',
      '    unit: minute',
      '',
    ].join('\n');
    assert.deepEqual(errorsOf(text), [
      "c.yaml:4: config error, unknown key 'vaule' (did you mean 'value'?)",
      "c.yaml:5: config error, unknown key 'request_per_unit' (did you mean 'requests_per_unit'?)",
      "c.yaml:7: config error, unknown key 'nmae' (did you mean 'name'?)",
      "c.yaml:7: config error, unknown key 'sise' (did you mean 'size'?)",
      "c.yaml:7: 'lease' needs a positive integer 'size'",
      "c.yaml:9: config error, unknown key 'colour' (valid here: unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, unit_multiplier, window, ip_prefix, lease)",
      "c.yaml:11: config error, unknown key 'requestsPerUnit' (did you mean 'requests_per_unit'?)",
      "c.yaml:13: config error, unknown key 'unit' (allowed only inside rate_limit)",
    ]);
    assert.deepEqual(errorsOf('domian: d\n'), [
      'c.yaml: config file cannot have empty domain',
      "c.yaml:1: config error, unknown key 'domian' (did you mean 'domain'?)",
    ]);
  });

  test('a value outside a fixed set lists the valid values, the closest first', () => {
    const text = [
      'domain: d',
      'descriptors:',
      '  - key: a',
      '    rate_limit: {unit: minutes, requests_per_unit: 3}',
      '  - key: b',
      '    rate_limit: {unit: fortnight, requests_per_unit: 3}',
      '  - key: c',
      '    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: token-bucket}',
      '',
    ].join('\n');
    const units = 'second, minute, hour, day, week, month, year';
    assert.deepEqual(errorsOf(text), [
      `c.yaml:4: invalid rate limit unit 'minutes' (did you mean 'minute'? valid: ${units})`,
      `c.yaml:6: invalid rate limit unit 'fortnight' (valid: ${units})`,
      "c.yaml:8: invalid rate limit algorithm 'token-bucket' (did you mean 'token_bucket'? valid: fixed_window, sliding_window, token_bucket, gcra)",
    ]);
  });

  test('a YAML syntax error gives the line and column where the problem starts', () => {
    const unclosed = "domain: d\ndescriptors:\n  - key: 'tenant\n    value: x\n  - key: b\n";
    assert.deepEqual(errorsOf(unclosed), [
      "c.yaml:3: YAML syntax error at column 10: the string opened here with ' is never closed (no matching ' before the end of the file)",
    ]);
    assert.deepEqual(errorsOf('domain: d\ndescriptors:\n  - key: a\n    value: "x\n'), [
      'c.yaml:4: YAML syntax error at column 12: the string opened here with " is never closed (no matching " before the end of the file)',
    ]);
    assert.deepEqual(errorsOf('domain: d\ndescriptors:\n\t- key: a\n'), [
      'c.yaml:3: YAML syntax error at column 1: Tabs are not allowed as indentation (YAML indents with spaces only: replace the tab)',
    ]);
    assert.deepEqual(errorsOf('domain: d\ndescriptors:\n  - key: a\n    value: b: c\n'), [
      "c.yaml:4: YAML syntax error at column 12: Nested mappings are not allowed in compact mappings (a value containing ': ' must be quoted)",
    ]);
  });

  test('a duplicate map key is named, with the line of its first use', () => {
    const text = 'domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      unit: second\n  - {key: b, key: c}\n';
    assert.deepEqual(errorsOf(text), [
      "c.yaml:6: duplicate key 'unit' at column 7 (first given at line 5): a map may have each key once; remove or merge one of them",
      "c.yaml:7: duplicate key 'key' at column 14 (first given at line 7): a map may have each key once; remove or merge one of them",
    ]);
  });

  test('a domain declared twice names both files and the flag that merges them', () => {
    const result = loadConfigSources(
      [
        { file: 'a.yaml', text: '# first\ndomain: shop\n' },
        { file: 'b.yaml', text: 'domain: shop\n' },
      ],
      opts,
    );
    assert.deepEqual(
      result.errors.map((e) => e.message),
      [
        "b.yaml:1: duplicate domain 'shop' in config file (already declared in a.yaml:2): " +
          'one file per domain, or pass --merge-domain-config (MERGE_DOMAIN_CONFIG=true) to merge their descriptors',
      ],
    );
    const merged = loadConfigSources(
      [
        { file: 'a.yaml', text: 'domain: shop\n' },
        { file: 'b.yaml', text: 'domain: shop\n' },
      ],
      { mergeDomains: true },
    );
    assert.deepEqual(merged.errors, []);
  });

  test('the closest word: typos, swapped letters, case and separators; nothing when far', () => {
    assert.equal(editDistance('reqeusts', 'requests'), 1);
    assert.equal(editDistance('rate_limit', 'ratelimit'), 1);
    assert.equal(closest('requests-per-unit', ['unit', 'requests_per_unit']), 'requests_per_unit');
    assert.equal(closest('Minute', ['second', 'minute']), 'minute');
    assert.equal(closest('foo', ['second', 'minute', 'hour', 'day']), undefined);
    assert.equal(closest('descriptor', ['descriptors', 'domain']), 'descriptors');
  });
});

describe('a rule without requests_per_unit', () => {
  const NO_RPU = 'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n';

  test('is accepted, as upstream accepts it, with a warning naming file, line and what to write', () => {
    const text = `${NO_RPU}  - key: zero\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: free\n    rate_limit: {unlimited: true}\n  - key: nulled\n    rate_limit: {unit: hour, requests_per_unit: }\n`;
    const result = loadConfigSources([{ file: 'w.yaml', text }], opts);
    assert.deepEqual(result.errors, []);
    assert.equal(result.config?.domains.get('d')?.children.get('k')?.defaultNode?.rule?.requestsPerUnit, 0);
    assert.deepEqual(
      result.warnings.map((w) => [w.file, w.line, w.detail]),
      [
        [
          'w.yaml',
          4,
          "rate_limit of 'd.k' has no 'requests_per_unit': its limit is 0 per minute, so it denies every request " +
            "(accepted, as envoyproxy/ratelimit does); set requests_per_unit, or 'unlimited: true' to never limit, " +
            "or 'requests_per_unit: 0' to say that denying everything is meant",
        ],
        ['w.yaml', 11, result.warnings[1]?.detail],
      ],
    );
    assert.match(result.warnings[1].detail, /^rate_limit of 'd\.nulled' has no 'requests_per_unit': its limit is 0 per hour/);
  });

  test('`sluice check` prints the warning and exits 0', async (t) => {
    const { file } = tempConfig(t, NO_RPU);
    const { code, stdout, stderr } = await runCli(['check', file]);
    assert.equal(code, 0);
    assert.equal(stdout, 'OK: 1 file(s), domains: d, 1 warning(s)\n');
    assert.equal(stderr.split('\n')[0].startsWith(`${file}:4: warning: rate_limit of 'd.k' has no 'requests_per_unit'`), true, stderr);
    const both = await runCli(['check', file, path.join(REPO, 'test/fixtures/config/bad/bad_unit.yaml')]);
    assert.equal(both.code, 1);
    assert.match(both.stderr, /warning: rate_limit of 'd\.k'/);
    assert.match(both.stderr, /sluice check: 2 error\(s\), 1 warning\(s\)\n$/);
  });

  test('is logged as a warning at every load', async (t) => {
    const { file } = tempConfig(t, NO_RPU);
    const { logger, lines } = captureLogs();
    const s = await startApp({ configPaths: [file] }, { logger });
    try {
      const warning = lines.find((l) => l.event === 'config_warning');
      assert.equal(warning?.level, 'warn');
      assert.equal(warning?.file, file);
      assert.equal(warning?.line, 4);
      assert.match(String(warning?.msg), /^.*rules\.yaml:4: warning: rate_limit of 'd\.k' has no 'requests_per_unit'/);
      assert.equal(lines.find((l) => l.event === 'config_loaded')?.warnings, 1);
      s.app.reloadConfig();
      assert.equal(lines.filter((l) => l.event === 'config_warning').length, 2);
    } finally {
      await s.stop();
    }
  });

  test('denies with one reset time: Retry-After is the reset the status gives', async (t) => {
    const { file } = tempConfig(t, `${NO_RPU}  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 10}\n`);
    // 6 s into a minute window: the window resets in 54 s.
    const s = await startApp({ configPaths: [file], responseHeadersEnabled: true }, { clock: new ManualClock(1_800_000_006_000) });
    try {
      const res = await s.http('/json', { method: 'POST', body: JSON.stringify({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'x' }] }] }) });
      assert.equal(res.status, 429);
      const json = (await res.json()) as { statuses: { durationUntilReset: string; limitRemaining: number }[] };
      assert.equal(json.statuses[0].durationUntilReset, '54s');
      assert.equal(json.statuses[0].limitRemaining, 0);
      assert.equal(res.headers.get('retry-after'), '54');
      assert.equal(res.headers.get('ratelimit-reset'), '54');
      const grpc = await s.call({ domain: 'd', descriptors: [d(['k', 'y'])] });
      assert.equal(grpc.statuses[0].durationUntilReset?.seconds, 54);
      assert.equal(grpc.responseHeadersToAdd.find((h) => h.key === 'Retry-After')?.value, '54');
      // Likewise more hits than the limit, which can never pass either.
      const big = await s.call({ domain: 'd', hitsAddend: 11, descriptors: [d(['tenant', 'acme'])] });
      assert.equal(big.statuses[0].durationUntilReset?.seconds, 54);
      assert.equal(big.responseHeadersToAdd.find((h) => h.key === 'Retry-After')?.value, '54');
    } finally {
      await s.stop();
    }
  });
});

describe('a rejected config is reported, never hidden', () => {
  const GOOD = 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n';
  const BAD = 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes, requests_per_unit: 5}\n';
  const SINCE = /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/;

  test('starting on a bad config: no "last good config" claimed; readiness says why', async (t) => {
    const { dir, file } = tempConfig(t, BAD);
    const { logger, lines } = captureLogs();
    const s = await startApp({ configPaths: [dir] }, { logger });
    try {
      const rejected = lines.find((l) => l.event === 'config_rejected');
      assert.equal(rejected?.keptPrevious, false);
      assert.equal(rejected?.msg, 'config rejected (1 error(s)); no config is loaded: requests are answered UNAVAILABLE until a valid one is');
      assert.doesNotMatch(JSON.stringify(lines), /last good config/);
      const listening = lines.find((l) => l.event === 'listening');
      assert.equal(
        listening?.msg,
        `sluice listening: gRPC 127.0.0.1:${s.grpcPort}, HTTP 127.0.0.1:${s.httpPort}, admin 127.0.0.1:${s.adminPort}, store memory, config ${dir} (not loaded: 1 error(s))`,
      );
      const health = await s.http('/healthcheck');
      assert.equal(health.status, 500);
      const body = await health.text();
      assert.match(body, /^NOT_SERVING: no config loaded \(config rejected since (\S+): (.*)\)\n$/);
      assert.match(body, SINCE);
      assert.ok(body.includes(`${file}:4: invalid rate limit unit 'minutes' (did you mean 'minute'?`), body);

      fs.writeFileSync(file, GOOD);
      assert.equal(s.app.reloadConfig().ok, true);
      const ok = await s.http('/healthcheck');
      assert.equal(ok.status, 200);
      assert.equal(await ok.text(), 'OK');
    } finally {
      await s.stop();
    }
  });

  test('a rejected reload keeps readiness at 200 and says since when and why, until a good one', async (t) => {
    const { file } = tempConfig(t, GOOD);
    const { logger, lines } = captureLogs();
    const s = await startApp({ configPaths: [file] }, { logger });
    try {
      assert.equal(await (await s.http('/healthcheck')).text(), 'OK');
      fs.writeFileSync(file, BAD);
      assert.equal(s.app.reloadConfig().ok, false);
      const rejected = lines.filter((l) => l.event === 'config_rejected').at(-1);
      assert.equal(rejected?.keptPrevious, true);
      assert.match(String(rejected?.msg), /^config rejected \(1 error\(s\)\); keeping the config loaded at \d{4}-.*Z$/);

      const first = await s.http('/healthcheck');
      assert.equal(first.status, 200);
      const body = await first.text();
      const m = /^OK \(config reload rejected since (\S+): (.*); still serving the last good config\)$/.exec(body);
      assert.ok(m, body);
      const since = m[1];
      assert.match(since, SINCE);
      assert.ok(m[2].startsWith(`${file}:4: invalid rate limit unit 'minutes'`), m[2]);
      for (const probe of [s.http('/readyz'), s.admin('/healthcheck')]) {
        const r = await probe;
        assert.equal(r.status, 200);
        assert.equal(await r.text(), body);
      }
      assert.equal(s.app.health.status, 'SERVING', 'gRPC health stays SERVING');

      // Rejected again, with other errors: the same "since", the latest errors.
      fs.writeFileSync(file, 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: -1}\n  - key: \n');
      await new Promise((r) => setTimeout(r, 5));
      s.app.reloadConfig();
      const again = await (await s.http('/healthcheck')).text();
      assert.ok(again.startsWith(`OK (config reload rejected since ${since}: ${file}:4: 'requests_per_unit' must be`), again);
      assert.ok(again.endsWith(' (and 1 more error(s)); still serving the last good config)'), again);
      // The last good config still answers.
      assert.equal((await s.call({ domain: 'd', descriptors: [d(['k', 'v'])] })).statuses[0].currentLimit?.requestsPerUnit, 5);

      fs.writeFileSync(file, GOOD.replace('5', '6'));
      assert.equal(s.app.reloadConfig().ok, true);
      assert.equal(await (await s.http('/healthcheck')).text(), 'OK');
    } finally {
      await s.stop();
    }
  });
});

// docs/configuration.md's `sluice check` sample is what the tool prints: each `npx sluice check ARGS` line is run
// (as `node dist/src/main.js check ARGS`, which `npx sluice` runs) and the `# ` lines after it are
// its output, stdout and stderr together.
test('the docs/configuration.md sample of `sluice check` is exactly what the tool prints', async () => {
  const readme = fs.readFileSync(path.join(REPO, 'docs/configuration.md'), 'utf8');
  const block = /Validate without starting:\n\n```sh\n([\s\S]*?)```/.exec(readme);
  assert.ok(block, 'docs/configuration.md has the `sluice check` sample');
  const commands: { args: string[]; expected: string[] }[] = [];
  for (const line of block[1].trimEnd().split('\n')) {
    if (line.startsWith('# ')) commands.at(-1)?.expected.push(line.slice(2));
    else commands.push({ args: line.replace(/#.*$/, '').trim().split(/\s+/).slice(2), expected: [] });
  }
  assert.equal(commands.length, 2);
  for (const c of commands) {
    assert.equal(c.args[0], 'check');
    const { stdout, stderr } = await runCli(c.args);
    assert.deepEqual(
      [...stderr.split('\n'), ...stdout.split('\n')].filter((l) => l !== ''),
      c.expected,
      c.args.join(' '),
    );
  }
});

// Envoy's current_limit can only say "N per unit" (issue 34, item 4). A window next to a unit must
// be exactly that unit; a window alone is reported as N per the largest unit not longer than it,
// and `sluice check` says so for every rule whose window is not one unit.
describe('window and unit', () => {
  const WINDOWS = [
    'domain: w',
    'descriptors:',
    '  - key: s90',
    '    rate_limit: {window: 90s, requests_per_unit: 4}',
    '  - key: m2',
    '    rate_limit: {window: 2m, requests_per_unit: 10}',
    '  - key: h1',
    '    rate_limit: {window: 1h, requests_per_unit: 100}',
    '  - key: h36',
    '    rate_limit: {window: 36h, requests_per_unit: 1000}',
    '  - key: half',
    '    rate_limit: {window: 500ms, requests_per_unit: 3}',
    '  - key: five_minutes',
    '    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 7}',
    '  - key: agrees',
    '    rate_limit: {unit: hour, window: 60m, requests_per_unit: 8}',
    '  - key: free',
    '    rate_limit: {unlimited: true}',
    '',
  ].join('\n');
  // key → [line, window as written back, what Envoy is told]; h1 and agrees are one unit: no note.
  const TOLD: Record<string, [number, string, number, string] | undefined> = {
    s90: [3, '1m30s', 4, 'MINUTE'],
    m2: [5, '2m', 10, 'MINUTE'],
    h1: undefined,
    h36: [9, '1d12h', 1000, 'DAY'],
    half: [11, '500ms', 3, 'SECOND'],
    five_minutes: [13, '5m', 7, 'MINUTE'],
    agrees: undefined,
  };
  const note = (file: string, key: string) => {
    const [line, window, n, unit] = TOLD[key]!;
    return `${file}:${line}: note: 'w.${key}' has a ${window} window, which Envoy's current_limit cannot express: Envoy is told ${n} per ${unit}`;
  };

  test('a window and a unit that disagree are an error naming the line and the fix', () => {
    const text = 'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      window: 90s\n      unit: hour\n      requests_per_unit: 4\n';
    assert.deepEqual(errorsOf(text), [
      "c.yaml:6: 'window: 90s' disagrees with 'unit: hour': given together, the window must be exactly one hour. Drop 'unit' (Envoy is then told 4 per MINUTE) or write 'window: 1h'",
    ]);
    assert.deepEqual(errorsOf(text.replace('90s', '1h')), []);
    assert.deepEqual(errorsOf(text.replace('90s', '3600s')), []);
  });

  test('`sluice check` prints what Envoy is told for each rule whose window is not one unit', async (t) => {
    const { file } = tempConfig(t, WINDOWS);
    const { code, stdout, stderr } = await runCli(['check', file]);
    assert.equal(code, 0, stderr);
    assert.equal(stderr, '');
    const notes = Object.keys(TOLD)
      .filter((k) => TOLD[k] !== undefined)
      .map((k) => note(file, k));
    assert.deepEqual(stdout.split('\n'), [...notes, 'OK: 1 file(s), domains: w', '']);
  });

  test('the notes say what a gRPC answer carries in current_limit', async (t) => {
    const { file } = tempConfig(t, WINDOWS);
    const s = await startApp({ configPaths: [file] });
    try {
      const keys = Object.keys(TOLD);
      const answer = await s.call({ domain: 'w', descriptors: keys.map((k) => d([k, 'x'])) });
      const told = answer.statuses.map((st) => `${st.currentLimit?.requestsPerUnit} per ${Unit[st.currentLimit?.unit ?? Unit.UNKNOWN]}`);
      assert.deepEqual(told, ['4 per MINUTE', '10 per MINUTE', '100 per HOUR', '1000 per DAY', '3 per SECOND', '7 per MINUTE', '8 per HOUR']);
      for (const [i, k] of keys.entries()) if (TOLD[k] !== undefined) assert.ok(note(file, k).endsWith(`Envoy is told ${told[i]}`), k);
    } finally {
      await s.stop();
    }
  });

  test("docs/configuration.md's table of what Envoy is told is what a gRPC answer carries", async (t) => {
    const readme = fs.readFileSync(path.join(REPO, 'docs/configuration.md'), 'utf8');
    const rows = [...readme.matchAll(/^\| `([^`]+)`[^|]*\| [^|]+ \| 10 per `([A-Z]+)`/gm)].map((m) => [m[1], m[2]]);
    assert.ok(rows.length >= 4, 'docs/configuration.md has the table');
    const lines = rows.map(([window], i) => `  - key: r${i}\n    rate_limit: {window: ${window}, requests_per_unit: 10}`);
    const { file } = tempConfig(t, `domain: w\ndescriptors:\n${lines.join('\n')}\n`);
    const s = await startApp({ configPaths: [file] });
    try {
      const answer = await s.call({ domain: 'w', descriptors: rows.map((_, i) => d([`r${i}`, 'x'])) });
      const told = answer.statuses.map((st) => Unit[st.currentLimit?.unit ?? Unit.UNKNOWN]);
      assert.deepEqual(
        told,
        rows.map(([, unit]) => unit),
      );
    } finally {
      await s.stop();
    }
  });
});
