import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { loadSettings } from '../../../src/settings';
import { sanitizeStatName } from '../../../src/telemetry/rule-stats';
import { tagSuffix } from '../../../src/telemetry/statsd';
import { d, startApp } from '../../support/app';

// statsd output with envoyproxy/ratelimit's names: a real UDP (and TCP) listener, the real app
// pointed at it, real ShouldRateLimit calls; the lines received are compared exactly.

const CONFIG = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: remote_address
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: route
    value: /a
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
`;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-statsd-'));
fs.writeFileSync(path.join(dir, 'edge.yaml'), CONFIG);
after(() => fs.rmSync(dir, { recursive: true, force: true }));

// A statsd server: every packet (UDP) or stream chunk (TCP), split into lines.
interface Listener {
  port: number;
  packets: string[];
  lines(): string[];
  waitFor(pred: (lines: string[]) => boolean, what: string): Promise<void>;
  close(): Promise<void>;
}

function collector(packets: string[], port: number, close: () => Promise<void>): Listener {
  const lines = () =>
    packets
      .join('\n')
      .split('\n')
      .filter((l) => l !== '');
  return {
    port,
    packets,
    lines,
    async waitFor(pred, what) {
      const until = Date.now() + 5000;
      while (!pred(lines())) {
        if (Date.now() > until) assert.fail(`timed out waiting for ${what}; got ${JSON.stringify(lines())}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    close,
  };
}

async function udpListener(): Promise<Listener> {
  const socket = dgram.createSocket('udp4');
  const packets: string[] = [];
  socket.on('message', (msg) => packets.push(msg.toString('utf8')));
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return collector(packets, socket.address().port, () => new Promise((resolve) => socket.close(() => resolve())));
}

async function tcpListener(): Promise<Listener> {
  const packets: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('data', (chunk) => packets.push(chunk.toString('utf8')));
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return collector(packets, port, () => {
    for (const s of sockets) s.destroy();
    return new Promise((resolve) => server.close(() => resolve()));
  });
}

const R = 'ratelimit.service.rate_limit';

describe('statsd output with upstream names', () => {
  test('per-rule, config and call counters: exact lines, types |c, batched', async () => {
    const statsd = await udpListener();
    // An hour: nothing is sent before stop() makes the last flush, so the lines are exactly the totals.
    const running = await startApp({
      configPaths: [dir],
      statsdEnabled: true,
      statsdHost: '127.0.0.1',
      statsdPort: statsd.port,
      statsFlushIntervalMs: 3_600_000,
    });
    try {
      const codes: string[] = [];
      for (let i = 0; i < 5; i++) codes.push(String((await running.call({ domain: 'edge', descriptors: [d(['tenant', 'acme'])] })).overallCode));
      for (let i = 0; i < 2; i++) await running.call({ domain: 'edge', descriptors: [d(['remote_address', '10.0.0.1'])] });
      for (let i = 0; i < 2; i++) await running.call({ domain: 'edge', descriptors: [d(['route', '/a'])] });
      await assert.rejects(running.call({ domain: '', descriptors: [d(['tenant', 'acme'])] }), /domain/);
      assert.deepEqual(codes.map(Number), [1, 1, 1, 2, 2]); // OK ×3, OVER_LIMIT ×2
      assert.equal(statsd.packets.length, 0, 'nothing sent before a flush');
    } finally {
      await running.stop();
    }
    await statsd.waitFor((l) => l.some((x) => x.startsWith('ratelimit_server.')), 'the last flush');
    assert.deepEqual(
      statsd.lines().sort(),
      [
        // 3 admitted, 2 denied; the third admitted hit passed 80% of 3.
        `${R}.edge.tenant.total_hits:5|c`,
        `${R}.edge.tenant.within_limit:3|c`,
        `${R}.edge.tenant.over_limit:2|c`,
        `${R}.edge.tenant.near_limit:1|c`,
        // detailed_metric: the value is in the name, an IPv4 address's dots made '_' as upstream does.
        `${R}.edge.remote_address_10_0_0_1.total_hits:2|c`,
        `${R}.edge.remote_address_10_0_0_1.within_limit:2|c`,
        // shadow_mode: the second hit would have been denied.
        `${R}.edge.route_/a.total_hits:2|c`,
        `${R}.edge.route_/a.within_limit:1|c`,
        `${R}.edge.route_/a.near_limit:1|c`,
        `${R}.edge.route_/a.over_limit:1|c`,
        `${R}.edge.route_/a.shadow_mode:1|c`,
        'ratelimit.service.config_load_success:1|c',
        'ratelimit.service.call.should_rate_limit.service_error:1|c',
        'ratelimit_server.ShouldRateLimit.total_requests:10|c',
      ].sort(),
    );
    // Batched: a handful of datagrams, not one per request or per line.
    assert.ok(statsd.packets.length <= 2, `${statsd.packets.length} datagrams`);
    await statsd.close();
  });

  test('periodic flushes send what changed since the last one, with EXTRA_TAGS', async () => {
    const statsd = await udpListener();
    const running = await startApp({
      configPaths: [dir],
      statsdEnabled: true,
      statsdHost: '127.0.0.1',
      statsdPort: statsd.port,
      statsFlushIntervalMs: 50,
      extraTags: ['env:prod.eu', 'app:edge'],
    });
    const tags = '.__app=edge.__env=prod_eu';
    const hits = () => statsd.lines().filter((l) => l.startsWith(`${R}.edge.tenant.total_hits`));
    try {
      // Each flush sends the hits since the one before: a flush may fall between these two calls.
      const sent = () => hits().map((l) => Number(/:(\d+)\|c$/.exec(l)?.[1]));
      await running.call({ domain: 'edge', descriptors: [d(['tenant', 'beta'])] });
      await running.call({ domain: 'edge', descriptors: [d(['tenant', 'beta'])] });
      await statsd.waitFor(() => sent().reduce((a, b) => a + b, 0) >= 2, 'the flushes of the first two hits');
      assert.ok(
        hits().every((l) => l.startsWith(`${R}.edge.tenant.total_hits${tags}:`)),
        hits().join('\n'),
      );
      assert.ok(sent().join() === '2' || sent().join() === '1,1', `sent ${sent().join()}`);
      assert.ok(statsd.lines().includes(`ratelimit.service.config_load_success${tags}:1|c`));
      // Nothing moved: nothing sent for it over several intervals.
      const before = hits().length;
      await new Promise((r) => setTimeout(r, 250));
      assert.equal(hits().length, before);
      await running.call({ domain: 'edge', descriptors: [d(['tenant', 'beta'])] });
      await statsd.waitFor(() => hits().length === before + 1, 'the next flush');
      assert.equal(hits()[before], `${R}.edge.tenant.total_hits${tags}:1|c`);
      assert.equal(statsd.lines().filter((l) => l.startsWith('ratelimit.service.config_load_success')).length, 1);
    } finally {
      await running.stop();
      await statsd.close();
    }
  });

  test('STATSD_PROTOCOL=tcp: newline-terminated lines over one connection', async () => {
    const statsd = await tcpListener();
    const running = await startApp({
      configPaths: [dir],
      statsdEnabled: true,
      statsdHost: '127.0.0.1',
      statsdPort: statsd.port,
      statsdProtocol: 'tcp',
      statsFlushIntervalMs: 3_600_000,
    });
    await running.call({ domain: 'edge', descriptors: [d(['tenant', 'gamma'])] });
    await running.stop();
    await statsd.waitFor((l) => l.length >= 4, 'the last flush');
    assert.ok(statsd.packets.join('').endsWith('\n'));
    assert.deepEqual(
      statsd.lines().sort(),
      [
        `${R}.edge.tenant.total_hits:1|c`,
        `${R}.edge.tenant.within_limit:1|c`,
        'ratelimit.service.config_load_success:1|c',
        'ratelimit_server.ShouldRateLimit.total_requests:1|c',
      ].sort(),
    );
    await statsd.close();
  });

  test("settings: upstream's names, off by default (upstream's default is on)", () => {
    const def = loadSettings([], {});
    assert.equal(def.statsdEnabled, false);
    assert.deepEqual([def.statsdHost, def.statsdPort, def.statsdProtocol, def.statsFlushIntervalMs, def.extraTags], ['localhost', 8125, 'udp', 10_000, []]);
    const s = loadSettings([], {
      USE_STATSD: 'true',
      STATSD_HOST: 'statsd.monitoring',
      STATSD_PORT: '9125',
      STATS_FLUSH_INTERVAL: '5s',
      EXTRA_TAGS: 'k1:v1,k2:v2',
    });
    assert.deepEqual(
      [s.statsdEnabled, s.statsdHost, s.statsdPort, s.statsFlushIntervalMs, s.extraTags],
      [true, 'statsd.monitoring', 9125, 5000, ['k1:v1', 'k2:v2']],
    );
    assert.throws(() => loadSettings([], { EXTRA_TAGS: 'novalue' }), /EXTRA_TAGS: expected key:value, got 'novalue'/);
  });

  test("names as upstream's SanitizeStatName and gostats' tag serialisation write them", () => {
    assert.equal(sanitizeStatName('edge.remote_address_192.168.1.20.path_a:b|c'), 'edge.remote_address_192_168_1_20.path_a_b_c');
    assert.equal(tagSuffix(['zone:eu-west-1', 'build:v1.2.3']), '.__build=v1_2_3.__zone=eu-west-1');
    assert.equal(tagSuffix([]), '');
  });
});
