import type http2 from 'node:http2';
import type { ServerOptions } from '@grpc/grpc-js';

// The grpc-js server options sluice may set (server/grpc.ts GRPC_SERVER_OPTIONS), as the sluice and
// http2 servers honour them (grpc-node.max_session_memory: node:http2 only; sluice's own HTTP/2
// holds no more per connection than the calls in flight). Any other is refused at start, so that
// the servers cannot silently differ.
const HONOURED = new Set([
  // Nothing here keeps per-call channelz data.
  'grpc.enable_channelz',
  'grpc.max_receive_message_length',
  'grpc.max_concurrent_streams',
  'grpc.max_connection_idle_ms',
  'grpc-node.max_session_memory',
  'grpc.keepalive_time_ms',
  'grpc.keepalive_timeout_ms',
]);

// grpc-js' "never" for keepalive_time_ms.
const NEVER_MS = ~(1 << 31);
const KEEPALIVE_TIMEOUT_MS = 20_000;

export function sessionOptions(options: ServerOptions, impl: string): http2.ServerOptions {
  const other = Object.keys(options).filter((key) => !HONOURED.has(key));
  if (other.length > 0) throw new Error(`GRPC_SERVER_IMPL=${impl} does not implement the grpc-js server option(s) ${other.join(', ')}`);
  // As grpc-js: no header-block or session-memory cap (Node degrades badly when it reaches the
  // latter), and its concurrent-stream limit when one is set.
  const out: http2.ServerOptions = {
    maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
    maxSessionMemory: options['grpc-node.max_session_memory'] ?? Number.MAX_SAFE_INTEGER,
  };
  const streams = options['grpc.max_concurrent_streams'];
  if (streams !== undefined) out.settings = { maxConcurrentStreams: streams };
  return out;
}

// grpc-js' server keepalive settings, when pinging is on.
export function keepaliveTimes(options: ServerOptions): { timeMs: number; timeoutMs: number } | undefined {
  const timeMs = options['grpc.keepalive_time_ms'] ?? NEVER_MS;
  if (timeMs <= 0 || timeMs >= NEVER_MS) return undefined;
  return { timeMs, timeoutMs: options['grpc.keepalive_timeout_ms'] ?? KEEPALIVE_TIMEOUT_MS };
}

// Starts pinging one session; returns what stops it.
export type Keepalive = (session: http2.ServerHttp2Session) => () => void;

// grpc-js' server keepalive: a PING every keepalive_time_ms, the connection closed when one is
// not acknowledged within keepalive_timeout_ms. Off by default (sluice sets neither): clients'
// pings are answered by HTTP/2 itself.
export function keepalive(options: ServerOptions): Keepalive | undefined {
  const times = keepaliveTimes(options);
  if (times === undefined) return undefined;
  const { timeMs, timeoutMs } = times;
  return (session) => {
    let timer: NodeJS.Timeout;
    const schedule = () => (timer = setTimeout(ping, timeMs).unref());
    const ping = () => {
      timer = setTimeout(() => session.destroy(), timeoutMs).unref();
      const sent = session.ping((err) => {
        clearTimeout(timer);
        if (err === null) schedule();
      });
      if (!sent) session.destroy();
    };
    schedule();
    return () => clearTimeout(timer);
  };
}
