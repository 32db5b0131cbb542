import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import {
  type HealthCheckRequest,
  HealthCheckResponse_ServingStatus as PbServing,
  HealthService,
} from '../gen/grpc/health/v1/health';
import { RateLimitServiceService, RateLimitResponse_Code } from '../gen/envoy/service/ratelimit/v3/rls';
import type { Logger } from '../logger';
import type { RateLimitService } from '../service/ratelimit';
import { HEALTH_SERVICES, type HealthState } from './health';
import type { Metrics } from './metrics';
import { mapError } from './status';

export const PROTO_DIR = path.resolve(__dirname, '../../../proto');

function pbServing(health: HealthState, service: string): PbServing {
  if (!(HEALTH_SERVICES as readonly string[]).includes(service)) return PbServing.SERVICE_UNKNOWN;
  return health.status === 'SERVING' ? PbServing.SERVING : PbServing.NOT_SERVING;
}

function healthImpl(health: HealthState): grpc.UntypedServiceImplementation {
  return {
    check(call: grpc.ServerUnaryCall<HealthCheckRequest, unknown>, callback: grpc.sendUnaryData<unknown>) {
      const status = pbServing(health, call.request.service);
      if (status === PbServing.SERVICE_UNKNOWN) {
        callback({ code: grpc.status.NOT_FOUND, details: `unknown service '${call.request.service}'` });
        return;
      }
      callback(null, { status });
    },
    watch(call: grpc.ServerWritableStream<HealthCheckRequest, unknown>) {
      const send = () => call.write({ status: pbServing(health, call.request.service) });
      send();
      health.on('change', send);
      call.on('cancelled', () => health.off('change', send));
      call.on('close', () => health.off('change', send));
    },
  };
}

export function createGrpcServer(deps: { service: RateLimitService; health: HealthState; metrics: Metrics; logger: Logger }): grpc.Server {
  const { service, health, metrics, logger } = deps;
  const server = new grpc.Server();
  server.addService(RateLimitServiceService, {
    shouldRateLimit(call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) {
      const end = metrics.requestDuration.startTimer({ transport: 'grpc' });
      const deadline = call.getDeadline();
      const deadlineAt = deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined;
      service.shouldRateLimit(call.request, { deadlineAt }).then(
        (response) => {
          end();
          metrics.requests.inc({ transport: 'grpc', code: RateLimitResponse_Code[response.overallCode] });
          callback(null, response);
        },
        (err: unknown) => {
          end();
          const mapped = mapError(err);
          metrics.requests.inc({ transport: 'grpc', code: mapped.label });
          if (mapped.label === 'INTERNAL') logger.error({ err, event: 'internal_error' }, 'ShouldRateLimit failed');
          else logger.debug({ event: 'request_error', code: mapped.label, error: mapped.message }, mapped.message);
          callback({ code: mapped.grpc, details: mapped.message });
        },
      );
    },
  });
  server.addService(HealthService, healthImpl(health));
  const definition = protoLoader.loadSync(['envoy/service/ratelimit/v3/rls.proto', 'grpc/health/v1/health.proto'], {
    includeDirs: [PROTO_DIR],
  });
  new ReflectionService(definition).addToServer(server);
  return server;
}

export function bindGrpc(server: grpc.Server, host: string, port: number, credentials = grpc.ServerCredentials.createInsecure()): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, credentials, (err, bound) =>
      err ? reject(err) : resolve(bound),
    );
  });
}
