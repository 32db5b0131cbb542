// Every setting sluice reads, from flags and the environment, as one table: the Settings type
// (types.ts), `sluice help settings`, docs/settings.md and COMPAT_MODE=upstream's defaults all
// follow from these rows. Precedence: flag > environment (sluice's name, then upstream's) > default.

export type Kind = 'string' | 'list' | 'port' | 'int' | 'count' | 'ratio' | 'share' | 'bool' | 'enum' | 'duration' | 'auto-int';

// envoyproxy/ratelimit's default where it differs from sluice's (COMPAT_MODE=upstream, compat.ts):
// a value, or another setting's value as in force (`same`), or its negation (`not`).
export type UpstreamDefault = { value: string | number | boolean } | { same: string } | { not: string };

// One row as written in the table; `key` names the field of Settings it fills (types.ts).
interface Row {
  key: string;
  flag: string;
  env: readonly string[];
  kind: Kind;
  def: unknown;
  choices?: readonly string[];
  upstream?: UpstreamDefault;
  help: string;
}

export type SettingKey = (typeof TABLE)[number]['key'];

// One row as the rest of the code reads it.
export interface Spec extends Row {
  key: SettingKey;
}

// The rows, with their literal types kept: types.ts derives the Settings type from them.
export const TABLE = [
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
  { key: 'rlqsAssignmentTtlMs', flag: 'rlqs-assignment-ttl', env: ['RLQS_ASSIGNMENT_TTL'], kind: 'duration', def: 10_000, help: "RLQS: how long a quota assignment lives at Envoy (whole seconds, at least 1 s; a window's assignment also ends with its window); units reserved for an Envoy and not reported used by then go back to the counter. Longer than Envoy's reporting_interval, so that reports renew assignments before they expire" },
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
  { key: 'redisTimeoutMs', flag: 'redis-timeout', env: ['REDIS_TIMEOUT'], kind: 'duration', def: 1000, upstream: { value: 10_000 }, help: 'a Redis call unanswered this long opens the breaker at once (the call is not abandoned: its outcome is still counted when Redis answers)' },
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
  { key: 'storeDeadlineMs', flag: 'store-deadline', env: ['STORE_DEADLINE'], kind: 'duration', def: 100, upstream: { same: 'redisTimeoutMs' }, help: "longest a decision waits on Redis for callers that give no deadline; with a gRPC deadline (Envoy always sends one) the wait is that deadline minus DEADLINE_MARGIN" },
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
  { key: 'overLimitCacheSize', flag: 'over-limit-cache-size', env: ['OVER_LIMIT_CACHE_SIZE'], kind: 'count', def: 100_000, upstream: { value: 0 }, help: 'keys remembered as over their limit, answered without Redis until they can pass (0 = off; COMPAT_MODE=upstream: 0 unless LOCAL_CACHE_SIZE_IN_BYTES)' },
  { key: 'localCacheSizeBytes', flag: 'local-cache-size-in-bytes', env: ['LOCAL_CACHE_SIZE_IN_BYTES'], kind: 'count', def: 0, help: "upstream's local cache size: the over-limit cache sized in bytes, one entry counted as 174 bytes (at least 512 KiB, as upstream's cache library); cannot be combined with OVER_LIMIT_CACHE_SIZE (0 = not given)" },
  { key: 'stopCacheKeyIncrementWhenOverlimit', flag: 'stop-cache-key-increment-when-overlimit', env: ['STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT'], kind: 'bool', def: false, help: 'a request that would go over a limit consumes nothing (sluice\'s all-or-nothing; in COMPAT_MODE=upstream it turns COUNT_DENIED_HITS off); cannot be combined with COUNT_DENIED_HITS=true' },
  { key: 'compatMode', flag: 'compat-mode', env: ['COMPAT_MODE'], kind: 'enum', def: 'native', choices: ['native', 'upstream'], help: "native (sluice's defaults) or upstream: envoyproxy/ratelimit's answers (denied hits counted, no Retry-After, waits on Redis up to REDIS_TIMEOUT, no automatic leases, over-limit cache only with LOCAL_CACHE_SIZE_IN_BYTES); settings given explicitly still win" },
  { key: 'leaseAutoThreshold', flag: 'lease-auto-threshold', env: ['LEASE_AUTO_THRESHOLD'], kind: 'count', def: 1000, upstream: { value: 0 }, help: 'requests per second for one key at this replica above which it is served from leases (0 = only rules with lease)' },
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
  { key: 'countDeniedHits', flag: 'count-denied-hits', env: ['COUNT_DENIED_HITS'], kind: 'bool', def: false, upstream: { not: 'stopCacheKeyIncrementWhenOverlimit' }, help: "upstream counting: hits are counted even when the answer is OVER_LIMIT" },
  { key: 'globalShadowMode', flag: 'shadow-mode', env: ['SHADOW_MODE'], kind: 'bool', def: false, help: 'never answer OVER_LIMIT overall (statuses still show it)' },
  { key: 'globalQuotaMode', flag: 'quota-mode', env: ['QUOTA_MODE'], kind: 'bool', def: false, help: 'treat every rule as quota_mode' },
  { key: 'nearLimitRatio', flag: 'near-limit-ratio', env: ['NEAR_LIMIT_RATIO'], kind: 'ratio', def: 0.8, help: 'share of a limit above which hits count as near_limit' },
  { key: 'mergeDomainConfig', flag: 'merge-domain-config', env: ['MERGE_DOMAIN_CONFIG'], kind: 'bool', def: false, help: 'merge files that declare the same domain instead of rejecting them' },
  { key: 'responseDynamicMetadata', flag: 'response-dynamic-metadata', env: ['RESPONSE_DYNAMIC_METADATA'], kind: 'bool', def: false, help: 'return the request and matched rule metadata as dynamic metadata' },
  { key: 'responseHeadersEnabled', flag: 'limit-response-headers', env: ['LIMIT_RESPONSE_HEADERS_ENABLED'], kind: 'bool', def: false, help: 'add RateLimit-Limit/-Remaining/-Reset response headers' },
  { key: 'headerLimit', flag: 'limit-limit-header', env: ['LIMIT_LIMIT_HEADER'], kind: 'string', def: 'RateLimit-Limit', help: 'name of the limit header' },
  { key: 'headerRemaining', flag: 'limit-remaining-header', env: ['LIMIT_REMAINING_HEADER'], kind: 'string', def: 'RateLimit-Remaining', help: 'name of the remaining header' },
  { key: 'headerReset', flag: 'limit-reset-header', env: ['LIMIT_RESET_HEADER'], kind: 'string', def: 'RateLimit-Reset', help: 'name of the reset header' },
  { key: 'retryAfterEnabled', flag: 'retry-after-header', env: ['RETRY_AFTER_HEADER_ENABLED'], kind: 'bool', def: true, upstream: { value: false }, help: 'add Retry-After (seconds) to OVER_LIMIT responses' },
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
] as const satisfies readonly Row[];

export const SETTINGS: readonly Spec[] = TABLE as readonly Spec[];

export function specOf(key: string): Spec {
  return SETTINGS.find((s) => s.key === key)!;
}
