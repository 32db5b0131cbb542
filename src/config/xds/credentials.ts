import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { SettingsError } from '../../errors';

export interface XdsTlsOptions {
  tls: boolean;
  caCertFile: string;
  clientCertFile: string;
  clientKeyFile: string;
  // The name the control plane's certificate must carry; '' = the host of the server URL.
  san: string;
}

function read(file: string, setting: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new SettingsError(`${setting}: cannot read '${file}': ${(e as Error).message}`);
  }
}

// Read at every connect, so a rotated certificate is used from the next reconnect on.
export function xdsCredentials(o: XdsTlsOptions): grpc.ChannelCredentials {
  if (!o.tls) return grpc.credentials.createInsecure();
  const ca = o.caCertFile === '' ? null : read(o.caCertFile, 'CONFIG_GRPC_XDS_SERVER_TLS_CACERT');
  const key = o.clientKeyFile === '' ? null : read(o.clientKeyFile, 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY');
  const cert = o.clientCertFile === '' ? null : read(o.clientCertFile, 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT');
  return grpc.credentials.createSsl(ca, key, cert);
}

// The SAN check, as upstream's tls.Config.ServerName: grpc-js verifies the certificate against the
// target name override instead of the URL's host.
export function xdsChannelOptions(o: XdsTlsOptions & { maxMsgBytes: number }): grpc.ChannelOptions {
  const out: grpc.ChannelOptions = {};
  if (o.tls && o.san !== '') out['grpc.ssl_target_name_override'] = o.san;
  if (o.maxMsgBytes > 0) out['grpc.max_receive_message_length'] = o.maxMsgBytes;
  return out;
}
