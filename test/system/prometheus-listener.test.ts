import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RateLimitResponse_Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, closing, d, startApp } from '../support/app';
import { runCli, spawnServer } from '../support/process';
import { freePort } from '../support/redis';
import { RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import * as grpc from '@grpc/grpc-js';

// USE_PROMETHEUS: upstream's dedicated metrics listener, its series named by a statsd_exporter
// mapping (sluice's default equivalent of upstream's, or PROMETHEUS_MAPPER_YAML).

const CONFIG = `domain: pl
descriptors:
  - key: k
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: { unit: hour, requests_per_unit: 10 }
`;

function tempDir(files: Record<string, string>): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-prom-'));
  for (const [name, text] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), text);
  return dir;
}

// The exposition text checked by promtool (a parse error fails; its naming lints do not: upstream's
// names are what they are), then as series text (`name{a="1",b="2"}`, labels as written) → value.
async function scrape(port: number, p = '/metrics'): Promise<Map<string, number>> {
  const res = await fetch(`http://127.0.0.1:${port}${p}`, closing());
  assert.equal(res.status, 200);
  const text = await res.text();
  const run = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    assert.fail("promtool not found: install Debian's prometheus package (apt-get install --no-install-recommends prometheus)");
  }
  assert.ok(run.status === 0 || run.status === 3, `promtool: ${run.stdout}${run.stderr}`);
  assert.doesNotMatch(run.stdout + run.stderr, /error while linting/);
  const series = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    assert.ok(!series.has(line.slice(0, at)), `series twice: ${line}`);
    series.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return series;
}

const kv = { domain: 'pl', descriptors: [d(['k', 'v'])] };
const nested = { domain: 'pl', descriptors: [d(['a', '1'], ['b', '2'], ['c', '3'])] };

// 5 calls on a limit of 3 (3 OK, 2 OVER_LIMIT) and 2 on the nested rule.
async function decide(call: (r: typeof kv) => Promise<{ overallCode: RateLimitResponse_Code }>): Promise<void> {
  const codes = [];
  for (let i = 0; i < 5; i++) codes.push((await call(kv)).overallCode);
  assert.deepEqual(
    codes,
    [1, 1, 1, 2, 2].map((c) => c as RateLimitResponse_Code),
  );
  for (let i = 0; i < 2; i++) assert.equal((await call(nested)).overallCode, RateLimitResponse_Code.OK);
}

function only(series: Map<string, number>, prefix: string): Record<string, number> {
  return Object.fromEntries([...series].filter(([k]) => k.startsWith(prefix)));
}

describe('USE_PROMETHEUS listener', () => {
  test("default mapping: upstream's series names, labels and counts; sluice's own series beside them; /metrics unchanged", async () => {
    const port = await freePort();
    const s = await startApp({ configPaths: [tempDir({ 'c.yaml': CONFIG })], prometheusEnabled: true, prometheusAddr: `127.0.0.1:${port}` });
    try {
      await decide(s.call);
      const series = await scrape(port);
      assert.deepEqual(only(series, 'ratelimit_service_rate_limit_'), {
        'ratelimit_service_rate_limit_total_hits{domain="pl",key1="k"}': 5,
        'ratelimit_service_rate_limit_over_limit{domain="pl",key1="k"}': 2,
        'ratelimit_service_rate_limit_near_limit{domain="pl",key1="k"}': 1,
        'ratelimit_service_rate_limit_within_limit{domain="pl",key1="k"}': 3,
        'ratelimit_service_rate_limit_total_hits{domain="pl",key1="a",key2="b"}': 2,
        'ratelimit_service_rate_limit_within_limit{domain="pl",key1="a",key2="b"}': 2,
      });
      assert.equal(series.get('ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}'), 7);
      assert.equal(series.get('ratelimit_service_config_load_success'), 1);
      // As statsd_exporter: a stat that never moved has no series.
      assert.equal(series.has('ratelimit_service_config_load_error'), false);
      assert.deepEqual(only(series, 'ratelimit_service_should_rate_limit_error'), {});
      // Upstream's default mapping: the millisecond timer scaled to seconds, sluice's buckets.
      assert.equal(series.get('ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}'), 7);
      assert.equal(series.get('ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="+Inf"}'), 7);
      assert.ok(series.has('ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.0001"}'));
      assert.equal(series.get('sluice_requests_total{transport="grpc",code="OVER_LIMIT"}'), 2);
      // Other paths are not served; the main port's /metrics is as before.
      assert.equal((await fetch(`http://127.0.0.1:${port}/other`, closing())).status, 404);
      assert.match(await (await s.http('/metrics')).text(), /ratelimit_service_rate_limit_total_hits\{domain="pl",key1="k",key2=""\} 5/);
    } finally {
      await s.stop();
    }
    await assert.rejects(fetch(`http://127.0.0.1:${port}/metrics`), 'the listener stops with the app');
  });

  test('PROMETHEUS_MAPPER_YAML (spawned, PROMETHEUS_ADDR=:port): renames, adds labels, drops the rest as a catch-all regex says', async () => {
    const port = await freePort();
    const mapper = `defaults:
  observer_type: histogram
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "edge_hits_total"
    help: "Hits by tenant"
    labels: { domain: "$1", tenant: "$2", team: edge }
  - match: "ratelimit_server.*.response_time"
    name: "edge_latency_ms"
    labels: { method: "$1" }
  - match: 'ratelimit\\.service\\.rate_limit\\.([^.]+)\\.(?P<rest>.+)\\.over_limit$'
    match_type: regex
    name: "edge_over_limit"
    labels: { domain: "$1", key: "\${rest}" }
  - match: "."
    match_type: regex
    action: drop
    name: dropped
`;
    const mapperFile = path.join(tempDir({ 'mapper.yaml': mapper }), 'mapper.yaml');
    const server = await spawnServer(['--config', tempDir({ 'c.yaml': CONFIG })], {
      USE_PROMETHEUS: 'true',
      PROMETHEUS_ADDR: `:${port}`,
      PROMETHEUS_MAPPER_YAML: mapperFile,
    });
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      assert.equal((await server.waitForLog((l) => l.event === 'prometheus_listening')).port, port);
      await decide((r) => callRls(client, r));
      const series = await scrape(port);
      const upstream = [...series.keys()].filter((k) => !/^(sluice_|process_|nodejs_)/.test(k));
      assert.deepEqual(
        upstream.filter((k) => !k.startsWith('edge_latency_ms_bucket')),
        [
          'edge_hits_total{domain="pl",team="edge",tenant="k"}',
          'edge_over_limit{domain="pl",key="k"}',
          'edge_latency_ms_sum{method="ShouldRateLimit"}',
          'edge_latency_ms_count{method="ShouldRateLimit"}',
        ],
      );
      assert.equal(series.get('edge_hits_total{domain="pl",team="edge",tenant="k"}'), 5);
      assert.equal(series.get('edge_over_limit{domain="pl",key="k"}'), 2);
      // No scale: the timer in milliseconds, as statsd_exporter would keep it.
      assert.equal(series.get('edge_latency_ms_count{method="ShouldRateLimit"}'), 7);
      assert.ok(series.has('edge_latency_ms_bucket{method="ShouldRateLimit",le="0.1"}'));
      assert.equal(series.get('sluice_requests_total{transport="grpc",code="OK"}'), 5);
      const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, closing())).text();
      assert.match(text, /^# HELP edge_hits_total Hits by tenant$/m);
      assert.match(text, /^# TYPE edge_latency_ms histogram$/m);
    } finally {
      client.close();
      await server.stop();
    }
  });

  test('unmatched statsd names keep their own name, escaped as statsd_exporter does; PROMETHEUS_PATH', async () => {
    const port = await freePort();
    const mapperFile = path.join(tempDir({ 'm.yaml': 'mappings:\n  - match: ratelimit.service.config_load_success\n    name: loads_ok\n' }), 'm.yaml');
    const s = await startApp({
      configPaths: [tempDir({ 'c.yaml': CONFIG })],
      prometheusEnabled: true,
      prometheusAddr: `127.0.0.1:${port}`,
      prometheusPath: '/stats/prometheus',
      prometheusMapperYaml: mapperFile,
    });
    try {
      await decide(s.call);
      const series = await scrape(port, '/stats/prometheus');
      assert.equal(series.get('loads_ok'), 1);
      assert.equal(series.get('ratelimit_service_rate_limit_pl_k_total_hits'), 5);
      assert.equal(series.get('ratelimit_service_rate_limit_pl_a_b_c_within_limit'), 2);
      assert.equal(series.get('ratelimit_server_ShouldRateLimit_total_requests'), 7);
      // An unmapped timer is a summary (statsd_exporter's default): its sum and count only.
      assert.equal(series.get('ratelimit_server_ShouldRateLimit_response_time_count'), 7);
      assert.equal(series.has('ratelimit_service_rate_limit_total_hits{domain="pl",key1="k"}'), false);
    } finally {
      await s.stop();
    }
  });

  const refusals: [string, string, RegExp][] = [
    ['ttl', 'mappings:\n  - match: a.b\n    name: x\n    ttl: 1m\n', /mappings\[0\]\.ttl: not applied by sluice/],
    ['unknown key', 'mappings:\n  - match: a.b\n    name: x\n  - match: a.c\n    nmae: y\n', /mappings\[1\]\.nmae: unknown key/],
    [
      'regex flags',
      'mappings:\n  - match: "(?i)ratelimit"\n    match_type: regex\n    name: x\n',
      /mappings\[0\]: match '\(\?i\)ratelimit' \(match_type: regex\): '\(\?i\)/,
    ],
    ['buckets', 'defaults:\n  histogram_options: { buckets: [1, 2] }\nmappings: []\n', /defaults\.histogram_options: not applied by sluice/],
    ['bad glob', 'mappings:\n  - match: "a.b*"\n    name: x\n', /mappings\[0\]: match 'a\.b\*' is not a glob/],
    ['bad YAML', 'mappings:\n  - match: [a\n', /line \d+/],
  ];
  for (const [what, text, message] of refusals) {
    test(`a mapping file sluice cannot apply refuses the start, naming the file and place: ${what}`, async () => {
      const file = path.join(tempDir({ 'bad.yaml': text }), 'bad.yaml');
      const run = await runCli(['serve', '--config', tempDir({ 'c.yaml': CONFIG }), '--grpc-port', '0', '--http-port', '0', '--admin-port', '0'], {
        USE_PROMETHEUS: 'true',
        PROMETHEUS_ADDR: '127.0.0.1:0',
        PROMETHEUS_MAPPER_YAML: file,
      });
      assert.equal(run.code, 2, run.stderr);
      assert.ok(run.stderr.includes(`PROMETHEUS_MAPPER_YAML ${file}: `), run.stderr);
      assert.match(run.stderr, message);
    });
  }

  test('a PROMETHEUS_ADDR or PROMETHEUS_PATH that is not one refuses the start', async () => {
    const dir = tempDir({ 'c.yaml': CONFIG });
    const addr = await runCli(['serve', '--config', dir], { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: 'localhost' });
    assert.equal(addr.code, 2);
    assert.match(addr.stderr, /PROMETHEUS_ADDR: expected :port, host:port or \[ipv6\]:port, got 'localhost'/);
    const p = await runCli(['serve', '--config', dir], { USE_PROMETHEUS: 'true', PROMETHEUS_PATH: 'metrics' });
    assert.equal(p.code, 2);
    assert.match(p.stderr, /PROMETHEUS_PATH: expected a path starting with '\/'/);
  });
});
