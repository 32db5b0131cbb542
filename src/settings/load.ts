import { checkExplicit, checkRedisUrls, checkSettings } from './checks';
import { applyCompatMode } from './compat';
import { parseValue, runtimeConfigPath, splitFlags } from './parse';
import { SETTINGS, specOf } from './table';
import type { Settings } from './types';

export function loadSettings(argv: readonly string[] = [], env: NodeJS.ProcessEnv = process.env): Settings {
  const flags = splitFlags(argv);
  const out: Record<string, unknown> = {};
  // Settings given by flag or environment: COMPAT_MODE changes only the others' defaults.
  const explicit = new Set<keyof Settings>();
  const origins: Partial<Record<keyof Settings, string>> = {};
  for (const spec of SETTINGS) {
    const given = flags.get(spec.flag);
    if (given !== undefined) {
      const values = given.map((v) => parseValue(spec, v, `--${spec.flag}`));
      out[spec.key] = spec.kind === 'list' ? values.flat() : values[values.length - 1];
      explicit.add(spec.key);
      origins[spec.key] = `--${spec.flag}`;
      continue;
    }
    const envName = spec.env.find((name) => env[name] !== undefined);
    out[spec.key] = envName !== undefined ? parseValue(spec, env[envName] as string, envName) : spec.def;
    if (envName !== undefined) explicit.add(spec.key);
    if (envName !== undefined) origins[spec.key] = envName;
  }
  const settings = out as unknown as Settings;
  settings.origins = origins;
  checkExplicit(settings, explicit);
  applyCompatMode(settings, explicit);
  settings.storeImpliedBy = impliedStore(flags, env);
  if (settings.storeImpliedBy !== undefined) settings.store = 'redis';
  checkSettings(settings);
  checkRedisUrls(settings);
  if (settings.configPaths.length === 0 && settings.configType === 'file') {
    const runtime = runtimeConfigPath(env);
    if (runtime !== undefined) settings.configPaths = [runtime];
  }
  return settings;
}

// upstream's default store is Redis, so its users (Envoy Gateway among them) set REDIS_URL and no
// BACKEND_TYPE: with a Redis setting given and no store named, the store is Redis, never a memory
// store per replica that would each admit the whole limit.
function impliedStore(flags: Map<string, string[]>, env: NodeJS.ProcessEnv): string | undefined {
  const store = specOf('store');
  if (flags.has(store.flag) || store.env.some((name) => env[name] !== undefined)) return undefined;
  for (const spec of SETTINGS) {
    if (!spec.key.startsWith('redis')) continue;
    if (flags.has(spec.flag)) return `--${spec.flag}`;
    const name = spec.env.find((n) => env[n] !== undefined && env[n] !== '');
    if (name !== undefined) return name;
  }
  return undefined;
}

// Settings given twice in the environment, under sluice's name and upstream's (HTTP_PORT and
// PORT, ADMIN_PORT and DEBUG_PORT...), with different values: which one is used, for a start-up
// warning. The precedence is the table's: a flag, then the names in their order.
export function conflictingNames(s: Settings, env: NodeJS.ProcessEnv): { names: string[]; used: string; message: string }[] {
  const out: { names: string[]; used: string; message: string }[] = [];
  for (const spec of SETTINGS) {
    const given = spec.env.filter((name) => env[name] !== undefined);
    if (new Set(given.map((name) => env[name])).size < 2) continue;
    const used = settingName(s, spec.key);
    const values = given.map((name) => `${name}=${env[name]}`).join(' and ');
    out.push({ names: given, used, message: `${values} are both set: ${used} is used${used.startsWith('--') ? ' (a flag wins over the environment)' : ''}` });
  }
  return out;
}

// The name a message should give a setting: the flag or variable the user set it with, else
// sluice's own environment name.
export function settingName(s: Settings, key: keyof Settings): string {
  return s.origins?.[key] ?? specOf(key).env[0];
}

export function defaultSettings(overrides: Partial<Settings> = {}): Settings {
  return { ...loadSettings([], {}), ...overrides };
}
