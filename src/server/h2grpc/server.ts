import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { status as Status, type ServerOptions, type ServiceDefinition, type UntypedServiceImplementation } from '@grpc/grpc-js';
import type { Logger } from '../../logger';
import { drainCalls, type ServiceEntry } from '../grpc';
import type { ServerTls } from '../tls';
import { Call, type CallOwner, ignoreError, type Method, respondStatus } from './call';
import { DeadlineList } from '../../deadline-list';
import { keepalive, type Keepalive, sessionOptions } from './options';

// A gRPC server on node:http2 (GRPC_SERVER_IMPL=http2) for the services grpc-js would carry, from
// the same definitions and handlers (server/grpc.ts grpcServices), without grpc-js' per-call
// machinery: no interceptor chain, no per-call timer (one deadline list per server), no closures
// per call beyond the unary callback.
export class H2GrpcServer implements CallOwner {
  readonly deadlines = new DeadlineList();
  readonly maxMessageBytes: number;
  private readonly methods = new Map<string, Method>();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly keepalive: Keepalive | undefined;
  private readonly http2Options: http2.ServerOptions;
  private server: http2.Http2Server | http2.Http2SecureServer | undefined;

  // `active`: calls being answered, counted by the handlers; what a graceful stop waits for.
  constructor(
    options: ServerOptions,
    readonly active: { calls: number },
  ) {
    this.maxMessageBytes = options['grpc.max_receive_message_length'] ?? 4 * 1024 * 1024;
    this.http2Options = sessionOptions(options);
    this.keepalive = keepalive(options);
  }

  addService(definition: ServiceDefinition, impl: UntypedServiceImplementation): void {
    for (const [name, m] of Object.entries(definition)) {
      const handler = impl[name] ?? (m.originalName === undefined ? undefined : impl[m.originalName]);
      if (handler === undefined) throw new Error(`no handler for ${m.path}`);
      this.methods.set(m.path, { ...m, handler } as Method);
    }
  }

  addServices(entries: ServiceEntry[]): this {
    for (const [definition, impl] of entries) this.addService(definition, impl);
    return this;
  }

  // Resolves with the port bound. With TLS, the certificate and client CA of `tls` (mTLS when it
  // has one), and new connections use the newest after each reload.
  bind(host: string, port: number, tls?: ServerTls): Promise<number> {
    const server = tls === undefined ? http2.createServer(this.http2Options) : this.secureServer(tls);
    this.server = server;
    server.on('session', (session) => this.track(session));
    server.on('stream', (stream, headers) => this.dispatch(stream, headers));
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve((server.address() as AddressInfo).port);
      });
    });
  }

  // As drainGrpc: GOAWAY, calls in flight answered, what is left closed once idle, at most timeoutMs.
  drain(timeoutMs: number, logger: Logger): Promise<void> {
    if (this.server === undefined) return Promise.resolve();
    return drainCalls(this, timeoutMs, logger);
  }

  tryShutdown(done: () => void): void {
    this.server!.close(() => done());
    for (const session of this.sessions) session.close();
  }

  forceShutdown(): void {
    for (const session of this.sessions) session.destroy();
    this.server!.close();
    this.deadlines.close();
  }

  private secureServer(tls: ServerTls): http2.Http2SecureServer {
    const server = http2.createSecureServer({
      ...this.http2Options,
      ...tls.secureContext(),
      requestCert: tls.requireClientCert,
      rejectUnauthorized: tls.requireClientCert,
      ALPNProtocols: ['h2'],
    });
    tls.onChange(() => server.setSecureContext(tls.secureContext()));
    // GRPC_CLIENT_TLS_SAN: a verified client whose certificate lacks the name is not served.
    server.on('secureConnection', (socket: TLSSocket) => tls.acceptsPeer(socket) || socket.destroy());
    return server;
  }

  private track(session: http2.ServerHttp2Session): void {
    this.sessions.add(session);
    session.on('error', ignoreError);
    const stopKeepalive = this.keepalive?.(session);
    session.once('close', () => {
      this.sessions.delete(session);
      stopKeepalive?.();
    });
  }

  private dispatch(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', ignoreError);
    const contentType = headers['content-type'];
    // As grpc-js: not gRPC at all is an HTTP error, an unknown method a gRPC status.
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) {
      stream.respond({ ':status': http2.constants.HTTP_STATUS_UNSUPPORTED_MEDIA_TYPE }, { endStream: true });
      return;
    }
    const path = headers[':path'] ?? '';
    const method = this.methods.get(path);
    if (method === undefined) return respondStatus(stream, Status.UNIMPLEMENTED, `The server does not implement the method ${path}`);
    new Call(stream, headers, method, this).start();
  }
}
