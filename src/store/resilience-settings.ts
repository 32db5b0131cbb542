import { monotonicClock } from '../clock';
import type { Logger } from '../logger';
import type { Metrics } from '../server/metrics';
import type { Settings } from '../settings';
import type { FallbackPolicy, ResilienceOptions } from './resilient';

const BREAKER_GAUGE = { closed: 0, half_open: 1, open: 2 } as const;

// ResilientStore's options from the settings, with its events wired to metrics and log lines.
export function resilienceOptions(s: Settings, metrics: Metrics, logger: Logger): ResilienceOptions {
  const domainPolicies = new Map<string, FallbackPolicy>();
  for (const entry of s.fallbackDomainPolicies) {
    const eq = entry.lastIndexOf('=');
    domainPolicies.set(entry.slice(0, eq), entry.slice(eq + 1) as FallbackPolicy);
  }
  let lastFailureLog = 0;
  return {
    clock: monotonicClock,
    deadlineMs: s.storeDeadlineMs,
    marginMs: s.deadlineMarginMs,
    breaker: { windowMs: s.breakerWindowMs, minCalls: s.breakerMinCalls, failureRatio: s.breakerFailureRatio, cooldownMs: s.breakerCooldownMs },
    policy: s.fallbackPolicy,
    domainPolicies,
    share: s.fallbackShare,
    overLimitCacheSize: s.overLimitCacheSize,
    leases: {
      autoThreshold: s.leaseAutoThreshold,
      autoShare: s.leaseAutoShare,
      ttlMs: s.leaseTtlMs,
      lowWater: s.leaseLowWater,
      events: {
        taken: (units) => metrics.leaseUnits.inc({ event: 'taken' }, units),
        returned: (units) => metrics.leaseUnits.inc({ event: 'returned' }, units),
        servedLocally: (hits) => metrics.leaseServed.inc(hits),
        exhausted: () => undefined,
      },
    },
    events: {
      breaker(from, to, reason) {
        metrics.breakerState.set(BREAKER_GAUGE[to]);
        metrics.breakerTransitions.inc({ to });
        const level = to === 'open' ? 'warn' : 'info';
        logger[level]({ event: 'breaker', from, to, reason }, `circuit breaker ${from} -> ${to}: ${reason}`);
      },
      degraded(policy) {
        metrics.degraded.inc({ policy });
      },
      storeFailure(kind, message) {
        metrics.storeFailures.inc({ kind });
        const now = Date.now();
        if (now - lastFailureLog < 5_000) return;
        lastFailureLog = now;
        logger.warn({ event: 'store_failure', kind, error: message }, `Redis call failed: ${message}`);
      },
      overLimitCacheHit() {
        metrics.overLimitCacheHits.inc();
      },
      writeBack(entries, hits, error) {
        metrics.writeBackHits.inc({ result: error === undefined ? 'ok' : 'error' }, hits);
        if (error === undefined) logger.info({ event: 'write_back', entries, hits }, 'fallback hits written back to Redis');
        else logger.warn({ event: 'write_back_failed', entries, hits, error }, 'could not write fallback hits back to Redis');
      },
    },
  };
}
