import { type App, createApp } from '../app';
import { createLogger } from '../logger';
import { SettingsError } from '../errors';
import type { Settings } from '../settings';
import { rejectionFromWire, type ToPrimary, type ToWorker } from './cluster-protocol';
import { stopOnSignals } from './cluster-signals';
import type { SetScrape } from '../telemetry/metrics';
import { upstreamTallies } from '../telemetry/prometheus-listener';

// One worker of WORKERS > 1: the whole app (gRPC, HTTP, store, metrics) on the ports the set
// shares, with its config handed over by the primary (server/workers.ts), which it also asks for
// the set's metrics and tells its own health.
export async function runWorker(settings: Settings): Promise<void> {
  const id = Number(process.env.SLUICE_WORKER ?? 0);
  const logger = createLogger(settings.logLevel, undefined, { format: settings.logFormat }).child({ worker: id });
  const send = (m: ToPrimary) => process.send?.(m);
  let app: App;
  try {
    app = createApp(settings, { logger, configFromPrimary: true });
  } catch (err) {
    // A bad setting (an invalid REDIS_URL) that every worker would hit: the primary says it once
    // and stops the set with exit code 2, instead of restarting workers that cannot start.
    send(startFailed(err));
    return;
  }
  const scrapes = new Map<number, (set: SetScrape) => void>();
  let nextScrape = 0;
  app.metrics.setSource = () =>
    new Promise((resolve) => {
      const scrapeId = nextScrape++;
      scrapes.set(scrapeId, resolve);
      send({ type: 'scrape', id: scrapeId, upstream: settings.prometheusEnabled });
    });
  const firstConfig = new Promise<void>((resolve) => {
    process.on('message', (m: ToWorker) => {
      if (m.type === 'config') {
        applyConfig(app, m);
        resolve();
      } else if (m.type === 'peers') app.health.setPeers(m.reasons);
      else if (m.type === 'collect') void collect(app, m.id, send, m.upstream);
      else if (m.type === 'scraped') {
        scrapes.get(m.id)?.({ text: m.text, tallies: m.tallies });
        scrapes.delete(m.id);
      }
    });
  });
  const reportHealth = () => send({ type: 'health', status: app.health.ownStatus, reasons: app.health.ownReasons() });
  app.health.on('own-change', reportHealth);
  // The primary reloads config; a SIGHUP sent to the whole process group is not for a worker.
  const { stop } = stopOnSignals({ logger, stop: () => app.stop(), hup: () => undefined });
  // Without its primary a worker is orphaned: it stops the same way.
  process.on('disconnect', () => stop('primary gone'));
  send({ type: 'hello' });
  await firstConfig;
  try {
    await app.start();
    reportHealth();
  } catch (err) {
    // A listener that cannot bind (a port in use: every worker shares it) is said once, by the
    // primary, which stops the set with exit code 2; this worker leaves quietly.
    if (err instanceof SettingsError) return void process.send?.(startFailed(err), undefined, {}, () => process.exit(2));
    send(startFailed(err));
    throw err;
  }
}

function startFailed(err: unknown): ToPrimary {
  return { type: 'start-failed', message: (err as Error)?.message ?? String(err), setting: err instanceof SettingsError };
}

function applyConfig(app: App, m: Extract<ToWorker, { type: 'config' }>): void {
  if (m.config !== undefined) app.config.adopt(m.config, m.trigger);
  // After adopt(), which clears it: the primary's latest verdict.
  app.health.setConfigRejected(rejectionFromWire(m.rejection));
}

async function collect(app: App, id: number, send: (m: ToPrimary) => void, upstream: boolean): Promise<void> {
  send({ type: 'collected', id, metrics: await app.metrics.registry.getMetricsAsJSON(), upstream: upstream ? await upstreamTallies(app.metrics) : undefined });
}
