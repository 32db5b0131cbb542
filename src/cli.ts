import { loadConfig } from './config/load';
import { SETTINGS } from './settings';

export function usage(): string {
  const rows = SETTINGS.map((s) => `  --${s.flag.padEnd(28)} ${s.env.join(', ').padEnd(34)} ${s.help}`);
  return [
    'usage: sluice [serve] [flags]      run the rate limit service (default)',
    '       sluice check [--merge-domain-config] PATH...   validate config files or directories',
    '',
    'flags (flag, environment variables, meaning):',
    ...rows,
    '',
  ].join('\n');
}

// `sluice check`: validates every file under every PATH, prints every error (file:line: message)
// and exits non-zero when there is one.
export function runCheck(args: readonly string[], out: NodeJS.WritableStream, err: NodeJS.WritableStream): number {
  const mergeDomains = args.includes('--merge-domain-config') || process.env.MERGE_DOMAIN_CONFIG === 'true';
  const paths = args.filter((a) => !a.startsWith('--'));
  const unknown = args.filter((a) => a.startsWith('--') && a !== '--merge-domain-config');
  if (unknown.length > 0) {
    err.write(`sluice check: unknown flag ${unknown[0]}\n`);
    return 2;
  }
  if (paths.length === 0) {
    err.write('sluice check: give at least one config file or directory\n');
    return 2;
  }
  const { config, errors } = loadConfig(paths, { mergeDomains });
  for (const e of errors) err.write(`${e.message}\n`);
  if (config === undefined) {
    err.write(`sluice check: ${errors.length} error(s)\n`);
    return 1;
  }
  out.write(`OK: ${config.files.length} file(s), domains: ${[...config.domains.keys()].join(', ')}\n`);
  return 0;
}
