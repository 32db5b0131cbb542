import * as grpc from '@grpc/grpc-js';
import { InvalidRequestError } from '../errors';
import { RateLimitQuotaServiceService } from '../gen/envoy/service/rate_limit_quota/v3/rlqs';
import type { Logger } from '../logger';
import { ResourceExhaustedError, type RateLimitQuotaService } from '../service/rlqs/quota';

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
