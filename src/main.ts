#!/usr/bin/env node
import { createApp } from './app';
import { runCheck, runSimulate, usage } from './cli';
import { loadSettings, SettingsError, upstreamSettingsNotRead } from './settings';

// Thin on purpose: settings → app → start → signals.
async function serve(argv: string[]): Promise<void> {
  const settings = loadSettings(argv);
  if (settings.configType === 'file' && settings.configPaths.length === 0) {
    throw new SettingsError('no config: pass --config PATH (or set CONFIG_PATH, or RUNTIME_ROOT for the upstream layout, or CONFIG_TYPE=GRPC_XDS_SOTW for config over xDS)');
  }
  const app = createApp(settings);
  const notRead = upstreamSettingsNotRead(process.env);
  if (notRead.length > 0) {
    app.logger.warn({ event: 'upstream_settings_not_read', names: notRead }, `envoyproxy/ratelimit settings that sluice does not read: ${notRead.join(', ')} (docs/migrating.md says what sluice does instead)`);
  }
  await app.start();
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.logger.info({ event: 'signal', signal }, 'shutting down');
    app.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        app.logger.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGHUP', () => app.reloadConfig());
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const command = args[0] !== undefined && !args[0].startsWith('-') ? args[0] : 'serve';
  const rest = command === args[0] ? args.slice(1) : args;
  // Before the general --help: `sluice simulate --help` prints its own options.
  if (command === 'simulate') {
    process.exitCode = runSimulate(rest, process.stdout, process.stderr);
    return;
  }
  if (args.includes('--help') || args.includes('-h') || command === 'help') {
    process.stdout.write(usage());
    return;
  }
  if (command === 'check') {
    process.exitCode = runCheck(rest, process.stdout, process.stderr);
    return;
  }
  if (command !== 'serve') throw new SettingsError(`unknown command '${command}' (serve, check, simulate)`);
  await serve(rest);
}

main().catch((err: unknown) => {
  const message = err instanceof SettingsError ? err.message : String((err as Error)?.stack ?? err);
  process.stderr.write(`sluice: ${message}\n`);
  process.exit(2);
});
