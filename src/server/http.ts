import http from 'node:http';
import { dumpConfig } from '../config/dump';
import type { ConfigHolder } from '../config/holder';
import { InvalidRequestError } from '../errors';
import { RateLimitRequest, RateLimitResponse } from '../gen/envoy/service/ratelimit/v3/rls';
import type { Logger } from '../logger';
import type { RateLimitService } from '../service/ratelimit';
import type { HealthState } from './health';
import type { Metrics } from './metrics';
import { mapError } from './status';

const MAX_BODY = 1 << 20;

export interface HttpDeps {
  service: RateLimitService;
  health: HealthState;
  metrics: Metrics;
  config: ConfigHolder;
  logger: Logger;
  settingsDump: () => Record<string, unknown>;
}

export type Route = (req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps) => Promise<void> | void;

export function send(res: http.ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) reject(new InvalidRequestError(`request body over ${MAX_BODY} bytes`));
      else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export function parseRequest(body: string): RateLimitRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    throw new InvalidRequestError(`body is not JSON: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new InvalidRequestError('body must be a JSON object (a RateLimitRequest)');
  }
  return RateLimitRequest.fromJSON(parsed);
}

// Protobuf's canonical JSON writes Durations as "60s"; ts-proto's toJSON writes an object.
export function responseJson(response: RateLimitResponse): string {
  const json = RateLimitResponse.toJSON(response) as { statuses?: { durationUntilReset?: { seconds?: number } }[] };
  for (const s of json.statuses ?? []) {
    if (s.durationUntilReset !== undefined) {
      (s as Record<string, unknown>).durationUntilReset = `${s.durationUntilReset.seconds ?? 0}s`;
    }
  }
  return JSON.stringify(json);
}

// POST /json: the RLS call as JSON; 200 OK, 429 over limit, 400 bad input (as upstream).
async function handleJson(req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  const end = deps.metrics.requestDuration.startTimer({ transport: 'http' });
  try {
    const response = await deps.service.shouldRateLimit(parseRequest(await readBody(req)));
    const over = response.overallCode === 2;
    deps.metrics.requests.inc({ transport: 'http', code: over ? 'OVER_LIMIT' : 'OK' });
    send(res, over ? 429 : 200, responseJson(response), 'application/json');
  } catch (err) {
    const mapped = mapError(err);
    deps.metrics.requests.inc({ transport: 'http', code: mapped.label });
    if (mapped.label === 'INTERNAL') deps.logger.error({ err, event: 'internal_error' }, 'POST /json failed');
    send(res, mapped.http, JSON.stringify({ error: mapped.message, code: mapped.label }), 'application/json');
  } finally {
    end();
  }
}

// Readiness (upstream's /healthcheck): 200 while serving, degraded or not; 500 with the reasons
// when not (no config, store unusable, shutting down).
function readiness(_req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): void {
  if (deps.health.status !== 'SERVING') return send(res, 500, `NOT_SERVING: ${deps.health.reasons().join(', ')}\n`);
  const degraded = deps.health.degraded();
  send(res, 200, degraded === undefined ? 'OK' : `OK (degraded: ${degraded})`);
}

async function metrics(_req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  send(res, 200, await deps.metrics.registry.metrics(), deps.metrics.registry.contentType);
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
    const out = await deps.service.explain(parseRequest(await readBody(req)));
    send(res, 200, `${JSON.stringify(out, null, 2)}\n`, 'application/json');
  } catch (err) {
    const mapped = mapError(err);
    send(res, mapped.http, JSON.stringify({ error: mapped.message, code: mapped.label }), 'application/json');
  }
}

// The main HTTP listener (PORT): the RLS as JSON, health and metrics.
export const MAIN_ROUTES: Record<string, { method: string; handle: Route }> = {
  '/json': { method: 'POST', handle: handleJson },
  '/healthcheck': { method: 'GET', handle: readiness },
  '/readyz': { method: 'GET', handle: readiness },
  // Liveness: the process answers; degraded or draining is not a reason to restart it.
  '/livez': { method: 'GET', handle: (_q, res) => send(res, 200, 'OK') },
  '/metrics': { method: 'GET', handle: metrics },
};

// The admin listener (ADMIN_PORT, localhost unless configured): config, explain, settings.
export const ADMIN_ROUTES: Record<string, { method: string; handle: Route }> = {
  '/rlconfig': { method: 'GET', handle: rlconfig },
  '/explain': { method: 'POST', handle: explain },
  '/settings': { method: 'GET', handle: (_q, res, deps) => send(res, 200, `${JSON.stringify(deps.settingsDump(), null, 2)}\n`, 'application/json') },
  '/metrics': { method: 'GET', handle: metrics },
  '/healthcheck': { method: 'GET', handle: readiness },
};

async function route(routes: Record<string, { method: string; handle: Route }>, req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  const r = routes[(req.url ?? '/').split('?')[0]];
  if (r === undefined) return send(res, 404, 'not found\n');
  const method = req.method ?? 'GET';
  if (method !== r.method && !(r.method === 'GET' && method === 'HEAD')) return send(res, 405, `use ${r.method}\n`);
  await r.handle(req, res, deps);
}

export function createHttpServer(deps: HttpDeps, routes = MAIN_ROUTES): http.Server {
  return http.createServer((req, res) => {
    route(routes, req, res, deps).catch((err: unknown) => {
      deps.logger.error({ err, event: 'http_error' }, 'HTTP handler failed');
      if (!res.headersSent) send(res, 500, 'internal error\n');
    });
  });
}

export function listenHttp(server: http.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address();
      resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
    });
  });
}
