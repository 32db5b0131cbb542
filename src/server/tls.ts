import * as grpc from '@grpc/grpc-js';
import type { Settings } from '../settings';

// gRPC listener credentials. With TLS, certificate files are re-read every TLS_RELOAD_INTERVAL
// and new connections use the new certificate (rotation without a restart); with a client CA,
// clients must present a certificate it signed (mTLS).
// The credentials, and a promise that resolves once the certificate files have been read: grpc-js
// loads them asynchronously and resets connections until then, so sluice reports itself listening
// only after.
export function grpcCredentials(s: Settings): { credentials: grpc.ServerCredentials; ready: Promise<void> } {
  if (!s.grpcTls) return { credentials: grpc.ServerCredentials.createInsecure(), ready: Promise.resolve() };
  if (s.grpcTlsCert === '' || s.grpcTlsKey === '') {
    throw new Error('GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY');
  }
  const identity = new grpc.experimental.FileWatcherCertificateProvider({
    certificateFile: s.grpcTlsCert,
    privateKeyFile: s.grpcTlsKey,
    refreshIntervalMs: s.tlsReloadMs,
  });
  const clientCa =
    s.grpcTlsClientCa === ''
      ? null
      : new grpc.experimental.FileWatcherCertificateProvider({ caCertificateFile: s.grpcTlsClientCa, refreshIntervalMs: s.tlsReloadMs });
  const loaded = (provider: grpc.experimental.CertificateProvider, kind: 'identity' | 'ca') =>
    new Promise<void>((resolve, reject) => {
      const listener = (update: unknown) => {
        if (update === null) return reject(new Error(`cannot read the gRPC TLS ${kind} files`));
        resolve();
      };
      if (kind === 'identity') provider.addIdentityCertificateListener(listener);
      else provider.addCaCertificateListener(listener);
    });
  const ready = Promise.all([loaded(identity, 'identity'), clientCa === null ? undefined : loaded(clientCa, 'ca')]).then(() => undefined);
  // grpc-js names the first parameter caCertificateProvider but passes it on as the identity.
  return { credentials: grpc.experimental.createCertificateProviderServerCredentials(identity, clientCa, clientCa !== null), ready };
}
