import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { Server as TlsServer, TLSSocket } from 'node:tls';
import { status as Status, type ServerOptions, type ServiceDefinition, type UntypedServiceImplementation } from '@grpc/grpc-js';
import type { Logger } from '../../logger';
import { drainCalls, type ServiceEntry } from '../grpc';
import type { ServerTls } from '../tls';
import { Call, type CallOwner, type GrpcStream, ignoreError, type Method, type RequestHeaders, respondStatus } from './call';
import { DeadlineList } from '../../deadline-list';
import { keepalive, type Keepalive, keepaliveTimes, sessionOptions } from './options';
import { WireServer, type WireOptions } from './wire';

// Which HTTP/2 carries the calls: sluice's own (wire.ts) or node:http2.
export type H2Transport = 'sluice' | 'http2';

// A gRPC server (GRPC_SERVER_IMPL=sluice or http2) for the services grpc-js would carry, from the
// same definitions and handlers (server/grpc.ts grpcServices), without grpc-js' per-call
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
  private wire: WireServer | undefined;
  private readonly wireOptions: WireOptions;
  private readonly idleMs: number | undefined;
  // Unary calls from their HEADERS until their stream closes: a graceful stop waits for these too,
  // not only for calls whose handler has started (one whose message is still on its way was received).
  private unaryStreams = 0;

  // `active`: calls being answered, counted by the handlers; what a graceful stop waits for.
  constructor(
    options: ServerOptions,
    readonly active: { calls: number },
    private readonly transport: H2Transport = 'sluice',
    extra: { handshakeTimeoutMs?: number; onAbuse?: WireOptions['onAbuse'] } = {},
  ) {
    this.maxMessageBytes = options['grpc.max_receive_message_length'] ?? 4 * 1024 * 1024;
    this.http2Options = sessionOptions(options, transport);
    this.keepalive = keepalive(options);
    const times = keepaliveTimes(options);
    this.idleMs = options['grpc.max_connection_idle_ms'];
    this.wireOptions = {
      maxConcurrentStreams: options['grpc.max_concurrent_streams'],
      keepaliveMs: times?.timeMs,
      keepaliveTimeoutMs: times?.timeoutMs,
      handshakeTimeoutMs: extra.handshakeTimeoutMs,
      idleTimeoutMs: this.idleMs,
      onAbuse: extra.onAbuse,
      maxMessageBytes: this.maxMessageBytes,
    };
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
  bind(host: string, port: number, tls?: ServerTls, options: { exclusive?: boolean } = {}): Promise<number> {
    let server: http2.Http2Server | http2.Http2SecureServer | WireServer['server'];
    if (this.transport === 'sluice') {
      server = this.wireServer(tls);
    } else {
      const h2 = tls === undefined ? http2.createServer(this.http2Options) : this.secureServer(tls);
      this.server = h2;
      h2.on('session', (session) => this.track(session));
      h2.on('stream', (stream, headers) => this.dispatch(stream, headers));
      server = h2;
    }
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port, host, exclusive: options.exclusive === true }, () => {
        server.off('error', reject);
        resolve((server.address() as AddressInfo).port);
      });
    });
  }

  // As drainGrpc: GOAWAY, calls in flight answered, what is left closed once idle, at most timeoutMs.
  drain(timeoutMs: number, logger: Logger): Promise<void> {
    if (this.server === undefined && this.wire === undefined) return Promise.resolve();
    return drainCalls(this, timeoutMs, logger);
  }

  inFlight(): number {
    return Math.max(this.active.calls, this.unaryStreams);
  }

  tryShutdown(done: () => void): void {
    if (this.wire !== undefined) return this.wire.close(done);
    this.server!.close(() => done());
    for (const session of this.sessions) session.close();
  }

  forceShutdown(): void {
    if (this.wire !== undefined) this.wire.destroy();
    else {
      for (const session of this.sessions) session.destroy();
      this.server!.close();
    }
    this.deadlines.close();
  }

  private wireServer(tls: ServerTls | undefined): WireServer['server'] {
    const onStream = (stream: GrpcStream, headers: RequestHeaders) => this.dispatch(stream, headers);
    if (tls === undefined) this.wire = new WireServer(this.wireOptions, onStream);
    else {
      const options = { ...tls.secureContext(), requestCert: tls.requireClientCert, rejectUnauthorized: tls.requireClientCert };
      // GRPC_CLIENT_TLS_SAN: a verified client whose certificate lacks the name is not served.
      this.wire = new WireServer(this.wireOptions, onStream, options, (socket) => tls.acceptsPeer(socket));
      const server = this.wire.server as TlsServer;
      tls.onChange(() => server.setSecureContext(tls.secureContext()));
    }
    return this.wire.server;
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
    // node:http2 has no idle timer of its own: no frame for that long closes the session gracefully.
    if (this.idleMs !== undefined) session.setTimeout(this.idleMs, () => session.close());
    session.once('close', () => {
      this.sessions.delete(session);
      stopKeepalive?.();
    });
  }

  private dispatch(stream: GrpcStream, headers: RequestHeaders): void {
    stream.on('error', ignoreError);
    const contentType = headers['content-type'];
    // As grpc-js: not gRPC at all is an HTTP error, an unknown method a gRPC status.
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) return unsupportedMediaType(stream);
    const path = (headers[':path'] as string | undefined) ?? '';
    const method = this.methods.get(path);
    if (method === undefined) return respondStatus(stream, Status.UNIMPLEMENTED, `The server does not implement the method ${path}`);
    if (!method.requestStream && !method.responseStream) {
      this.unaryStreams++;
      stream.once('close', () => this.unaryStreams--);
    }
    new Call(stream, headers, method, this).start();
  }
}

// 415, as grpc-js answers. On sluice's own HTTP/2 it is sent once the request has ended, as an
// HTTP server answers a whole request: frames the client sends meanwhile are checked as on any
// stream (RFC 9113 state, flow control, content-length).
function unsupportedMediaType(stream: GrpcStream): void {
  const answer = () => stream.respond({ ':status': http2.constants.HTTP_STATUS_UNSUPPORTED_MEDIA_TYPE }, { endStream: true });
  if (stream.holdCredit === undefined) return answer();
  stream.on('data', () => undefined);
  stream.on('end', answer);
}
