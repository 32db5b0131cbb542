import { SettingsError } from '../errors';
import { redactRedisUrl } from '../redact';
import { validateRedisUrl } from '../store/redis/connection';
import { domainPolicies, fallbackPolicy, listenAddress, otlpHeaders, partitionPolicy, redisTargets } from './derived';
import type { Settings } from './types';

// Every start-up check of the settings, in one place: each failure is a SettingsError naming the
// settings to change, printed without a stack trace. Run by loadSettings once the values are in
// force (after COMPAT_MODE's defaults).

// Settings given together that contradict each other; only settings given explicitly can.
export function checkExplicit(s: Settings, explicit: ReadonlySet<keyof Settings>): void {
  if (explicit.has('countDeniedHits') && s.countDeniedHits && s.stopCacheKeyIncrementWhenOverlimit) {
    throw new SettingsError(
      'STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true cannot be combined with COUNT_DENIED_HITS=true: one counts the hits of a request that goes over, the other does not',
    );
  }
  if (explicit.has('overLimitCacheSize') && explicit.has('localCacheSizeBytes')) {
    throw new SettingsError('OVER_LIMIT_CACHE_SIZE (entries) and LOCAL_CACHE_SIZE_IN_BYTES (bytes) both size the over-limit cache: set one of them');
  }
}

export function checkSettings(s: Settings): void {
  validateXds(s);
  domainPolicies(
    s.fallbackDomainPolicies,
    fallbackPolicy,
    (entry) => new SettingsError(`FALLBACK_DOMAIN_POLICIES: expected domain=local|allow|deny, got '${entry}'`),
  );
  validateRegion(s);
  validatePerSecond(s);
  validateTracing(s);
  validatePrometheus(s);
  if (s.grpcTls && (s.grpcTlsCert === '' || s.grpcTlsKey === '')) {
    throw new SettingsError('GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY');
  }
  if (s.grpcTlsClientSan !== '' && (!s.grpcTls || s.grpcTlsClientCa === '')) {
    throw new SettingsError(
      'GRPC_CLIENT_TLS_SAN needs GRPC_SERVER_USE_TLS and GRPC_CLIENT_TLS_CACERT: the name is checked on client certificates verified against that CA',
    );
  }
  // Each worker would keep its own counters and admit the whole limit.
  if (s.store === 'memory' && typeof s.workers === 'number' && s.workers > 1) {
    throw new SettingsError(
      `WORKERS=${s.workers} needs STORE=redis: with STORE=memory each worker would keep its own counters and admit the whole limit (use WORKERS=1, or auto, which is 1 with the memory store)`,
    );
  }
  for (const tag of s.extraTags) {
    if (!/^[^:]+:.+$/.test(tag)) throw new SettingsError(`EXTRA_TAGS: expected key:value, got '${tag}'`);
  }
  if (s.statsFlushIntervalMs < 1) throw new SettingsError('STATS_FLUSH_INTERVAL must be at least 1ms');
  if (s.httpHeadersTimeoutMs < 1 || s.httpRequestTimeoutMs < s.httpHeadersTimeoutMs) {
    throw new SettingsError('HTTP_HEADERS_TIMEOUT must be at least 1ms and HTTP_REQUEST_TIMEOUT at least HTTP_HEADERS_TIMEOUT');
  }
}

// Each Redis in use, its URL against its type; the messages name its own settings.
export function checkRedisUrls(s: Settings): void {
  if (s.store !== 'redis') return;
  const targets = redisTargets(s);
  for (const target of [targets.main, targets.perSecond, targets.global]) if (target !== undefined) validateRedisUrl(target);
}

function validateXds(s: Settings): void {
  for (const entry of s.xdsNodeMetadata) {
    if (!/^[^=]+=/.test(entry)) throw new SettingsError(`CONFIG_GRPC_XDS_NODE_METADATA: expected key=value, got '${entry}'`);
  }
  for (const entry of s.xdsAdditionalHeaders) {
    // gRPC metadata keys: what grpc-js accepts as a text header (it throws on anything else).
    const key = entry.split(':')[0].trim();
    if (!/^[0-9A-Za-z_.-]+:/.test(`${key}:`) || !entry.includes(':') || /-bin$/i.test(key)) {
      throw new SettingsError(
        `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: expected key:value with a key of letters, digits, '-', '_' or '.' (not ending in -bin), got '${key}'`,
      );
    }
  }
  if (s.xdsBackoffInitialMs < 1) throw new SettingsError('XDS_CLIENT_BACKOFF_INITIAL_INTERVAL must be at least 1ms');
  if (s.xdsBackoffMaxMs < s.xdsBackoffInitialMs)
    throw new SettingsError('XDS_CLIENT_BACKOFF_MAX_INTERVAL must be at least XDS_CLIENT_BACKOFF_INITIAL_INTERVAL');
  if ((s.xdsTlsClientCert === '') !== (s.xdsTlsClientKey === '')) {
    throw new SettingsError('CONFIG_GRPC_XDS_CLIENT_TLS_CERT and CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together (mTLS to the control plane)');
  }
}

function validatePrometheus(s: Settings): void {
  listenAddress(s.prometheusAddr, 'PROMETHEUS_ADDR');
  if (!s.prometheusPath.startsWith('/')) throw new SettingsError(`PROMETHEUS_PATH: expected a path starting with '/', got '${s.prometheusPath}'`);
}

function validateTracing(s: Settings): void {
  for (const [name, url] of [
    ['OTEL_EXPORTER_OTLP_ENDPOINT', s.otlpEndpoint],
    ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', s.otlpTracesEndpoint],
  ]) {
    if (url !== '' && !/^https?:\/\/[^/]/.test(url)) throw new SettingsError(`${name}: expected an http:// or https:// URL, got '${redactRedisUrl(url)}'`);
  }
  otlpHeaders(s.otlpHeaders);
}

function validateRegion(s: Settings): void {
  const policyError = (origin: string, value: string) => new SettingsError(`${origin}: expected deny, allow or a share such as 50% or 0.5, got '${value}'`);
  if (partitionPolicy(s.globalPartitionPolicy) === undefined) throw policyError('GLOBAL_PARTITION_POLICY', s.globalPartitionPolicy);
  domainPolicies(s.globalPartitionDomainPolicies, partitionPolicy, (entry) => policyError('GLOBAL_PARTITION_DOMAIN_POLICIES', entry));
  if (s.globalRedisUrl === '') return;
  if (s.region === '') throw new SettingsError("GLOBAL_REDIS_URL needs REGION: the name of this replica's region");
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(s.region)) throw new SettingsError(`REGION: expected 1-64 letters, digits, '.', '_' or '-', got '${s.region}'`);
  if (s.store !== 'redis') throw new SettingsError('GLOBAL_REDIS_URL needs STORE=redis: each region decides on its own Redis (REDIS_URL)');
  if (s.keyLayout === 'upstream')
    throw new SettingsError("GLOBAL_REDIS_URL cannot be combined with KEY_LAYOUT=upstream (the global budget is kept in sluice's layout)");
  if (s.globalRedisType === 'cluster' && s.hashTag === 'none')
    throw new SettingsError("GLOBAL_REDIS_TYPE=cluster needs KEY_HASH_TAG descriptor or domain: a counter and its regions' demand must share a slot");
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
  checkSocketType({
    typeName: 'REDIS_SOCKET_TYPE',
    urlName: 'REDIS_URL',
    type: s.redisSocketType,
    url: s.redisUrl,
    single: s.redisType === 'single',
    used: s.store === 'redis',
  });
  if (s.redisPerSecond) {
    if (s.store !== 'redis') throw new SettingsError('REDIS_PERSECOND needs STORE=redis: per-second limits go to their own Redis, the others to REDIS_URL');
    if (s.redisPerSecondUrl.trim() === '')
      throw new SettingsError('REDIS_PERSECOND needs REDIS_PERSECOND_URL: the Redis that counts limits of one second or less');
    if (s.globalRedisUrl !== '')
      throw new SettingsError('REDIS_PERSECOND cannot be combined with GLOBAL_REDIS_URL (multi-region keeps every limit on the regional Redis)');
  }
  checkSocketType({
    typeName: 'REDIS_PERSECOND_SOCKET_TYPE',
    urlName: 'REDIS_PERSECOND_URL',
    type: s.redisPerSecondSocketType,
    url: s.redisPerSecondUrl,
    single: s.redisPerSecondType === 'single',
    used: s.redisPerSecond,
  });
}
