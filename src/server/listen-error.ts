import { SettingsError } from '../errors';

// A listener that cannot bind stops the start with one line naming the setting to change, e.g.
// "GRPC_PORT=8081: address 0.0.0.0:8081 is already in use", never a stack trace: a port taken or
// refused, or an address that is not this machine's, is a configuration mistake.

export interface ListenTarget {
  // The settings as the user wrote them, NAME=value (a flag, sluice's or upstream's variable, or
  // one setting for both: PROMETHEUS_ADDR=:9090).
  portSetting: string;
  hostSetting: string;
  host: string;
  port: number;
}

// Node's listen errors carry a code; grpc-js puts it (or its resolver's words) in the message.
function errorCode(err: unknown): string | undefined {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === 'string') return code;
  const message = String((err as Error | undefined)?.message ?? err);
  const named = /\b(EADDRINUSE|EACCES|EPERM|EADDRNOTAVAIL|ENOTFOUND|EAI_AGAIN|EAI_NONAME|EINVAL)\b/.exec(message);
  if (named !== null) return named[1];
  return /name resolution failed|could not resolve|invalid address/i.test(message) ? 'ENOTFOUND' : undefined;
}

function address(host: string, port: number): string {
  const h = host === '' ? '*' : host.includes(':') ? `[${host}]` : host;
  return `${h}:${port}`;
}

// The error to stop with, or `err` itself when it is not one of these.
export function listenError(err: unknown, t: ListenTarget): unknown {
  const at = address(t.host, t.port);
  const port = t.portSetting;
  const host = t.hostSetting;
  switch (errorCode(err)) {
    case 'EADDRINUSE':
      return new SettingsError(`${port}: address ${at} is already in use`);
    case 'EACCES':
    case 'EPERM':
      return new SettingsError(`${port}: not permitted to listen on ${at}${t.port < 1024 ? ' (a port below 1024 needs root or CAP_NET_BIND_SERVICE)' : ''}`);
    case 'EADDRNOTAVAIL':
      return new SettingsError(`${host}: address ${at} is not an address of this machine`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
    case 'EAI_NONAME':
    case 'EINVAL':
      return new SettingsError(`${host}: '${t.host}' is not a host name or address this machine can listen on`);
    default:
      return err;
  }
}

// `listening` with its failure explained as above.
export async function listenAs<T>(t: ListenTarget, listening: Promise<T>): Promise<T> {
  try {
    return await listening;
  } catch (err) {
    throw listenError(err, t);
  }
}
