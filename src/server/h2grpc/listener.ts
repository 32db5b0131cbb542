import type { Logger } from '../../logger';
import { bindGrpc, createGrpcServer, drainGrpc, type GrpcDeps, grpcServerOptions, grpcServices } from '../grpc';
import { grpcCredentials, type ServerTls } from '../tls';
import { H2GrpcServer } from './server';

export type GrpcServerImpl = 'grpc-js' | 'http2' | 'sluice';

// The gRPC listener as app.ts sees it, whichever server carries it (GRPC_SERVER_IMPL).
export interface GrpcListener {
  // Resolves with the port bound (port 0 picks a free one).
  bind(host: string, port: number, tls: ServerTls | undefined): Promise<number>;
  // A graceful stop: GOAWAY, calls in flight answered, at most timeoutMs.
  drain(timeoutMs: number, logger: Logger): Promise<void>;
}

export function createGrpcListener(impl: GrpcServerImpl, deps: GrpcDeps): GrpcListener {
  if (impl !== 'grpc-js') {
    const active = { calls: 0 };
    return new H2GrpcServer(grpcServerOptions(deps.service.bounds), active, impl).addServices(grpcServices(deps, active));
  }
  const server = createGrpcServer(deps);
  return {
    bind: (host, port, tls) => bindGrpc(server, host, port, grpcCredentials(tls)),
    drain: (timeoutMs, logger) => drainGrpc(server, timeoutMs, logger),
  };
}
