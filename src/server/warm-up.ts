import http2 from 'node:http2';
import net from 'node:net';
import type { CompiledConfig, DescriptorNode, RateLimitRule } from '../config/types';
import { RateLimitRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import { frame } from './h2grpc/framing';
import { encodeHeaders } from './h2grpc/hpack';
import { DATA, encodeFrame, END_HEADERS, END_STREAM, HEADERS, PREFACE, SETTINGS } from './h2grpc/frames';
import type { ConfigHolder } from '../config/holder';
import { createLogger, type Logger } from '../logger';
import { RateLimitService } from '../service/ratelimit';
import type { Settings } from '../settings';
import { MemoryStore } from '../store/memory';
import type { DecideOptions, Decision, LimitCheck, Store } from '../store/store';
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
// in front"); 2048 calls (0.35-0.5 s of start-up on 2 cores) took most of that away, and 8192 more.
// But calls that come MAX_STREAMS to a read also come MAX_STREAMS to a store batch: 8192 of them
// were 265 Redis script calls, too few for V8 to optimise what runs once per batch or per read
// (the store's batch, ioredis' command and reply, the socket's read), which it then did under the
// first real load, where Envoy's calls at a moderate rate come one to a read. So half the calls go
// one after another on SEQUENTIAL_LANES connections (sequentialShare).
const MIN_CONNECTIONS = 16;
const MAX_STREAMS = 32;
const CALL_TIMEOUT_MS = 2000;
// No new warm-up connection after this long (a Redis that turns slow makes each call wait for the
// store's deadline), nor a longer wait for the warm-up's own store to be able to decide.
const BUDGET_MS = 3000;
const STORE_READY_MS = 300;

// How `calls` calls are spread: connections, and calls on each (their product is at least `calls`,
// and less than `calls` + connections).
export function warmUpPlan(calls: number): { connections: number; streams: number } {
  if (calls <= 0) return { connections: 0, streams: 0 };
  const connections = Math.min(calls, Math.max(MIN_CONNECTIONS, Math.ceil(calls / MAX_STREAMS)));
  return { connections, streams: Math.ceil(calls / connections) };
}

// A request that a rule of the config matches, so config match, keys, limiter and store run: the
// first limited rule found depth-first (an unlimited rule never reaches the store), else the first
// rule; a made-up request without config.
export function warmUpRequest(config: CompiledConfig | undefined): RateLimitRequest {
  const first = config?.domains.entries().next().value as [string, DescriptorNode] | undefined;
  const path = first === undefined ? undefined : (pathTo(first[1], (r) => !r.unlimited) ?? pathTo(first[1], () => true));
  const entries = path === undefined || path.length === 0 ? [{ key: 'warm-up', value: 'warm-up' }] : path;
  return { domain: first?.[0] ?? 'sluice-warm-up', descriptors: [{ entries, hitsAddend: undefined, limit: undefined }], hitsAddend: 0 };
}

type Entry = { key: string; value: string };

// The entries leading from `node` to the first rule that `wanted` accepts (values, then wildcards,
// then the default branch at each level), or undefined.
function pathTo(node: DescriptorNode, wanted: (rule: RateLimitRule) => boolean, depth = 0): Entry[] | undefined {
  if (node.rule !== undefined) return wanted(node.rule) ? [] : undefined;
  if (depth > 16) return undefined;
  for (const [key, branch] of node.children) {
    const options: [string, DescriptorNode | undefined][] = [
      ...branch.values.entries(),
      ...branch.wildcards.map((w): [string, DescriptorNode] => [w.pattern.replaceAll('*', 'w'), w.node]),
      ['warm-up', branch.defaultNode],
    ];
    for (const [value, next] of options) {
      const rest = next === undefined ? undefined : pathTo(next, wanted, depth + 1);
      if (rest !== undefined) return [{ key, value }, ...rest];
    }
  }
  return undefined;
}

// One connection's opening as Envoy writes it: the preface, SETTINGS and `streams` unary calls in
// one write, without waiting for the server's SETTINGS.
export function callBytes(request: RateLimitRequest, authority: string, grpcTimeout: string, streams = 1): Buffer {
  const body = frame(RateLimitRequest.encode(request).finish());
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
    onAnswers(socket, () => {
      if (++ended === streams) done();
    });
  });
}

// Calls `answered` for each call the server ends on `socket` (HEADERS with END_STREAM: its
// trailers).
function onAnswers(socket: net.Socket, answered: () => void): void {
  let input: Buffer = Buffer.alloc(0);
  socket.on('data', (chunk: Buffer) => {
    input = input.length === 0 ? chunk : Buffer.concat([input, chunk]);
    while (input.length >= 9 && input.length >= 9 + input.readUIntBE(0, 3)) {
      const [type, flags] = [input[3], input[4]];
      input = input.subarray(9 + input.readUIntBE(0, 3));
      if (type === HEADERS && (flags & END_STREAM) !== 0) answered();
    }
  });
}

// Of `calls`, those made one after another (oneByOne, on SEQUENTIAL_LANES connections at once): half
// of what nghttp2Share leaves, none below 64.
export const SEQUENTIAL_LANES = 4;
export function sequentialShare(calls: number): number {
  return calls < 64 ? 0 : Math.floor((calls - nghttp2Share(calls)) / 2);
}

// `calls` calls on one new connection, each sent once the one before has been answered. Resolves
// with the calls answered (fewer after an error or timeoutMs).
export function oneByOne(port: number, request: RateLimitRequest, calls: number, timeoutMs = CALL_TIMEOUT_MS): Promise<number> {
  const opening = callBytes(request, `127.0.0.1:${port}`, '1S');
  // The call's HEADERS and DATA, after the preface and SETTINGS, with the stream id at 5 of each.
  const frames = opening.subarray(PREFACE.length + 9);
  const dataAt = 9 + frames.readUIntBE(0, 3);
  const call = (i: number) => {
    const next = Buffer.from(frames);
    next.writeUInt32BE(2 * i + 1, 5);
    next.writeUInt32BE(2 * i + 1, dataAt + 5);
    return next;
  };
  return new Promise((resolve) => {
    const socket = net.connect({ port, host: '127.0.0.1', noDelay: true });
    let answered = 0;
    const done = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve(answered);
    };
    const timer = setTimeout(done, timeoutMs);
    socket.once('connect', () => socket.write(opening));
    socket.on('error', done);
    socket.on('close', done);
    onAnswers(socket, () => {
      if (++answered >= calls) done();
      else socket.write(call(answered));
    });
  });
}

// Of `calls`, those made through node:http2's client on one connection (nghttp2Calls): an eighth,
// at most 256; none below 64.
export function nghttp2Share(calls: number): number {
  return calls < 64 ? 0 : Math.min(256, Math.floor(calls / 8));
}

// `calls` calls, MAX_STREAMS at a time, on one connection of node:http2's client. nghttp2, the
// library Envoy's HTTP/2 codec was built on and sends like, Huffman-codes strings, adds headers to
// the dynamic table (a request id each time, so that the table fills and evicts) and returns flow
// control credit with WINDOW_UPDATE: parts of the HPACK decoder and of the connection that
// callBytes' plain blocks never reach. Resolves with the calls answered.
export async function nghttp2Calls(port: number, request: RateLimitRequest, calls: number, timeoutMs = CALL_TIMEOUT_MS): Promise<number> {
  const body = frame(RateLimitRequest.encode(request).finish());
  const session = http2.connect(`http://127.0.0.1:${port}`);
  session.on('error', () => undefined);
  const timer = setTimeout(() => session.destroy(), timeoutMs);
  let answered = 0;
  const call = (i: number) =>
    new Promise<void>((resolve) => {
      const stream = session.request({
        ':method': 'POST',
        ':path': SHOULD_RATE_LIMIT,
        'content-type': 'application/grpc',
        te: 'trailers',
        'grpc-timeout': '1S',
        'x-request-id': `sluice-warm-up-${i}-${Math.random().toString(36).slice(2)}`,
      });
      stream.on('trailers', () => answered++);
      stream.on('error', () => undefined);
      stream.on('close', () => resolve());
      stream.resume();
      stream.end(body);
    });
  try {
    for (let next = 0; next < calls && !session.destroyed; next += MAX_STREAMS)
      await Promise.all(Array.from({ length: Math.min(MAX_STREAMS, calls - next) }, (_, j) => call(next + j)));
  } finally {
    clearTimeout(timer);
    session.destroy();
  }
  return answered;
}

// Binds `scratch` on a loopback port of its own, answers about `calls` calls on new connections one
// after another (warmUpPlan; sequentialShare of them one by one, nghttp2Share through node:http2's
// client) and closes it.
// Resolves with the calls answered and the connections opened; a failure only means a colder start.
export async function warmUp(
  scratch: GrpcListener,
  request: RateLimitRequest,
  logger: Logger,
  calls: number,
): Promise<{ answered: number; connections: number }> {
  const viaNghttp2 = nghttp2Share(calls);
  const sequential = sequentialShare(calls);
  const { connections, streams } = warmUpPlan(calls - viaNghttp2 - sequential);
  const port = await scratch.bind('127.0.0.1', 0, undefined, { exclusive: true });
  const bytes = callBytes(request, `127.0.0.1:${port}`, '1S', streams);
  let answered = 0;
  let opened = 0;
  const stopAt = performance.now() + BUDGET_MS;
  try {
    for (; opened < connections && performance.now() < stopAt; opened++) {
      await callOnNewConnection(port, bytes, streams);
      answered += streams;
    }
  } catch {
    opened++; // counted: fewer answered
  }
  if (sequential > 0 && performance.now() < stopAt) {
    const lane = Math.ceil(sequential / SEQUENTIAL_LANES);
    const left = stopAt - performance.now();
    const lanes = await Promise.all(Array.from({ length: SEQUENTIAL_LANES }, () => oneByOne(port, request, lane, left)));
    answered += lanes.reduce((a, b) => a + b, 0);
    opened += SEQUENTIAL_LANES;
  }
  if (viaNghttp2 > 0 && performance.now() < stopAt) {
    answered += await nghttp2Calls(port, request, viaNghttp2).catch(() => 0);
    opened++;
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
  // A store of the service's kind for the warm-up alone, made with the warm-up's settings (the
  // Redis store: its own connections, keys under the warm-up's prefix, so no counter of the
  // service moves); closed after it. Absent: a memory store.
  store?: (settings: Settings) => Store;
}

// The warm-up's view of its own store: every limit loosened to a million per period of at most 2 s,
// so that no call is denied, and what it writes to Redis expires within seconds. Every other call's
// keys are its own, so that it runs the store's code for a new tenant's decision (as Envoy's first
// calls for new tenants); the others go to a returning tenant, one of RETURNING in turn, each far
// below LEASE_AUTO_THRESHOLD's default (never a hot key's lease).
// Not every call new: V8 decides per allocation site whether what it allocates lives long
// ("pretenuring"). When each warm-up call made keys of its own, every per-key record made in the
// warm-up survived, and V8 from then on made those records in the old generation, also for a hot
// key, whose records are replaced at every decision: 3-descriptor calls cost about 20% more CPU and
// mark-compacts (docs/security.md, after the attack table).
export class LooseStore implements Store {
  readonly kind: string;
  private calls = 0;
  constructor(private readonly inner: Store) {
    this.kind = inner.kind;
  }
  decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.inner.decide(this.loosen(checks), options);
  }
  peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.inner.peek(this.loosen(checks), options);
  }
  private loosen(checks: readonly LimitCheck[]): LimitCheck[] {
    const call = this.calls++;
    const own = call % 2 === 0 ? `#${call}` : `#returning-${(call >> 1) % RETURNING}`;
    // Made as the limiter makes its checks (limiter.ts toCheck: the same properties in the same
    // order), not spread from them: the store's code then sees objects of the shape it sees in
    // service, and fewer of its functions are deoptimised by the first real calls (a trace of the
    // first 20,000 calls after start: 19-22 deopts instead of 27-28).
    return checks.map((c) => {
      const loose: EveryField = {
        key: `${c.key}${own}`,
        algorithm: c.algorithm,
        limit: LOOSE,
        periodMs: Math.min(c.periodMs, SHORT_PERIOD_MS),
        burst: LOOSE,
        hits: c.hits,
        mode: c.mode,
        lease: c.lease,
      };
      if (c.layout === undefined) return loose;
      return Object.assign(loose, { layout: c.layout });
    });
  }
  ready(): boolean {
    return this.inner.ready();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const LOOSE = 1_000_000;
// Every field of a check but `layout` (toCheck adds it last, and only for upstream's keys), each
// required even where optional: a field added to LimitCheck must be copied in loosen() too.
type EveryField = { [K in Exclude<keyof LimitCheck, 'layout'>]-?: LimitCheck[K] };
// Returning tenants: 8192 calls, half of them on 16 keys, is 256 calls each in 0.75-1.4 s.
const RETURNING = 16;
// Longer than a second, so that REDIS_PERSECOND sends each warm-up call where its rule's go.
const SHORT_PERIOD_MS = 2000;

// Resolves with true once `store` is ready, with false after `ms`.
function whenReady(store: Store, ms: number): Promise<boolean> {
  if (store.ready()) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    store.onReadyChange?.(() => {
      if (store.ready()) clearTimeout(timer), resolve(true);
    });
  });
}

// The warm-up of app.start(): the service's code with a store, metrics and log of its own, on the
// gRPC server the settings choose. grpc-js is left cold (its listener cannot bind exclusively in a
// worker of WORKERS > 1), and so is every server with WARM_UP_CALLS=0.
export async function warmUpGrpc(deps: WarmUpDeps): Promise<void> {
  if (deps.settings.grpcServerImpl === 'grpc-js' || deps.settings.warmUpCalls <= 0) return;
  const started = performance.now();
  const quiet = createLogger('silent');
  const metrics = new Metrics();
  // Every key the warm-up makes (the service's upstream layout, the Redis store's own) under a
  // prefix of its own.
  const settings: Settings = { ...deps.settings, cacheKeyPrefix: `${deps.settings.cacheKeyPrefix}warm-up:` };
  let own = deps.store?.(settings);
  // A store that cannot decide yet (Redis down or slow to connect) would make every warm-up call
  // wait for its deadline: the warm-up then runs on a memory store, as without STORE=redis.
  if (own !== undefined && !(await whenReady(own, STORE_READY_MS))) {
    await own.close();
    own = undefined;
  }
  const service = new RateLimitService({
    config: deps.config,
    store: own === undefined ? new MemoryStore() : new LooseStore(own),
    settings,
    sink: metricsDecisionSink(metrics, deps.settings.nearLimitRatio),
    logger: quiet,
  });
  const scratch = createGrpcListener(deps.settings.grpcServerImpl, { service, health: deps.health, metrics, logger: quiet, connection: deps.connection });
  let result: { answered: number; connections: number };
  try {
    result = await warmUp(scratch, warmUpRequest(deps.config.config), quiet, deps.settings.warmUpCalls);
  } finally {
    await own?.close();
  }
  const { answered, connections } = result;
  const ms = Math.round(performance.now() - started);
  const store = own?.kind ?? 'memory';
  deps.logger.info(
    { event: 'warm_up', calls: answered, connections, store, ms },
    `gRPC path warmed up: ${answered} calls on ${connections} loopback connections, on a ${store} store of its own, in ${ms} ms`,
  );
}
