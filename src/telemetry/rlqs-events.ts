import { Counter, Gauge } from 'prom-client';
import type { RlqsEvents } from '../service/rlqs/quota';
import type { Metrics } from './metrics';

// A report from a domain with no config is counted under this label: a peer must not be able to
// mint label values.
const UNKNOWN_DOMAIN = '(unknown)';

// The RLQS series: reports and actions per domain, unknown buckets, open streams.
export function rlqsEvents(metrics: Metrics): RlqsEvents {
  const registers = [metrics.registry];
  const reports = new Counter({ name: 'sluice_rlqs_reports_total', help: 'RLQS usage reports received, by domain', labelNames: ['domain'], registers });
  const buckets = new Counter({
    name: 'sluice_rlqs_bucket_reports_total',
    help: 'Bucket usages in RLQS reports, by domain',
    labelNames: ['domain'],
    registers,
  });
  const actions = new Counter({
    name: 'sluice_rlqs_actions_total',
    help: 'RLQS bucket actions sent, by domain and action (token_bucket, allow_all, deny_all, abandon)',
    labelNames: ['domain', 'action'],
    registers,
  });
  const unknown = new Counter({
    name: 'sluice_rlqs_unknown_buckets_total',
    help: 'RLQS bucket usages no rule matched (answered as RLQS_UNKNOWN_BUCKET says), by domain',
    labelNames: ['domain'],
    registers,
  });
  const streams = new Gauge({ name: 'sluice_rlqs_streams', help: 'Open RLQS streams', registers });
  const label = (domain: string) => (domain === '' ? UNKNOWN_DOMAIN : domain);
  return {
    report: (domain, n) => {
      reports.inc({ domain: label(domain) });
      buckets.inc({ domain: label(domain) }, n);
    },
    action: (domain, action) => actions.inc({ domain: label(domain), action }),
    unknownBucket: (domain) => unknown.inc({ domain: label(domain) }),
    streams: (delta) => streams.inc(delta),
  };
}
