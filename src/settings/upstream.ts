// Every setting envoyproxy/ratelimit reads from its environment (its src/settings/settings.go), and
// what sluice does with each. The README's table of them is written from this list
// (test/unit/settings/upstream-settings.test.ts keeps the two equal and checks the list against upstream's names),
// and the ones sluice does not honour are named in a start-up warning when they are set.

export type UpstreamStatus = 'honoured' | 'honoured differently' | 'not honoured';

export interface UpstreamSetting {
  names: readonly string[];
  status: UpstreamStatus;
  // How it differs, or why it is not honoured; for 'honoured', what sluice's own name is, if any.
  note: string;
  // 'honoured differently' settings whose only value sluice has: named in the start-up warning
  // when set to anything else.
  warnUnless?: (value: string) => boolean;
}

const isTrue = (v: string) => ['1', 'true', 'yes', 'on'].includes(v.trim().toLowerCase());

export const UPSTREAM_SETTINGS: readonly UpstreamSetting[] = [
  { names: ['HOST', 'PORT'], status: 'honoured', note: "the HTTP listener (`HTTP_PORT` is sluice's name for `PORT`)" },
  { names: ['DEBUG_PORT'], status: 'honoured', note: 'the admin listener (`ADMIN_PORT`): `/rlconfig`, `/explain`, `/settings`; no Go pprof' },
  { names: ['DEBUG_HOST'], status: 'honoured differently', note: 'default `127.0.0.1` (upstream `0.0.0.0`): the admin port stays local unless opened' },
  {
    names: ['GRPC_HOST', 'GRPC_PORT', 'GRPC_SERVER_USE_TLS', 'GRPC_SERVER_TLS_CERT', 'GRPC_SERVER_TLS_KEY', 'GRPC_CLIENT_TLS_CACERT'],
    status: 'honoured',
    note: 'certificate files are re-read when they change (`TLS_RELOAD_INTERVAL`)',
  },
  {
    names: ['GRPC_CLIENT_TLS_SAN'],
    status: 'honoured differently',
    note: 'a client certificate without the name is disconnected right after the TLS handshake (upstream fails the handshake); no call of it is answered',
  },
  { names: ['GRPC_UDS'], status: 'not honoured', note: 'gRPC listens on `GRPC_HOST`:`GRPC_PORT` only' },
  {
    names: ['GRPC_MAX_CONNECTION_AGE', 'GRPC_MAX_CONNECTION_AGE_GRACE'],
    status: 'not honoured',
    note: 'connections are kept until the client or a drain closes them',
  },
  { names: ['LOG_LEVEL'], status: 'honoured differently', note: 'default `info` (upstream `WARN`); `warning` is accepted' },
  { names: ['LOG_FORMAT'], status: 'honoured differently', note: 'default `json` (upstream `text`); `text` means `pretty`' },
  {
    names: [
      'CONFIG_TYPE',
      'CONFIG_GRPC_XDS_NODE_ID',
      'CONFIG_GRPC_XDS_SERVER_URL',
      'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS',
      'CONFIG_GRPC_XDS_SERVER_USE_TLS',
      'CONFIG_GRPC_XDS_CLIENT_TLS_CERT',
      'CONFIG_GRPC_XDS_CLIENT_TLS_KEY',
      'CONFIG_GRPC_XDS_SERVER_TLS_CACERT',
      'CONFIG_GRPC_XDS_SERVER_TLS_SAN',
      'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES',
    ],
    status: 'honoured',
    note: 'config over xDS (README, "Config over xDS")',
  },
  {
    names: ['CONFIG_GRPC_XDS_NODE_METADATA'],
    status: 'honoured differently',
    note: 'an entry without `=` (which upstream drops) stops the start, naming the setting',
  },
  {
    names: ['XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', 'XDS_CLIENT_BACKOFF_MAX_INTERVAL', 'XDS_CLIENT_BACKOFF_RANDOM_FACTOR', 'XDS_CLIENT_BACKOFF_JITTER'],
    status: 'honoured differently',
    note: "waits double from the initial to the max interval, each spread by ±`RANDOM_FACTOR` with `JITTER`; upstream's backoff library takes `RANDOM_FACTOR` as the growth factor",
  },
  { names: ['CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL'], status: 'not honoured', note: 'reconnects follow `XDS_CLIENT_BACKOFF_*` alone' },
  {
    names: ['FORCE_START_WITHOUT_INITIAL_CONFIG'],
    status: 'honoured differently',
    note: "before the first config every domain is unknown (OK, no limit), what Envoy's default fail-open makes of upstream's error",
  },
  { names: ['HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED'], status: 'honoured', note: '' },
  { names: ['RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_APPDIRECTORY'], status: 'honoured', note: 'used when no `--config`/`CONFIG_PATH` is given' },
  {
    names: ['RUNTIME_WATCH_ROOT'],
    status: 'honoured differently',
    note: "the config directory is watched whatever it says (`CONFIG_WATCH`), and symlink swaps (a ConfigMap's `..data`) load once",
  },
  {
    names: ['RUNTIME_IGNOREDOTFILES'],
    status: 'honoured differently',
    note: 'dotfiles are never loaded: `false` is named in the start-up warning',
    warnUnless: isTrue,
  },
  {
    names: ['BACKEND_TYPE'],
    status: 'honoured differently',
    note: "`redis` when a Redis setting is given (as upstream's default implies), `memory` with none; `memcache` is refused at start",
  },
  {
    names: [
      'REDIS_URL',
      'REDIS_TYPE',
      'REDIS_AUTH',
      'REDIS_SENTINEL_AUTH',
      'REDIS_TLS',
      'REDIS_TLS_CACERT',
      'REDIS_TLS_CLIENT_CERT',
      'REDIS_TLS_CLIENT_KEY',
      'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION',
    ],
    status: 'honoured',
    note: 'default URL `redis://127.0.0.1:6379` (upstream: a unix socket); also `redis://` URL forms',
  },
  {
    names: ['REDIS_SOCKET_TYPE'],
    status: 'honoured differently',
    note: 'the URL says it (a path is a unix socket, `host:port` is TCP); `tcp` or `unix` is checked against it, and a mismatch stops the start naming both settings',
  },
  { names: ['REDIS_POOL_SIZE'], status: 'honoured differently', note: 'default 1: commands are pipelined on each connection' },
  {
    names: ['REDIS_TIMEOUT'],
    status: 'honoured differently',
    note: "natively a call unanswered this long opens the breaker and a decision waits up to the caller's deadline; `COMPAT_MODE=upstream` waits up to it, as upstream",
  },
  {
    names: [
      'REDIS_PERSECOND',
      'REDIS_PERSECOND_URL',
      'REDIS_PERSECOND_TYPE',
      'REDIS_PERSECOND_AUTH',
      'REDIS_PERSECOND_SENTINEL_AUTH',
      'REDIS_PERSECOND_TLS',
      'REDIS_PERSECOND_POOL_SIZE',
      'REDIS_PERSECOND_SOCKET_TYPE',
      'REDIS_PERSECOND_TIMEOUT',
    ],
    status: 'honoured',
    note: 'per-second limits on their own Redis (README, "Redis")',
  },
  {
    names: [
      'REDIS_PIPELINE_WINDOW',
      'REDIS_PIPELINE_LIMIT',
      'REDIS_CLUSTER_PIPELINE_PARALLELISM',
      'REDIS_PERSECOND_PIPELINE_WINDOW',
      'REDIS_PERSECOND_PIPELINE_LIMIT',
      'REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM',
    ],
    status: 'not honoured',
    note: 'the requests of one event-loop turn go to Redis together, without a window to wait',
  },
  {
    names: ['REDIS_POOL_ON_EMPTY_BEHAVIOR', 'REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR'],
    status: 'not honoured',
    note: 'pipelined connections are never all taken',
  },
  {
    names: ['REDIS_HEALTH_CHECK_ACTIVE_CONNECTION'],
    status: 'honoured differently',
    note: 'always on: not ready until Redis was reached and a real decision round-tripped; NOT_SERVING while it cannot be',
  },
  {
    names: ['REDIS_STARTUP_INITIAL_INTERVAL', 'REDIS_STARTUP_MAX_INTERVAL', 'REDIS_STARTUP_MAX_ELAPSED_TIME'],
    status: 'not honoured',
    note: 'sluice starts without Redis and keeps reconnecting (NOT_SERVING meanwhile) instead of exiting',
  },
  { names: ['EXPIRATION_JITTER_MAX_SECONDS'], status: 'not honoured', note: 'each key expires when its algorithm no longer needs it' },
  {
    names: [
      'MEMCACHE_HOST_PORT',
      'MEMCACHE_MAX_IDLE_CONNS',
      'MEMCACHE_SRV',
      'MEMCACHE_SRV_REFRESH',
      'MEMCACHE_TLS',
      'MEMCACHE_TLS_CLIENT_CERT',
      'MEMCACHE_TLS_CLIENT_KEY',
      'MEMCACHE_TLS_CACERT',
      'MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION',
    ],
    status: 'not honoured',
    note: 'no memcached store (it cannot run one atomic decision per request)',
  },
  { names: ['LOCAL_CACHE_SIZE_IN_BYTES', 'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT'], status: 'honoured', note: 'README, "Compatibility"' },
  { names: ['CACHE_KEY_PREFIX'], status: 'honoured differently', note: "default `sluice:` (upstream empty); keys are sluice's unless `KEY_LAYOUT=upstream`" },
  {
    names: [
      'NEAR_LIMIT_RATIO',
      'SHADOW_MODE',
      'QUOTA_MODE',
      'MERGE_DOMAIN_CONFIG',
      'RESPONSE_DYNAMIC_METADATA',
      'LIMIT_RESPONSE_HEADERS_ENABLED',
      'LIMIT_LIMIT_HEADER',
      'LIMIT_REMAINING_HEADER',
      'LIMIT_RESET_HEADER',
    ],
    status: 'honoured',
    note: '',
  },
  { names: ['USE_STATSD'], status: 'honoured differently', note: 'default `false` (upstream `true`): Prometheus `/metrics` is always served' },
  {
    names: ['STATSD_HOST', 'STATSD_PORT', 'STATS_FLUSH_INTERVAL', 'EXTRA_TAGS'],
    status: 'honoured',
    note: '`EXTRA_TAGS` are also constant labels on every Prometheus series',
  },
  { names: ['USE_DOG_STATSD', 'USE_DOG_STATSD_MOGRIFIERS'], status: 'not honoured', note: 'no DogStatsD output: statsd or Prometheus' },
  { names: ['DISABLE_STATS'], status: 'not honoured', note: 'statsd is off unless `USE_STATSD=true`; Prometheus series cost nothing until scraped' },
  {
    names: ['USE_PROMETHEUS', 'PROMETHEUS_ADDR', 'PROMETHEUS_PATH', 'PROMETHEUS_MAPPER_YAML', 'PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS'],
    status: 'honoured',
    note: 'a listener of its own with upstream\'s series (README, "Metrics")',
  },
  {
    names: [
      'TRACING_ENABLED',
      'TRACING_SERVICE_NAME',
      'TRACING_SERVICE_NAMESPACE',
      'TRACING_SERVICE_INSTANCE_ID',
      'TRACING_EXPORTER_PROTOCOL',
      'TRACING_SAMPLING_RATE',
    ],
    status: 'honoured',
    note: 'OpenTelemetry (README, "Tracing")',
  },
];

// Not upstream's: Envoy Gateway sets it, but envoyproxy/ratelimit reads no variable of that name
// (its client CA is GRPC_CLIENT_TLS_CACERT), so neither asks Envoy for a client certificate.
const ENVOY_GATEWAY_ONLY = ['GRPC_SERVER_TLS_CA_CERT'];

const byName = new Map(UPSTREAM_SETTINGS.flatMap((s) => s.names.map((n) => [n, s] as const)));

// Upstream's settings in `env` that sluice does not honour, or (warnUnless) not with that value.
export function upstreamSettingsNotRead(env: NodeJS.ProcessEnv): string[] {
  return Object.keys(env)
    .filter((name) => {
      if (ENVOY_GATEWAY_ONLY.includes(name)) return true;
      const s = byName.get(name);
      if (s === undefined) return false;
      return s.status === 'not honoured' || (s.warnUnless !== undefined && !s.warnUnless(env[name] ?? ''));
    })
    .sort();
}

// The README's table.
export function upstreamSettingsTable(): string {
  const rows = UPSTREAM_SETTINGS.map((s) => `| ${s.names.map((n) => `\`${n}\``).join(', ')} | ${s.status} | ${s.note} |`);
  return ['| envoyproxy/ratelimit setting | in sluice | how, or why not |', '|---|---|---|', ...rows].join('\n');
}
