import type { Row } from './row';
import { CONFIG_ROWS } from './rows/config';
import { REGION_ROWS } from './rows/regions';
import { RESPONSE_ROWS } from './rows/responses';
import { SERVER_ROWS } from './rows/server';
import { STORE_ROWS } from './rows/store';
import { TELEMETRY_ROWS } from './rows/telemetry';

export type { Kind, UpstreamDefault } from './row';

// Every setting sluice reads, from flags and the environment, as one table: the Settings type
// (types.ts), `sluice help settings`, docs/settings.md and COMPAT_MODE=upstream's defaults all
// follow from these rows. Precedence: flag > environment (sluice's name, then upstream's) > default.

export type SettingKey = (typeof TABLE)[number]['key'];

// One row as the rest of the code reads it.
export interface Spec extends Row {
  key: SettingKey;
}

// The rows, by topic (rows/), in the order help and docs/settings.md list them; their literal types
// are kept: types.ts derives the Settings type from them.
export const TABLE = [...CONFIG_ROWS, ...SERVER_ROWS, ...STORE_ROWS, ...REGION_ROWS, ...RESPONSE_ROWS, ...TELEMETRY_ROWS] as const satisfies readonly Row[];

export const SETTINGS: readonly Spec[] = TABLE as readonly Spec[];

export function specOf(key: string): Spec {
  return SETTINGS.find((s) => s.key === key)!;
}
