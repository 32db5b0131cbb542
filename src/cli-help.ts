import { SETTINGS, type Settings, type Spec, valueText } from './settings';
import { VERSION } from './version';

// `sluice --help` and each command's help. Defaults and meanings come from the settings table
// (settings/table.ts), so they cannot drift from what the code does; only the choice of the settings
// most people touch, and their grouping, is written here.

const GROUPS: readonly [title: string, keys: readonly (keyof Settings)[]][] = [
  ['Listeners', ['grpcPort', 'grpcHost', 'httpPort', 'host', 'adminPort', 'adminHost']],
  ['Config', ['configPaths', 'configType', 'configWatch']],
  ['Store', ['store', 'redisUrl', 'redisType', 'redisAuth', 'redisTls', 'workers']],
  ['When Redis is slow or gone', ['fallbackPolicy', 'storeDeadlineMs', 'compatMode']],
  ['Logs, metrics, traces', ['logLevel', 'logFormat', 'statsdEnabled', 'prometheusEnabled', 'tracingEnabled']],
  ['Shutdown', ['shutdownDelayMs', 'drainTimeoutMs']],
];

const SUMMARY_MAX = 64;

export function defaultText(spec: Spec): string {
  return valueText(spec, spec.def);
}

// The first clause of a setting's help (for a choice, the choices): enough to recognise it; the
// README and `sluice help settings` have the rest.
function summary(spec: Spec): string {
  if (spec.kind === 'enum') return spec.choices!.join(' | ');
  const first = spec.help.split(/; | \(|, e\.g\. /)[0];
  if (first.length <= SUMMARY_MAX) return first;
  return `${first.slice(0, first.lastIndexOf(' ', SUMMARY_MAX - 1))}…`;
}

// Rows of flag and environment, default, meaning, in aligned columns.
function table(specs: readonly Spec[], full: boolean): string[] {
  const names = specs.map((s) => `--${s.flag}  ${s.env.join(', ')}`);
  const defaults = specs.map(defaultText);
  const w1 = Math.max(...names.map((n) => n.length));
  const w2 = Math.max(...defaults.map((d) => d.length));
  return specs.map((s, i) => `  ${names[i].padEnd(w1)}  ${defaults[i].padEnd(w2)}  ${full ? s.help : summary(s)}`);
}

const spec = (key: keyof Settings): Spec => SETTINGS.find((s) => s.key === key)!;

const COMMANDS = [
  'usage: sluice [serve] [flags]        run the rate-limit service (the default command)',
  '       sluice check [flags] PATH...  validate config files or directories (sluice check --help)',
  '       sluice simulate [flags]       replay traffic through the algorithms (sluice simulate --help)',
  '       sluice help settings          every setting, with its default and meaning',
  '       sluice --version              print the version',
];

export function usage(): string {
  const specs = GROUPS.flatMap(([, keys]) => keys.map(spec));
  const rows = table(specs, false);
  const groups = GROUPS.flatMap(([title, keys]) => ['', `${title}:`, ...rows.splice(0, keys.length)]);
  return [
    `sluice ${VERSION}: Envoy's rate limit service (envoy.service.ratelimit.v3)`,
    '',
    ...COMMANDS,
    '',
    'Each setting is a flag or an environment variable (the flag wins). The most used, with flag,',
    'environment variables, default and meaning:',
    ...groups,
    '',
    `All ${SETTINGS.length} settings: sluice help settings, or the Settings section of README.md.`,
    '',
  ].join('\n');
}

// `sluice help settings`: the whole table.
export function settingsHelp(): string {
  return [`${SETTINGS.length} settings (flag, environment variables, default, meaning):`, ...table(SETTINGS, true), ''].join('\n');
}

export function checkUsage(flags: readonly string[]): string {
  const rows = table(
    SETTINGS.filter((s) => flags.includes(s.flag)),
    true,
  );
  return [
    'usage: sluice check [flags] PATH...',
    '',
    'Validates every config file under each PATH (file or directory) as `serve` would load it, and',
    'prints each error as file:line: message. Exit code 0: valid; 1: an error; 2: a usage error.',
    '',
    'flags (also read from the environment):',
    ...rows,
    '',
  ].join('\n');
}
