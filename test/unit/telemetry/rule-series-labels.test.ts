import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { upstreamCounters } from '../../../src/telemetry/statsd';
import { d, startApp } from '../../support/app';
import { parseExposition, seriesOf } from '../../support/exposition';

// Per-rule series whose stats key holds request values (detailed_metric, value_to_metric): in
// /metrics each label holds one whole descriptor entry, dots and all, so 1.2.3.4 and 1.2.9.9 are two
// series and a hostname is not cut apart; statsd names stay upstream's (IPv4 dots made '_').

const PER_MINUTE = '{ unit: minute, requests_per_unit: 100 }';
const CONFIG = `
domain: edge
descriptors:
  - { key: remote_address, detailed_metric: true, rate_limit: ${PER_MINUTE} }
  - { key: host, value_to_metric: true, rate_limit: ${PER_MINUTE} }
  - { key: source, value: 10.0.0.1, rate_limit: ${PER_MINUTE} }
  - { key: source, value: 10.0.9.9, rate_limit: ${PER_MINUTE} }
  - key: tenant
    descriptors: [{ key: host, detailed_metric: true, rate_limit: ${PER_MINUTE} }]
`;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rule-labels-'));
fs.writeFileSync(path.join(dir, 'edge.yaml'), CONFIG);
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const CALLS: [entries: [string, string][], times: number][] = [
  [[['remote_address', '1.2.3.4']], 2],
  [[['remote_address', '1.2.9.9']], 1],
  [[['host', 'api.example.com']], 1],
  [[['host', 'api.example.org']], 2],
  [[['source', '10.0.0.1']], 1],
  [[['source', '10.0.9.9']], 3],
  [
    [
      ['tenant', 'acme'],
      ['host', 'a.b.c'],
    ],
    1,
  ],
];

test('detailed_metric and value_to_metric label values carry whole descriptor values in /metrics; statsd names unchanged', async () => {
  const s = await startApp({ configPaths: [dir] });
  try {
    for (const [entries, times] of CALLS) for (let i = 0; i < times; i++) await s.call({ domain: 'edge', descriptors: [d(...entries)] });
    const samples = parseExposition(await (await s.http('/metrics')).text());
    assert.deepEqual(seriesOf(samples, 'ratelimit_service_rate_limit_total_hits'), {
      'domain=edge,key1=remote_address_1.2.3.4,key2=': 2,
      'domain=edge,key1=remote_address_1.2.9.9,key2=': 1,
      'domain=edge,key1=host_api.example.com,key2=': 1,
      'domain=edge,key1=host_api.example.org,key2=': 2,
      // A rule's own key: what upstream's statsd-exporter mapping makes of its statsd name.
      'domain=edge,key1=source_10_0_0_1,key2=': 1,
      'domain=edge,key1=source_10_0_9_9,key2=': 3,
      'domain=edge,key1=tenant_acme,key2=host_a.b.c': 1,
    });
    // statsd (and the USE_PROMETHEUS listener, which maps these names): upstream's names, as before.
    const statsd = [...(await upstreamCounters(s.app.metrics))].filter(([name]) => name.endsWith('.total_hits'));
    assert.deepEqual(Object.fromEntries(statsd), {
      'ratelimit.service.rate_limit.edge.remote_address_1_2_3_4.total_hits': 2,
      'ratelimit.service.rate_limit.edge.remote_address_1_2_9_9.total_hits': 1,
      'ratelimit.service.rate_limit.edge.host_api.example.com.total_hits': 1,
      'ratelimit.service.rate_limit.edge.host_api.example.org.total_hits': 2,
      'ratelimit.service.rate_limit.edge.source_10_0_0_1.total_hits': 1,
      'ratelimit.service.rate_limit.edge.source_10_0_9_9.total_hits': 3,
      'ratelimit.service.rate_limit.edge.tenant_acme.host_a.b.c.total_hits': 1,
    });
  } finally {
    await s.stop();
  }
});

// Two rules whose stats keys join to the same dotted string: a nested rule (tenant=acme, host=api)
// and its parent given the value "acme.host_api". Tallied by the joined string, the second call
// landed in the first one's series; tallied by tuple, each keeps its own labels. Their statsd names
// are one name, as upstream's would be.
const CLASH = `
domain: clash
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: ${PER_MINUTE}
    descriptors: [{ key: host, detailed_metric: true, rate_limit: ${PER_MINUTE} }]
`;

test('stats keys that join to the same dotted string keep their own Prometheus labels', async () => {
  const clashDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-rule-clash-'));
  fs.writeFileSync(path.join(clashDir, 'clash.yaml'), CLASH);
  const s = await startApp({ configPaths: [clashDir] });
  try {
    await s.call({ domain: 'clash', descriptors: [d(['tenant', 'acme'], ['host', 'api'])] });
    for (let i = 0; i < 2; i++) await s.call({ domain: 'clash', descriptors: [d(['tenant', 'acme.host_api'])] });
    const samples = parseExposition(await (await s.http('/metrics')).text());
    assert.deepEqual(seriesOf(samples, 'ratelimit_service_rate_limit_total_hits'), {
      'domain=clash,key1=tenant_acme,key2=host_api': 1,
      'domain=clash,key1=tenant_acme.host_api,key2=': 2,
    });
    const statsd = [...(await upstreamCounters(s.app.metrics))].filter(([name]) => name.endsWith('.total_hits'));
    assert.deepEqual(Object.fromEntries(statsd), { 'ratelimit.service.rate_limit.clash.tenant_acme.host_api.total_hits': 3 });
  } finally {
    await s.stop();
    fs.rmSync(clashDir, { recursive: true, force: true });
  }
});
