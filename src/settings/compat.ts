import { entriesForBytes } from '../store/over-limit-cache';
import { SETTINGS, type Spec, type UpstreamDefault } from './table';
import type { Settings } from './types';

// COMPAT_MODE: whose behaviour sluice's defaults follow. One profile chosen at start; it only
// changes defaults, so a setting given explicitly (flag or environment) always wins, and sluice's
// algorithms and extensions still work wherever a config asks for them. envoyproxy/ratelimit's
// defaults are the table's `upstream` column.

type Upstream = Spec & { upstream: UpstreamDefault };

const UPSTREAM: readonly Upstream[] = SETTINGS.filter((s): s is Upstream => s.upstream !== undefined);

export function applyCompatMode(s: Settings, explicit: ReadonlySet<keyof Settings>): void {
  if (s.compatMode === 'upstream') {
    const values = s as unknown as Record<string, unknown>;
    const apply = (row: Upstream, value: (u: UpstreamDefault) => unknown) => {
      if (!explicit.has(row.key)) values[row.key] = value(row.upstream);
    };
    // Values first, so that a setting following another (STORE_DEADLINE as REDIS_TIMEOUT) reads
    // the one in force.
    for (const row of UPSTREAM) if ('value' in row.upstream) apply(row, (u) => (u as { value: unknown }).value);
    for (const row of UPSTREAM)
      if (!('value' in row.upstream)) apply(row, (u) => ('same' in u ? values[u.same] : !(values[(u as { not: string }).not] as boolean)));
  }
  if (explicit.has('localCacheSizeBytes')) s.overLimitCacheSize = entriesForBytes(s.localCacheSizeBytes);
}

// The start-up log line: which mode runs and the settings where the modes differ, as in force.
export function compatModeLine(s: Settings): { fields: Record<string, unknown>; message: string } {
  const fields: Record<string, unknown> = { event: 'compat_mode', mode: s.compatMode };
  for (const row of UPSTREAM) fields[row.key] = s[row.key];
  const message =
    s.compatMode === 'upstream'
      ? 'COMPAT_MODE=upstream: answering as envoyproxy/ratelimit does (settings given explicitly win)'
      : "COMPAT_MODE=native: sluice's own behaviour (COMPAT_MODE=upstream answers as envoyproxy/ratelimit)";
  return { fields, message };
}
