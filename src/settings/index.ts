// The settings: one table (table.ts) from which the Settings type (types.ts), parsing (parse.ts,
// load.ts), every start-up check (checks.ts), COMPAT_MODE's defaults (compat.ts), the option
// objects handed to the layers below (derived.ts) and the docs (describe.ts) follow. Read once, in
// main.ts; app.ts turns them into what each layer takes.
export { SettingsError } from '../errors';
export { redactRedisUrl } from '../redact';
export { compatModeLine } from './compat';
export {
  domainPolicies,
  listenAddress,
  otlpHeaders,
  type PartitionPolicy,
  partitionPolicy,
  type RedisTargets,
  redisStackOptions,
  redisTargets,
  type RegionSettings,
  regionSettings,
  validatePerSecondUrl,
} from './derived';
export { describeSettings, settingsReference, valueText } from './describe';
export { conflictingNames, defaultSettings, loadSettings, settingName } from './load';
export { SETTINGS, type Spec, specOf } from './table';
export type { CompatMode, Settings } from './types';
export { UPSTREAM_SETTINGS, type UpstreamSetting, upstreamSettingsNotRead, upstreamSettingsTable } from './upstream';
