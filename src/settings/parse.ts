import path from 'node:path';
import { parseDuration } from '../config/duration';
import { SettingsError } from '../errors';
import { SETTINGS, type Spec } from './table';
import type { Settings } from './types';

// Flags and environment values as text, parsed by the kind of their row.

// Other names a value is known by: upstream's LOG_LEVEL=warning, LOG_FORMAT=text (its default).
const ENUM_ALIASES: Partial<Record<keyof Settings, Record<string, string>>> = {
  logLevel: { warning: 'warn' },
  logFormat: { text: 'pretty' },
};

const TRUE = new Set(['1', 'true', 'yes', 'on']);
const FALSE = new Set(['0', 'false', 'no', 'off', '']);

export function parseValue(spec: Spec, raw: string, origin: string): unknown {
  const bad = (what: string): never => {
    throw new SettingsError(`${origin}: ${what}, got '${raw}'`);
  };
  switch (spec.kind) {
    case 'string':
      return raw;
    case 'list':
      return raw
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
    case 'bool': {
      const v = raw.toLowerCase();
      if (TRUE.has(v)) return true;
      if (FALSE.has(v)) return false;
      return bad('expected true or false');
    }
    case 'port':
    case 'count':
    case 'int': {
      const n = Number(raw);
      const max = spec.kind === 'port' ? 65535 : Number.MAX_SAFE_INTEGER;
      const min = spec.kind === 'int' ? 1 : 0;
      if (!/^\d+$/.test(raw) || n < min || n > max) return bad(`expected an integer ${min}..${max}`);
      return n;
    }
    case 'auto-int':
      if (raw.trim().toLowerCase() === 'auto') return 'auto';
      return parseValue({ ...spec, kind: 'int' }, raw, origin);
    case 'share':
      if (raw.trim().toLowerCase() === 'auto') return 'auto';
      return parseValue({ ...spec, kind: 'ratio' }, raw, origin);
    case 'ratio': {
      const n = Number(raw);
      if (raw.trim() === '' || !Number.isFinite(n) || n < 0 || n > 1) return bad('expected a number between 0 and 1');
      return n;
    }
    case 'duration': {
      if (/^\d+$/.test(raw)) return Number(raw);
      try {
        return parseDuration(raw);
      } catch (err) {
        return bad((err as Error).message);
      }
    }
    case 'enum': {
      const v = ENUM_ALIASES[spec.key]?.[raw.toLowerCase()] ?? raw.toLowerCase();
      if (!spec.choices?.includes(v)) return bad(`expected one of ${spec.choices?.join(', ')}`);
      return v;
    }
  }
}

// The upstream runtime layout: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY (the
// last defaults to "config"), used when no --config is given.
export function runtimeConfigPath(env: NodeJS.ProcessEnv): string | undefined {
  const root = env.RUNTIME_ROOT;
  if (root === undefined || root === '') return undefined;
  return path.join(root, env.RUNTIME_SUBDIRECTORY ?? '', env.RUNTIME_APPDIRECTORY || 'config');
}

export function splitFlags(argv: readonly string[]): Map<string, string[]> {
  const flags = new Map<string, string[]>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new SettingsError(`unexpected argument '${arg}'`);
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    const spec = SETTINGS.find((s) => s.flag === name);
    if (spec === undefined) throw new SettingsError(`unknown flag --${name} (see sluice --help)`);
    let value: string;
    if (eq >= 0) value = arg.slice(eq + 1);
    else if (spec.kind === 'bool') value = 'true';
    else if (i + 1 < argv.length) value = argv[++i];
    else throw new SettingsError(`flag --${name} needs a value`);
    flags.set(name, [...(flags.get(name) ?? []), value]);
  }
  return flags;
}
