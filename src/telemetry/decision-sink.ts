import type { DecisionSink } from '../service/decision-sink';
import type { Metrics } from './metrics';

// The service's decisions as metrics: per-rule hits (near_limit at NEAR_LIMIT_RATIO) and calls for
// unknown domains.
export function metricsDecisionSink(metrics: Metrics, nearLimitRatio: number): DecisionSink {
  return {
    decided(results) {
      for (const r of results) metrics.recordDescriptor(r, nearLimitRatio);
    },
    unknownDomain: (domain, descriptors) => metrics.domainNotFound.record(domain, descriptors),
  };
}
