import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createLogger } from '../../../src/logger';
import { Metrics } from '../../../src/telemetry/metrics';
import { storeEvents } from '../../../src/telemetry/store-events';

// The store's event sink: every event lands in its metric, and the log lines that matter are JSON
// with the documented fields (repeated failures rate-limited).

function capture() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  return { lines, logger: createLogger('info', stream) };
}

async function value(metrics: Metrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = metrics.registry.getSingleMetric(name);
  assert.ok(metric, `${name} is registered`);
  const data = await metric.get();
  return data.values.filter((v) => Object.entries(labels).every(([k, x]) => (v.labels as Record<string, unknown>)[k] === x)).reduce((a, v) => a + v.value, 0);
}

test('every StoreEvents method maps to its metric and log line', async () => {
  const metrics = new Metrics();
  const { lines, logger } = capture();
  const ev = storeEvents(metrics, logger);

  ev.storeCall('decide', 0.002, true);
  ev.storeCall('refund', 0.01, false);
  ev.storeFailure('timeout', 'no answer in 18 ms');
  ev.storeFailure('stalled', 'unanswered for 1000 ms');
  ev.storeFailure('error', 'ECONNREFUSED');
  ev.ownOverload(120, 'event loop lagged 120 ms');
  ev.ownOverload(130, 'event loop lagged 130 ms');
  ev.breaker('closed', 'open', 'failure ratio 0.6');
  ev.breaker('open', 'half_open', 'recovering');
  ev.degraded('local', 'breaker open');
  ev.degraded('deny', 'breaker open');
  ev.overLimitCacheHit();
  ev.writeBack(3, 40);
  ev.writeBack(2, 5, 'READONLY');
  ev.refund(4);
  ev.refund(2, 'NOSCRIPT');
  ev.leaseTaken(50);
  ev.leaseReturned(8);
  ev.leaseServed(17);
  ev.replicas(3);

  assert.equal((await value(metrics, 'sluice_store_duration_seconds', { operation: 'decide', result: 'ok' })) > 0, true);
  const count = (await metrics.storeDuration.get()).values.filter((v) => v.metricName === 'sluice_store_duration_seconds_count');
  assert.deepEqual(count.map((v) => [v.labels.operation, v.labels.result, v.value]).sort(), [
    ['decide', 'ok', 1],
    ['refund', 'error', 1],
  ]);
  assert.equal(await value(metrics, 'sluice_store_failures_total', { kind: 'timeout' }), 1);
  assert.equal(await value(metrics, 'sluice_store_failures_total', { kind: 'stalled' }), 1);
  assert.equal(await value(metrics, 'sluice_store_failures_total', { kind: 'error' }), 1);
  assert.equal(await value(metrics, 'sluice_store_own_overload_total'), 2);
  assert.equal(await value(metrics, 'sluice_breaker_state'), 1);
  assert.equal(await value(metrics, 'sluice_breaker_transitions_total', { to: 'open' }), 1);
  assert.equal(await value(metrics, 'sluice_breaker_transitions_total', { to: 'half_open' }), 1);
  assert.equal(await value(metrics, 'sluice_degraded_decisions_total', { policy: 'local' }), 1);
  assert.equal(await value(metrics, 'sluice_degraded_decisions_total', { policy: 'deny' }), 1);
  assert.equal(await value(metrics, 'sluice_over_limit_cache_hits_total'), 1);
  assert.equal(await value(metrics, 'sluice_fallback_write_back_hits_total', { result: 'ok' }), 40);
  assert.equal(await value(metrics, 'sluice_fallback_write_back_hits_total', { result: 'error' }), 5);
  assert.equal(await value(metrics, 'sluice_refund_entries_total', { result: 'ok' }), 4);
  assert.equal(await value(metrics, 'sluice_refund_entries_total', { result: 'error' }), 2);
  assert.equal(await value(metrics, 'sluice_lease_units_total', { event: 'taken' }), 50);
  assert.equal(await value(metrics, 'sluice_lease_units_total', { event: 'returned' }), 8);
  assert.equal(await value(metrics, 'sluice_lease_hits_served_locally_total'), 17);
  assert.equal(await value(metrics, 'sluice_fleet_replicas'), 3);

  const events = lines.map((l) => ({ level: l.level, event: l.event }));
  assert.deepEqual(events, [
    // Failures: one line per 5 s however many kinds follow.
    { level: 'warn', event: 'store_failure' },
    { level: 'warn', event: 'own_overload' },
    { level: 'warn', event: 'breaker' },
    { level: 'info', event: 'breaker' },
    { level: 'info', event: 'write_back' },
    { level: 'warn', event: 'write_back_failed' },
    { level: 'warn', event: 'refund_failed' },
  ]);
  const byEvent = (e: string) => lines.filter((l) => l.event === e);
  assert.equal(byEvent('store_failure')[0].kind, 'timeout');
  assert.equal(byEvent('own_overload')[0].lagMs, 120);
  assert.deepEqual([byEvent('breaker')[0].from, byEvent('breaker')[0].to, byEvent('breaker')[0].reason], ['closed', 'open', 'failure ratio 0.6']);
  assert.deepEqual([byEvent('write_back')[0].entries, byEvent('write_back')[0].hits], [3, 40]);
  assert.equal(byEvent('write_back_failed')[0].error, 'READONLY');
  assert.deepEqual([byEvent('refund_failed')[0].entries, byEvent('refund_failed')[0].error], [2, 'NOSCRIPT']);

  ev.breaker('half_open', 'closed', 'write-back done');
  assert.equal(await value(metrics, 'sluice_breaker_state'), 0);
});
