import { createHmac } from 'node:crypto';
import { aggregateIp, type IpPrefix } from './ip';
import { type Algorithm, UNIT_SECONDS } from './model';

// Counter keys: <prefix>{<hash tag>}<rest>. Pure functions, no I/O.
//
// Every part is escaped so that no two different descriptors can produce the same key (upstream
// joins with '_' unescaped, so key "a_b"/value "c" and key "a"/value "b_c" collide there).
// The algorithm and period are part of the key: a config change from fixed_window to token_bucket,
// or from 1m to 5m windows, starts fresh counters instead of misreading old state.
//
// Hash tag (which part decides the Redis Cluster slot): 'descriptor' (default) = domain and the
// first entry, so a request's descriptors that start with the same entry (tenant, tenant+route)
// share a slot while different tenants spread over the cluster; 'domain' puts a whole domain on one
// slot; 'none' hashes the whole key.
export type HashTagPolicy = 'descriptor' | 'domain' | 'none';

// Values longer than maxLength, and every value of the listed keys, are replaced by a truncated
// HMAC-SHA256 under `secret`: bounded key size, and no raw client data (addresses, tokens) in
// Redis. 128 bits of the MAC are kept, so distinct values do not share a counter in practice.
export interface ValueHashing {
  secret: string;
  maxLength: number;
  keys: ReadonlySet<string>;
}

export interface KeyOptions {
  prefix: string;
  hashTag: HashTagPolicy;
  hashing?: ValueHashing;
  // 'upstream': fixed windows of upstream's units get envoyproxy/ratelimit's keys (upstreamKey).
  layout?: 'sluice' | 'upstream';
}

export interface KeyParts {
  domain: string;
  entries: readonly { key: string; value: string }[];
  algorithm: Algorithm;
  periodMs: number;
  // From the rule's `ip_prefix`: aggregate these entries' addresses.
  ipPrefix?: IpPrefix;
}

// The entry keys whose values Envoy fills with the client address.
export const ADDRESS_KEYS: ReadonlySet<string> = new Set(['remote_address', 'masked_remote_address']);

const ESCAPES: Record<string, string> = { '%': '%25', '|': '%7C', '=': '%3D', '{': '%7B', '}': '%7D' };

export function escapeKeyPart(s: string): string {
  return /[%|={}]/.test(s) ? s.replace(/[%|={}]/g, (c) => ESCAPES[c]) : s;
}

// A hashed value is written as "%h<mac>": an escaped real value never contains a bare '%h', so
// hashed and plain values cannot collide either.
function valuePart(key: string, value: string, hashing: ValueHashing | undefined): string {
  if (hashing !== undefined && (value.length > hashing.maxLength || hashing.keys.has(key))) {
    return `%h${createHmac('sha256', hashing.secret).update(value).digest('base64url').slice(0, 22)}`;
  }
  return escapeKeyPart(value);
}

// An entry's value as its counter sees it: an address aggregated to the rule's `ip_prefix`.
function counterValue(e: { key: string; value: string }, parts: KeyParts): string {
  return parts.ipPrefix !== undefined && ADDRESS_KEYS.has(e.key) ? aggregateIp(e.value, parts.ipPrefix) : e.value;
}

function entryPart(e: { key: string; value: string }, parts: KeyParts, options: KeyOptions): string {
  return `${escapeKeyPart(e.key)}=${valuePart(e.key, counterValue(e, parts), options.hashing)}`;
}

// Built by concatenation (no arrays): it runs for every limit of every request.
export function counterKey(parts: KeyParts, options: KeyOptions): string {
  const domain = escapeKeyPart(parts.domain);
  const entries = parts.entries;
  const suffix = `|${parts.algorithm}:${parts.periodMs}`;
  let rest = '';
  for (let i = options.hashTag === 'descriptor' ? 1 : 0; i < entries.length; i++) {
    rest += i === 0 ? entryPart(entries[i], parts, options) : `|${entryPart(entries[i], parts, options)}`;
  }
  switch (options.hashTag) {
    case 'domain':
      return `${options.prefix}{${domain}}|${rest}${suffix}`;
    case 'none':
      return `${options.prefix}${domain}|${rest}${suffix}`;
    case 'descriptor': {
      const first = entries.length === 0 ? '' : entryPart(entries[0], parts, options);
      return `${options.prefix}{${domain}|${first}}${rest}${suffix}`;
    }
  }
}

// Upstream's units, as window lengths in seconds (its UnitToDivider: a month is 30 days, a year 365,
// as in UNIT_SECONDS).
const UPSTREAM_DIVIDERS: ReadonlyMap<number, number> = new Map(Object.values(UNIT_SECONDS).map((s) => [s * 1000, s]));

// Whether a fixed window of `periodMs` has an envoyproxy/ratelimit key (its units only).
export function hasUpstreamKey(algorithm: Algorithm, periodMs: number): boolean {
  return algorithm === 'fixed_window' && UPSTREAM_DIVIDERS.has(periodMs);
}

// envoyproxy/ratelimit's counter key (its cache_key.go): prefix, domain, then key and value of
// every entry, each followed by '_', then the window's start in Unix seconds from `nowMs`, this
// process' clock (upstream uses its own). Not escaped, as upstream does not; values are the
// request's, as upstream has them (ip_prefix aggregation applies, value hashing does not).
export function upstreamKey(parts: KeyParts, prefix: string, nowMs: number): string {
  const divider = UPSTREAM_DIVIDERS.get(parts.periodMs);
  if (divider === undefined || parts.algorithm !== 'fixed_window') throw new Error(`no upstream key for ${parts.algorithm} over ${parts.periodMs} ms`);
  let key = `${prefix}${parts.domain}_`;
  for (const e of parts.entries) key += `${e.key}_${counterValue(e, parts)}_`;
  const seconds = Math.floor(nowMs / 1000);
  return key + String(Math.floor(seconds / divider) * divider);
}
