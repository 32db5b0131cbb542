import * as grpc from '@grpc/grpc-js';
import { type Logger, logEvery } from '../../logger';
import { bindGrpc, createGrpcServer, drainGrpc, type GrpcDeps, grpcServerOptions, grpcServices } from '../grpc';
import { grpcCredentials, type ServerTls } from '../tls';
import { H2GrpcServer } from './server';
import type { WireConnection } from './wire';

export type GrpcServerImpl = 'grpc-js' | 'http2' | 'sluice';

// The gRPC listener as app.ts sees it, whichever server carries it (GRPC_SERVER_IMPL).
export interface GrpcListener {
  // Resolves with the port bound (port 0 picks a free one). `exclusive`: not shared with the other
  // workers of WORKERS > 1 (the warm-up's scratch listener).
  bind(host: string, port: number, tls: ServerTls | undefined, options?: { exclusive?: boolean }): Promise<number>;
  // A graceful stop: GOAWAY, calls in flight answered, at most timeoutMs.
  drain(timeoutMs: number, logger: Logger): Promise<void>;
}

export function createGrpcListener(impl: GrpcServerImpl, deps: GrpcDeps): GrpcListener {
  if (impl !== 'grpc-js') {
    const active = { calls: 0 };
    const options = grpcServerOptions(deps.service.bounds, deps.connection);
    const extra = { handshakeTimeoutMs: deps.connection?.handshakeTimeoutMs, onAbuse: abuseReport(deps) };
    return new H2GrpcServer(options, active, impl, extra).addServices(grpcServices(deps, active));
  }
  routeGrpcJsLog(deps.logger);
  const server = createGrpcServer(deps);
  return {
    bind: (host, port, tls) => bindGrpc(server, host, port, grpcCredentials(tls)),
    drain: (timeoutMs, logger) => drainGrpc(server, timeoutMs, logger),
  };
}

// grpc-js writes its errors as text on stderr ("E No address added ..." before the bind error that
// listen-error.ts words); as JSON log lines they stay with the rest of the log.
function routeGrpcJsLog(logger: Logger): void {
  const line = (...args: unknown[]) => logger.warn({ event: 'grpc_js' }, args.map(String).join(' '));
  grpc.setLogger({ error: line, info: line, debug: line } as Partial<Console>);
}

// A connection closed for abuse: counted by reason, and logged at warn at most once a second (an
// attacker reconnecting in a loop must not flood the log), with how many went unlogged.
function abuseReport(deps: GrpcDeps): (c: WireConnection, what: string) => void {
  const abuse = logEvery(1000);
  return (c, what) => {
    deps.metrics.abusiveConnections.inc({ reason: what });
    const unlogged = abuse();
    if (unlogged === undefined) return;
    const peer = `${c.socket.remoteAddress}:${c.socket.remotePort}`;
    deps.logger.warn(
      { event: 'grpc_connection_abusive', peer, reason: what, unlogged },
      `gRPC connection from ${peer} closed (GOAWAY ENHANCE_YOUR_CALM): past its budget of ${what}`,
    );
  };
}
