import { randomUUID } from 'node:crypto';
import { monotonicClock } from '../clock';
import { SettingsError } from '../errors';
import type { RedisStackOptions } from '../store/compose';
import type { RegionOptions } from '../store/region';
import type { PartitionPolicy } from '../store/region/partition';
import { type RedisTarget, validateRedisUrl } from '../store/redis/connection';
import type { FallbackPolicy } from '../store/stages/fallback';
import type { Settings } from './types';

// What the layers below are handed instead of Settings: values parsed from one or more settings,
// grouped into the plain option objects each takes (store/ never reads Settings).

// A listen address as Go's net.Listen reads it (upstream's PROMETHEUS_ADDR): ':port' (host '':
// every interface), 'host:port' or '[ipv6]:port'.
export function listenAddress(text: string, origin: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(text.trim());
  if (m === null || Number(m[3]) > 65535) throw new SettingsError(`${origin}: expected :port, host:port or [ipv6]:port, got '${text}'`);
  return { host: m[1] ?? m[2], port: Number(m[3]) };
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
      throw new SettingsError(
        `OTEL_EXPORTER_OTLP_HEADERS: expected key=value with a key of letters, digits, '-', '_' or '.' (not ending in -bin), got '${key}'`,
      );
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
export type { PartitionPolicy };

export function partitionPolicy(text: string): PartitionPolicy | undefined {
  const t = text.trim().toLowerCase();
  if (t === 'deny' || t === 'allow') return { kind: t };
  const m = /^(\d+(?:\.\d+)?)(%?)$/.exec(t);
  if (m === null) return undefined;
  const share = Number(m[1]) / (m[2] === '%' ? 100 : 1);
  return share > 0 && share <= 1 ? { kind: 'share', share } : undefined;
}

export function fallbackPolicy(text: string): FallbackPolicy | undefined {
  return text === 'local' || text === 'allow' || text === 'deny' ? text : undefined;
}

// A `domain=policy` list (FALLBACK_DOMAIN_POLICIES, GLOBAL_PARTITION_DOMAIN_POLICIES), parsed in
// this one place: the domain runs to the last '='; an entry `parse` refuses is `bad(entry)`.
export function domainPolicies<P>(entries: readonly string[], parse: (text: string) => P | undefined, bad: (entry: string) => Error): Map<string, P> {
  const out = new Map<string, P>();
  for (const entry of entries) {
    const eq = entry.lastIndexOf('=');
    const policy = eq <= 0 ? undefined : parse(entry.slice(eq + 1));
    if (policy === undefined) throw bad(entry);
    out.set(entry.slice(0, eq), policy);
  }
  return out;
}

// Entries already checked at start (checks.ts): a failure here is a bug.
const checked = (entry: string) => new SettingsError(`unchecked domain policy '${entry}'`);

// Each Redis sluice may talk to, with its own connection settings, built once here: REDIS_URL's;
// REDIS_PERSECOND_URL's (its own URL, type, passwords, TLS switch and pool size; the TLS files
// and the connect timeout are REDIS_URL's, as upstream); GLOBAL_REDIS_URL's (its own URL, type
// and password, one connection; the rest REDIS_URL's).
export interface RedisTargets {
  main: RedisTarget;
  perSecond?: RedisTarget;
  global?: RedisTarget;
}

export function redisTargets(s: Settings): RedisTargets {
  const main: RedisTarget = {
    redisUrl: s.redisUrl,
    redisType: s.redisType,
    redisAuth: s.redisAuth,
    redisSentinelAuth: s.redisSentinelAuth,
    redisTls: s.redisTls,
    redisTlsCaCert: s.redisTlsCaCert,
    redisTlsClientCert: s.redisTlsClientCert,
    redisTlsClientKey: s.redisTlsClientKey,
    redisTlsSkipHostnameVerification: s.redisTlsSkipHostnameVerification,
    redisPoolSize: s.redisPoolSize,
    redisConnectTimeoutMs: s.redisConnectTimeoutMs,
  };
  const perSecond: RedisTarget = {
    ...main,
    redisUrl: s.redisPerSecondUrl,
    redisType: s.redisPerSecondType,
    redisAuth: s.redisPerSecondAuth,
    redisSentinelAuth: s.redisPerSecondSentinelAuth,
    redisTls: s.redisPerSecondTls,
    redisPoolSize: s.redisPerSecondPoolSize,
    names: { url: 'REDIS_PERSECOND_URL', type: 'REDIS_PERSECOND_TYPE', auth: 'REDIS_PERSECOND_AUTH' },
  };
  const global: RedisTarget = {
    ...main,
    redisUrl: s.globalRedisUrl,
    redisType: s.globalRedisType,
    redisAuth: s.globalRedisAuth,
    redisPoolSize: 1,
    names: { url: 'GLOBAL_REDIS_URL', type: 'GLOBAL_REDIS_TYPE', auth: 'GLOBAL_REDIS_AUTH' },
  };
  return { main, perSecond: s.redisPerSecond ? perSecond : undefined, global: s.globalRedisUrl === '' ? undefined : global };
}

// The per-second Redis' connection settings, refused (naming the per-second settings) when its URL
// cannot work.
export function validatePerSecondUrl(s: Settings): RedisTarget {
  const target = redisTargets({ ...s, redisPerSecond: true }).perSecond!;
  validateRedisUrl(target);
  return target;
}

// The Redis stack's options (store/compose.ts), from the settings of the stages.
export function redisStackOptions(s: Settings): RedisStackOptions {
  return {
    clock: monotonicClock,
    storeDeadlineMs: s.storeDeadlineMs,
    deadlineMarginMs: s.deadlineMarginMs,
    stalledMs: s.redisTimeoutMs,
    breaker: { windowMs: s.breakerWindowMs, minCalls: s.breakerMinCalls, failureRatio: s.breakerFailureRatio, cooldownMs: s.breakerCooldownMs },
    policy: s.fallbackPolicy,
    domainPolicies: domainPolicies(s.fallbackDomainPolicies, fallbackPolicy, checked),
    share: s.fallbackShare,
    replicaTtlMs: s.replicaTtlMs,
    replicaId: randomUUID(),
    overLimitCacheSize: s.overLimitCacheSize,
    overLimitCacheWhenCounting: s.localCacheSizeBytes > 0,
    leases: { autoThreshold: s.leaseAutoThreshold, autoShare: s.leaseAutoShare, ttlMs: s.leaseTtlMs, lowWater: s.leaseLowWater },
    memoryMaxKeys: s.memoryMaxKeys,
    journalFlushMs: 1000,
  };
}

// Multi-region's options (store/region/) that come from settings; app.ts adds the global store
// and the events.
export type RegionSettings = Omit<RegionOptions, 'global' | 'events' | 'report'>;

export function regionSettings(s: Settings): RegionSettings {
  return {
    region: s.region,
    policy: partitionPolicy(s.globalPartitionPolicy)!,
    domainPolicies: domainPolicies(s.globalPartitionDomainPolicies, partitionPolicy, checked),
    horizonMs: s.globalLeaseHorizonMs,
    replicaHorizonMs: s.replicaLeaseHorizonMs,
    leaseTtlMs: s.globalLeaseTtlMs,
    timeoutMs: s.globalTimeoutMs,
  };
}
