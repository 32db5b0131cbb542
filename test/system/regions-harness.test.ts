import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { d } from '../support/app';
import { stopAll } from '../support/redis';
import { type Deployment, type DriveResult, admittedInWindows, drive, percentile, redisInfoCalls, startRegions } from '../support/regions';

// The harness on today's code path (global: false): two "regions" of two replicas sharing one
// Redis are one fleet, so together they admit one limit per second, exactly and undegraded.

const LIMIT = 10;
const DURATION_MS = 4000;
const RATE = { a: 15, b: 5 } as Record<string, number>;
const CONFIG = ['domain: t', 'descriptors:', '  - key: tenant', `    rate_limit: { unit: second, requests_per_unit: ${LIMIT} }`].join('\n');

describe('regions harness, single shared Redis (global: false), 2 regions x 2 replicas', () => {
  let deployment: Deployment;
  let result: DriveResult;
  let commands: number;

  before(async () => {
    deployment = await startRegions({
      regions: [
        { name: 'a', replicas: 2 },
        { name: 'b', replicas: 2 },
      ],
      configYaml: CONFIG,
      delayMs: 0,
      global: false,
    });
    const redis = deployment.regions[0].redis;
    const before = await redisInfoCalls(redis);
    // A fresh tenant value per run, so nothing a previous run left in Redis counts.
    const tenant = `t1-${process.pid}-${Date.now()}`;
    result = await drive({
      deployment,
      durationMs: DURATION_MS,
      ratePerSecond: (region) => RATE[region],
      request: () => ({ domain: 't', descriptors: [d(['tenant', tenant])] }),
    });
    commands = (await redisInfoCalls(redis)) - before;
  });
  after(async () => {
    await deployment?.stop();
    await stopAll();
  });

  test('every replica shares the one Redis', () => {
    const ports = new Set(deployment.regions.map((r) => r.redis.port));
    assert.equal(ports.size, 1);
    assert.equal(deployment.global, undefined);
    assert.ok(deployment.regions.every((r) => r.proxy === undefined && r.apps.length === 2));
  });

  test('open loop sends at the requested rate per region', (t) => {
    for (const row of result.regionTotals) {
      const want = (RATE[row.region] * DURATION_MS) / 1000;
      t.diagnostic(`region ${row.region}: sent ${row.sent}, admitted ${row.admitted}, denied ${row.denied}`);
      assert.ok(Math.abs(row.sent - want) <= 2, `region ${row.region} sent ${row.sent}, want ~${want}`);
    }
    for (const row of result.perSecond) assert.ok(Math.abs(row.sent - RATE[row.region]) <= 2, `region ${row.region} second ${row.second}: sent ${row.sent}`);
  });

  test('the fleet admits one limit per second overall, with no errors and no degraded answers', (t) => {
    const seconds = DURATION_MS / 1000;
    const { admitted, errors, degraded, errorCodes } = result.totals;
    t.diagnostic(
      `admitted ${admitted}; per 1 s window ${admittedInWindows(result, 1)
        .map((w) => w.admitted)
        .join(' ')}; ${commands} Redis commands`,
    );
    // Drive seconds are not aligned to the limiter's wall-clock windows: up to one extra window's worth.
    assert.ok(admitted <= LIMIT * (Math.ceil(seconds) + 1), `admitted ${admitted}`);
    assert.ok(admitted >= LIMIT * (Math.floor(seconds) - 1), `admitted ${admitted}`);
    assert.equal(errors, 0, `errors ${JSON.stringify(errorCodes)}`);
    assert.equal(degraded, 0);
    assert.ok(commands >= result.totals.sent, `${commands} Redis commands for ${result.totals.sent} decisions`);
  });

  test('every region has a finite p99 latency', (t) => {
    for (const l of result.latency) {
      t.diagnostic(`region ${l.region}: p50 ${l.p50.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms, max ${l.max.toFixed(1)} ms over ${l.count}`);
      assert.ok(Number.isFinite(l.p99) && l.count > 0, `region ${l.region}: p99 ${l.p99}`);
    }
  });

  test('admittedInWindows sums the per-second rows, globally and per region', () => {
    const windows = admittedInWindows(result, 2);
    assert.equal(windows.length, 2);
    assert.equal(
      windows.reduce((n, w) => n + w.admitted, 0),
      result.totals.admitted,
    );
    for (const r of result.regionTotals)
      assert.equal(
        windows.reduce((n, w) => n + (w.byRegion[r.region] ?? 0), 0),
        r.admitted,
      );
  });
});

test('percentile is nearest rank, NaN when empty', () => {
  assert.equal(percentile([5, 1, 4, 2, 3], 50), 3);
  assert.equal(percentile([5, 1, 4, 2, 3], 99), 5);
  assert.equal(percentile([5, 1, 4, 2, 3], 0), 1);
  assert.ok(Number.isNaN(percentile([], 50)));
});

describe('regions harness, wiring of the WAN links', () => {
  after(() => stopAll());

  test('global: true gives each region its own Redis and its own link to one global Redis', async () => {
    const deployment = await startRegions({
      regions: [
        { name: 'a', replicas: 1 },
        { name: 'b', replicas: 1 },
      ],
      configYaml: CONFIG,
      delayMs: 5,
    });
    try {
      const [a, b] = deployment.regions;
      assert.ok(deployment.global);
      assert.notEqual(a.redis.port, b.redis.port);
      assert.ok(a.proxy && b.proxy && a.proxy !== b.proxy);
      assert.ok(![a.redis.port, b.redis.port].includes(deployment.global.port));
      const result = await drive({
        deployment,
        durationMs: 500,
        ratePerSecond: () => 10,
        request: () => ({ domain: 't', descriptors: [d(['tenant', 'smoke'])] }),
      });
      assert.equal(result.totals.sent, 10);
      assert.equal(result.totals.errors, 0, JSON.stringify(result.totals.errorCodes));
    } finally {
      await deployment.stop();
    }
  });

  test('sharedOverWan puts each region a round trip away from the one shared Redis', async (t) => {
    const delayMs = 20;
    const deployment = await startRegions({
      regions: [
        { name: 'a', replicas: 1 },
        { name: 'b', replicas: 1 },
      ],
      configYaml: CONFIG,
      delayMs,
      global: false,
      sharedOverWan: true,
    });
    try {
      assert.equal(new Set(deployment.regions.map((r) => r.redis.port)).size, 1);
      const result = await drive({
        deployment,
        durationMs: 1000,
        ratePerSecond: () => 10,
        request: () => ({ domain: 't', descriptors: [d(['tenant', `wan-${Date.now()}`])] }),
      });
      assert.equal(result.totals.errors, 0, JSON.stringify(result.totals.errorCodes));
      for (const l of result.latency) {
        t.diagnostic(`region ${l.region}: p50 ${l.p50.toFixed(1)} ms over ${l.count}`);
        assert.ok(l.p50 >= 2 * delayMs, `region ${l.region}: p50 ${l.p50.toFixed(1)} ms, below one ${2 * delayMs} ms round trip`);
      }
      for (const r of deployment.regions) assert.ok(r.proxy!.counters.bytesUp > 0, `region ${r.name}: nothing crossed its link`);
    } finally {
      await deployment.stop();
    }
  });
});
