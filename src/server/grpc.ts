import * as grpc from '@grpc/grpc-js';
import { type HealthCheckRequest, HealthCheckResponse_ServingStatus as PbServing, HealthService } from '../gen/grpc/health/v1/health';
import { RateLimitServiceService, RateLimitResponse_Code } from '../gen/envoy/service/ratelimit/v3/rls';
import type { Logger } from '../logger';
import { InvalidRequestError } from '../errors';
import type { RateLimitService } from '../service/ratelimit';
import type { RequestBounds } from '../service/request';
import { decodeRequest } from '../service/request-wire';
import { HEALTH_SERVICES, type HealthState } from './health';
import type { Metrics } from '../telemetry/metrics';
import { reflectionServices } from './reflection';
import { mapError } from './status';
import { closeGrpcFront, listenGrpcCheckingSan } from './client-san';
import { credentialsTls } from './tls';
import type { Tracer } from '../telemetry/tracing';
import { observeCall } from '../telemetry/observe-call';
import type { RateLimitQuotaService } from '../service/rlqs/quota';
import { RateLimitQuotaServiceService } from '../gen/envoy/service/rate_limit_quota/v3/rlqs';
import { rlqsService } from './rlqs';

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

// What the ShouldRateLimit deserializer hands the handler when the bytes are not an acceptable
// request: grpc-js answers INTERNAL for a throwing deserializer, and a malformed or oversized
// request is the caller's fault (INVALID_ARGUMENT).
class Refused {
  constructor(readonly error: InvalidRequestError) {}
}

function rlsDefinition(bounds: RequestBounds): typeof RateLimitServiceService {
  const method = RateLimitServiceService.shouldRateLimit;
  const requestDeserialize = (bytes: Buffer): any => {
    try {
      return decodeRequest(bytes, bounds);
    } catch (err) {
      if (err instanceof InvalidRequestError) return new Refused(err);
      throw err;
    }
  };
  return { ...RateLimitServiceService, shouldRateLimit: { ...method, requestDeserialize } };
}

// Options of sluice's gRPC server that `npm run bench` gives its empty-handler baseline too, so that
// the comparison is the cost of deciding, not of a differently tuned server.
export const GRPC_SERVER_OPTIONS: grpc.ServerOptions = { 'grpc.enable_channelz': 0 };

// Unary calls being answered, per server: what a graceful stop waits for (see drainGrpc).
const ACTIVE = new WeakMap<grpc.Server, { calls: number }>();

// What one gRPC connection may hold (GRPC_MAX_CONCURRENT_STREAMS, GRPC_HANDSHAKE_TIMEOUT,
// GRPC_MAX_CONNECTION_IDLE; 0: none).
export interface GrpcConnectionLimits {
  maxConcurrentStreams: number;
  handshakeTimeoutMs: number;
  maxConnectionIdleMs: number;
}

export interface GrpcDeps {
  service: RateLimitService;
  // StreamRateLimitQuotas (RLQS), on the same port, when given.
  quota?: RateLimitQuotaService;
  connection?: GrpcConnectionLimits;
  health: HealthState;
  metrics: Metrics;
  logger: Logger;
  tracer?: Tracer;
}

// A service definition and its handlers, as grpc-js' addService takes them.
export type ServiceEntry = [grpc.ServiceDefinition, grpc.UntypedServiceImplementation];

// Larger messages are refused from their length prefix, before they are buffered
// (RESOURCE_EXHAUSTED, gRPC's code for an oversized message). Channelz (per-call tracing that
// nothing here serves) is off: it allocates on every call.
export function grpcServerOptions(bounds: RequestBounds, connection?: GrpcConnectionLimits): grpc.ServerOptions {
  const options: grpc.ServerOptions = { ...GRPC_SERVER_OPTIONS, 'grpc.max_receive_message_length': bounds.maxRequestBytes };
  if (connection !== undefined && connection.maxConcurrentStreams > 0) options['grpc.max_concurrent_streams'] = connection.maxConcurrentStreams;
  if (connection !== undefined && connection.maxConnectionIdleMs > 0) options['grpc.max_connection_idle_ms'] = connection.maxConnectionIdleMs;
  return options;
}

export function createGrpcServer(deps: GrpcDeps): grpc.Server {
  const active = { calls: 0 };
  const server = new grpc.Server(grpcServerOptions(deps.service.bounds, deps.connection));
  for (const [definition, impl] of grpcServices(deps, active)) server.addService(definition, impl);
  ACTIVE.set(server, active);
  return server;
}

// Every service sluice answers over gRPC, whichever server carries them (grpc-js, or h2grpc/ on
// node:http2); `active` counts the ShouldRateLimit calls being answered.
export function grpcServices(deps: GrpcDeps, active: { calls: number }): ServiceEntry[] {
  const { service, health, logger } = deps;
  const observe = observeCall(deps, 'grpc');
  const rls: grpc.UntypedServiceImplementation = {
    shouldRateLimit(call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) {
      // Reset by the client before it was started (Rapid Reset): nothing to decide, no one to answer.
      if (call.cancelled) return;
      active.calls++;
      const observed = observe(call);
      const deadline = call.getDeadline();
      const deadlineAt = deadline instanceof Date ? deadline.getTime() : Number.isFinite(deadline) ? deadline : undefined;
      const request = call.request;
      const trace = observed.trace;
      const decided = request instanceof Refused ? Promise.reject(request.error) : service.shouldRateLimit(request, { deadlineAt, trace, caller: call });
      decided.then(
        (response) => {
          active.calls--;
          observed.answered(RateLimitResponse_Code[response.overallCode], 'OK');
          callback(null, response);
        },
        (err: unknown) => {
          active.calls--;
          const mapped = mapError(err);
          observed.failed(mapped, mapped.label, err);
          callback({ code: mapped.grpc, details: mapped.message });
        },
      );
    },
  };
  const quota: ServiceEntry[] = deps.quota === undefined ? [] : [rlqsService(deps.quota, logger)];
  const reflected = [RateLimitServiceService, HealthService, ...(deps.quota === undefined ? [] : [RateLimitQuotaServiceService])];
  return [[rlsDefinition(service.bounds), rls], [HealthService, healthImpl(health)], ...quota, ...reflectionServices(reflected)];
}

// How long no call may be in flight before a draining server closes what is left, ms.
const IDLE_GRACE_MS = 50;
const IDLE_POLL_MS = 10;

// A graceful stop: no new connections or streams (GOAWAY), calls in flight answered, at most
// `timeoutMs`. grpc-js' tryShutdown also waits for every HTTP/2 session to report closed; a
// session its client had just closed (destroyed, its 'close' event not yet emitted) never does,
// and the stop would wait out the whole timeout with nothing to answer. So once no call has been in
// flight for a moment, what is left is closed at once.
export function drainGrpc(server: grpc.Server | undefined, timeoutMs: number, logger: Logger): Promise<void> {
  if (server === undefined) return Promise.resolve();
  closeGrpcFront(server);
  const active = ACTIVE.get(server) ?? { calls: 0 };
  return drainCalls(
    { inFlight: () => active.calls, tryShutdown: (done) => server.tryShutdown(done), forceShutdown: () => server.forceShutdown() },
    timeoutMs,
    logger,
  );
}

// What a graceful stop needs of a gRPC server, whichever implements it.
export interface Drainable {
  // Calls received and not yet answered.
  inFlight(): number;
  // Stops accepting (GOAWAY); `done` once every connection has closed.
  tryShutdown(done: () => void): void;
  forceShutdown(): void;
}

export function drainCalls(server: Drainable, timeoutMs: number, logger: Logger): Promise<void> {
  return new Promise((resolve) => {
    let idleSince = Date.now();
    const finish = (force: boolean) => {
      clearTimeout(timer);
      clearInterval(poll);
      if (force) server.forceShutdown();
      resolve();
    };
    const timer = setTimeout(() => {
      logger.warn({ event: 'drain_timeout', timeoutMs }, 'in-flight calls did not finish in time; closing');
      finish(true);
    }, timeoutMs);
    const poll = setInterval(() => {
      if (server.inFlight() > 0) idleSince = Date.now();
      else if (Date.now() - idleSince >= IDLE_GRACE_MS) finish(true);
    }, IDLE_POLL_MS);
    server.tryShutdown(() => finish(false));
  });
}

export function bindGrpc(server: grpc.Server, host: string, port: number, credentials = grpc.ServerCredentials.createInsecure()): Promise<number> {
  const tls = credentialsTls(credentials);
  if (tls !== undefined && tls.clientSan !== '') return listenGrpcCheckingSan(server, host, port, tls);
  return new Promise((resolve, reject) => {
    server.bindAsync(`${host}:${port}`, credentials, (err, bound) => (err ? reject(err) : resolve(bound)));
  });
}
