import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import YAML from 'yaml';
import { BENCH_RULES } from '../../../bench/envoy-in-front';
import { envoyInFrontTable, envoyScale, type Figures, type Measured, sumMeasured } from '../../../bench/envoy-in-front-table';
import { REPO } from '../../support/process';

// The "Envoy in front" bench section (bench/envoy-in-front.ts) without running it: the rules it
// gives both services, its knobs and its table.

const measured = (over: Partial<Measured>): Measured => ({
  n: 40,
  s200: 0,
  s429: 0,
  s5xx: 0,
  noAnswer: 0,
  withHeaders: 0,
  envoy: { ok: 0, over_limit: 0, error: 0, failure_mode_allowed: 0 },
  ...over,
});

const figures: Figures = {
  burst: measured({ s200: 10, s429: 30, withHeaders: 40, envoy: { ok: 10, over_limit: 30, error: 0, failure_mode_allowed: 0 }, degraded: 0, cpuMs: 10 }),
  steady: measured({ n: 4800, s200: 4800, envoy: { ok: 4797, over_limit: 0, error: 3, failure_mode_allowed: 3 }, degraded: 0, cpuMs: 720 }),
  coldSteady: measured({ n: 4800, s200: 4800, envoy: { ok: 4700, over_limit: 0, error: 100, failure_mode_allowed: 100 }, degraded: 0, cpuMs: 2400 }),
  firstDecisions: measured({ n: 200, s200: 200, envoy: { ok: 197, over_limit: 0, error: 3, failure_mode_allowed: 3 } }),
  burnerBurst: measured({ n: 60, s200: 60, envoy: { ok: 58, over_limit: 0, error: 2, failure_mode_allowed: 2 } }),
  burnerSteady: measured({ n: 7000, s200: 6990, envoy: { ok: 6900, over_limit: 0, error: 60, failure_mode_allowed: 60 }, noAnswer: 1 }),
  outage: measured({ s200: 7, s429: 33, envoy: { ok: 7, over_limit: 33, error: 0, failure_mode_allowed: 0 }, degraded: 40 }),
};

describe('bench: Envoy in front', () => {
  test("both services get examples/config/edge.yaml's tenant rules, in upstream's format", () => {
    const shipped = YAML.parse(fs.readFileSync(path.join(REPO, 'examples/config/edge.yaml'), 'utf8'));
    const bench = YAML.parse(BENCH_RULES);
    assert.equal(bench.domain, shipped.domain);
    const tenant = (doc: { descriptors: { key: string; value?: string; rate_limit?: object }[] }, value?: string) =>
      doc.descriptors.find((d) => d.key === 'tenant' && d.value === value)?.rate_limit;
    assert.deepEqual(tenant(bench), tenant(shipped));
    assert.deepEqual(tenant(bench, 'internal'), tenant(shipped, 'internal'));
    const upstreamKeys = new Set(['name', 'unit', 'requests_per_unit', 'unlimited']);
    for (const d of bench.descriptors) for (const k of Object.keys(d.rate_limit)) assert.ok(upstreamKeys.has(k), `${k} is not upstream's`);
  });

  test('knobs: defaults, a short run, and a bad value named', () => {
    assert.deepEqual(envoyScale({}), {
      scale: 1,
      rate: 800,
      steady: 4800,
      starts: 5,
      burnerSteady: 7000,
      burner: true,
      workers: 'auto',
      warmS: 20,
      coldStarts: 1,
    });
    assert.deepEqual(envoyScale({ BENCH_ENVOY_SCALE: '0.1', BENCH_ENVOY_BURNER: '0' }), {
      scale: 0.1,
      rate: 800,
      steady: 480,
      starts: 1,
      burnerSteady: 700,
      burner: false,
      workers: 'auto',
      warmS: 20,
      coldStarts: 1,
    });
    assert.equal(envoyScale({ BENCH_ENVOY_WARM_S: '0' }).warmS, 0);
    assert.throws(() => envoyScale({ BENCH_ENVOY_WARM_S: '-1' }), /BENCH_ENVOY_WARM_S=-1: expected a number of seconds, 0 or more/);
    assert.throws(() => envoyScale({ BENCH_ENVOY_SCALE: 'fast' }), /^Error: BENCH_ENVOY_SCALE=fast: expected a number above 0$/);
    assert.throws(() => envoyScale({ BENCH_ENVOY_RATE: '0' }), /BENCH_ENVOY_RATE=0/);
    assert.throws(() => envoyScale({ BENCH_ENVOY_BURNER: 'yes' }), /BENCH_ENVOY_BURNER=yes: expected 0 or 1/);
    assert.equal(envoyScale({ BENCH_ENVOY_WORKERS: '1' }).workers, '1');
    assert.throws(() => envoyScale({ BENCH_ENVOY_WORKERS: '0' }), /BENCH_ENVOY_WORKERS=0: expected auto or a whole number above 0/);
    assert.equal(envoyScale({ BENCH_ENVOY_COLD_STARTS: '6' }).coldStarts, 6);
    assert.throws(() => envoyScale({ BENCH_ENVOY_COLD_STARTS: '1.5' }), /BENCH_ENVOY_COLD_STARTS=1.5: expected a whole number above 0/);
    assert.equal(envoyScale({ BENCH_ENVOY_WARM_UP_CALLS: '2048' }).warmUpCalls, 2048);
    assert.throws(() => envoyScale({ BENCH_ENVOY_WARM_UP_CALLS: 'many' }), /BENCH_ENVOY_WARM_UP_CALLS=many: expected a whole number, 0 or more/);
  });

  test('the cold row: summed over its starts, with the errors at each', () => {
    const scale = envoyScale({ BENCH_ENVOY_COLD_STARTS: '3' });
    const row = envoyInFrontTable(scale, { ...figures, coldErrors: [0, 100, 0] }, 'not run')
      .split('\n')
      .find((l) => l.includes('right after the replicas started'));
    assert.match(row ?? '', /, 3 starts \| ok 4,700 \/ over_limit 0 \/ error 100, service CPU 500 µs\/request; errors at each start: 0, 100, 0 \| – \|$/);
  });

  test("the table: Envoy's counters for each service side by side", () => {
    const lines = envoyInFrontTable(envoyScale({}), figures, figures).split('\n');
    assert.equal(lines.length, 2 + 7);
    const cells = (i: number) =>
      lines[i]
        .split(' | ')
        .slice(1)
        .map((c) => c.replace(/ \|$/, ''));
    assert.deepEqual(cells(2), Array(2).fill('10 × 200, 30 × 429, x-ratelimit headers on 40 (ok 10 / over_limit 30 / error 0)'));
    assert.match(lines[3], /^\| 4,800 requests at 800\/s, healthy Redis, after 20 s of such traffic/);
    assert.deepEqual(cells(3), Array(2).fill('ok 4,797 / over_limit 0 / error 3, service CPU 150 µs/request'));
    assert.match(lines[4], /^\| the same 4,800 requests right after the replicas started/);
    assert.deepEqual(cells(4), Array(2).fill('ok 4,700 / over_limit 0 / error 100, service CPU 500 µs/request'));
    assert.match(lines[5], /\| 7 of 40, 0 × 5xx \(ok 7 \/ over_limit 33 \/ error 0, 40 decided without Redis\) \|/);
    assert.match(lines[6], /^\| first decisions .*5 Envoy starts × 40 requests.* \| 3 of 200 missed \(ok 197/);
    assert.match(lines[8], /\| 60 of 7,000 missed \(ok 6,900 \/ over_limit 0 \/ error 60, 40 not asked, 1 unanswered\) \|/);
  });

  test("host steal: a row's steal, and how many of its errors came right after 20 ms or more of it", () => {
    const steady = { ...figures.steady, stealMs: 120, errorsInSteal: 3 };
    const calm = { ...figures.firstDecisions, stealMs: 0, errorsInSteal: 0 };
    const lines = envoyInFrontTable(
      envoyScale({ BENCH_ENVOY_BURNER: '0' }),
      { ...figures, steady, firstDecisions: calm, burst: { ...figures.burst, stealMs: 0 } },
      figures,
    ).split('\n');
    assert.match(
      lines[3],
      /\| ok 4,797 \/ over_limit 0 \/ error 3, service CPU 150 µs\/request, host steal 120 ms, 3 of the 3 errors right after 20 ms or more of it \| ok 4,797 \/ over_limit 0 \/ error 3, service CPU 150 µs\/request \|$/,
    );
    assert.match(lines[6], /\| 3 of 200 missed \(ok 197 \/ over_limit 0 \/ error 3, host steal 0 ms, 0 of the 3 errors right after 20 ms or more of it\) \|/);
    // No errors and no steal: nothing said.
    assert.doesNotMatch(lines[2], /steal/);
    const sum = sumMeasured([steady, calm]);
    assert.deepEqual([sum.stealMs, sum.errorsInSteal], [120, 3]);
    assert.equal(sumMeasured([steady, figures.firstDecisions]).stealMs, undefined);
  });

  test('a column that did not run has a dash in every cell; the burner rows can be left out', () => {
    const lines = envoyInFrontTable(envoyScale({ BENCH_ENVOY_BURNER: '0' }), figures, 'Go not found').split('\n');
    assert.equal(lines.length, 2 + 5);
    for (const line of lines.slice(2)) assert.match(line, / \| – \|$/);
  });

  test('the first-decisions row adds up its Envoy starts', () => {
    const sum = sumMeasured([figures.firstDecisions, figures.burnerBurst!]);
    assert.deepEqual(sum.envoy, { ok: 255, over_limit: 0, error: 5, failure_mode_allowed: 5 });
    assert.equal(sum.n, 260);
    assert.equal(sum.degraded, undefined);
  });
});
