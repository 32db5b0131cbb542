import * as grpc from '@grpc/grpc-js';
import type https from 'node:https';
import tls, { type TLSSocket } from 'node:tls';
import { listenHttp } from './http';
import type { ServerTls } from './tls';

// The TLS listeners in front of grpc-js servers, closed by drainGrpc.
const FRONTS = new WeakMap<grpc.Server, tls.Server>();

// grpc-js offers no hook into its TLS handshake, so with a SAN to check, TLS on the gRPC port is
// terminated here, with the certificate, client CA and reloads of tls.ts, and each connection whose
// client passes is handed to the grpc-js server as HTTP/2 over the TLS socket. Others are closed as
// soon as the handshake ends (upstream fails the handshake itself): no call of theirs is answered.
export function listenGrpcCheckingSan(server: grpc.Server, host: string, port: number, t: ServerTls): Promise<number> {
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const front = tls.createServer({ ...t.secureContext(), requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['h2'] });
  t.onChange(() => front.setSecureContext(t.secureContext()));
  front.on('secureConnection', (socket: TLSSocket) => (t.acceptsPeer(socket) ? injector.injectConnection(socket) : socket.destroy()));
  FRONTS.set(server, front);
  return listenHttp(front, host, port);
}

// Stops accepting connections; those handed over close with the gRPC server's drain.
export function closeGrpcFront(server: grpc.Server): void {
  FRONTS.get(server)?.close();
}

// The HTTPS listener (POST /json) shares the client CA: a client whose certificate was verified but
// lacks the name is disconnected too. Clients without a certificate stay, for the routes that ask
// for none (health probes); /json refuses them already.
export function refuseHttpsPeersWithoutSan(server: https.Server, t: ServerTls): void {
  server.on('secureConnection', (socket: TLSSocket) => {
    if (socket.authorized && !t.acceptsPeer(socket)) socket.destroy();
  });
}
