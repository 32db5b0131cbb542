import path from 'node:path';
import { parseDuration } from './config/duration';
import { applyCompatMode, type CompatMode } from './compat-mode';
import type { HashTagPolicy } from './keys';

// Every setting sluice reads, from flags and the environment, in one place. Everything else gets
// a Settings object. Precedence: flag > environment (sluice's name, then upstream's) > default.

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal' | 'silent';
export type LogFormat = 'json' | 'pretty';

export interface Settings {
  configPaths: string[];
  // Where config comes from: files (configPaths) or an xDS control plane (src/config/xds/).
  configType: 'file' | 'grpc_xds_sotw';
  xdsServerUrl: string;
  xdsNodeId: string;
  // key=value entries, sent as the node's metadata (string values, as upstream).
  xdsNodeMetadata: string[];
  // key:value entries, sent as gRPC metadata on the stream.
  xdsAdditionalHeaders: string[];
  xdsTls: boolean;
  xdsTlsClientCert: string;
  xdsTlsClientKey: string;
  xdsTlsCaCert: string;
  xdsTlsSan: string;
  xdsBackoffInitialMs: number;
  xdsBackoffMaxMs: number;
  xdsBackoffRandomFactor: number;
  xdsBackoffJitter: boolean;
  // 0: grpc-js' default (4 MiB).
  xdsMaxMsgBytes: number;
  // Serve before the first config arrives, as if every domain were unknown (upstream's flag).
  forceStartWithoutInitialConfig: boolean;
  // Ready only once a config with at least one domain is loaded (upstream's flag).
  healthyWithAtLeastOneConfigLoaded: boolean;
  // The setting whose presence chose the Redis store when no store was named (start-up log).
  storeImpliedBy?: string;
  host: string;
  httpPort: number;
  grpcHost: string;
  grpcPort: number;
  // Which gRPC server carries the gRPC listener: server/h2grpc/ on its own HTTP/2 (wire.ts) or on
  // node:http2, or grpc-js.
  grpcServerImpl: 'grpc-js' | 'http2' | 'sluice';
  // Per gRPC connection: streams at once, time to the client's first SETTINGS, time without a
  // stream before a graceful close (0: never).
  grpcMaxConcurrentStreams: number;
  grpcHandshakeTimeoutMs: number;
  grpcMaxConnectionIdleMs: number;
  // RLQS (service/rlqs/): how long an assignment lives at Envoy, what an unknown bucket gets, and
  // how many buckets one stream may report.
  rlqsAssignmentTtlMs: number;
  rlqsUnknownBucket: 'allow' | 'deny';
  rlqsMaxBucketsPerStream: number;
  adminHost: string;
  adminPort: number;
  grpcTls: boolean;
  grpcTlsCert: string;
  grpcTlsKey: string;
  grpcTlsClientCa: string;
  // A verified client certificate must also carry this DNS or IP SAN ('' = any), as upstream.
  grpcTlsClientSan: string;
  tlsReloadMs: number;
  httpPlaintext: boolean;
  httpHeadersTimeoutMs: number;
  httpRequestTimeoutMs: number;
  httpKeepAliveTimeoutMs: number;
  httpMaxConnections: number;
  configWatch: boolean;
  // Periodic config fingerprint check behind the file watch; 0 = off.
  configPollIntervalMs: number;
  configMaxFileBytes: number;
  configMaxDescriptors: number;
  shutdownDelayMs: number;
  drainTimeoutMs: number;
  // Serving processes sharing the ports (server/workers.ts); 'auto': the cores this process may use.
  workers: number | 'auto';
  logLevel: LogLevel;
  logFormat: LogFormat;
  // Request bounds (service/request.ts): over one, a request is refused with INVALID_ARGUMENT.
  maxDescriptors: number;
  maxDescriptorEntries: number;
  maxValueBytes: number;
  maxRequestBytes: number;
  store: 'memory' | 'redis';
  memoryMaxKeys: number;
  redisUrl: string;
  redisType: 'single' | 'sentinel' | 'cluster';
  redisAuth: string;
  redisSentinelAuth: string;
  redisTls: boolean;
  redisTlsCaCert: string;
  redisTlsClientCert: string;
  redisTlsClientKey: string;
  redisTlsSkipHostnameVerification: boolean;
  redisPoolSize: number;
  redisTimeoutMs: number;
  redisConnectTimeoutMs: number;
  // '' = as the URL says (a path is a unix socket); upstream's tcp | unix are checked against it.
  redisSocketType: string;
  // REDIS_PERSECOND: limits of one second or less on their own Redis (store/persecond.ts).
  redisPerSecond: boolean;
  redisPerSecondUrl: string;
  redisPerSecondType: 'single' | 'sentinel' | 'cluster';
  redisPerSecondAuth: string;
  redisPerSecondSentinelAuth: string;
  redisPerSecondTls: boolean;
  redisPerSecondPoolSize: number;
  // '' = as the URL says (a path is a unix socket); upstream's tcp | unix are checked against it.
  redisPerSecondSocketType: string;
  // 0 = REDIS_TIMEOUT.
  redisPerSecondTimeoutMs: number;
  countDeniedHits: boolean;
  globalShadowMode: boolean;
  globalQuotaMode: boolean;
  nearLimitRatio: number;
  mergeDomainConfig: boolean;
  responseDynamicMetadata: boolean;
  responseHeadersEnabled: boolean;
  headerLimit: string;
  headerRemaining: string;
  headerReset: string;
  retryAfterEnabled: boolean;
  headerRetryAfter: string;
  cacheKeyPrefix: string;
  windowCounters: 'hash' | 'keys';
  hashTag: HashTagPolicy;
  keyLayout: 'sluice' | 'upstream';
  keyHashSecret: string;
  keyHashMaxValueLength: number;
  keyHashKeys: string[];
  storeDeadlineMs: number;
  deadlineMarginMs: number;
  breakerFailureRatio: number;
  breakerMinCalls: number;
  breakerWindowMs: number;
  breakerCooldownMs: number;
  fallbackPolicy: 'local' | 'allow' | 'deny';
  fallbackDomainPolicies: string[];
  // 'auto': 1 / the live replicas registered in Redis; a number: that share of what remains.
  fallbackShare: number | 'auto';
  replicaTtlMs: number;
  degradedHeader: string;
  overLimitCacheSize: number;
  // LOCAL_CACHE_SIZE_IN_BYTES (upstream's name): the over-limit cache sized in bytes; 0 = not given.
  localCacheSizeBytes: number;
  // Upstream's STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: a request that goes over counts nothing.
  stopCacheKeyIncrementWhenOverlimit: boolean;
  // Whose behaviour the defaults follow: sluice's own, or envoyproxy/ratelimit's (compat-mode.ts).
  compatMode: CompatMode;
  leaseAutoThreshold: number;
  leaseAutoShare: number;
  leaseTtlMs: number;
  leaseLowWater: number;
  // Multi-region (docs/multi-region.md): without globalRedisUrl nothing of this applies.
  region: string;
  globalRedisUrl: string;
  globalRedisType: 'single' | 'sentinel' | 'cluster';
  globalRedisAuth: string;
  // deny | allow | a share of each limit such as 50% or 0.5 (see partitionPolicy()).
  globalPartitionPolicy: string;
  globalPartitionDomainPolicies: string[];
  globalLeaseHorizonMs: number;
  globalLeaseTtlMs: number;
  replicaLeaseHorizonMs: number;
  globalTimeoutMs: number;
  // statsd output with envoyproxy/ratelimit's metric names (server/statsd.ts); off by default.
  statsdEnabled: boolean;
  statsdHost: string;
  statsdPort: number;
  statsdProtocol: 'udp' | 'tcp';
  statsFlushIntervalMs: number;
  extraTags: string[];
  // Upstream's Prometheus listener (server/prometheus-listener.ts): its series named by a statsd_exporter mapping.
  prometheusEnabled: boolean;
  prometheusAddr: string;
  prometheusPath: string;
  // '' = sluice's equivalent of upstream's default mapping (server/upstream-mapping.ts).
  prometheusMapperYaml: string;
  prometheusResponseTimeAsMs: boolean;
  // OpenTelemetry tracing (server/tracing.ts); off by default, and then no OTel code is loaded.
  tracingEnabled: boolean;
  tracingServiceName: string;
  tracingServiceNamespace: string;
  // '': a random UUID per process, as upstream.
  tracingServiceInstanceId: string;
  tracingSamplingRate: number;
  tracingExporterProtocol: 'http' | 'grpc';
  // '': the protocol's default collector (localhost:4318 for http, localhost:4317 for grpc).
  otlpEndpoint: string;
  otlpTracesEndpoint: string;
  // k1=v1,k2=v2 (URL-encoded values), as the OTel SDK reads it; see otlpHeaders().
  otlpHeaders: string;
  // Where each setting given explicitly came from: its flag (--grpc-port) or the environment
  // variable read (PORT rather than HTTP_PORT), so that messages name what the user wrote.
  origins?: Partial<Record<keyof Settings, string>>;
}

type Kind = 'string' | 'list' | 'port' | 'int' | 'count' | 'ratio' | 'share' | 'bool' | 'enum' | 'duration' | 'auto-int';

export interface Spec {
  key: keyof Settings;
  flag: string;
  env: string[];
  kind: Kind;
  def: unknown;
  choices?: readonly string[];
  help: string;
}

// The settings table; README's table is written from it.
export const SETTINGS: readonly Spec[] = [
  { key: 'configPaths', flag: 'config', env: ['CONFIG_PATH'], kind: 'list', def: [], help: 'config file or directory; repeat the flag or separate with commas' },
  { key: 'configType', flag: 'config-type', env: ['CONFIG_TYPE'], kind: 'enum', def: 'file', choices: ['file', 'grpc_xds_sotw'], help: 'file (CONFIG_PATH) or grpc_xds_sotw: config pushed by an xDS control plane (ADS, state of the world) as RateLimitConfig resources' },
  { key: 'xdsServerUrl', flag: 'xds-server-url', env: ['CONFIG_GRPC_XDS_SERVER_URL'], kind: 'string', def: 'localhost:18000', help: 'xDS control plane address, host:port' },
  { key: 'xdsNodeId', flag: 'xds-node-id', env: ['CONFIG_GRPC_XDS_NODE_ID'], kind: 'string', def: 'default', help: 'node id sent to the control plane (it picks the snapshot by this)' },
  { key: 'xdsNodeMetadata', flag: 'xds-node-metadata', env: ['CONFIG_GRPC_XDS_NODE_METADATA'], kind: 'list', def: [], help: 'node metadata sent to the control plane, key1=value1,key2=value2 (string values)' },
  { key: 'xdsAdditionalHeaders', flag: 'xds-additional-headers', env: ['CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS'], kind: 'list', def: [], help: 'gRPC metadata on the xDS stream, key1:value1,key2:value2 (e.g. an authorization token); values never logged' },
  { key: 'xdsTls', flag: 'xds-tls', env: ['CONFIG_GRPC_XDS_SERVER_USE_TLS'], kind: 'bool', def: false, help: 'TLS to the xDS control plane' },
  { key: 'xdsTlsClientCert', flag: 'xds-tls-client-cert', env: ['CONFIG_GRPC_XDS_CLIENT_TLS_CERT'], kind: 'string', def: '', help: 'client certificate file presented to the control plane (mTLS; with the key)' },
  { key: 'xdsTlsClientKey', flag: 'xds-tls-client-key', env: ['CONFIG_GRPC_XDS_CLIENT_TLS_KEY'], kind: 'string', def: '', help: 'client key file (mTLS)' },
  { key: 'xdsTlsCaCert', flag: 'xds-tls-cacert', env: ['CONFIG_GRPC_XDS_SERVER_TLS_CACERT'], kind: 'string', def: '', help: "CA file the control plane's certificate must chain to (default: the system roots)" },
  { key: 'xdsTlsSan', flag: 'xds-tls-san', env: ['CONFIG_GRPC_XDS_SERVER_TLS_SAN'], kind: 'string', def: '', help: "name the control plane's certificate must carry (default: the host of CONFIG_GRPC_XDS_SERVER_URL)" },
  { key: 'xdsBackoffInitialMs', flag: 'xds-backoff-initial-interval', env: ['XDS_CLIENT_BACKOFF_INITIAL_INTERVAL'], kind: 'duration', def: 10_000, help: 'first wait before reconnecting to the control plane; doubles per failed attempt' },
  { key: 'xdsBackoffMaxMs', flag: 'xds-backoff-max-interval', env: ['XDS_CLIENT_BACKOFF_MAX_INTERVAL'], kind: 'duration', def: 60_000, help: 'longest wait between reconnects' },
  { key: 'xdsBackoffRandomFactor', flag: 'xds-backoff-random-factor', env: ['XDS_CLIENT_BACKOFF_RANDOM_FACTOR'], kind: 'ratio', def: 0.5, help: 'with jitter, each wait is spread by up to this share either way' },
  { key: 'xdsBackoffJitter', flag: 'xds-backoff-jitter', env: ['XDS_CLIENT_BACKOFF_JITTER'], kind: 'bool', def: true, help: 'randomize reconnect waits so replicas do not reconnect in step' },
  { key: 'xdsMaxMsgBytes', flag: 'xds-max-msg-size', env: ['XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES'], kind: 'count', def: 0, help: "largest xDS response accepted, in bytes (0: grpc-js' default, 4 MiB)" },
  { key: 'forceStartWithoutInitialConfig', flag: 'force-start-without-initial-config', env: ['FORCE_START_WITHOUT_INITIAL_CONFIG'], kind: 'bool', def: false, help: 'serve before the first config: until one loads, every domain is unknown (answered OK, no limit), as upstream' },
  { key: 'healthyWithAtLeastOneConfigLoaded', flag: 'healthy-with-at-least-one-config-loaded', env: ['HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED'], kind: 'bool', def: false, help: 'ready only while the loaded config has at least one domain' },
  { key: 'host', flag: 'host', env: ['HOST'], kind: 'string', def: '0.0.0.0', help: 'HTTP listen address' },
  { key: 'httpPort', flag: 'http-port', env: ['HTTP_PORT', 'PORT'], kind: 'port', def: 8080, help: 'HTTP port (/json, /healthcheck, /readyz, /livez, /metrics; /rlconfig is on the admin port)' },
  { key: 'grpcHost', flag: 'grpc-host', env: ['GRPC_HOST'], kind: 'string', def: '0.0.0.0', help: 'gRPC listen address' },
  { key: 'grpcPort', flag: 'grpc-port', env: ['GRPC_PORT'], kind: 'port', def: 8081, help: 'gRPC port (RLS, health, reflection)' },
  { key: 'grpcServerImpl', flag: 'grpc-server-impl', env: ['GRPC_SERVER_IMPL'], kind: 'enum', def: 'sluice', choices: ['sluice', 'http2', 'grpc-js'], help: "gRPC server: sluice (sluice's own gRPC on its own HTTP/2: the services and gRPC behaviour of grpc-js with less work per call and per connection), http2 (the same gRPC on node:http2), or grpc-js" },
  { key: 'grpcMaxConcurrentStreams', flag: 'grpc-max-concurrent-streams', env: ['GRPC_MAX_CONCURRENT_STREAMS'], kind: 'count', def: 1024, help: "calls at once on one gRPC connection (SETTINGS_MAX_CONCURRENT_STREAMS); more are refused (REFUSED_STREAM) and Envoy opens another connection; 0: no limit. 1024 is Envoy's default max_requests circuit breaker: one Envoy never has more calls in flight to the cluster" },
  { key: 'grpcHandshakeTimeoutMs', flag: 'grpc-handshake-timeout', env: ['GRPC_HANDSHAKE_TIMEOUT'], kind: 'duration', def: 10_000, help: "a gRPC connection whose TLS handshake, HTTP/2 preface and first SETTINGS are not complete this long after it opened is closed (GRPC_SERVER_IMPL=sluice; grpc-js and node:http2 have none)" },
  { key: 'grpcMaxConnectionIdleMs', flag: 'grpc-max-connection-idle', env: ['GRPC_MAX_CONNECTION_IDLE'], kind: 'duration', def: 300_000, help: "a gRPC connection with no call for this long is closed gracefully (GOAWAY, as grpc-go's MaxConnectionIdle); the client reconnects on its next call. 0: never" },
  { key: 'rlqsAssignmentTtlMs', flag: 'rlqs-assignment-ttl', env: ['RLQS_ASSIGNMENT_TTL'], kind: 'duration', def: 10_000, help: "RLQS: how long a quota assignment lives at Envoy (whole seconds, at least 1 s; a window's assignment also ends with its window); units reserved for an Envoy and not used by then are lost to the window. Longer than Envoy's reporting_interval, so that reports renew assignments before they expire" },
  { key: 'rlqsUnknownBucket', flag: 'rlqs-unknown-bucket', env: ['RLQS_UNKNOWN_BUCKET'], kind: 'enum', def: 'allow', choices: ['allow', 'deny'], help: 'RLQS: what a bucket no rule of its domain matches is assigned: allow (ALLOW_ALL, as RLS answers OK for a descriptor without a limit) or deny (DENY_ALL); counted in sluice_rlqs_unknown_buckets_total' },
  { key: 'rlqsMaxBucketsPerStream', flag: 'rlqs-max-buckets-per-stream', env: ['RLQS_MAX_BUCKETS_PER_STREAM'], kind: 'int', def: 10_000, help: 'RLQS: most buckets one stream may report; more ends the stream with RESOURCE_EXHAUSTED' },
  { key: 'adminHost', flag: 'admin-host', env: ['ADMIN_HOST', 'DEBUG_HOST'], kind: 'string', def: '127.0.0.1', help: 'admin listen address (/rlconfig, /explain, /settings); localhost unless you open it' },
  { key: 'adminPort', flag: 'admin-port', env: ['ADMIN_PORT', 'DEBUG_PORT'], kind: 'port', def: 6070, help: 'admin port (upstream debug port)' },
  { key: 'grpcTls', flag: 'grpc-tls', env: ['GRPC_SERVER_USE_TLS'], kind: 'bool', def: false, help: 'TLS on the gRPC listener' },
  { key: 'grpcTlsCert', flag: 'grpc-tls-cert', env: ['GRPC_SERVER_TLS_CERT'], kind: 'string', def: '', help: 'server certificate file (PEM)' },
  { key: 'grpcTlsKey', flag: 'grpc-tls-key', env: ['GRPC_SERVER_TLS_KEY'], kind: 'string', def: '', help: 'server key file (PEM); never logged' },
  { key: 'grpcTlsClientCa', flag: 'grpc-tls-client-ca', env: ['GRPC_CLIENT_TLS_CACERT'], kind: 'string', def: '', help: 'CA file: clients must present a certificate it signed (mTLS)' },
  { key: 'grpcTlsClientSan', flag: 'grpc-tls-client-san', env: ['GRPC_CLIENT_TLS_SAN'], kind: 'string', def: '', help: 'with GRPC_CLIENT_TLS_CACERT: the client certificate must also carry this DNS name or IP address as a SAN (wildcard certificates match as in TLS); other clients are refused at the TLS handshake (gRPC) or at the connection (HTTPS)' },
  { key: 'tlsReloadMs', flag: 'tls-reload-interval', env: ['TLS_RELOAD_INTERVAL'], kind: 'duration', def: 5000, help: 'how often certificate files are checked for changes' },
  { key: 'httpPlaintext', flag: 'http-plaintext', env: ['HTTP_PLAINTEXT'], kind: 'bool', def: false, help: 'keep the HTTP port plaintext even with GRPC_SERVER_USE_TLS (then POST /json is unauthenticated; for a sidecar that terminates TLS)' },
  { key: 'httpHeadersTimeoutMs', flag: 'http-headers-timeout', env: ['HTTP_HEADERS_TIMEOUT'], kind: 'duration', def: 10_000, help: 'an HTTP client that has not sent complete request headers (and finished the TLS handshake) this long after connecting or its previous request is disconnected' },
  { key: 'httpRequestTimeoutMs', flag: 'http-request-timeout', env: ['HTTP_REQUEST_TIMEOUT'], kind: 'duration', def: 30_000, help: 'longest an HTTP client may take to send a whole request, headers and body; at least HTTP_HEADERS_TIMEOUT' },
  { key: 'httpKeepAliveTimeoutMs', flag: 'http-keepalive-timeout', env: ['HTTP_KEEPALIVE_TIMEOUT'], kind: 'duration', def: 5000, help: 'an idle keep-alive HTTP connection is closed after this' },
  { key: 'httpMaxConnections', flag: 'http-max-connections', env: ['HTTP_MAX_CONNECTIONS'], kind: 'count', def: 10_000, help: 'most open connections per HTTP listener; beyond, new ones are closed at once (0 = no cap)' },
  { key: 'configWatch', flag: 'config-watch', env: ['CONFIG_WATCH'], kind: 'bool', def: true, help: 'reload when config files change (SIGHUP always reloads)' },
  { key: 'configPollIntervalMs', flag: 'config-poll-interval', env: ['CONFIG_POLL_INTERVAL'], kind: 'duration', def: 5000, help: 'also compare the config files with what was loaded this often, in case a file watch event was lost (0 = off)' },
  { key: 'configMaxFileBytes', flag: 'config-max-file-bytes', env: ['CONFIG_MAX_FILE_BYTES'], kind: 'int', def: 2 * 1024 * 1024, help: 'largest config file accepted, in bytes; a larger one is a config error' },
  { key: 'configMaxDescriptors', flag: 'config-max-descriptors', env: ['CONFIG_MAX_DESCRIPTORS'], kind: 'int', def: 100_000, help: 'most descriptors in the whole config, counting each use of a YAML alias; more is a config error' },
  { key: 'shutdownDelayMs', flag: 'shutdown-delay', env: ['SHUTDOWN_DELAY'], kind: 'duration', def: 0, help: 'on SIGTERM, keep serving this long with health NOT_SERVING so load balancers drain' },
  { key: 'drainTimeoutMs', flag: 'drain-timeout', env: ['DRAIN_TIMEOUT'], kind: 'duration', def: 10_000, help: 'on SIGTERM, longest wait for in-flight calls before closing' },
  { key: 'workers', flag: 'workers', env: ['WORKERS'], kind: 'auto-int', def: 'auto', help: 'serving processes sharing the ports, each on its own core, under one primary that loads config: auto (the cores this process may use, within the container CPU limit; 1 with STORE=memory) or a number; more than 1 needs STORE=redis' },
  { key: 'logLevel', flag: 'log-level', env: ['LOG_LEVEL'], kind: 'enum', def: 'info', choices: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'], help: 'log level; request lines are logged at debug' },
  { key: 'logFormat', flag: 'log-format', env: ['LOG_FORMAT'], kind: 'enum', def: 'json', choices: ['json', 'pretty'], help: "json (one object per line, for log collectors) or pretty (one readable line per event, for a terminal); upstream's `text` means pretty" },
  { key: 'maxDescriptors', flag: 'max-descriptors', env: ['MAX_DESCRIPTORS'], kind: 'int', def: 256, help: 'most descriptors in one request (Envoy sends one per matching rate_limits entry: a handful); more is refused with INVALID_ARGUMENT (HTTP 400) before any counter is touched' },
  { key: 'maxDescriptorEntries', flag: 'max-descriptor-entries', env: ['MAX_DESCRIPTOR_ENTRIES'], kind: 'int', def: 32, help: 'most entries in one descriptor (one per action of a rate_limits entry); more is refused with INVALID_ARGUMENT' },
  { key: 'maxValueBytes', flag: 'max-value-bytes', env: ['MAX_VALUE_BYTES'], kind: 'int', def: 65_536, help: "longest domain, entry key or entry value, in UTF-8 bytes; longer is refused with INVALID_ARGUMENT. Above Envoy's default 60 KiB request-header limit, so no header value Envoy forwards is refused: raise it with Envoy's max_request_headers_kb" },
  { key: 'maxRequestBytes', flag: 'max-request-bytes', env: ['MAX_REQUEST_BYTES'], kind: 'int', def: 1_048_576, help: 'largest request: the gRPC message (grpc.max_receive_message_length; larger is RESOURCE_EXHAUSTED) and the POST /json and /explain body (larger is HTTP 400)' },
  { key: 'store', flag: 'store', env: ['STORE', 'BACKEND_TYPE'], kind: 'enum', def: 'memory', choices: ['memory', 'redis'], help: 'counter store: memory (one process) or redis (shared by replicas; ready once Redis was reached and one real decision round-tripped)' },
  { key: 'memoryMaxKeys', flag: 'memory-max-keys', env: ['MEMORY_MAX_KEYS'], kind: 'int', def: 1_000_000, help: 'most counters kept exactly in memory; expired ones make room first; when all are live, new keys are decided by a bounded approximate tier that can only over-count' },
  { key: 'redisUrl', flag: 'redis-url', env: ['REDIS_URL'], kind: 'string', def: 'redis://127.0.0.1:6379', help: 'single: redis[s]://[user:pass@]host:port[/db], host:port or a unix socket path; sentinel: master,host:port[,host:port]; cluster: host:port[,host:port]' },
  { key: 'redisType', flag: 'redis-type', env: ['REDIS_TYPE'], kind: 'enum', def: 'single', choices: ['single', 'sentinel', 'cluster'], help: 'Redis deployment' },
  { key: 'redisAuth', flag: 'redis-auth', env: ['REDIS_AUTH'], kind: 'string', def: '', help: 'password, or user:password (ACL); secret, never logged' },
  { key: 'redisSentinelAuth', flag: 'redis-sentinel-auth', env: ['REDIS_SENTINEL_AUTH'], kind: 'string', def: '', help: 'password of the sentinels; secret' },
  { key: 'redisTls', flag: 'redis-tls', env: ['REDIS_TLS'], kind: 'bool', def: false, help: 'TLS to Redis (implied by rediss://)' },
  { key: 'redisTlsCaCert', flag: 'redis-tls-cacert', env: ['REDIS_TLS_CACERT'], kind: 'string', def: '', help: 'CA certificate file for Redis TLS' },
  { key: 'redisTlsClientCert', flag: 'redis-tls-client-cert', env: ['REDIS_TLS_CLIENT_CERT'], kind: 'string', def: '', help: 'client certificate file (mutual TLS)' },
  { key: 'redisTlsClientKey', flag: 'redis-tls-client-key', env: ['REDIS_TLS_CLIENT_KEY'], kind: 'string', def: '', help: 'client key file (mutual TLS)' },
  { key: 'redisTlsSkipHostnameVerification', flag: 'redis-tls-skip-hostname-verification', env: ['REDIS_TLS_SKIP_HOSTNAME_VERIFICATION'], kind: 'bool', def: false, help: 'accept a certificate for another host name' },
  { key: 'redisPoolSize', flag: 'redis-pool-size', env: ['REDIS_POOL_SIZE'], kind: 'int', def: 1, help: 'connections per Redis (pipelined; more only help when Redis latency dominates)' },
  { key: 'redisTimeoutMs', flag: 'redis-timeout', env: ['REDIS_TIMEOUT'], kind: 'duration', def: 1000, help: 'a Redis call unanswered this long opens the breaker at once (the call is not abandoned: its outcome is still counted when Redis answers)' },
  { key: 'redisConnectTimeoutMs', flag: 'redis-connect-timeout', env: ['REDIS_CONNECT_TIMEOUT'], kind: 'duration', def: 2000, help: 'connect timeout; sluice keeps retrying, health says NOT_SERVING meanwhile' },
  { key: 'redisSocketType', flag: 'redis-socket-type', env: ['REDIS_SOCKET_TYPE'], kind: 'string', def: '', help: "tcp or unix; empty = as REDIS_URL says (a path is a unix socket). Upstream's setting, checked against the URL: a mismatch is refused at start" },
  { key: 'redisPerSecond', flag: 'redis-persecond', env: ['REDIS_PERSECOND'], kind: 'bool', def: false, help: 'count limits of one second or less (unit: second) on their own Redis, REDIS_PERSECOND_URL, and the others on REDIS_URL, as upstream' },
  { key: 'redisPerSecondUrl', flag: 'redis-persecond-url', env: ['REDIS_PERSECOND_URL'], kind: 'string', def: '', help: 'the per-second Redis, in the forms of REDIS_URL for REDIS_PERSECOND_TYPE; needed with REDIS_PERSECOND' },
  { key: 'redisPerSecondType', flag: 'redis-persecond-type', env: ['REDIS_PERSECOND_TYPE'], kind: 'enum', def: 'single', choices: ['single', 'sentinel', 'cluster'], help: 'deployment of the per-second Redis' },
  { key: 'redisPerSecondAuth', flag: 'redis-persecond-auth', env: ['REDIS_PERSECOND_AUTH'], kind: 'string', def: '', help: 'password, or user:password, of the per-second Redis; secret, never logged' },
  { key: 'redisPerSecondSentinelAuth', flag: 'redis-persecond-sentinel-auth', env: ['REDIS_PERSECOND_SENTINEL_AUTH'], kind: 'string', def: '', help: "password of the per-second Redis' sentinels; secret" },
  { key: 'redisPerSecondTls', flag: 'redis-persecond-tls', env: ['REDIS_PERSECOND_TLS'], kind: 'bool', def: false, help: 'TLS to the per-second Redis (implied by rediss://), with the REDIS_TLS_* files, as upstream' },
  { key: 'redisPerSecondPoolSize', flag: 'redis-persecond-pool-size', env: ['REDIS_PERSECOND_POOL_SIZE'], kind: 'int', def: 1, help: 'connections to the per-second Redis (as REDIS_POOL_SIZE)' },
  { key: 'redisPerSecondSocketType', flag: 'redis-persecond-socket-type', env: ['REDIS_PERSECOND_SOCKET_TYPE'], kind: 'string', def: '', help: "tcp or unix; empty = as REDIS_PERSECOND_URL says (a path is a unix socket). Upstream's setting, checked against the URL: a mismatch is refused at start" },
  { key: 'redisPerSecondTimeoutMs', flag: 'redis-persecond-timeout', env: ['REDIS_PERSECOND_TIMEOUT'], kind: 'duration', def: 0, help: 'REDIS_TIMEOUT for the per-second Redis (0 = REDIS_TIMEOUT)' },
  { key: 'storeDeadlineMs', flag: 'store-deadline', env: ['STORE_DEADLINE'], kind: 'duration', def: 100, help: "longest a decision waits on Redis for callers that give no deadline; with a gRPC deadline (Envoy always sends one) the wait is that deadline minus DEADLINE_MARGIN" },
  { key: 'deadlineMarginMs', flag: 'deadline-margin', env: ['DEADLINE_MARGIN'], kind: 'duration', def: 2, help: "kept back from the caller's gRPC deadline for the answer to travel (a tenth of the time left when that is more)" },
  { key: 'breakerFailureRatio', flag: 'breaker-failure-ratio', env: ['BREAKER_FAILURE_RATIO'], kind: 'ratio', def: 0.5, help: 'share of failed or timed-out Redis calls in the window that opens the breaker' },
  { key: 'breakerMinCalls', flag: 'breaker-min-calls', env: ['BREAKER_MIN_CALLS'], kind: 'int', def: 10, help: 'fewest calls in the window before the ratio applies' },
  { key: 'breakerWindowMs', flag: 'breaker-window', env: ['BREAKER_WINDOW'], kind: 'duration', def: 10_000, help: 'sliding window of the failure ratio' },
  { key: 'breakerCooldownMs', flag: 'breaker-cooldown', env: ['BREAKER_COOLDOWN'], kind: 'duration', def: 1000, help: 'open breaker waits this long before one probe' },
  { key: 'fallbackPolicy', flag: 'fallback-policy', env: ['FALLBACK_POLICY'], kind: 'enum', def: 'local', choices: ['local', 'allow', 'deny'], help: 'when Redis cannot decide: local limiter, allow, or deny (gRPC UNAVAILABLE)' },
  { key: 'fallbackDomainPolicies', flag: 'fallback-domain-policies', env: ['FALLBACK_DOMAIN_POLICIES'], kind: 'list', def: [], help: 'per-domain policy, e.g. payments=deny,search=allow' },
  { key: 'fallbackShare', flag: 'fallback-share', env: ['FALLBACK_SHARE'], kind: 'share', def: 'auto', help: "share of what Redis last said remains that this replica's local fallback may admit: auto = 1 / live replicas (each registers in Redis), or a number 0..1" },
  { key: 'replicaTtlMs', flag: 'replica-ttl', env: ['REPLICA_TTL'], kind: 'duration', def: 5000, help: 'a replica that stops heartbeating to Redis is no longer counted for FALLBACK_SHARE=auto after this' },
  { key: 'degradedHeader', flag: 'degraded-header', env: ['DEGRADED_HEADER'], kind: 'string', def: 'x-ratelimit-degraded', help: 'response header on answers made without Redis' },
  { key: 'overLimitCacheSize', flag: 'over-limit-cache-size', env: ['OVER_LIMIT_CACHE_SIZE'], kind: 'count', def: 100_000, help: 'keys remembered as over their limit, answered without Redis until they can pass (0 = off; COMPAT_MODE=upstream: 0 unless LOCAL_CACHE_SIZE_IN_BYTES)' },
  { key: 'localCacheSizeBytes', flag: 'local-cache-size-in-bytes', env: ['LOCAL_CACHE_SIZE_IN_BYTES'], kind: 'count', def: 0, help: "upstream's local cache size: the over-limit cache sized in bytes, one entry counted as 174 bytes (at least 512 KiB, as upstream's cache library); cannot be combined with OVER_LIMIT_CACHE_SIZE (0 = not given)" },
  { key: 'stopCacheKeyIncrementWhenOverlimit', flag: 'stop-cache-key-increment-when-overlimit', env: ['STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT'], kind: 'bool', def: false, help: 'a request that would go over a limit consumes nothing (sluice\'s all-or-nothing; in COMPAT_MODE=upstream it turns COUNT_DENIED_HITS off); cannot be combined with COUNT_DENIED_HITS=true' },
  { key: 'compatMode', flag: 'compat-mode', env: ['COMPAT_MODE'], kind: 'enum', def: 'native', choices: ['native', 'upstream'], help: "native (sluice's defaults) or upstream: envoyproxy/ratelimit's answers (denied hits counted, no Retry-After, waits on Redis up to REDIS_TIMEOUT, no automatic leases, over-limit cache only with LOCAL_CACHE_SIZE_IN_BYTES); settings given explicitly still win" },
  { key: 'leaseAutoThreshold', flag: 'lease-auto-threshold', env: ['LEASE_AUTO_THRESHOLD'], kind: 'count', def: 1000, help: 'requests per second for one key at this replica above which it is served from leases (0 = only rules with lease)' },
  { key: 'leaseAutoShare', flag: 'lease-auto-share', env: ['LEASE_AUTO_SHARE'], kind: 'ratio', def: 0.02, help: "units per automatic lease, as a share of the key's limit (at least 1)" },
  { key: 'leaseTtlMs', flag: 'lease-ttl', env: ['LEASE_TTL'], kind: 'duration', def: 1000, help: 'a lease gives back its unused units after this (a window lease at the latest when its window ends)' },
  { key: 'leaseLowWater', flag: 'lease-low-water', env: ['LEASE_LOW_WATER'], kind: 'ratio', def: 0.25, help: 'a lease refills in the background below this share of its size' },
  { key: 'region', flag: 'region', env: ['REGION'], kind: 'string', def: '', help: 'this replica\'s region (multi-region mode, with GLOBAL_REDIS_URL); replicas of one region share its REDIS_URL' },
  { key: 'globalRedisUrl', flag: 'global-redis-url', env: ['GLOBAL_REDIS_URL'], kind: 'string', def: '', help: 'the Redis shared by all regions (same forms as REDIS_URL): it holds the global budget, from which each region leases its allowance off the request path; empty = one region' },
  { key: 'globalRedisType', flag: 'global-redis-type', env: ['GLOBAL_REDIS_TYPE'], kind: 'enum', def: 'single', choices: ['single', 'sentinel', 'cluster'], help: 'deployment of GLOBAL_REDIS_URL' },
  { key: 'globalRedisAuth', flag: 'global-redis-auth', env: ['GLOBAL_REDIS_AUTH'], kind: 'string', def: '', help: 'password, or user:password, of the global Redis; secret, never logged' },
  { key: 'globalPartitionPolicy', flag: 'global-partition-policy', env: ['GLOBAL_PARTITION_POLICY'], kind: 'string', def: 'deny', help: 'when the global Redis is unreachable and a key\'s regional allowance is spent: deny, allow, or a share of the limit this region may admit on its own, e.g. 50% (reconciled into the global budget when it is back)' },
  { key: 'globalPartitionDomainPolicies', flag: 'global-partition-domain-policies', env: ['GLOBAL_PARTITION_DOMAIN_POLICIES'], kind: 'list', def: [], help: 'per-domain partition policy, e.g. payments=deny,search=50%' },
  { key: 'globalLeaseHorizonMs', flag: 'global-lease-horizon', env: ['GLOBAL_LEASE_HORIZON'], kind: 'duration', def: 2000, help: "a regional lease covers this much of the region's observed demand for the key: longer = fewer calls to the global Redis, more units held in one region" },
  { key: 'replicaLeaseHorizonMs', flag: 'replica-lease-horizon', env: ['REPLICA_LEASE_HORIZON'], kind: 'duration', def: 500, help: "multi-region: each replica leases this much of its own demand for a key from the region's allowance and answers from it without the regional Redis (0 = every decision on the regional Redis)" },
  { key: 'globalLeaseTtlMs', flag: 'global-lease-ttl', env: ['GLOBAL_LEASE_TTL'], kind: 'duration', def: 10_000, help: 'units a region leased and has not used go back to the global budget after this (a window lease ends with its window)' },
  { key: 'globalTimeoutMs', flag: 'global-timeout', env: ['GLOBAL_TIMEOUT'], kind: 'duration', def: 1000, help: 'a call to the global Redis unanswered this long counts as failed; two failures in a row mean a partition' },
  { key: 'countDeniedHits', flag: 'count-denied-hits', env: ['COUNT_DENIED_HITS'], kind: 'bool', def: false, help: "upstream counting: hits are counted even when the answer is OVER_LIMIT" },
  { key: 'globalShadowMode', flag: 'shadow-mode', env: ['SHADOW_MODE'], kind: 'bool', def: false, help: 'never answer OVER_LIMIT overall (statuses still show it)' },
  { key: 'globalQuotaMode', flag: 'quota-mode', env: ['QUOTA_MODE'], kind: 'bool', def: false, help: 'treat every rule as quota_mode' },
  { key: 'nearLimitRatio', flag: 'near-limit-ratio', env: ['NEAR_LIMIT_RATIO'], kind: 'ratio', def: 0.8, help: 'share of a limit above which hits count as near_limit' },
  { key: 'mergeDomainConfig', flag: 'merge-domain-config', env: ['MERGE_DOMAIN_CONFIG'], kind: 'bool', def: false, help: 'merge files that declare the same domain instead of rejecting them' },
  { key: 'responseDynamicMetadata', flag: 'response-dynamic-metadata', env: ['RESPONSE_DYNAMIC_METADATA'], kind: 'bool', def: false, help: 'return the request and matched rule metadata as dynamic metadata' },
  { key: 'responseHeadersEnabled', flag: 'limit-response-headers', env: ['LIMIT_RESPONSE_HEADERS_ENABLED'], kind: 'bool', def: false, help: 'add RateLimit-Limit/-Remaining/-Reset response headers' },
  { key: 'headerLimit', flag: 'limit-limit-header', env: ['LIMIT_LIMIT_HEADER'], kind: 'string', def: 'RateLimit-Limit', help: 'name of the limit header' },
  { key: 'headerRemaining', flag: 'limit-remaining-header', env: ['LIMIT_REMAINING_HEADER'], kind: 'string', def: 'RateLimit-Remaining', help: 'name of the remaining header' },
  { key: 'headerReset', flag: 'limit-reset-header', env: ['LIMIT_RESET_HEADER'], kind: 'string', def: 'RateLimit-Reset', help: 'name of the reset header' },
  { key: 'retryAfterEnabled', flag: 'retry-after-header', env: ['RETRY_AFTER_HEADER_ENABLED'], kind: 'bool', def: true, help: 'add Retry-After (seconds) to OVER_LIMIT responses' },
  { key: 'headerRetryAfter', flag: 'retry-after-header-name', env: ['RETRY_AFTER_HEADER'], kind: 'string', def: 'Retry-After', help: 'name of the retry-after header' },
  { key: 'cacheKeyPrefix', flag: 'cache-key-prefix', env: ['CACHE_KEY_PREFIX'], kind: 'string', def: 'sluice:', help: 'prefix of every counter key' },
  { key: 'keyHashSecret', flag: 'key-hash-secret', env: ['KEY_HASH_SECRET'], kind: 'string', def: '', help: 'HMAC secret for hashed key values; secret, never logged' },
  { key: 'keyHashMaxValueLength', flag: 'key-hash-max-value-length', env: ['KEY_HASH_MAX_VALUE_LENGTH'], kind: 'int', def: 128, help: 'descriptor values longer than this are hashed in counter keys' },
  { key: 'keyHashKeys', flag: 'key-hash-keys', env: ['KEY_HASH_KEYS'], kind: 'list', def: [], help: 'entry keys whose values are always hashed in counter keys (e.g. remote_address)' },
  { key: 'hashTag', flag: 'hash-tag', env: ['KEY_HASH_TAG'], kind: 'enum', def: 'descriptor', choices: ['descriptor', 'domain', 'none'], help: 'which part of a key picks its Redis Cluster slot' },
  { key: 'keyLayout', flag: 'key-layout', env: ['KEY_LAYOUT'], kind: 'enum', def: 'sluice', choices: ['sluice', 'upstream'], help: "counter keys of fixed windows of one unit (second to year): sluice's, or envoyproxy/ratelimit's (its key format, integer counts, window from this process' clock) to share counters with its replicas on one Redis during a migration" },
  { key: 'windowCounters', flag: 'window-counters', env: ['WINDOW_COUNTERS'], kind: 'enum', def: 'hash', choices: ['hash', 'keys'], help: "how the Redis store keeps fixed-window counters in sluice's key layout: 'hash', every counter of a window and period as a field of one hash that expires once (about half the Redis CPU and memory per new counter; not on Redis Cluster, where every counter keeps its own key), or 'keys', a key with its own expiry per counter" },
  { key: 'statsdEnabled', flag: 'statsd', env: ['USE_STATSD'], kind: 'bool', def: false, help: "send envoyproxy/ratelimit's statsd counters (ratelimit.service.rate_limit.<rule>.<stat>, …) every STATS_FLUSH_INTERVAL; off by default, unlike upstream" },
  { key: 'statsdHost', flag: 'statsd-host', env: ['STATSD_HOST'], kind: 'string', def: 'localhost', help: 'statsd host' },
  { key: 'statsdPort', flag: 'statsd-port', env: ['STATSD_PORT'], kind: 'port', def: 8125, help: 'statsd port' },
  { key: 'statsdProtocol', flag: 'statsd-protocol', env: ['STATSD_PROTOCOL'], kind: 'enum', def: 'udp', choices: ['udp', 'tcp'], help: "udp, or tcp (what envoyproxy/ratelimit sends over; statsd_exporter takes both)" },
  { key: 'statsFlushIntervalMs', flag: 'stats-flush-interval', env: ['STATS_FLUSH_INTERVAL'], kind: 'duration', def: 10_000, help: 'how often statsd counters are sent (each a delta since the last flush)' },
  { key: 'extraTags', flag: 'extra-tags', env: ['EXTRA_TAGS'], kind: 'list', def: [], help: "tags on every statsd metric, k1:v1,k2:v2, written as upstream's statsd library does (name.__k1=v1.__k2=v2), and constant labels on every Prometheus series" },
  { key: 'prometheusEnabled', flag: 'prometheus', env: ['USE_PROMETHEUS'], kind: 'bool', def: false, help: "a dedicated metrics listener on PROMETHEUS_ADDR, as upstream's: its series named from upstream's statsd names by a statsd_exporter mapping (PROMETHEUS_MAPPER_YAML), with sluice's own series beside them; /metrics on the HTTP port is unchanged" },
  { key: 'prometheusAddr', flag: 'prometheus-addr', env: ['PROMETHEUS_ADDR'], kind: 'string', def: ':9090', help: 'address of the metrics listener: :port (every interface), host:port or [ipv6]:port' },
  { key: 'prometheusPath', flag: 'prometheus-path', env: ['PROMETHEUS_PATH'], kind: 'string', def: '/metrics', help: 'path the metrics listener serves' },
  { key: 'prometheusMapperYaml', flag: 'prometheus-mapper-yaml', env: ['PROMETHEUS_MAPPER_YAML'], kind: 'string', def: '', help: "statsd_exporter mapping file replacing the default mapping (upstream's default_mapper.yaml equivalent); what sluice cannot apply refuses the start, naming the mapping (README: Prometheus listener)" },
  { key: 'prometheusResponseTimeAsMs', flag: 'prometheus-response-time-as-milliseconds', env: ['PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS'], kind: 'bool', def: false, help: 'default mapping only: ratelimit_service_response_time_seconds in milliseconds, as upstream with this setting' },
  { key: 'tracingEnabled', flag: 'tracing', env: ['TRACING_ENABLED'], kind: 'bool', def: false, help: 'OpenTelemetry tracing: a span per ShouldRateLimit (gRPC and POST /json) continuing the caller\'s traceparent, a child span per store call, exported over OTLP' },
  { key: 'tracingServiceName', flag: 'tracing-service-name', env: ['TRACING_SERVICE_NAME'], kind: 'string', def: 'RateLimit', help: 'service.name of the spans (upstream\'s default)' },
  { key: 'tracingServiceNamespace', flag: 'tracing-service-namespace', env: ['TRACING_SERVICE_NAMESPACE'], kind: 'string', def: '', help: 'service.namespace of the spans' },
  { key: 'tracingServiceInstanceId', flag: 'tracing-service-instance-id', env: ['TRACING_SERVICE_INSTANCE_ID'], kind: 'string', def: '', help: 'service.instance.id of the spans (default: a random UUID per process, as upstream)' },
  { key: 'tracingSamplingRate', flag: 'tracing-sampling-rate', env: ['TRACING_SAMPLING_RATE'], kind: 'ratio', def: 1, help: 'share of traces started here that are recorded, 0..1; a caller\'s traceparent decides for its own traces' },
  { key: 'tracingExporterProtocol', flag: 'tracing-exporter-protocol', env: ['TRACING_EXPORTER_PROTOCOL'], kind: 'enum', def: 'http', choices: ['http', 'grpc'], help: 'OTLP over http (JSON, POST <endpoint>/v1/traces) or grpc' },
  { key: 'otlpEndpoint', flag: 'otlp-endpoint', env: ['OTEL_EXPORTER_OTLP_ENDPOINT'], kind: 'string', def: '', help: 'OTLP collector base URL, e.g. http://collector:4318 (default http://localhost:4318, or http://localhost:4317 for grpc); http:// is plaintext, https:// TLS' },
  { key: 'otlpTracesEndpoint', flag: 'otlp-traces-endpoint', env: ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'], kind: 'string', def: '', help: 'full URL spans are sent to, used as given (wins over OTEL_EXPORTER_OTLP_ENDPOINT)' },
  { key: 'otlpHeaders', flag: 'otlp-headers', env: ['OTEL_EXPORTER_OTLP_HEADERS'], kind: 'string', def: '', help: 'headers (gRPC metadata) on every export, k1=v1,k2=v2 with URL-encoded values; redacted in logs and /settings' },
];

export class SettingsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SettingsError';
  }
}

// Other names a value is known by: upstream's LOG_LEVEL=warning, LOG_FORMAT=text (its default).
const ENUM_ALIASES: Partial<Record<keyof Settings, Record<string, string>>> = {
  logLevel: { warning: 'warn' },
  logFormat: { text: 'pretty' },
};

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

function parseValue(spec: Spec, raw: string, origin: string): unknown {
  const bad = (what: string): never => {
    throw new SettingsError(`${origin}: ${what}, got '${raw}'`);
  };
  switch (spec.kind) {
    case 'string':
      return raw;
    case 'list':
      return raw.split(',').map((s) => s.trim()).filter((s) => s !== '');
    case 'bool': {
      const v = raw.toLowerCase();
      if (TRUE.has(v)) return true;
      if (FALSE.has(v)) return false;
      return bad('expected true or false');
    }
    case 'port':
    case 'count':
    case 'int': {
      const n = Number(raw);
      const max = spec.kind === 'port' ? 65535 : Number.MAX_SAFE_INTEGER;
      const min = spec.kind === 'int' ? 1 : 0;
      if (!/^\d+$/.test(raw) || n < min || n > max) return bad(`expected an integer ${min}..${max}`);
      return n;
    }
    case 'auto-int':
      if (raw.trim().toLowerCase() === 'auto') return 'auto';
      return parseValue({ ...spec, kind: 'int' }, raw, origin);
    case 'share':
      if (raw.trim().toLowerCase() === 'auto') return 'auto';
      return parseValue({ ...spec, kind: 'ratio' }, raw, origin);
    case 'ratio': {
      const n = Number(raw);
      if (raw.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) return bad('expected a number between 0 and 1');
      return n;
    }
    case 'duration': {
      if (/^\d+$/.test(raw)) return Number(raw);
      try {
        return parseDuration(raw);
      } catch (err) {
        return bad((err as Error).message);
      }
    }
    case 'enum': {
      const v = ENUM_ALIASES[spec.key]?.[raw.toLowerCase()] ?? raw.toLowerCase();
      if (!spec.choices?.includes(v)) return bad(`expected one of ${spec.choices?.join(', ')}`);
      return v;
    }
  }
}

// The upstream runtime layout: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (the
// last defaults to "config"), used when no --config is given.
function runtimeConfigPath(env: NodeJS.ProcessEnv): string | undefined {
  const root = env.RUNTIME_ROOT;
  if (root === undefined || root === '') return undefined;
  return path.join(root, env.RUNTIME_SUBDIRECTORY ?? '', env.RUNTIME_APPDIRECTORY || 'config');
}

function splitFlags(argv: readonly string[]): Map<string, string[]> {
  const flags = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new SettingsError(`unexpected argument '${arg}'`);
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    const spec = SETTINGS.find((s) => s.flag === name);
    if (spec === undefined) throw new SettingsError(`unknown flag --${name} (see sluice --help)`);
    let value: string;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (spec.kind === 'bool') value = 'true';
    else if (i + 1 < argv.length) value = argv[++i];
    else throw new SettingsError(`flag --${name} needs a value`);
    flags.set(name, [...(flags.get(name) ?? []), value]);
  }
  return flags;
}

export function loadSettings(argv: readonly string[] = [], env: NodeJS.ProcessEnv = process.env): Settings {
  const flags = splitFlags(argv);
  const out: Record<string, unknown> = {};
  // Settings given by flag or environment: COMPAT_MODE changes only the others' defaults.
  const explicit = new Set<keyof Settings>();
  const origins: Partial<Record<keyof Settings, string>> = {};
  for (const spec of SETTINGS) {
    const given = flags.get(spec.flag);
    if (given !== undefined) {
      const values = given.map((v) => parseValue(spec, v, `--${spec.flag}`));
      out[spec.key] = spec.kind === 'list' ? values.flat() : values[values.length - 1];
      explicit.add(spec.key);
      origins[spec.key] = `--${spec.flag}`;
      continue;
    }
    const envName = spec.env.find((name) => env[name] !== undefined);
    out[spec.key] = envName !== undefined ? parseValue(spec, env[envName] as string, envName) : spec.def;
    if (envName !== undefined) explicit.add(spec.key);
    if (envName !== undefined) origins[spec.key] = envName;
  }
  const settings = out as unknown as Settings;
  settings.origins = origins;
  applyCompatMode(settings, explicit);
  settings.storeImpliedBy = impliedStore(flags, env);
  if (settings.storeImpliedBy !== undefined) settings.store = 'redis';
  validateXds(settings);
  for (const entry of settings.fallbackDomainPolicies) {
    if (!/^[^=]+=(local|allow|deny)$/.test(entry)) {
      throw new SettingsError(`FALLBACK_DOMAIN_POLICIES: expected domain=local|allow|deny, got '${entry}'`);
    }
  }
  validateRegion(settings);
  validatePerSecond(settings);
  validateTracing(settings);
  validatePrometheus(settings);
  if (settings.grpcTlsClientSan !== '' && (!settings.grpcTls || settings.grpcTlsClientCa === '')) {
    throw new SettingsError('GRPC_CLIENT_TLS_SAN needs GRPC_SERVER_USE_TLS and GRPC_CLIENT_TLS_CACERT: the name is checked on client certificates verified against that CA');
  }
  // Each worker would keep its own counters and admit the whole limit.
  if (settings.store === 'memory' && typeof settings.workers === 'number' && settings.workers > 1) {
    throw new SettingsError(`WORKERS=${settings.workers} needs STORE=redis: with STORE=memory each worker would keep its own counters and admit the whole limit (use WORKERS=1, or auto, which is 1 with the memory store)`);
  }
  for (const tag of settings.extraTags) {
    if (!/^[^:]+:.+$/.test(tag)) throw new SettingsError(`EXTRA_TAGS: expected key:value, got '${tag}'`);
  }
  if (settings.statsFlushIntervalMs < 1) throw new SettingsError('STATS_FLUSH_INTERVAL must be at least 1ms');
  if (settings.httpHeadersTimeoutMs < 1 || settings.httpRequestTimeoutMs < settings.httpHeadersTimeoutMs) {
    throw new SettingsError('HTTP_HEADERS_TIMEOUT must be at least 1ms and HTTP_REQUEST_TIMEOUT at least HTTP_HEADERS_TIMEOUT');
  }
  if (settings.configPaths.length === 0 && settings.configType === 'file') {
    const runtime = runtimeConfigPath(env);
    if (runtime !== undefined) settings.configPaths = [runtime];
  }
  return settings;
}

// upstream's default store is Redis, so its users (Envoy Gateway among them) set REDIS_URL and no
// BACKEND_TYPE: with a Redis setting given and no store named, the store is Redis, never a memory
// store per replica that would each admit the whole limit.
function impliedStore(flags: Map<string, string[]>, env: NodeJS.ProcessEnv): string | undefined {
  const store = SETTINGS.find((s) => s.key === 'store')!;
  if (flags.has(store.flag) || store.env.some((name) => env[name] !== undefined)) return undefined;
  for (const spec of SETTINGS) {
    if (!spec.key.startsWith('redis')) continue;
    if (flags.has(spec.flag)) return `--${spec.flag}`;
    const name = spec.env.find((n) => env[n] !== undefined && env[n] !== '');
    if (name !== undefined) return name;
  }
  return undefined;
}

function validateXds(s: Settings): void {
  for (const entry of s.xdsNodeMetadata) {
    if (!/^[^=]+=/.test(entry)) throw new SettingsError(`CONFIG_GRPC_XDS_NODE_METADATA: expected key=value, got '${entry}'`);
  }
  for (const entry of s.xdsAdditionalHeaders) {
    // gRPC metadata keys: what grpc-js accepts as a text header (it throws on anything else).
    const key = entry.split(':')[0].trim();
    if (!/^[0-9A-Za-z_.-]+:/.test(`${key}:`) || !entry.includes(':') || /-bin$/i.test(key)) {
      throw new SettingsError(`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: expected key:value with a key of letters, digits, '-', '_' or '.' (not ending in -bin), got '${key}'`);
    }
  }
  if (s.xdsBackoffInitialMs < 1) throw new SettingsError('XDS_CLIENT_BACKOFF_INITIAL_INTERVAL must be at least 1ms');
  if (s.xdsBackoffMaxMs < s.xdsBackoffInitialMs) throw new SettingsError('XDS_CLIENT_BACKOFF_MAX_INTERVAL must be at least XDS_CLIENT_BACKOFF_INITIAL_INTERVAL');
  if ((s.xdsTlsClientCert === '') !== (s.xdsTlsClientKey === '')) {
    throw new SettingsError('CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together (mTLS to the control plane)');
  }
}

// A listen address as Go's net.Listen reads it (upstream's PROMETHEUS_ADDR): ':port' (host '':
// every interface), 'host:port' or '[ipv6]:port'.
export function listenAddress(text: string, origin: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text.trim());
  if (m === null || Number(m[3]) > 65535) throw new SettingsError(`${origin}: expected :port, host:port or [ipv6]:port, got '${text}'`);
  return { host: m[1] ?? m[2], port: Number(m[3]) };
}

function validatePrometheus(s: Settings): void {
  listenAddress(s.prometheusAddr, 'PROMETHEUS_ADDR');
  if (!s.prometheusPath.startsWith('/')) throw new SettingsError(`PROMETHEUS_PATH: expected a path starting with '/', got '${s.prometheusPath}'`);
}

function validateTracing(s: Settings): void {
  for (const [name, url] of [['OTEL_EXPORTER_OTLP_ENDPOINT', s.otlpEndpoint], ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', s.otlpTracesEndpoint]]) {
    if (url !== '' && !/^https?:\/\/[^/]/.test(url)) throw new SettingsError(`${name}: expected an http:// or https:// URL, got '${redactRedisUrl(url)}'`);
  }
  otlpHeaders(s.otlpHeaders);
}

// OTEL_EXPORTER_OTLP_HEADERS as the OpenTelemetry SDK reads it: k1=v1,k2=v2, values URL-encoded.
// Keys are what both an HTTP header and gRPC metadata accept as a text header.
export function otlpHeaders(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of text.split(',')) {
    if (entry.trim() === '') continue;
    const eq = entry.indexOf('=');
    const key = entry.slice(0, Math.max(eq, 0)).trim();
    // The value is a secret (an authorization header): never part of a message.
    if (!/^[0-9A-Za-z_.-]+$/.test(key) || /-bin$/i.test(key)) {
      throw new SettingsError(`OTEL_EXPORTER_OTLP_HEADERS: expected key=value with a key of letters, digits, '-', '_' or '.' (not ending in -bin), got '${key}'`);
    }
    try {
      out[key] = decodeURIComponent(entry.slice(eq + 1).trim());
    } catch {
      throw new SettingsError(`OTEL_EXPORTER_OTLP_HEADERS: the value of '${key}' is not valid URL encoding`);
    }
  }
  return out;
}

// A partition policy: deny, allow, or the share of each limit a cut-off region admits on its own.
export type PartitionPolicy = { kind: 'deny' } | { kind: 'allow' } | { kind: 'share'; share: number };

export function partitionPolicy(text: string): PartitionPolicy | undefined {
  const t = text.trim().toLowerCase();
  if (t === 'deny' || t === 'allow') return { kind: t };
  const m = /^(\d+(?:\.\d+)?)(%?)$/.exec(t);
  if (m === null) return undefined;
  const share = Number(m[1]) / (m[2] === '%' ? 100 : 1);
  return share > 0 && share <= 1 ? { kind: 'share', share } : undefined;
}

function validateRegion(s: Settings): void {
  const policyError = (origin: string, value: string) =>
    new SettingsError(`${origin}: expected deny, allow or a share such as 50% or 0.5, got '${value}'`);
  if (partitionPolicy(s.globalPartitionPolicy) === undefined) throw policyError('GLOBAL_PARTITION_POLICY', s.globalPartitionPolicy);
  for (const entry of s.globalPartitionDomainPolicies) {
    const eq = entry.lastIndexOf('=');
    if (eq <= 0 || partitionPolicy(entry.slice(eq + 1)) === undefined) throw policyError('GLOBAL_PARTITION_DOMAIN_POLICIES', entry);
  }
  if (s.globalRedisUrl === '') return;
  if (s.region === '') throw new SettingsError('GLOBAL_REDIS_URL needs REGION: the name of this replica\'s region');
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(s.region)) throw new SettingsError(`REGION: expected 1-64 letters, digits, '.', '_' or '-', got '${s.region}'`);
  if (s.store !== 'redis') throw new SettingsError('GLOBAL_REDIS_URL needs STORE=redis: each region decides on its own Redis (REDIS_URL)');
  if (s.keyLayout === 'upstream') throw new SettingsError("GLOBAL_REDIS_URL cannot be combined with KEY_LAYOUT=upstream (the global budget is kept in sluice's layout)");
  if (s.globalRedisType === 'cluster' && s.hashTag === 'none') throw new SettingsError('GLOBAL_REDIS_TYPE=cluster needs KEY_HASH_TAG descriptor or domain: a counter and its regions\' demand must share a slot');
}

// Upstream's REDIS_SOCKET_TYPE and REDIS_PERSECOND_SOCKET_TYPE, checked against the URL's form:
// sluice connects as the URL says (a path is a unix socket), so a type that contradicts it is
// refused rather than ignored.
function checkSocketType(o: { typeName: string; urlName: string; type: string; url: string; single: boolean; used: boolean }): void {
  const type = o.type.toLowerCase();
  if (!['', 'tcp', 'unix'].includes(type)) throw new SettingsError(`${o.typeName}: expected tcp or unix, got '${o.type}'`);
  const unix = o.url.trim().startsWith('/');
  if (!o.used || !o.single || type === '' || (type === 'unix') === unix) return;
  const form = unix ? 'a unix socket path' : 'a network address';
  throw new SettingsError(`${o.typeName}=${type} but ${o.urlName} is ${form} ('${redactRedisUrl(o.url)}'); set ${unix ? 'unix' : 'tcp'} or leave it empty`);
}

// REDIS_PERSECOND: what it needs; each Redis' socket type against its URL.
function validatePerSecond(s: Settings): void {
  checkSocketType({ typeName: 'REDIS_SOCKET_TYPE', urlName: 'REDIS_URL', type: s.redisSocketType, url: s.redisUrl, single: s.redisType === 'single', used: s.store === 'redis' });
  if (s.redisPerSecond) {
    if (s.store !== 'redis') throw new SettingsError('REDIS_PERSECOND needs STORE=redis: per-second limits go to their own Redis, the others to REDIS_URL');
    if (s.redisPerSecondUrl.trim() === '') throw new SettingsError('REDIS_PERSECOND needs REDIS_PERSECOND_URL: the Redis that counts limits of one second or less');
    if (s.globalRedisUrl !== '') throw new SettingsError('REDIS_PERSECOND cannot be combined with GLOBAL_REDIS_URL (multi-region keeps every limit on the regional Redis)');
  }
  checkSocketType({ typeName: 'REDIS_PERSECOND_SOCKET_TYPE', urlName: 'REDIS_PERSECOND_URL', type: s.redisPerSecondSocketType, url: s.redisPerSecondUrl, single: s.redisPerSecondType === 'single', used: s.redisPerSecond });
}

// Settings given twice in the environment, under sluice's name and upstream's (HTTP_PORT and
// PORT, ADMIN_PORT and DEBUG_PORT...), with different values: which one is used, for a start-up
// warning. The precedence is the table's: a flag, then the names in their order.
export function conflictingNames(s: Settings, env: NodeJS.ProcessEnv): { names: string[]; used: string; message: string }[] {
  const out: { names: string[]; used: string; message: string }[] = [];
  for (const spec of SETTINGS) {
    const given = spec.env.filter((name) => env[name] !== undefined);
    if (new Set(given.map((name) => env[name])).size < 2) continue;
    const used = settingName(s, spec.key);
    const values = given.map((name) => `${name}=${env[name]}`).join(' and ');
    out.push({ names: given, used, message: `${values} are both set: ${used} is used${used.startsWith('--') ? ' (a flag wins over the environment)' : ''}` });
  }
  return out;
}

// The name a message should give a setting: the flag or variable the user set it with, else
// sluice's own environment name.
export function settingName(s: Settings, key: keyof Settings): string {
  return s.origins?.[key] ?? SETTINGS.find((spec) => spec.key === key)!.env[0];
}

export function defaultSettings(overrides: Partial<Settings> = {}): Settings {
  return { ...loadSettings([], {}), ...overrides };
}

const SECRET: readonly (keyof Settings)[] = ['redisAuth', 'redisSentinelAuth', 'keyHashSecret', 'globalRedisAuth', 'otlpHeaders', 'redisPerSecondAuth', 'redisPerSecondSentinelAuth'];
// Other URLs that may carry a user and password.
const URLS = ['otlpEndpoint', 'otlpTracesEndpoint', 'xdsServerUrl'] as const;
// Lists of key:value whose values are secrets (an authorization header).
const SECRET_VALUES: readonly (keyof Settings)[] = ['xdsAdditionalHeaders'];

// A URL (Redis, or any with a user and password: OTLP, xDS) fit for logs and messages: the
// credentials become [redacted]. They run from after the scheme's '://' (from the start without
// one) to the last '@', the rule redis-connection.ts parses by, since a password pasted unencoded
// may itself hold '@', ':', '/' or '//'; a user name (up to the first ':', which a user name
// cannot hold) stays. In a list (cluster nodes) everything from the first entry to the last '@'
// is hidden: a password may hold ',' too.
export function redactRedisUrl(url: string): string {
  const at = url.lastIndexOf('@');
  if (at < 0) return url;
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url);
  const start = scheme !== null && scheme[0].length <= at ? scheme[0].length : 0;
  const colon = url.indexOf(':', start);
  const keep = colon >= 0 && colon < at ? colon + 1 : start;
  return `${url.slice(0, keep)}[redacted]${url.slice(at)}`;
}

// Settings as logged at startup, with secrets (and a password inside REDIS_URL) redacted.
export function describeSettings(settings: Settings): Record<string, unknown> {
  const { origins: _origins, ...shown } = settings;
  const out: Record<string, unknown> = shown;
  for (const key of SECRET) if (out[key] !== '') out[key] = '[redacted]';
  for (const key of SECRET_VALUES) out[key] = (settings[key] as string[]).map((e) => `${e.split(':')[0]}:[redacted]`);
  out.redisUrl = redactRedisUrl(settings.redisUrl);
  out.globalRedisUrl = redactRedisUrl(settings.globalRedisUrl);
  out.redisPerSecondUrl = redactRedisUrl(settings.redisPerSecondUrl);
  for (const key of URLS) out[key] = redactRedisUrl(settings[key]);
  return out;
}

// Which of envoyproxy/ratelimit's settings sluice honours, and the start-up warning for the rest.
export { upstreamSettingsNotRead } from './upstream-settings';
