import assert from 'node:assert/strict';
import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { parser } from '@prometheus-io/lezer-promql';
import YAML from 'yaml';
import { dashboardJson } from '../../deploy/observability/dashboard';
import { Metrics } from '../../src/telemetry/metrics';
import { REPO } from '../support/process';

// deploy/observability: the Prometheus rules checked and unit-tested by promtool (Debian's
// `prometheus` package), the Grafana dashboard rebuilt from deploy/observability/dashboard.ts, and
// every PromQL expression in them parsed with Prometheus' own grammar and checked to name only
// series that sluice exports (or that rules.yml records).

type Yaml = any;

const OBS = path.join(REPO, 'deploy/observability');
const read = (file: string) => fs.readFileSync(path.join(OBS, file), 'utf8');
const rules = (): Yaml => YAML.parse(read('rules.yml'));
const ruleTests = (): Yaml => YAML.parse(read('rules.test.yml'));
const allRules = (): Yaml[] => rules().groups.flatMap((g: Yaml) => g.rules);

function promtool(args: string[], cwd = OBS): SpawnSyncReturns<string> {
  const run = spawnSync('promtool', args, { cwd, encoding: 'utf8', timeout: 60_000 });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    assert.fail("promtool not found: install Debian's prometheus package (apt-get install --no-install-recommends prometheus; .ci/run does)");
  }
  assert.equal(run.error, undefined);
  return run;
}

// The series names sluice's /metrics exposes (as app.ts creates them, Node's process metrics
// included); a histogram as its _bucket, _sum and _count series.
async function exportedNames(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const m of await new Metrics({ defaultMetrics: true }).registry.getMetricsAsJSON()) {
    // prom-client types `type` as a numeric enum; at run time it is the exposition's type name.
    if ((m.type as unknown as string) === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(m.name + suffix);
    else names.add(m.name);
  }
  return names;
}

// The metric names a PromQL expression selects; fails on a syntax error or a selector without a
// name. Grafana's interval variables stand for a duration.
function selectedMetrics(expr: string): string[] {
  const src = expr.replace(/\$__(rate_interval|range|interval)\b/g, '5m');
  const names: string[] = [];
  const problems: string[] = [];
  parser.parse(src).iterate({
    enter(node) {
      if (node.type.isError) problems.push(`syntax error at ${node.from}: '${src.slice(node.from, node.to + 10)}'`);
      if (node.name !== 'VectorSelector') return;
      const id = node.node.getChild('Identifier');
      if (id === null) problems.push(`a selector without a metric name: ${src.slice(node.from, node.to)}`);
      else names.push(src.slice(id.from, id.to));
    },
  });
  assert.deepEqual(problems, [], expr);
  assert.ok(names.length > 0, `${expr} selects no series`);
  return names;
}

function assertKnown(exprs: string[], known: Set<string>, where: string): void {
  for (const expr of exprs) {
    for (const name of selectedMetrics(expr))
      assert.ok(known.has(name), `${where}: ${name} (in ${expr}) is neither exported by sluice (src/telemetry/metrics.ts) nor recorded by rules.yml`);
  }
}

describe('deploy/observability/rules.yml', () => {
  test('promtool check rules accepts every rule', () => {
    const run = promtool(['check', 'rules', 'rules.yml']);
    assert.equal(run.status, 0, run.stdout + run.stderr);
    assert.match(run.stdout, new RegExp(`SUCCESS: ${allRules().length} rules found`));
  });

  test('promtool test rules: rules.test.yml passes', () => {
    const run = promtool(['test', 'rules', 'rules.test.yml']);
    assert.equal(run.status, 0, run.stdout + run.stderr);
    assert.match(run.stdout, /SUCCESS/);
  });

  test('every alert is tested firing and quiet; every recording rule is tested or feeds a tested alert', () => {
    const cases = ruleTests().tests.flatMap((t: Yaml) => t.alert_rule_test ?? []);
    const exprTests = ruleTests()
      .tests.flatMap((t: Yaml) => t.promql_expr_test ?? [])
      .map((t: Yaml) => t.expr);
    const alerts = allRules().filter((r: Yaml) => r.alert);
    for (const a of alerts) {
      const mine = cases.filter((c: Yaml) => c.alertname === a.alert);
      assert.ok(
        mine.some((c: Yaml) => c.exp_alerts.length > 0),
        `${a.alert} is tested firing`,
      );
      assert.ok(
        mine.some((c: Yaml) => c.exp_alerts.length === 0),
        `${a.alert} is tested quiet`,
      );
    }
    for (const r of allRules().filter((x: Yaml) => x.record)) {
      const used = allRules().some((x: Yaml) => x !== r && selectedMetrics(x.expr).includes(r.record));
      assert.ok(exprTests.includes(r.record) || used, `${r.record} is tested`);
    }
  });

  test('the unit tests fail when a rule changes', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rules-'));
    try {
      fs.copyFileSync(path.join(OBS, 'rules.test.yml'), path.join(dir, 'rules.test.yml'));
      const mutants: [string, string][] = [
        ['for: 2m', 'for: 5m'],
        ['sluice:store_duration_seconds:p99_5m{operation="decide"} > 0.01', 'sluice:store_duration_seconds:p99_5m{operation="decide"} > 0.05'],
        ['unless sluice_config_loads_total{result="error"} offset 15m', 'unless sluice_config_loads_total{result="error"}'],
      ];
      for (const [from, to] of mutants) {
        assert.ok(read('rules.yml').includes(from), from);
        fs.writeFileSync(path.join(dir, 'rules.yml'), read('rules.yml').replace(from, to));
        const run = promtool(['test', 'rules', 'rules.test.yml'], dir);
        assert.notEqual(run.status, 0, `the tests still pass with '${to}'`);
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('rules and their test series name only what sluice exports or rules.yml records', async () => {
    const exported = await exportedNames();
    const recorded = allRules()
      .filter((r: Yaml) => r.record)
      .map((r: Yaml) => r.record as string);
    const known = new Set([...exported, ...recorded]);
    assertKnown(
      allRules().map((r: Yaml) => r.expr),
      known,
      'rules.yml',
    );
    const series = ruleTests().tests.flatMap((t: Yaml) => t.input_series.map((s: Yaml) => s.series as string));
    for (const s of series) assert.ok(exported.has(s.split('{')[0]), `rules.test.yml input ${s} is a series sluice exports`);
    assertKnown(
      ruleTests().tests.flatMap((t: Yaml) => (t.promql_expr_test ?? []).map((e: Yaml) => e.expr)),
      known,
      'rules.test.yml',
    );
  });

  test('a misspelt metric is caught', async () => {
    assert.throws(() => assertKnown(['rate(sluice_request_total[5m])'], new Set(['sluice_requests_total']), 'x'), /sluice_request_total/);
    assert.throws(() => selectedMetrics('sum by (code (rate(sluice_requests_total[5m]))'), /syntax error/);
  });
});

describe('deploy/observability/grafana-dashboard.json', () => {
  const committed = () => JSON.parse(read('grafana-dashboard.json'));

  test('is what deploy/observability/dashboard.ts builds (npm run dashboard)', () => {
    assert.equal(read('grafana-dashboard.json'), dashboardJson(), 'run npm run dashboard and commit the result');
  });

  test('shows decisions by code, over-limit rules, store latency, degraded answers, breaker state and config reloads', () => {
    const panels = committed().panels;
    const exprs = (title: RegExp) => panels.filter((p: Yaml) => title.test(p.title)).flatMap((p: Yaml) => p.targets.map((t: Yaml) => t.expr as string));
    const uses = (title: RegExp, metric: string) =>
      assert.ok(
        exprs(title).some((e: string) => selectedMetrics(e).includes(metric)),
        `${title} shows ${metric}`,
      );
    uses(/^Decisions by code/, 'sluice_requests_total');
    uses(/over-limit rules/i, 'ratelimit_service_rate_limit_over_limit');
    uses(/^Redis latency/, 'sluice_store_duration_seconds_bucket');
    uses(/^Degraded answers/, 'sluice_degraded_decisions_total');
    uses(/breaker/i, 'sluice_breaker_state');
    uses(/^Config loads/, 'sluice_config_loads_total');
    const ids = panels.map((p: Yaml) => p.id);
    assert.equal(new Set(ids).size, ids.length, 'panel ids are unique');
    // No two panels overlap on Grafana's 24-column grid.
    const cells = new Set<string>();
    for (const { gridPos: g } of panels) {
      assert.ok(g.x + g.w <= 24, 'within the grid');
      for (let x = g.x; x < g.x + g.w; x++) {
        for (let y = g.y; y < g.y + g.h; y++) {
          assert.ok(!cells.has(`${x},${y}`), 'panels overlap');
          cells.add(`${x},${y}`);
        }
      }
    }
  });

  test('every query names only metrics sluice exports, from the dashboard’s data source', async () => {
    const exported = await exportedNames();
    const dashboard = committed();
    for (const p of dashboard.panels) {
      assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${datasource}' }, p.title);
      assert.ok(p.targets.length > 0, p.title);
      assertKnown(
        p.targets.map((t: Yaml) => t.expr),
        exported,
        `panel ${p.title}`,
      );
      for (const t of p.targets) assert.match(t.expr, /\{job=~"\$job"\}/, `${p.title}: filtered by the job variable`);
    }
    for (const v of dashboard.templating.list.filter((x: Yaml) => x.type === 'query')) {
      const m = /^label_values\((\w+), \w+\)$/.exec(v.query);
      assert.ok(m, v.query);
      assert.ok(exported.has(m[1]), `variable ${v.name}: ${m[1]} is exported`);
    }
  });
});
