import * as grpc from '@grpc/grpc-js';
import { Counter, Gauge } from 'prom-client';
import { InvalidRequestError } from '../errors';
import { RateLimitQuotaServiceService } from '../gen/envoy/service/rate_limit_quota/v3/rlqs';
import type { Logger } from '../logger';
import { ResourceExhaustedError, type RateLimitQuotaService, type RlqsEvents } from '../service/rlqs/quota';
import type { Metrics } from './metrics';

// A report from a domain with no config is counted under this label: a peer must not be able to
// mint label values.
const UNKNOWN_DOMAIN = '(unknown)';

// The RLQS series: reports and actions per domain, unknown buckets, open streams.
export function rlqsEvents(metrics: Metrics): RlqsEvents {
  const registers = [metrics.registry];
  const reports = new Counter({ name: 'sluice_rlqs_reports_total', help: 'RLQS usage reports received, by domain', labelNames: ['domain'], registers });
  const buckets = new Counter({ name: 'sluice_rlqs_bucket_reports_total', help: 'Bucket usages in RLQS reports, by domain', labelNames: ['domain'], registers });
  const actions = new Counter({ name: 'sluice_rlqs_actions_total', help: 'RLQS bucket actions sent, by domain and action (token_bucket, allow_all, deny_all, abandon)', labelNames: ['domain', 'action'], registers });
  const unknown = new Counter({ name: 'sluice_rlqs_unknown_buckets_total', help: 'RLQS bucket usages no rule matched (answered as RLQS_UNKNOWN_BUCKET says), by domain', labelNames: ['domain'], registers });
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

function statusOf(err: Error): { code: grpc.status; details: string } {
  if (err instanceof InvalidRequestError) return { code: grpc.status.INVALID_ARGUMENT, details: err.message };
  if (err instanceof ResourceExhaustedError) return { code: grpc.status.RESOURCE_EXHAUSTED, details: err.message };
  return { code: grpc.status.INTERNAL, details: 'internal error' };
}

// StreamRateLimitQuotas, for grpc-js and for h2grpc/ (whose streaming calls look the same to it).
export function rlqsService(quota: RateLimitQuotaService, logger: Logger): [grpc.ServiceDefinition, grpc.UntypedServiceImplementation] {
  const impl: grpc.UntypedServiceImplementation = {
    streamRateLimitQuotas(call: grpc.ServerDuplexStream<any, any>) {
      let done = false;
      const stream = quota.open(
        (response) => call.write(response),
        (err) => {
          done = true;
          const status = statusOf(err);
          if (status.code === grpc.status.INTERNAL) logger.error({ err, event: 'internal_error', transport: 'rlqs' }, 'RLQS stream failed');
          else logger.warn({ event: 'rlqs_stream_refused', code: grpc.status[status.code], error: status.details }, `RLQS stream ended: ${status.details}`);
          call.emit('error', status);
        },
      );
      call.on('data', (report) => stream.receive(report));
      // The client is done reporting: so is the server.
      call.on('end', () => {
        void stream.finish().then(() => {
          if (!done) call.end();
          done = true;
        });
      });
      call.on('cancelled', () => {
        done = true;
        stream.close();
      });
    },
  };
  return [RateLimitQuotaServiceService as unknown as grpc.ServiceDefinition, impl];
}
