import type { ReloadTrigger } from '../config/holder';
import type { CompiledConfig } from '../config/types';
import { ConfigError } from '../errors';
import type { Registry } from 'prom-client';
import type { ServingStatus } from './health';
import type { UpstreamTallies } from '../telemetry/upstream-tallies';

// Messages between the primary and its workers under WORKERS > 1 (server/workers.ts). The IPC
// channel uses structured clone ('advanced' serialization), so the compiled config — plain objects,
// arrays and Maps — crosses as it is, without re-reading or re-compiling files.

// A rejected load, without the Error class (structured clone keeps only an Error's message).
export interface RejectionWire {
  since: Date;
  errors: { file: string; line?: number; detail: string }[];
}

export type ToWorker =
  // `config`: the config to serve, undefined while none is loaded; `rejection`: the latest load's
  // errors when it was rejected.
  | { type: 'config'; config?: CompiledConfig; rejection?: RejectionWire; trigger: ReloadTrigger }
  // Why the other workers of the set are not serving ([] when they all are).
  | { type: 'peers'; reasons: string[] }
  // `upstream`: with the worker's tallies for the USE_PROMETHEUS listener (its scrape asked for them).
  | { type: 'collect'; id: number; upstream: boolean }
  | { type: 'scraped'; id: number; text: string; tallies?: UpstreamTallies };

export type ToPrimary =
  | { type: 'hello' }
  | { type: 'health'; status: ServingStatus; reasons: string[] }
  // `setting`: the message names the setting to change (a SettingsError), and is said as it is.
  | { type: 'start-failed'; message: string; setting?: boolean }
  // `upstream` (USE_PROMETHEUS): the set's tallies for the metrics listener too.
  | { type: 'scrape'; id: number; upstream: boolean }
  | { type: 'collected'; id: number; metrics: MetricsJson; upstream?: UpstreamTallies };

// One process' series, as prom-client's AggregatorRegistry.aggregate() takes them.
export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

export function rejectionToWire(r: { since: Date; errors: ConfigError[] } | undefined): RejectionWire | undefined {
  return r === undefined ? undefined : { since: r.since, errors: r.errors.map((e) => ({ file: e.file, line: e.line, detail: e.detail })) };
}

export function rejectionFromWire(r: RejectionWire | undefined): { since: Date; errors: ConfigError[] } | undefined {
  return r === undefined ? undefined : { since: r.since, errors: r.errors.map((e) => new ConfigError(e.file, e.detail, e.line)) };
}
