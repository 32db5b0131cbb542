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
}

function send(res: http.ServerResponse, status: number, body: string, type = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function readBody(req: http.IncomingMessage): Promise<string> {
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

function parseRequest(body: string): RateLimitRequest {
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

async function route(req: http.IncomingMessage, res: http.ServerResponse, deps: HttpDeps): Promise<void> {
  const url = (req.url ?? '/').split('?')[0];
  const method = req.method ?? 'GET';
  if (url === '/json') {
    if (method !== 'POST') return send(res, 405, 'use POST\n');
    return handleJson(req, res, deps);
  }
  if (method !== 'GET' && method !== 'HEAD') return send(res, 405, 'use GET\n');
  switch (url) {
    case '/healthcheck': {
      const ok = deps.health.status === 'SERVING';
      return send(res, ok ? 200 : 500, ok ? 'OK' : `NOT_SERVING: ${deps.health.reasons().join(', ')}\n`);
    }
    case '/rlconfig': {
      const config = deps.config.config;
      return config === undefined ? send(res, 503, 'no config loaded\n') : send(res, 200, dumpConfig(config));
    }
    case '/metrics':
      return send(res, 200, await deps.metrics.registry.metrics(), deps.metrics.registry.contentType);
    default:
      return send(res, 404, 'not found\n');
  }
}

export function createHttpServer(deps: HttpDeps): http.Server {
  return http.createServer((req, res) => {
    route(req, res, deps).catch((err: unknown) => {
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
