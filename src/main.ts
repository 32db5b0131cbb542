#!/usr/bin/env node
import cluster from 'node:cluster';
import { createApp } from './app';
import { runCheck, runSimulate, settingsHelp, usage } from './cli';
import { runWorker } from './server/cluster-worker';
import { stopOnSignals } from './server/cluster-signals';
import { logWorkers, planWorkers, runPrimary, type WorkerPlan } from './server/workers';
import { cgroupMemoryLimit, configBytes, memoryFitWarning } from './server/memory-fit';
import { createLogger, type Logger } from './logger';
import { SettingsError } from './errors';
import { conflictingNames, loadSettings, type Settings, upstreamSettingsNotRead } from './settings';
import { VERSION } from './version';

// Thin on purpose: settings → app → start → signals.
async function serve(argv: string[]): Promise<void> {
  const settings = loadSettings(argv);
  if (settings.configType === 'file' && settings.configPaths.length === 0) {
    throw new SettingsError(
      'no config: pass --config PATH (or set CONFIG_PATH, or RUNTIME_ROOT for the upstream layout, or CONFIG_TYPE=GRPC_XDS_SOTW for config over xDS)',
    );
  }
  // WORKERS > 1: this process is the primary (server/workers.ts) or one of its workers.
  if (cluster.isWorker) return runWorker(settings);
  const workers = planWorkers(settings);
  if (workers.count > 1) {
    const logger = createLogger(settings.logLevel, undefined, { format: settings.logFormat });
    warnAtStart(logger, settings);
    warnMemory(logger, settings, workers);
    return runPrimary(settings, workers, logger);
  }
  const app = createApp(settings);
  warnAtStart(app.logger, settings);
  await app.start();
  logWorkers(app.logger, workers);
  warnMemory(app.logger, settings, workers);
  stopOnSignals({ logger: app.logger, stop: () => app.stop(), hup: () => app.reloadConfig() });
}

function warnMemory(logger: Logger, settings: Settings, plan: WorkerPlan): void {
  const limitBytes = cgroupMemoryLimit(process.env.SLUICE_CGROUP_ROOT);
  const bytes = configBytes(settings.configType === 'file' ? settings.configPaths : []);
  const line = memoryFitWarning({ workers: plan.count, why: plan.why, configBytes: bytes, limitBytes });
  if (line !== undefined) logger.warn({ event: 'memory_limit_low', workers: plan.count, limitBytes, configBytes: bytes }, line);
}

function warnAtStart(logger: Logger, settings: Settings): void {
  for (const c of conflictingNames(settings, process.env)) logger.warn({ event: 'settings_conflict', names: c.names, used: c.used }, c.message);
  const notRead = upstreamSettingsNotRead(process.env);
  if (notRead.length > 0) {
    logger.warn(
      { event: 'upstream_settings_not_read', names: notRead },
      `envoyproxy/ratelimit settings that sluice does not read: ${notRead.join(', ')} (docs/migrating.md says what sluice does instead)`,
    );
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.length === 1 && (args[0] === '--version' || args[0] === '-v' || args[0] === 'version')) {
    process.stdout.write(`sluice ${VERSION}\n`);
    return;
  }
  const command = args[0] !== undefined && !args[0].startsWith('-') ? args[0] : 'serve';
  const rest = command === args[0] ? args.slice(1) : args;
  // Each command reads its own --help.
  if (command === 'simulate') {
    process.exitCode = runSimulate(rest, process.stdout, process.stderr);
    return;
  }
  if (command === 'check') {
    process.exitCode = runCheck(rest, process.stdout, process.stderr);
    return;
  }
  if (command === 'help') return help(rest[0]);
  if (command !== 'serve') throw new SettingsError(`unknown command '${command}' (serve, check, simulate, help)`);
  if (rest.includes('--help') || rest.includes('-h')) return help(undefined);
  await serve(rest);
}

// `sluice help [check | simulate | settings | serve]`.
function help(topic: string | undefined): void {
  if (topic === 'check' || topic === 'simulate') {
    const run = topic === 'check' ? runCheck : runSimulate;
    process.exitCode = run(['--help'], process.stdout, process.stderr);
    return;
  }
  if (topic === 'settings') return void process.stdout.write(settingsHelp());
  if (topic !== undefined && topic !== 'serve') throw new SettingsError(`no help on '${topic}' (serve, check, simulate, settings)`);
  process.stdout.write(usage());
}

main().catch((err: unknown) => {
  const message = err instanceof SettingsError ? err.message : String((err as Error)?.stack ?? err);
  process.stderr.write(`sluice: ${message}\n`);
  process.exit(2);
});
