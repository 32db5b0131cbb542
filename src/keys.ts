import type { Algorithm } from './model';

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

export interface KeyOptions {
  prefix: string;
  hashTag: HashTagPolicy;
}

export interface KeyParts {
  domain: string;
  entries: readonly { key: string; value: string }[];
  algorithm: Algorithm;
  periodMs: number;
}

const ESCAPES: Record<string, string> = { '%': '%25', '|': '%7C', '=': '%3D', '{': '%7B', '}': '%7D' };

export function escapeKeyPart(s: string): string {
  return /[%|={}]/.test(s) ? s.replace(/[%|={}]/g, (c) => ESCAPES[c]) : s;
}

function entryPart(e: { key: string; value: string }): string {
  return `${escapeKeyPart(e.key)}=${escapeKeyPart(e.value)}`;
}

export function counterKey(parts: KeyParts, options: KeyOptions): string {
  const domain = escapeKeyPart(parts.domain);
  const entries = parts.entries.map(entryPart);
  const suffix = `|${parts.algorithm}:${parts.periodMs}`;
  switch (options.hashTag) {
    case 'domain':
      return `${options.prefix}{${domain}}|${entries.join('|')}${suffix}`;
    case 'none':
      return `${options.prefix}${domain}|${entries.join('|')}${suffix}`;
    case 'descriptor': {
      const rest = entries.slice(1).map((e) => `|${e}`).join('');
      return `${options.prefix}{${domain}|${entries[0] ?? ''}}${rest}${suffix}`;
    }
  }
}
