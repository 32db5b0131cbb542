import http from 'node:http';
import https from 'node:https';
import type { Server, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { dumpConfig } from '../config/dump';
import type { ConfigHolder } from '../config/holder';
import { InvalidRequestError } from '../errors';
import { type RateLimitRequest, RateLimitResponse } from '../gen/envoy/service/ratelimit/v3/rls';
import type { Logger } from '../logger';
import type { RateLimitService } from '../service/ratelimit';
import { checkUtf8Bytes, DEFAULT_BOUNDS, overBound, type RequestBounds } from '../service/request';
import { requestFromJson } from '../service/request-json';
import { type HealthState, plainDegradedReason } from './health';
import type { Metrics } from '../telemetry/metrics';
import { mapError } from './status';
import type { ServerTls } from './tls';
import type { Tracer } from '../telemetry/tracing';
import { observeCall } from '../telemetry/observe-call';
import { HttpDrainState, registerDrain } from './http-drain';

export interface HttpDeps {
  service: RateLimitService;
  health: HealthState;
  metrics: Metrics;
  config: ConfigHolder;
  logger: Logger;
  settingsDump: () => Record<string, unknown>;
  tracer?: Tracer;
}

export type Route = (req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps) => Promise<void> | void;

export function send(res: http.ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8', headers: http.OutgoingHttpHeaders = {}): void {
  res.writeHead(status, { ...headers, 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

// The body as text: at most MAX_REQUEST_BYTES (refused from Content-Length when it says more, else
// once that much has arrived; the rest is discarded, never buffered), and valid UTF-8 as JSON
// must be (decoding would silently turn invalid bytes into U+FFFD).
export function readBody(req: http.IncomingMessage, bounds: RequestBounds = DEFAULT_BOUNDS): Promise<string> {
  const max = bounds.maxRequestBytes;
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > max) {
      req.resume();
      return reject(overBound('request body', declared, 'maxRequestBytes', bounds, 'bytes'));
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size <= max) return void chunks.push(c);
      req.off('data', onData);
      req.resume();
      reject(overBound('request body', size, 'maxRequestBytes', bounds, 'bytes (or more)'));
    };
    req.on('data', onData);
    req.on('end', () => {
      if (size > max) return;
      const body = Buffer.concat(chunks);
      try {
        checkUtf8Bytes('request body', body);
        resolve(body.toString('utf8'));
      } catch (err) {
        reject(err);
      }
    });
    req.on('error', reject);
  });
}

export function parseRequest(body: string, bounds: RequestBounds = DEFAULT_BOUNDS): RateLimitRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    throw new InvalidRequestError(`body is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidRequestError('body must be a JSON object (a RateLimitRequest)');
  }
  return requestFromJson(parsed, bounds);
}

interface StatusJson {
  limitRemaining?: number;
  durationUntilReset?: { seconds?: number } | string;
}

// Protobuf's canonical JSON writes Durations as "60s"; ts-proto's toJSON writes an object.
// proto3 JSON leaves out zero values, so a known `limitRemaining: 0` (the answer of every 429)
// would vanish: it is written out, and left out only where the remaining is not known (the
// indices listed in dynamicMetadata.unknownRemaining). A degraded reason is put in sluice's words.
export function responseJson(response: RateLimitResponse, storeNow?: string): string {
  const json = RateLimitResponse.toJSON(response) as { statuses?: StatusJson[]; dynamicMetadata?: Record<string, unknown> };
  const unknown = new Set(response.dynamicMetadata?.unknownRemaining as number[] | undefined);
  json.statuses = (json.statuses ?? []).map((s, i) => {
    const { limitRemaining, durationUntilReset, ...rest } = s;
    const out: StatusJson = { ...rest };
    if (limitRemaining !== undefined || !unknown.has(i)) out.limitRemaining = limitRemaining ?? 0;
    if (typeof durationUntilReset === 'object') out.durationUntilReset = `${durationUntilReset.seconds ?? 0}s`;
    return out;
  });
  const reason = json.dynamicMetadata?.degradedReason;
  if (typeof reason === 'string') json.dynamicMetadata!.degradedReason = plainDegradedReason(reason, storeNow);
  return JSON.stringify(json);
}

// A header Node would refuse (a name set to something that is not an HTTP token) is left out
// rather than failing the answer; it is still in the body's responseHeadersToAdd.
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

// What Envoy would add to its client's response: Retry-After, RateLimit-*, the degraded marker.
function httpHeaders(response: RateLimitResponse): http.OutgoingHttpHeaders {
  const out: http.OutgoingHttpHeaders = {};
  for (const h of response.responseHeadersToAdd) {
    if (HEADER_NAME.test(h.key) && !/[\r\n\0]/.test(h.value)) out[h.key.toLowerCase()] = h.value;
  }
  return out;
}

// "counter store unavailable (store error: Stream isn't writeable…)" → in sluice's words.
function plainUnavailable(message: string, storeNow?: string): string {
  const m = /^counter store unavailable \((.*)\); fallback policy is deny$/s.exec(message);
  return m === null ? message : `counter store unavailable (${plainDegradedReason(m[1], storeNow)}); fallback policy is deny`;
}

// POST /json: the RLS call as JSON; 200 OK, 429 over limit, 400 bad input (as upstream).
// One observer per app (its deps), so that its failure log is shared by its HTTP listeners.
const observers = new WeakMap<HttpDeps, ReturnType<typeof observeCall>>();
function observeJson(deps: HttpDeps): ReturnType<typeof observeCall> {
  let observe = observers.get(deps);
  if (observe === undefined) observers.set(deps, (observe = observeCall(deps, 'http')));
  return observe;
}

async function handleJson(req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  const observed = observeJson(deps)(req);
  try {
    const response = await deps.service.shouldRateLimit(parseRequest(await readBody(req, deps.service.bounds), deps.service.bounds), { trace: observed.trace });
    const over = response.overallCode === 2;
    send(res, over ? 429 : 200, responseJson(response, deps.health.storeNow()), 'application/json', httpHeaders(response));
    observed.answered(over ? 'OVER_LIMIT' : 'OK', over ? 429 : 200);
  } catch (err) {
    const mapped = mapError(err);
    const message = mapped.label === 'UNAVAILABLE' ? plainUnavailable(mapped.message, deps.health.storeNow()) : mapped.message;
    send(res, mapped.http, JSON.stringify({ error: message, code: mapped.label }), 'application/json');
    observed.failed(mapped, mapped.http, err);
  }
}

// Readiness (upstream's /healthcheck): 200 while serving, degraded or not, and after a rejected
// reload (the last good config still serves; the body says since when and why); 500 with the
// reasons when not serving (no config, store unusable, shutting down).
function readiness(_req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): void {
  if (deps.health.status !== 'SERVING') return send(res, 500, `NOT_SERVING: ${deps.health.reasons().join(', ')}\n`);
  const notes = deps.health.notes();
  send(res, 200, notes.length === 0 ? 'OK' : `OK (${notes.join('; ')})`);
}

async function metrics(_req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  send(res, 200, await deps.metrics.scrape(), deps.metrics.registry.contentType);
}

function rlconfig(_req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): void {
  const config = deps.config.config;
  if (config === undefined) return send(res, 503, 'no config loaded\n');
  send(res, 200, dumpConfig(config));
}

// POST /explain: the RLS request as JSON → what each descriptor matches and what would be
// decided, without consuming anything.
async function explain(req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  try {
    const out = await deps.service.explain(parseRequest(await readBody(req, deps.service.bounds), deps.service.bounds));
    send(res, 200, `${JSON.stringify(out, null, 2)}\n`, 'application/json');
  } catch (err) {
    const mapped = mapError(err);
    send(res, mapped.http, JSON.stringify({ error: mapped.message, code: mapped.label }), 'application/json');
  }
}

// `clientCert`: on a listener with a client CA (mTLS), only for clients whose certificate it
// verified. Health and metrics stay open to any client that completes the TLS handshake, so that
// probes (which present no certificate) keep working.
interface RouteSpec {
  method: string;
  handle: Route;
  clientCert?: true;
}

// The main HTTP listener (PORT): the RLS as JSON, health and metrics. With GRPC_SERVER_USE_TLS it
// serves HTTPS with the gRPC listener's certificate (see createHttpServer).
export const MAIN_ROUTES: Record<string, RouteSpec> = {
  '/json': { method: 'POST', handle: handleJson, clientCert: true },
  '/healthcheck': { method: 'GET', handle: readiness },
  '/readyz': { method: 'GET', handle: readiness },
  // Liveness: the process answers; degraded or draining is not a reason to restart it.
  '/livez': { method: 'GET', handle: (_q, res) => send(res, 200, 'OK') },
  '/metrics': { method: 'GET', handle: metrics },
};

// The admin listener (ADMIN_PORT, localhost unless configured): config, explain, settings.
export const ADMIN_ROUTES: Record<string, RouteSpec> = {
  '/rlconfig': { method: 'GET', handle: rlconfig },
  '/explain': { method: 'POST', handle: explain },
  '/settings': { method: 'GET', handle: (_q, res, deps) => send(res, 200, `${JSON.stringify(deps.settingsDump(), null, 2)}\n`, 'application/json') },
  '/metrics': { method: 'GET', handle: metrics },
  '/healthcheck': { method: 'GET', handle: readiness },
};

// `tls`: the listener serves HTTPS (its plaintext connections are for probes and scrapes only).
async function route(
  routes: Record<string, RouteSpec>,
  req: http.IncomingMessage,
  res: http.ServerResponse,
  deps: HttpDeps,
  tls: { mtls: boolean } | undefined,
): Promise<void> {
  const r = routes[(req.url ?? '/').split('?')[0]];
  if (r === undefined) return send(res, 404, 'not found\n');
  const method = req.method ?? 'GET';
  if (method !== r.method && !(r.method === 'GET' && method === 'HEAD')) return send(res, 405, `use ${r.method}\n`);
  if (r.clientCert && tls !== undefined && !(req.socket as Partial<TLSSocket>).encrypted)
    return send(res, 403, 'HTTPS is required with GRPC_SERVER_USE_TLS (HTTP_PLAINTEXT=true allows plaintext)\n');
  if (r.clientCert && tls?.mtls && !(req.socket as TLSSocket).authorized)
    return send(res, 403, 'a client certificate signed by GRPC_CLIENT_TLS_CACERT is required\n');
  await r.handle(req, res, deps);
}

export interface HttpServerOptions {
  // Until complete request headers (and the TLS handshake); the whole request; an idle keep-alive
  // connection. Slow clients are cut off instead of holding sockets open.
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  // Open connections at most; 0 = no cap.
  maxConnections: number;
  // HTTPS with these certificates (reloaded when they change).
  tls?: ServerTls;
}

export const DEFAULT_HTTP_OPTIONS: HttpServerOptions = { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 5000, maxConnections: 10_000 };

export function createHttpServer(deps: HttpDeps, routes = MAIN_ROUTES, options: HttpServerOptions = DEFAULT_HTTP_OPTIONS): http.Server {
  const tlsRoute = options.tls === undefined ? undefined : { mtls: options.tls.requireClientCert };
  const drain = new HttpDrainState();
  const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
    drain.request(res);
    route(routes, req, res, deps, tlsRoute).catch((err: unknown) => {
      deps.logger.error({ err, event: 'http_error' }, 'HTTP handler failed');
      if (!res.headersSent) send(res, 500, 'internal error\n');
    });
  };
  const timeouts: http.ServerOptions = {
    headersTimeout: options.headersTimeoutMs,
    requestTimeout: options.requestTimeoutMs,
    keepAliveTimeout: options.keepAliveTimeoutMs,
    // Node checks the two timeouts only this often (30 s by default).
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(options.headersTimeoutMs / 4))),
  };
  const t = options.tls;
  let server: http.Server;
  if (t === undefined) {
    server = http.createServer(timeouts, handler);
    registerDrain(server, drain);
  } else {
    // A client without a certificate still completes the handshake (rejectUnauthorized: false);
    // routes that need one check req.socket.authorized.
    const tlsOptions = { requestCert: t.requireClientCert, rejectUnauthorized: false, handshakeTimeout: options.headersTimeoutMs };
    const secure = https.createServer({ ...timeouts, ...tlsOptions, ...t.secureContext() }, handler);
    t.onChange(() => secure.setSecureContext(t.secureContext()));
    const plain = http.createServer(timeouts, handler);
    acceptPlaintextToo(secure, plain);
    server = secure;
    registerDrain(server, drain, [plain]);
  }
  if (options.maxConnections > 0) server.maxConnections = options.maxConnections;
  return server;
}

// Kubernetes probes of upstream's deployments (Envoy Gateway's among them) ask for /healthcheck
// over plain HTTP even with GRPC_SERVER_USE_TLS, because upstream's HTTP port never serves TLS. So
// the HTTPS port also takes plaintext connections, told apart by their first byte (a TLS
// handshake starts with 0x16): they reach health and metrics; POST /json is refused (route()).
function acceptPlaintextToo(secure: https.Server, plain: http.Server): void {
  const [onTls] = secure.listeners('connection') as ((socket: Socket) => void)[];
  secure.removeAllListeners('connection');
  secure.on('connection', (socket: Socket) => {
    socket.once('readable', () => {
      const first = socket.read(1) as Buffer | null;
      if (first === null) return void socket.destroy();
      // Both servers read what is unshifted before the rest of the stream.
      socket.unshift(first);
      if (first[0] === 0x16) onTls.call(secure, socket);
      else plain.emit('connection', socket);
    });
  });
}

// Any listener (an HTTP server, or the TLS front of client-san.ts): resolves with the bound port.
export function listenHttp(server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address();
      resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
    });
  });
}
