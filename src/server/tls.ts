import * as grpc from '@grpc/grpc-js';
import { isIP } from 'node:net';
import type tls from 'node:tls';
import type { TLSSocket } from 'node:tls';
import type { Logger } from '../logger';
import { SettingsError } from '../errors';
import { settingName, type Settings } from '../settings';

// The server certificate of GRPC_SERVER_USE_TLS, shared by the gRPC listener and (unless
// HTTP_PLAINTEXT) the main HTTP listener. Certificate files are re-read every TLS_RELOAD_INTERVAL
// and new connections use the new certificate (rotation without a restart); with a client CA,
// clients must present a certificate it signed (mTLS).
export interface ServerTls {
  credentials: grpc.ServerCredentials;
  // Resolves once the files have been read: grpc-js loads them asynchronously and resets
  // connections until then, so sluice reports itself listening only after.
  ready: Promise<void>;
  requireClientCert: boolean;
  // GRPC_CLIENT_TLS_SAN ('' = none): a name a verified client certificate must also carry.
  clientSan: string;
  // Whether a connection's client may stay, after the handshake: with GRPC_CLIENT_TLS_SAN, only if
  // its certificate carries the name (a refusal is logged). Servers close the others.
  acceptsPeer(socket: TLSSocket): boolean;
  // The newest certificate, key and client CA, for an https server (after `ready`).
  secureContext(): tls.SecureContextOptions;
  // Called after each change of the files.
  onChange(listener: () => void): void;
  // Stops watching the files (the watcher's timer would keep the process alive).
  close(): void;
}

type Identity = { certificate: Buffer; privateKey: Buffer };

// Certificate files that cannot be read at start: a configuration mistake, named by its settings.
function unreadable(s: Settings, keys: ('grpcTlsCert' | 'grpcTlsKey' | 'grpcTlsClientCa')[]): SettingsError {
  const files = keys.map((k) => `${settingName(s, k)}=${s[k]}`).join(', ');
  return new SettingsError(`cannot read the gRPC TLS file${keys.length > 1 ? 's' : ''} ${files}`);
}

export function serverTls(s: Settings, logger?: Logger): ServerTls | undefined {
  if (!s.grpcTls) return undefined;
  // Both files are given: settings/checks.ts refuses GRPC_SERVER_USE_TLS without them.
  const identity = new grpc.experimental.FileWatcherCertificateProvider({
    certificateFile: s.grpcTlsCert,
    privateKeyFile: s.grpcTlsKey,
    refreshIntervalMs: s.tlsReloadMs,
  });
  const clientCa =
    s.grpcTlsClientCa === ''
      ? null
      : new grpc.experimental.FileWatcherCertificateProvider({ caCertificateFile: s.grpcTlsClientCa, refreshIntervalMs: s.tlsReloadMs });
  let id: Identity | undefined;
  let ca: Buffer | undefined;
  const changed = new Set<() => void>();
  const notify = () => changed.forEach((l) => l());
  let identityLoaded!: (err?: Error) => void;
  let caLoaded!: (err?: Error) => void;
  const settle = (resolve: () => void, reject: (e: Error) => void) => (err?: Error) => (err ? reject(err) : resolve());
  const ready = Promise.all([
    new Promise<void>((resolve, reject) => (identityLoaded = settle(resolve, reject))),
    clientCa === null ? undefined : new Promise<void>((resolve, reject) => (caLoaded = settle(resolve, reject))),
  ]).then(() => undefined);
  // A null update (a file missing mid-rotation) keeps the last good certificate.
  const onIdentity = (update: Identity | null) => {
    if (update === null) return id === undefined ? identityLoaded(unreadable(s, ['grpcTlsCert', 'grpcTlsKey'])) : undefined;
    const first = id === undefined;
    id = update;
    if (first) identityLoaded();
    else notify();
  };
  const onCa = (update: { caCertificate: Buffer } | null) => {
    if (update === null) return ca === undefined ? caLoaded(unreadable(s, ['grpcTlsClientCa'])) : undefined;
    const first = ca === undefined;
    ca = update.caCertificate;
    if (first) caLoaded();
    else notify();
  };
  identity.addIdentityCertificateListener(onIdentity);
  clientCa?.addCaCertificateListener(onCa);
  return {
    // grpc-js names the first parameter caCertificateProvider but passes it on as the identity.
    credentials: grpc.experimental.createCertificateProviderServerCredentials(identity, clientCa, clientCa !== null),
    ready,
    requireClientCert: clientCa !== null,
    clientSan: s.grpcTlsClientSan,
    acceptsPeer: (socket) => s.grpcTlsClientSan === '' || peerHasSan(socket, s.grpcTlsClientSan, logger),
    secureContext: () => ({ cert: id?.certificate, key: id?.privateKey, ...(ca === undefined ? {} : { ca }) }),
    onChange: (listener) => void changed.add(listener),
    close() {
      changed.clear();
      identity.removeIdentityCertificateListener(onIdentity);
      clientCa?.removeCaCertificateListener(onCa);
    },
  };
}

// gRPC listener credentials: insecure without GRPC_SERVER_USE_TLS.
export function grpcCredentials(t: ServerTls | undefined): grpc.ServerCredentials {
  if (t === undefined) return grpc.ServerCredentials.createInsecure();
  OWNER.set(t.credentials, t);
  return t.credentials;
}

// The ServerTls of the credentials grpcCredentials() handed out: bindGrpc() reads the client SAN
// to check from it (grpc-js itself cannot check one, see client-san.ts).
const OWNER = new WeakMap<grpc.ServerCredentials, ServerTls>();

export function credentialsTls(credentials: grpc.ServerCredentials): ServerTls | undefined {
  return OWNER.get(credentials);
}

// GRPC_CLIENT_TLS_SAN as upstream checks it (its gRPC server's VerifyPeerCertificate): the client
// certificate, verified against GRPC_CLIENT_TLS_CACERT, must also carry the name: as a DNS SAN
// (a wildcard covering one whole label matches, as in TLS) or, for an IP address, as an IP SAN.
// The subject's CN does not count, as in Go. A refusal is logged, as upstream does.
export function peerHasSan(socket: TLSSocket, san: string, logger?: Logger): boolean {
  const cert = socket.getPeerX509Certificate();
  const found = cert === undefined ? undefined : isIP(san) !== 0 ? cert.checkIP(san) : cert.checkHost(san, { subject: 'never', partialWildcards: false });
  if (found !== undefined) return true;
  const subject = cert?.subject.replace(/\n/g, ', ') ?? 'none';
  logger?.warn(
    { event: 'client_san_refused', san, subject, remote: socket.remoteAddress },
    `client certificate (${subject}) does not carry GRPC_CLIENT_TLS_SAN ${san}: connection closed`,
  );
  return false;
}
