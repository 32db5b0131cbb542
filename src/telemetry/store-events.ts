import { type Logger, logEvery } from '../logger';
import type { StoreEvents } from '../store/events';
import type { Metrics } from './metrics';

type BreakerState = Parameters<StoreEvents['breaker']>[1];

const BREAKER_GAUGE: Record<BreakerState, number> = { closed: 0, half_open: 1, open: 2 };

// Repeated warnings (a Redis outage fails every call) would flood the log: at most one line per
// kind of event every LOG_EVERY_MS; the counters still count every occurrence.
const LOG_EVERY_MS = 5_000;

// The store layers' events as metrics and JSON log lines: the one place the store is wired to
// server/ (the store only knows the StoreEvents interface).
export function storeEvents(metrics: Metrics, logger: Logger): StoreEvents {
  const failureLog = logEvery(LOG_EVERY_MS);
  const overloadLog = logEvery(LOG_EVERY_MS);
  const refundLog = logEvery(LOG_EVERY_MS);
  return {
    storeCall(operation, seconds, ok) {
      metrics.storeDuration.observe({ operation, result: ok ? 'ok' : 'error' }, seconds);
    },
    storeFailure(kind, message) {
      metrics.storeFailures.inc({ kind });
      if (failureLog() !== undefined) logger.warn({ event: 'store_failure', kind, error: message }, `Redis call failed (${kind}): ${message}`);
    },
    ownOverload(lagMs, message) {
      metrics.ownOverload.inc();
      if (overloadLog() !== undefined) logger.warn({ event: 'own_overload', lagMs }, `store deadline missed because this process was busy: ${message}`);
    },
    breaker(from, to, reason) {
      metrics.breakerState.set(BREAKER_GAUGE[to]);
      metrics.breakerTransitions.inc({ to });
      const level = to === 'open' ? 'warn' : 'info';
      logger[level]({ event: 'breaker', from, to, reason }, `circuit breaker ${from} -> ${to}: ${reason}`);
    },
    degraded(policy) {
      metrics.degraded.inc({ policy });
    },
    overLimitCacheHit() {
      metrics.overLimitCacheHits.inc();
    },
    writeBack(entries, hits, error) {
      metrics.writeBackHits.inc({ result: error === undefined ? 'ok' : 'error' }, hits);
      if (error === undefined) logger.info({ event: 'write_back', entries, hits }, 'fallback hits written back to Redis');
      else logger.warn({ event: 'write_back_failed', entries, hits, error }, 'could not write fallback hits back to Redis');
    },
    refund(entries, error) {
      metrics.refundEntries.inc({ result: error === undefined ? 'ok' : 'error' }, entries);
      if (error !== undefined && refundLog() !== undefined)
        logger.warn({ event: 'refund_failed', entries, error }, 'could not give consumed hits back to Redis (will retry)');
    },
    leaseTaken(units) {
      metrics.leaseUnits.inc({ event: 'taken' }, units);
    },
    leaseReturned(units) {
      metrics.leaseUnits.inc({ event: 'returned' }, units);
    },
    leaseServed(hits) {
      metrics.leaseServed.inc(hits);
    },
    replicas(count) {
      metrics.fleetReplicas.set(count);
    },
    restored(counters) {
      logger.warn({ event: 'restored', counters }, 'Redis had lost its data: counters put back as this replica last saw them');
    },
  };
}
