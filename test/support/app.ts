import * as grpc from '@grpc/grpc-js';
import { createApp, type App, type AppOptions } from '../../src/app';
import { type RateLimitRequest, type RateLimitResponse, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../src/logger';
import { defaultSettings, type Settings } from '../../src/settings';
import { TEST_WARM_UP_CALLS } from './process';

export interface Running {
  app: App;
  grpcPort: number;
  httpPort: number;
  adminPort: number;
  client: RateLimitServiceClient;
  call(request: Partial<RateLimitRequest>): Promise<RateLimitResponse>;
  http(path: string, init?: RequestInit): Promise<Response>;
  admin(path: string, init?: RequestInit): Promise<Response>;
  stop(): Promise<void>;
}

// SLUICE_GRPC_SERVER_IMPL=http2 or grpc-js runs the gRPC tests against that server (default: the
// service's default, sluice's own gRPC on its own HTTP/2).
export const GRPC_SERVER_IMPL = (process.env.SLUICE_GRPC_SERVER_IMPL ?? 'sluice') as Settings['grpcServerImpl'];

// Boots the real service in this process on free loopback ports, with a gRPC client to it.
export async function startApp(overrides: Partial<Settings>, options: AppOptions = {}): Promise<Running> {
  const settings = defaultSettings({
    host: '127.0.0.1',
    grpcHost: '127.0.0.1',
    httpPort: 0,
    grpcPort: 0,
    adminPort: 0,
    configWatch: false,
    logLevel: 'silent',
    grpcServerImpl: GRPC_SERVER_IMPL,
    warmUpCalls: TEST_WARM_UP_CALLS,
    ...overrides,
  });
  const app = createApp(settings, { logger: createLogger(settings.logLevel), ...options });
  const { grpcPort, httpPort, adminPort } = await app.start();
  const client = new RateLimitServiceClient(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
  const call = (request: Partial<RateLimitRequest>) => callRls(client, request);
  return {
    app,
    grpcPort,
    httpPort,
    adminPort,
    client,
    call,
    http: (path, init) => fetch(`http://127.0.0.1:${httpPort}${path}`, closing(init)),
    admin: (path, init) => fetch(`http://127.0.0.1:${adminPort}${path}`, closing(init)),
    async stop() {
      client.close();
      await app.stop();
    },
  };
}

// Connection: close unless the test says otherwise: an idle keep-alive connection left open makes
// the service's graceful stop wait a quiet second before closing it (src/server/http-drain.ts).
export function closing(init?: RequestInit): RequestInit {
  const headers = new Headers(init?.headers);
  if (!headers.has('connection')) headers.set('connection', 'close');
  return { ...init, headers };
}

export function callRls(client: RateLimitServiceClient, request: Partial<RateLimitRequest>): Promise<RateLimitResponse> {
  const full: RateLimitRequest = { domain: '', descriptors: [], hitsAddend: 0, ...request };
  return new Promise((resolve, reject) => {
    client.shouldRateLimit(full, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

// Shorthand for a descriptor from key/value pairs.
export function d(...pairs: [string, string][]): RateLimitRequest['descriptors'][number] {
  return { entries: pairs.map(([key, value]) => ({ key, value })) };
}
