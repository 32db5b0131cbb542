import { windowNotes } from './config/dump';
import { loadConfig, type LoadResult, warningMessage } from './config/load';
import { checkUsage } from './cli-help';
import { ConfigError } from './errors';
import { loadSettings, SETTINGS, type Settings } from './settings';

export { runSimulate } from './simulate';
export { settingsHelp, usage } from './cli-help';

// Settings `sluice check` takes, as flags or from the environment: the same caps as `serve`.
const CHECK_FLAGS = ['merge-domain-config', 'config-max-file-bytes', 'config-max-descriptors'];

function checkSettings(flags: string[]): Settings {
  const env: NodeJS.ProcessEnv = {};
  for (const spec of SETTINGS.filter((s) => CHECK_FLAGS.includes(s.flag))) {
    for (const name of spec.env) if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  return loadSettings(flags, env);
}

// `sluice check`: validates every file under every PATH, prints every error (file:line: message)
// and exits 1 when there is one; 2 for a usage error. Never a stack trace. On success, a note per
// rule whose window Envoy cannot be told exactly.
export function runCheck(args: readonly string[], out: NodeJS.WritableStream, err: NodeJS.WritableStream): number {
  if (args.includes('--help') || args.includes('-h')) {
    out.write(checkUsage(CHECK_FLAGS));
    return 0;
  }
  const paths: string[] = [];
  const flags: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (!a.startsWith('--')) {
      paths.push(a);
      continue;
    }
    const name = a.slice(2).split('=')[0];
    if (!CHECK_FLAGS.includes(name)) {
      err.write(`sluice check: unknown flag ${a}\n`);
      return 2;
    }
    flags.push(a);
    if (!a.includes('=') && name !== 'merge-domain-config' && i + 1 < args.length) flags.push(args[++i]);
  }
  if (paths.length === 0) {
    err.write('sluice check: give at least one config file or directory\n');
    return 2;
  }
  let settings: Settings;
  try {
    settings = checkSettings(flags);
  } catch (e) {
    err.write(`sluice check: ${(e as Error).message}\n`);
    return 2;
  }
  const limits = { maxFileBytes: settings.configMaxFileBytes, maxDescriptors: settings.configMaxDescriptors };
  let result: LoadResult;
  try {
    result = loadConfig(paths, { mergeDomains: settings.mergeDomainConfig, limits });
  } catch (e) {
    result = { errors: [new ConfigError(paths.join(', '), `error loading config: ${(e as Error)?.message ?? String(e)}`)], warnings: [] };
  }
  const { config, errors, warnings } = result;
  for (const e of errors) err.write(`${e.message}\n`);
  for (const w of warnings) err.write(`${warningMessage(w)}\n`);
  const warned = warnings.length === 0 ? '' : `, ${warnings.length} warning(s)`;
  if (config === undefined) {
    err.write(`sluice check: ${errors.length} error(s)${warned}\n`);
    return 1;
  }
  for (const note of windowNotes(config)) out.write(`${note}\n`);
  out.write(`OK: ${config.files.length} file(s), domains: ${[...config.domains.keys()].join(', ')}${warned}\n`);
  return 0;
}
