import type http from 'node:http';
import type * as grpc from '@grpc/grpc-js';
import type { Clock } from './clock';
import { ConfigHolder, type ReloadResult } from './config/holder';
import { createLogger, type Logger } from './logger';
import { RateLimitService } from './service/ratelimit';
import { bindGrpc, createGrpcServer } from './server/grpc';
import { HealthState } from './server/health';
import { ADMIN_ROUTES, createHttpServer, listenHttp, MAIN_ROUTES } from './server/http';
import { grpcCredentials } from './server/tls';
import { ConfigWatcher } from './config/watcher';
import { Metrics } from './server/metrics';
import { describeSettings, type Settings } from './settings';
import { MemoryStore } from './store/memory';
import { storeEvents } from './server/store-events';
import { createRedisStack, redisStackOptions } from './store/compose';
import { RedisStore } from './store/redis';
import { createRedisClients } from './store/redis-connection';
import type { Store } from './store/store';

export interface AppOptions {
  logger?: Logger;
  clock?: Clock;
  store?: Store;
}

export interface App {
  readonly settings: Settings;
  readonly health: HealthState;
  readonly metrics: Metrics;
  readonly service: RateLimitService;
  readonly config: ConfigHolder;
  readonly logger: Logger;
  // Binds both listeners; resolves with the ports actually bound (port 0 picks a free one).
  start(): Promise<{ grpcPort: number; httpPort: number; adminPort: number }>;
  reloadConfig(): ReloadResult;
  stop(): Promise<void>;
}

function createStore(settings: Settings, metrics: Metrics, logger: Logger, clock?: Clock): Store {
  if (settings.store === 'redis') {
    const events = storeEvents(metrics, logger);
    const redis = new RedisStore({ ...createRedisClients(settings, logger), events, keyPrefix: settings.cacheKeyPrefix });
    return createRedisStack(redis, events, redisStackOptions(settings));
  }
  return createMemoryStore(settings, metrics, logger, clock);
}

function createMemoryStore(settings: Settings, metrics: Metrics, logger: Logger, clock?: Clock): Store {
  let lastLog = 0;
  let evictedSinceLog = 0;
  const store = new MemoryStore({
    clock,
    maxKeys: settings.memoryMaxKeys,
    onEvict: () => {
      metrics.memoryEvictions.inc();
      evictedSinceLog++;
      const now = Date.now();
      // At most one line per 10 s however hard the key cap is hit.
      if (now - lastLog >= 10_000) {
        logger.warn(
          { event: 'memory_store_evicting', evicted: evictedSinceLog, maxKeys: settings.memoryMaxKeys },
          'memory store at its key cap: evicting least recently written counters',
        );
        lastLog = now;
        evictedSinceLog = 0;
      }
    },
  });
  metrics.memoryKeysSource = () => store.size;
  return store;
}

export function createApp(settings: Settings, options: AppOptions = {}): App {
  const logger = options.logger ?? createLogger(settings.logLevel);
  const metrics = new Metrics({ defaultMetrics: true });
  const store = options.store ?? createStore(settings, metrics, logger, options.clock);
  const health = new HealthState(() => store.ready(), () => store.degraded?.());
  store.onReadyChange?.(() => health.refresh());
  health.on('change', (status: string) => logger.info({ event: 'health', status, reasons: health.reasons() }, `health: ${status}`));
  const config = new ConfigHolder(settings.configPaths, {
    mergeDomains: settings.mergeDomainConfig,
    logger,
    onLoad: (ok) => {
      metrics.configLoads.inc({ result: ok ? 'success' : 'error' });
      if (ok) metrics.configLoadTimestamp.setToCurrentTime();
      // Cached denials and leases were derived from the old limits.
      if (ok) store.configChanged?.();
      health.setConfigLoaded(config.config !== undefined);
    },
  });
  const service = new RateLimitService({ config, store, settings, metrics, logger });
  const watcher = settings.configWatch ? new ConfigWatcher(settings.configPaths, () => config.reload(), logger) : undefined;
  const deps = { service, health, metrics, config, logger, settingsDump: () => describeSettings(settings) };
  let grpcServer: grpc.Server | undefined;
  const httpServers: http.Server[] = [];

  return {
    settings,
    health,
    metrics,
    service,
    config,
    logger,
    async start() {
      logger.info({ event: 'starting', settings: describeSettings(settings) }, 'sluice starting');
      config.reload();
      watcher?.start();
      grpcServer = createGrpcServer({ service, health, metrics, logger });
      const { credentials, ready } = grpcCredentials(settings);
      await ready;
      const grpcPort = await bindGrpc(grpcServer, settings.grpcHost, settings.grpcPort, credentials);
      const main = createHttpServer(deps, MAIN_ROUTES);
      const admin = createHttpServer(deps, ADMIN_ROUTES);
      httpServers.push(main, admin);
      const httpPort = await listenHttp(main, settings.host, settings.httpPort);
      const adminPort = await listenHttp(admin, settings.adminHost, settings.adminPort);
      logger.info(
        { event: 'listening', grpcPort, httpPort, adminPort, tls: settings.grpcTls, store: store.kind, health: health.status },
        'sluice listening',
      );
      return { grpcPort, httpPort, adminPort };
    },
    reloadConfig: () => config.reload(),
    // Graceful: health NOT_SERVING at once, keep serving SHUTDOWN_DELAY for load balancers to
    // notice, stop accepting, let in-flight calls finish (at most DRAIN_TIMEOUT), close the store.
    async stop() {
      health.setShuttingDown();
      watcher?.stop();
      if (settings.shutdownDelayMs > 0) await new Promise((r) => setTimeout(r, settings.shutdownDelayMs));
      await drainGrpc(grpcServer, settings.drainTimeoutMs, logger);
      await Promise.all(httpServers.map((h) => new Promise<void>((resolve) => (h.close(() => resolve()), h.closeIdleConnections()))));
      await store.close();
      logger.info({ event: 'stopped' }, 'sluice stopped');
    },
  };
}

function drainGrpc(server: grpc.Server | undefined, timeoutMs: number, logger: Logger): Promise<void> {
  if (server === undefined) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      logger.warn({ event: 'drain_timeout', timeoutMs }, 'in-flight calls did not finish in time; closing');
      server.forceShutdown();
      resolve();
    }, timeoutMs);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
