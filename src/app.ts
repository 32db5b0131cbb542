import type http from 'node:http';
import type https from 'node:https';
import type { Clock } from './clock';
import { ConfigHolder, type ReloadResult } from './config/holder';
import { createLogger, type Logger, logEvery } from './logger';
import { RateLimitService } from './service/ratelimit';
import { RateLimitQuotaService } from './service/rlqs/quota';
import { rlqsEvents } from './telemetry/rlqs-events';
import { createGrpcListener, type GrpcListener } from './server/h2grpc/listener';
import { HealthState } from './server/health';
import { drainHttp } from './server/http-drain';
import { ADMIN_ROUTES, createHttpServer, type HttpServerOptions, listenHttp, MAIN_ROUTES } from './server/http';
import { type ServerTls, serverTls } from './server/tls';
import { refuseHttpsPeersWithoutSan } from './server/client-san';
import { createPrometheusListener } from './telemetry/prometheus-listener';
import { ConfigWatcher } from './config/watcher';
import type { ConfigLimits } from './config/limits';
import type { XdsConfigClient } from './config/xds/client';
import { createXdsSource } from './config/xds/source';
import { metricsDecisionSink } from './telemetry/decision-sink';
import { Metrics } from './telemetry/metrics';
import { StatsdSink } from './telemetry/statsd';
import { createTracer } from './telemetry/tracing';
import { compatModeLine, describeSettings, redactRedisUrl, redisStackOptions, redisTargets, regionSettings, settingName, type Settings } from './settings';
import { listenAs, type ListenTarget } from './server/listen-error';
import { regionEvents } from './telemetry/region-events';
import type { StoreEvents } from './store/events';
import type { OverLimitCacheStats } from './store/over-limit-cache';
import type { RegionOptions } from './store/region';
import { createRegionalStack } from './store/region/stack';
import { MemoryStore } from './store/memory';
import { storeEvents } from './telemetry/store-events';
import { warmUpGrpc } from './server/warm-up';
import { createPerSecondSplit, createRedisStack } from './store/compose';
import { perSecondEvents } from './store/persecond';
import { RedisStore } from './store/redis';
import { createRedisClients, type RedisTarget } from './store/redis/connection';
import type { Store } from './store/store';
import { buildInfo, VERSION } from './version';

export interface AppOptions {
  logger?: Logger;
  clock?: Clock;
  store?: Store;
  // Set in each worker of WORKERS > 1 (server/workers.ts): config comes from the primary, which
  // alone reads files or xDS and counts loads; ConfigHolder.adopt() swaps it in.
  configFromPrimary?: boolean;
}

export interface App {
  readonly settings: Settings;
  readonly health: HealthState;
  readonly metrics: Metrics;
  readonly service: RateLimitService;
  readonly config: ConfigHolder;
  readonly logger: Logger;
  // Binds both listeners; resolves with the ports actually bound (port 0 picks a free one).
  start(): Promise<{ grpcPort: number; httpPort: number; adminPort: number; prometheusPort?: number }>;
  reloadConfig(): ReloadResult;
  stop(): Promise<void>;
}

function createStore(settings: Settings, metrics: Metrics, logger: Logger, clock?: Clock): Store {
  if (settings.store === 'redis') {
    const events = storeEvents(metrics, logger);
    // First, so that a bad REDIS_PERSECOND_URL is refused before any connection opens.
    const targets = redisTargets(settings);
    const keys = { keyPrefix: settings.cacheKeyPrefix, windowHashes: settings.windowCounters === 'hash' };
    // The per-second Redis' events are the main one's, labelled.
    const perSecond =
      targets.perSecond === undefined ? undefined : redisStore(targets.perSecond, perSecondEvents(events), logger.child({ redis: 'persecond' }), keys);
    const redis = redisStore(targets.main, events, logger, keys);
    const options = { ...redisStackOptions(settings), onOverLimitCache: (stats: OverLimitCacheStats) => metrics.addLocalCache(stats) };
    if (targets.global !== undefined)
      return createRegionalStack(redis, events, options, regionOptions(settings, targets.global, { metrics, logger, events, keys }));
    if (perSecond !== undefined) return createPerSecondSplit({ main: redis, perSecond, events, options, perSecondStalledMs: settings.redisPerSecondTimeoutMs });
    return createRedisStack(redis, events, options);
  }
  return createMemoryStore(settings, metrics, logger, clock);
}

function redisStore(target: RedisTarget, events: StoreEvents, logger: Logger, keys: { keyPrefix: string; windowHashes: boolean }): RedisStore {
  return new RedisStore({ ...createRedisClients(target, logger), events, ...keys });
}

// Multi-region: the global Redis (its target: the regional connection settings but its own URL,
// type and password), and the region's settings.
function regionOptions(
  settings: Settings,
  target: RedisTarget,
  o: { metrics: Metrics; logger: Logger; events: StoreEvents; keys: { keyPrefix: string; windowHashes: boolean } },
): RegionOptions {
  const { events } = o;
  // Its calls are timed apart from the regional Redis' (operation global_lease, ...).
  const globalEvents: StoreEvents = { ...events, storeCall: (operation, seconds, ok) => events.storeCall(`global_${operation}`, seconds, ok) };
  const region = regionEvents(o.metrics, o.logger, settings.region);
  return { ...regionSettings(settings), global: redisStore(target, globalEvents, o.logger, o.keys), events: region.events, report: region.watch };
}

function createMemoryStore(settings: Settings, metrics: Metrics, logger: Logger, clock?: Clock): Store {
  // At most one line per 10 s however hard the key cap is hit.
  const overflowLog = logEvery(10_000);
  const store: MemoryStore = new MemoryStore({
    clock,
    maxKeys: settings.memoryMaxKeys,
    onOverflow: () => {
      metrics.memoryOverflow.inc();
      const unlogged = overflowLog();
      if (unlogged === undefined) return;
      logger.warn(
        { event: 'memory_store_overflow', decisions: unlogged + 1, maxKeys: settings.memoryMaxKeys, overflowBytes: store.overflowBytes },
        'memory store at its key cap with every counter live: new keys decided by the approximate tier (it can only over-count)',
      );
    },
  });
  metrics.memoryKeysSource = () => store.size;
  metrics.memoryOverflowBytesSource = () => store.overflowBytes;
  return store;
}

export function createApp(settings: Settings, options: AppOptions = {}): App {
  const logger = options.logger ?? createLogger(settings.logLevel, undefined, { format: settings.logFormat });
  const metrics = new Metrics({ defaultMetrics: true, extraTags: settings.extraTags });
  const store = options.store ?? createStore(settings, metrics, logger, options.clock);
  const health = new HealthState(
    () => store.ready(),
    () => store.degraded?.(),
  );
  store.onReadyChange?.(() => health.refresh());
  health.on('change', (status: string) => logger.info({ event: 'health', status, reasons: health.reasons() }, `health: ${status}`));
  const xds = settings.configType === 'grpc_xds_sotw';
  const fed = options.configFromPrimary === true;
  const limits = configLimits(settings);
  const config = new ConfigHolder(xds || fed ? [] : settings.configPaths, {
    mergeDomains: settings.mergeDomainConfig,
    limits,
    logger,
    source: fed ? 'the primary' : xds ? `xds ${settings.xdsServerUrl}` : undefined,
    onLoad: (ok) => {
      if (!fed) metrics.configLoads.inc({ result: ok ? 'success' : 'error' });
      if (ok && !fed) metrics.configLoadTimestamp.setToCurrentTime();
      // Cached denials and leases were derived from the old limits.
      if (ok) store.configChanged?.();
      if (ok) quota.configChanged();
      health.setConfigRejected(config.rejection);
      health.setConfigLoaded(configReady(config, settings));
    },
  });
  const { watcher, xds: xdsSource } = fed ? {} : configSources(settings, config, logger);
  const service = new RateLimitService({ config, store, settings, sink: metricsDecisionSink(metrics, settings.nearLimitRatio), logger, clock: options.clock });
  const rlqsOptions = {
    assignmentTtlMs: settings.rlqsAssignmentTtlMs,
    unknownBucket: settings.rlqsUnknownBucket,
    maxBucketsPerStream: settings.rlqsMaxBucketsPerStream,
  };
  const quota = new RateLimitQuotaService({
    config,
    store,
    limiter: service.limiter,
    bounds: service.bounds,
    options: rlqsOptions,
    events: rlqsEvents(metrics),
    logger,
    clock: options.clock,
  });
  const statsd = settings.statsdEnabled
    ? new StatsdSink(metrics, {
        host: settings.statsdHost,
        port: settings.statsdPort,
        protocol: settings.statsdProtocol,
        flushIntervalMs: settings.statsFlushIntervalMs,
        extraTags: settings.extraTags,
        logger,
      })
    : undefined;
  const tracer = createTracer(settings, logger);
  const deps = { service, health, metrics, config, logger, settingsDump: () => ({ ...buildInfo(), ...describeSettings(settings) }), tracer };
  const prometheus = createPrometheusListener({ settings, metrics, deps, http: httpOptions(settings), logger });
  let grpcServer: GrpcListener | undefined;
  const httpServers: http.Server[] = [];
  let tls: ServerTls | undefined;

  return {
    settings,
    health,
    metrics,
    service,
    config,
    logger,
    async start() {
      logger.info(
        { event: 'starting', build: buildInfo(), settings: describeSettings(settings) },
        `sluice ${VERSION} starting (Node.js ${process.versions.node})`,
      );
      logStoreChoice(settings, logger);
      const mode = compatModeLine(settings);
      logger.info(mode.fields, mode.message);
      if (xds && settings.configPaths.length > 0) {
        logger.warn(
          { event: 'config_paths_ignored', paths: settings.configPaths },
          `CONFIG_TYPE=GRPC_XDS_SOTW: config comes from ${settings.xdsServerUrl}; CONFIG_PATH / --config (${settings.configPaths.join(', ')}) is not read`,
        );
      }
      startConfig({ settings, config, health, watcher, xds: xdsSource, fed });
      statsd?.start();
      const connection = {
        maxConcurrentStreams: settings.grpcMaxConcurrentStreams,
        handshakeTimeoutMs: settings.grpcHandshakeTimeoutMs,
        maxConnectionIdleMs: settings.grpcMaxConnectionIdleMs,
      };
      grpcServer = createGrpcListener(settings.grpcServerImpl, { service, quota, health, metrics, logger, tracer, connection });
      tls = serverTls(settings, logger);
      await tls?.ready;
      // The warm-up's own Redis store: its own connections, its keys under the warm-up's prefix.
      const warmUpStore =
        settings.store === 'redis' && options.store === undefined ? (own: Settings) => createStore(own, new Metrics(), createLogger('silent')) : undefined;
      await warmUpGrpc({ settings, config, health, connection, logger, store: warmUpStore });
      const grpcPort = await listenAs(listenTarget(settings, 'grpcHost', 'grpcPort'), grpcServer.bind(settings.grpcHost, settings.grpcPort, tls));
      // With gRPC TLS the main listener (POST /json) is HTTPS with the same certificate and client
      // CA, unless HTTP_PLAINTEXT; the admin listener (localhost by default) stays plaintext.
      const httpTls = settings.httpPlaintext ? undefined : tls;
      const main = createHttpServer(deps, MAIN_ROUTES, { ...httpOptions(settings), tls: httpTls });
      if (httpTls !== undefined && httpTls.clientSan !== '') refuseHttpsPeersWithoutSan(main as https.Server, httpTls);
      const admin = createHttpServer(deps, ADMIN_ROUTES, httpOptions(settings));
      httpServers.push(main, admin);
      const httpPort = await listenAs(listenTarget(settings, 'host', 'httpPort'), listenHttp(main, settings.host, settings.httpPort));
      const adminPort = await listenAs(listenTarget(settings, 'adminHost', 'adminPort'), listenHttp(admin, settings.adminHost, settings.adminPort));
      const prometheusPort = await prometheus?.start();
      const ports = { grpcPort, httpPort, adminPort, httpTls: httpTls !== undefined };
      logger.info(
        {
          event: 'listening',
          grpcPort,
          httpPort,
          adminPort,
          prometheusPort,
          tls: settings.grpcTls,
          httpTls: httpTls !== undefined,
          store: store.kind,
          health: health.status,
        },
        listeningLine(settings, ports, config),
      );
      return { grpcPort, httpPort, adminPort, prometheusPort };
    },
    reloadConfig: () => {
      if (!xds) return config.reload('signal');
      // Nothing to re-read: the control plane pushes every change.
      logger.info({ event: 'config_reload_skipped' }, 'config comes from xDS: nothing to reload (the control plane pushes changes)');
      return { ok: config.config !== undefined, errors: [], warnings: [] };
    },
    // Graceful: health NOT_SERVING at once, keep serving SHUTDOWN_DELAY for load balancers to
    // notice, stop accepting, let in-flight calls finish (at most DRAIN_TIMEOUT), close the store.
    async stop() {
      health.setShuttingDown();
      watcher?.stop();
      xdsSource?.stop();
      if (settings.shutdownDelayMs > 0) await new Promise((r) => setTimeout(r, settings.shutdownDelayMs));
      // Both listeners at once, each answering what it has received; the store stays open until both
      // are done, so the last calls are decided by it.
      await Promise.all([grpcServer?.drain(settings.drainTimeoutMs, logger), ...httpServers.map((h) => drainHttp(h, settings.drainTimeoutMs))]);
      await prometheus?.stop();
      tls?.close();
      // After the drain, so the last flush counts every answered call.
      await statsd?.close();
      await tracer.shutdown();
      quota.close();
      await store.close();
      logger.info({ event: 'stopped' }, 'sluice stopped');
    },
  };
}

// A listener's settings as the user gave them, for a bind failure's message (listen-error.ts).
function listenTarget(s: Settings, hostKey: 'grpcHost' | 'host' | 'adminHost', portKey: 'grpcPort' | 'httpPort' | 'adminPort'): ListenTarget {
  return {
    hostSetting: `${settingName(s, hostKey)}=${s[hostKey]}`,
    portSetting: `${settingName(s, portKey)}=${s[portKey]}`,
    host: s[hostKey],
    port: s[portKey],
  };
}

export function configLimits(settings: Settings): ConfigLimits {
  return { maxFileBytes: settings.configMaxFileBytes, maxDescriptors: settings.configMaxDescriptors };
}

// Where config comes from: an xDS stream, or files with their watcher (CONFIG_WATCH).
export function configSources(settings: Settings, config: ConfigHolder, logger: Logger): { watcher?: ConfigWatcher; xds?: XdsConfigClient } {
  if (settings.configType === 'grpc_xds_sotw') {
    return { xds: createXdsSource({ settings, holder: config, limits: configLimits(settings), logger }) };
  }
  if (!settings.configWatch) return {};
  const watcher = new ConfigWatcher({
    paths: settings.configPaths,
    reload: (trigger) => config.reload(trigger),
    logger,
    pollIntervalMs: settings.configPollIntervalMs,
    maxFileBytes: settings.configMaxFileBytes,
  });
  return { watcher };
}

// The first config: files are read now; xDS pushes arrive on the stream. Without
// FORCE_START_WITHOUT_INITIAL_CONFIG nothing is served (UNAVAILABLE, NOT_SERVING) until one loads.
function startConfig(o: { settings: Settings; config: ConfigHolder; health: HealthState; watcher?: ConfigWatcher; xds?: XdsConfigClient; fed: boolean }): void {
  const { settings, config, health } = o;
  if (o.xds === undefined && !o.fed) {
    config.reload('startup');
    o.watcher?.start();
  }
  if (settings.forceStartWithoutInitialConfig) config.serveEmptyUntilLoaded();
  health.setConfigLoaded(configReady(config, settings));
  o.xds?.start();
}

// Ready as far as config goes: one is served, and with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED it
// has a domain (upstream's rule: a config with no domain does not count).
function configReady(config: ConfigHolder, settings: Settings): boolean {
  const served = config.config;
  if (served === undefined) return false;
  return !settings.healthyWithAtLeastOneConfigLoaded || served.domains.size > 0;
}

function logStoreChoice(settings: Settings, logger: Logger): void {
  if (settings.storeImpliedBy === undefined) return;
  logger.info(
    { event: 'store_implied', store: 'redis', by: settings.storeImpliedBy },
    `store redis: ${settings.storeImpliedBy} is set and no STORE / BACKEND_TYPE, and envoyproxy/ratelimit's default store is Redis (STORE=memory keeps counters in this process)`,
  );
}

// One line a person can read: where each listener is, the store, the config.
// e.g. "sluice listening: gRPC 0.0.0.0:8081, HTTP 0.0.0.0:8080, admin 127.0.0.1:6070, store memory, config examples/config (1 domain)"
function listeningLine(s: Settings, p: { grpcPort: number; httpPort: number; adminPort: number; httpTls: boolean }, config: ConfigHolder): string {
  const redis = (url: string, type: string) => `${redactRedisUrl(url)}${type === 'single' ? '' : ` (${type})`}`;
  const perSecond = s.redisPerSecond ? `, per-second limits on redis ${redis(s.redisPerSecondUrl, s.redisPerSecondType)}` : '';
  const store = s.store === 'redis' ? `store redis ${redis(s.redisUrl, s.redisType)}${perSecond}` : 'store memory';
  const domains = config.config?.domains.size;
  const errors = config.rejection?.errors.length ?? 0;
  const waiting = s.configType === 'grpc_xds_sotw' && errors === 0 ? 'waiting for the first push' : `not loaded: ${errors} error(s)`;
  const loaded = domains === undefined ? waiting : `${domains} domain${domains === 1 ? '' : 's'}`;
  return (
    `sluice listening: gRPC ${s.grpcHost}:${p.grpcPort}${s.grpcTls ? ' (TLS)' : ''}, ` +
    `HTTP ${s.host}:${p.httpPort}${p.httpTls ? ' (TLS)' : ''}, admin ${s.adminHost}:${p.adminPort}, ` +
    `${store}, config ${configOrigin(s)} (${config.waitingForFirst ? 'none yet, serving every domain as unknown' : loaded})`
  );
}

function configOrigin(s: Settings): string {
  return s.configType === 'grpc_xds_sotw' ? `xDS ${s.xdsServerUrl}` : s.configPaths.join(', ');
}

function httpOptions(s: Settings): HttpServerOptions {
  return {
    headersTimeoutMs: s.httpHeadersTimeoutMs,
    requestTimeoutMs: s.httpRequestTimeoutMs,
    keepAliveTimeoutMs: s.httpKeepAliveTimeoutMs,
    maxConnections: s.httpMaxConnections,
  };
}
