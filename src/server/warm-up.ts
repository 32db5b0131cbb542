import net from 'node:net';
import type { CompiledConfig, DescriptorNode } from '../config/types';
import { RateLimitRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import { encodeHeaders } from './h2grpc/hpack';
import { DATA, encodeFrame, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS } from './h2grpc/frames';
import type { ConfigHolder } from '../config/holder';
import { createLogger, type Logger } from '../logger';
import { RateLimitService } from '../service/ratelimit';
import type { Settings } from '../settings';
import { MemoryStore } from '../store/memory';
import type { GrpcConnectionLimits } from './grpc';
import type { HealthState } from './health';
import { createGrpcListener, type GrpcListener } from './h2grpc/listener';
import { metricsDecisionSink } from '../telemetry/decision-sink';
import { Metrics } from '../telemetry/metrics';

// The first ShouldRateLimit a process answers runs every function on its path for the first time:
// V8 compiles each lazily then, and the whole path (HTTP/2 frames, HPACK, protobuf, config match,
// limiter, answer) took 50-100 ms on a loaded 2-core machine, past Envoy's 20 ms default, and the
// next few calls were still slow. So before the gRPC port is bound, the same code answers calls
// over loopback on a scratch listener (its own store and metrics, so no counter and no series of
// the real service moves): the first caller on the real port finds the path compiled.

export const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

// WARM_UP_CALLS calls go over at least MIN_CONNECTIONS new connections (a connection's opening and
// its first call are paths of their own), at most MAX_STREAMS at once on each (later calls on a
// connection reuse its HPACK table, as Envoy's do). V8 optimises a function only after it has run
// often: 32 calls compiled the path but left it in baseline code, and a replica then spent its
// first seconds of Envoy traffic at 2-3 times its warm cost per call (docs/performance.md, "Envoy
// in front"); 2048 calls (about 0.3 s of start-up) took that away.
const MIN_CONNECTIONS = 16;
const MAX_STREAMS = 32;
const CALL_TIMEOUT_MS = 2000;

// How `calls` calls are spread: connections, and calls on each (their product is at least `calls`,
// and less than `calls` + connections).
export function warmUpPlan(calls: number): { connections: number; streams: number } {
  if (calls <= 0) return { connections: 0, streams: 0 };
  const connections = Math.min(calls, Math.max(MIN_CONNECTIONS, Math.ceil(calls / MAX_STREAMS)));
  return { connections, streams: Math.ceil(calls / connections) };
}

// A request that a rule of the config matches (the first domain's first rule, following the
// first branch at each level), so config match, keys and limiter run; a made-up one without config.
export function warmUpRequest(config: CompiledConfig | undefined): RateLimitRequest {
  const first = config?.domains.entries().next().value as [string, DescriptorNode] | undefined;
  const entries: { key: string; value: string }[] = [];
  let node = first?.[1];
  while (node !== undefined && node.rule === undefined) {
    const next = node.children.entries().next().value;
    if (next === undefined) break;
    const [key, branch] = next;
    const byValue = branch.values.entries().next().value;
    if (byValue !== undefined) [entries[entries.length], node] = [{ key, value: byValue[0] }, byValue[1]];
    else if (branch.wildcards.length > 0)
      [entries[entries.length], node] = [{ key, value: branch.wildcards[0].pattern.replaceAll('*', 'w') }, branch.wildcards[0].node];
    else [entries[entries.length], node] = [{ key, value: 'warm-up' }, branch.defaultNode];
  }
  if (entries.length === 0) entries.push({ key: 'warm-up', value: 'warm-up' });
  return { domain: first?.[0] ?? 'sluice-warm-up', descriptors: [{ entries, hitsAddend: undefined, limit: undefined }], hitsAddend: 0 };
}

// One connection's opening as Envoy writes it: the preface, SETTINGS and `streams` unary calls in
// one write, without waiting for the server's SETTINGS.
export function callBytes(request: RateLimitRequest, authority: string, grpcTimeout: string, streams = 1): Buffer {
  const message = RateLimitRequest.encode(request).finish();
  const body = Buffer.alloc(5 + message.length);
  body.writeUInt32BE(message.length, 1);
  body.set(message, 5);
  const headers = {
    ':method': 'POST',
    ':scheme': 'http',
    ':path': SHOULD_RATE_LIMIT,
    ':authority': authority,
    'content-type': 'application/grpc',
    te: 'trailers',
    'grpc-timeout': grpcTimeout,
  };
  const parts = [PREFACE, encodeFrame(SETTINGS, 0, 0)];
  for (let i = 0; i < streams; i++)
    parts.push(encodeFrame(HEADERS, END_HEADERS, 2 * i + 1, encodeHeaders(headers)), encodeFrame(DATA, END_STREAM, 2 * i + 1, body));
  return Buffer.concat(parts);
}

// Opens a connection, writes `bytes` and resolves once `streams` calls have ended (their trailers
// came) with the milliseconds from connect() to the last; rejects on an error or after timeoutMs.
export function callOnNewConnection(port: number, bytes: Buffer, streams = 1, timeoutMs = CALL_TIMEOUT_MS): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
    let input: Buffer = Buffer.alloc(0);
    let ended = 0;
    const done = (err?: Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (err === undefined) resolve(performance.now() - started);
      else reject(err);
    };
    const timer = setTimeout(() => done(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    socket.once('connect', () => socket.write(bytes));
    socket.on('error', done);
    socket.on('close', () => done(new Error(`connection closed after ${ended} of ${streams} answers`)));
    socket.on('data', (chunk: Buffer) => {
      input = input.length === 0 ? chunk : Buffer.concat([input, chunk]);
      while (input.length >= 9 && input.length >= 9 + input.readUIntBE(0, 3)) {
        const [type, flags] = [input[3], input[4]];
        input = input.subarray(9 + input.readUIntBE(0, 3));
        if (type === HEADERS && (flags & END_STREAM) !== 0 && ++ended === streams) return done();
      }
    });
  });
}

// Binds `scratch` on a loopback port of its own, answers about `calls` calls on new connections one
// after another (warmUpPlan) and closes it. Resolves with the calls answered and the connections
// opened; a failure only means a colder start.
export async function warmUp(
  scratch: GrpcListener,
  request: RateLimitRequest,
  logger: Logger,
  calls: number,
): Promise<{ answered: number; connections: number }> {
  const { connections, streams } = warmUpPlan(calls);
  const port = await scratch.bind('127.0.0.1', 0, undefined, { exclusive: true });
  const bytes = callBytes(request, `127.0.0.1:${port}`, '1S', streams);
  let answered = 0;
  let opened = 0;
  try {
    for (; opened < connections; opened++) {
      await callOnNewConnection(port, bytes, streams);
      answered += streams;
    }
  } catch {
    opened++; // counted: fewer answered
  }
  await scratch.drain(CALL_TIMEOUT_MS, logger);
  return { answered, connections: opened };
}

export interface WarmUpDeps {
  settings: Settings;
  config: ConfigHolder;
  health: HealthState;
  connection: GrpcConnectionLimits;
  logger: Logger;
}

// The warm-up of app.start(): the service's code with a store, metrics and log of its own, on the
// gRPC server the settings choose. grpc-js is left cold (its listener cannot bind exclusively in a
// worker of WORKERS > 1), and so is every server with WARM_UP_CALLS=0.
export async function warmUpGrpc(deps: WarmUpDeps): Promise<void> {
  if (deps.settings.grpcServerImpl === 'grpc-js' || deps.settings.warmUpCalls <= 0) return;
  const started = performance.now();
  const quiet = createLogger('silent');
  const metrics = new Metrics();
  const service = new RateLimitService({
    config: deps.config,
    store: new MemoryStore(),
    settings: deps.settings,
    sink: metricsDecisionSink(metrics, deps.settings.nearLimitRatio),
    logger: quiet,
  });
  const scratch = createGrpcListener(deps.settings.grpcServerImpl, { service, health: deps.health, metrics, logger: quiet, connection: deps.connection });
  const { answered, connections } = await warmUp(scratch, warmUpRequest(deps.config.config), quiet, deps.settings.warmUpCalls);
  const ms = Math.round(performance.now() - started);
  deps.logger.info(
    { event: 'warm_up', calls: answered, connections, ms },
    `gRPC path warmed up: ${answered} calls on ${connections} loopback connections in ${ms} ms`,
  );
}
