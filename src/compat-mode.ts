import { type Settings, SettingsError } from './settings';
import { entriesForBytes } from './store/over-limit-cache';

// COMPAT_MODE: whose behaviour sluice's defaults follow. One profile chosen at start; it only
// changes defaults, so a setting given explicitly (flag or environment) always wins, and sluice's
// algorithms and extensions still work wherever a config asks for them.
export type CompatMode = 'native' | 'upstream';

// REDIS_TIMEOUT's default in envoyproxy/ratelimit (settings.go).
const UPSTREAM_REDIS_TIMEOUT_MS = 10_000;

// envoyproxy/ratelimit's behaviour, as defaults (settings that differ from sluice's only).
function upstreamDefaults(s: Settings, explicit: ReadonlySet<keyof Settings>): Partial<Settings> {
  const redisTimeoutMs = explicit.has('redisTimeoutMs') ? s.redisTimeoutMs : UPSTREAM_REDIS_TIMEOUT_MS;
  return {
    // Every hit counted (INCRBY), unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT asks otherwise.
    countDeniedHits: !s.stopCacheKeyIncrementWhenOverlimit,
    retryAfterEnabled: false,
    // Each request waits on Redis up to REDIS_TIMEOUT (the caller's own gRPC deadline still bounds it).
    redisTimeoutMs,
    storeDeadlineMs: redisTimeoutMs,
    leaseAutoThreshold: 0,
    // Upstream's local cache is off unless LOCAL_CACHE_SIZE_IN_BYTES sizes it.
    overLimitCacheSize: 0,
  };
}

export function applyCompatMode(s: Settings, explicit: ReadonlySet<keyof Settings>): void {
  if (explicit.has('countDeniedHits') && s.countDeniedHits && s.stopCacheKeyIncrementWhenOverlimit) {
    throw new SettingsError('STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true cannot be combined with COUNT_DENIED_HITS=true: one counts the hits of a request that goes over, the other does not');
  }
  if (explicit.has('overLimitCacheSize') && explicit.has('localCacheSizeBytes')) {
    throw new SettingsError('OVER_LIMIT_CACHE_SIZE (entries) and LOCAL_CACHE_SIZE_IN_BYTES (bytes) both size the over-limit cache: set one of them');
  }
  if (s.compatMode === 'upstream') {
    for (const [key, value] of Object.entries(upstreamDefaults(s, explicit)) as [keyof Settings, unknown][]) {
      if (!explicit.has(key)) (s as unknown as Record<string, unknown>)[key] = value;
    }
  }
  if (explicit.has('localCacheSizeBytes')) s.overLimitCacheSize = entriesForBytes(s.localCacheSizeBytes);
}

// The start-up log line: which mode runs and the settings where the modes differ, as in force.
export function compatModeLine(s: Settings): { fields: Record<string, unknown>; message: string } {
  const fields = {
    event: 'compat_mode',
    mode: s.compatMode,
    countDeniedHits: s.countDeniedHits,
    retryAfterEnabled: s.retryAfterEnabled,
    redisTimeoutMs: s.redisTimeoutMs,
    storeDeadlineMs: s.storeDeadlineMs,
    leaseAutoThreshold: s.leaseAutoThreshold,
    overLimitCacheSize: s.overLimitCacheSize,
  };
  const message =
    s.compatMode === 'upstream'
      ? "COMPAT_MODE=upstream: answering as envoyproxy/ratelimit does (settings given explicitly win)"
      : "COMPAT_MODE=native: sluice's own behaviour (COMPAT_MODE=upstream answers as envoyproxy/ratelimit)";
  return { fields, message };
}
