import { redactRedisUrl } from '../redact';
import { SETTINGS, type Spec, specOf, type UpstreamDefault } from './table';
import type { Settings } from './types';

const SECRET: readonly (keyof Settings)[] = [
  'redisAuth',
  'redisSentinelAuth',
  'keyHashSecret',
  'globalRedisAuth',
  'otlpHeaders',
  'redisPerSecondAuth',
  'redisPerSecondSentinelAuth',
];
// Other URLs that may carry a user and password.
const URLS = ['otlpEndpoint', 'otlpTracesEndpoint', 'xdsServerUrl'] as const;
// Lists of key:value whose values are secrets (an authorization header).
const SECRET_VALUES: readonly (keyof Settings)[] = ['xdsAdditionalHeaders'];

// Settings as logged at startup, with secrets (and a password inside REDIS_URL) redacted.
export function describeSettings(settings: Settings): Record<string, unknown> {
  const { origins: _origins, ...shown } = settings;
  const out: Record<string, unknown> = shown;
  for (const key of SECRET) if (out[key] !== '') out[key] = '[redacted]';
  for (const key of SECRET_VALUES) out[key] = (settings[key] as string[]).map((e) => `${e.split(':')[0]}:[redacted]`);
  out.redisUrl = redactRedisUrl(settings.redisUrl);
  out.globalRedisUrl = redactRedisUrl(settings.globalRedisUrl);
  out.redisPerSecondUrl = redactRedisUrl(settings.redisPerSecondUrl);
  for (const key of URLS) out[key] = redactRedisUrl(settings[key]);
  return out;
}

// A duration in the unit a person would write it in (10s, not 10000).
function duration(ms: number): string {
  if (ms === 0) return '0';
  if (ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

// A value of a setting as help and docs show it ('-' for nothing).
export function valueText(spec: Spec, value: unknown): string {
  if (Array.isArray(value)) return value.length === 0 ? '-' : value.join(',');
  if (value === '') return '-';
  if (spec.kind === 'duration' && typeof value === 'number') return duration(value);
  return String(value);
}

const envOf = (key: string): string => specOf(key).env[0];

function upstreamText(spec: Spec, u: UpstreamDefault): string {
  if ('value' in u) return valueText(spec, u.value);
  return 'same' in u ? `as \`${envOf(u.same)}\`` : `not \`${envOf(u.not)}\``;
}

const cell = (text: string): string => text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
const code = (text: string): string => (text === '-' ? '-' : `\`${text}\``);

// docs/settings.md, written from the table by `npm run docs:settings` (scripts/docs-settings.ts);
// test/unit/settings/docs-reference.test.ts fails when the file differs.
export function settingsReference(): string {
  const rows = SETTINGS.map((s) => {
    const names = [...s.env.map((e) => `\`${e}\``), `\`--${s.flag}\``].join('<br>');
    const choices = s.choices === undefined ? '' : ` One of ${s.choices.map((c) => `\`${c}\``).join(', ')}.`;
    const upstream = s.upstream === undefined ? '' : upstreamText(s, s.upstream);
    const help = s.help.endsWith('.') ? s.help : `${s.help}.`;
    return `| ${names} | ${s.kind} | ${code(valueText(s, s.def))} | ${upstream} | ${cell(help + choices)} |`;
  });
  return [
    '# Settings reference',
    '',
    '<!-- Generated from src/settings/table.ts by `npm run docs:settings`; do not edit by hand. -->',
    '',
    `Every one of sluice's ${SETTINGS.length} settings. Each is an environment variable (where envoyproxy/ratelimit`,
    'has the setting, under its name too; the first name listed wins) or a flag, and a flag wins over the',
    'environment. Durations take a number of milliseconds or a duration such as `1m30s`; lists are',
    "comma-separated. `COMPAT_MODE=upstream` gives the settings of its column envoyproxy/ratelimit's",
    'defaults; a setting given explicitly keeps its value.',
    '',
    '| setting | kind | default | `COMPAT_MODE=upstream` | meaning |',
    '|---|---|---|---|---|',
    ...rows,
    '',
  ].join('\n');
}
