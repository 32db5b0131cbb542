import type http from 'node:http';
import type * as grpc from '@grpc/grpc-js';
import type { Clock } from './clock';
import { ConfigHolder, type ReloadResult } from './config/holder';
import { createLogger, type Logger } from './logger';
import { RateLimitService } from './service/ratelimit';
import { bindGrpc, createGrpcServer } from './server/grpc';
import { HealthState } from './server/health';
import { createHttpServer, listenHttp } from './server/http';
import { Metrics } from './server/metrics';
import { describeSettings, type Settings } from './settings';
import { MemoryStore } from './store/memory';
import { RedisStore } from './store/redis';
import { ResilientStore } from './store/resilient';
import { resilienceOptions } from './store/resilience-settings';
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
  start(): Promise<{ grpcPort: number; httpPort: number }>;
  reloadConfig(): ReloadResult;
  stop(): Promise<void>;
}

function createStore(settings: Settings, metrics: Metrics, logger: Logger, clock?: Clock): Store {
  if (settings.store === 'redis') {
    const local = new MemoryStore({ maxKeys: settings.memoryMaxKeys });
    return new ResilientStore(new RedisStore(createRedisClients(settings, logger)), local, resilienceOptions(settings, metrics, logger));
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
  const health = new HealthState(() => store.ready());
  store.onReadyChange?.(() => health.refresh());
  health.on('change', (status: string) => logger.info({ event: 'health', status, reasons: health.reasons() }, `health: ${status}`));
  const config = new ConfigHolder(settings.configPaths, {
    mergeDomains: settings.mergeDomainConfig,
    logger,
    onLoad: (ok) => {
      metrics.configLoads.inc({ result: ok ? 'success' : 'error' });
      if (ok) metrics.configLoadTimestamp.setToCurrentTime();
      health.setConfigLoaded(config.config !== undefined);
    },
  });
  const service = new RateLimitService({ config, store, settings, metrics, logger });
  let grpcServer: grpc.Server | undefined;
  let httpServer: http.Server | undefined;

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
      grpcServer = createGrpcServer({ service, health, metrics, logger });
      const grpcPort = await bindGrpc(grpcServer, settings.grpcHost, settings.grpcPort);
      httpServer = createHttpServer({ service, health, metrics, config, logger });
      const httpPort = await listenHttp(httpServer, settings.host, settings.httpPort);
      logger.info({ event: 'listening', grpcPort, httpPort, store: store.kind, health: health.status }, 'sluice listening');
      return { grpcPort, httpPort };
    },
    reloadConfig: () => config.reload(),
    async stop() {
      health.setShuttingDown();
      await new Promise<void>((resolve) => (grpcServer ? grpcServer.tryShutdown(() => resolve()) : resolve()));
      await new Promise<void>((resolve) => (httpServer ? httpServer.close(() => resolve()) : resolve()));
      httpServer?.closeAllConnections();
      await store.close();
      logger.info({ event: 'stopped' }, 'sluice stopped');
    },
  };
}
