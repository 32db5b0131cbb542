import cluster, { type Worker } from 'node:cluster';
import fs from 'node:fs';
import os from 'node:os';
import { AggregatorRegistry, Counter, Gauge } from 'prom-client';
import { configLimits, configSources } from '../app';
import { ConfigHolder, type ReloadTrigger } from '../config/holder';
import type { Logger } from '../logger';
import type { Settings } from '../settings';
import { type MetricsJson, rejectionToWire, type ToPrimary, type ToWorker } from './cluster-protocol';
import { stopOnSignals } from './cluster-signals';
import { Metrics, type SetScrape } from '../telemetry/metrics';
import { upstreamTallies } from '../telemetry/prometheus-listener';
import { sumTallies, type UpstreamTallies } from '../telemetry/upstream-tallies';

type Collected = Extract<ToPrimary, { type: 'collected' }>;

// WORKERS > 1: one primary and N workers (node:cluster). The primary serves nothing: it loads
// config (files with their watch, SIGHUP, or xDS) and hands the compiled config to every worker,
// restarts a worker that dies, and speaks for the set: a scrape of /metrics on any worker returns
// every worker's series summed once, and a worker is ready only when all are. The workers share
// the listening ports, each accepting new connections itself (the kernel gives each to one).

export interface WorkerPlan {
  count: number;
  // For the start-up log, e.g. "WORKERS=auto: 2 cores available, container CPU limit 1.5".
  why: string;
}

// The CPU limit of this container in cores (cgroup v2 cpu.max, else v1 cfs quota), when there is
// one. `root`: where the cgroup files are (SLUICE_CGROUP_ROOT, for tests).
export function cgroupCpuLimit(read: (file: string) => string = (f) => fs.readFileSync(f, 'utf8'), root = '/sys/fs/cgroup'): number | undefined {
  const ratio = (quota: number, period: number) => (quota > 0 && period > 0 ? quota / period : undefined);
  try {
    const [quota, period] = read(`${root}/cpu.max`).trim().split(/\s+/);
    return quota === 'max' ? undefined : ratio(Number(quota), Number(period));
  } catch {
    // not cgroup v2
  }
  try {
    return ratio(Number(read(`${root}/cpu/cpu.cfs_quota_us`)), Number(read(`${root}/cpu/cpu.cfs_period_us`)));
  } catch {
    return undefined;
  }
}

export function planWorkers(
  settings: Settings,
  probe = { cores: os.availableParallelism(), cpuLimit: cgroupCpuLimit(undefined, process.env.SLUICE_CGROUP_ROOT) },
): WorkerPlan {
  if (typeof settings.workers === 'number') return { count: settings.workers, why: `WORKERS=${settings.workers}` };
  // A second worker would keep a second set of counters (settings.ts refuses a number > 1).
  if (settings.store === 'memory') return { count: 1, why: 'WORKERS=auto with STORE=memory: one process holds the counters' };
  const { cores, cpuLimit } = probe;
  const count = Math.max(1, Math.min(cores, Math.ceil(cpuLimit ?? cores)));
  const limit = cpuLimit === undefined ? '' : `, container CPU limit ${Number(cpuLimit.toFixed(2))}`;
  return { count, why: `WORKERS=auto: ${cores} core${cores === 1 ? '' : 's'} this process may use${limit}` };
}

export function logWorkers(logger: Logger, plan: WorkerPlan): void {
  logger.info({ event: 'workers', workers: plan.count, why: plan.why }, `${plan.count} serving process${plan.count === 1 ? '' : 'es'} (${plan.why})`);
}

interface Slot {
  id: number;
  worker?: Worker;
  state: 'starting' | 'SERVING' | 'NOT_SERVING' | 'exited';
  reasons: string[];
  exit?: string;
  startedAt: number;
  quickExits: number;
}

// How long a worker must have run for its exit not to count as a crash loop; restart delays.
const STABLE_MS = 10_000;
const RESTART_BASE_MS = 100;
const RESTART_MAX_MS = 5000;
// A worker that does not answer a metrics collection within this is left out of the scrape.
const COLLECT_TIMEOUT_MS = 2000;
// Beyond SHUTDOWN_DELAY + DRAIN_TIMEOUT, how long the primary waits for workers to exit.
const EXIT_GRACE_MS = 5000;

export async function runPrimary(settings: Settings, plan: WorkerPlan, logger: Logger): Promise<void> {
  logWorkers(logger, plan);
  // Each worker accepts from the shared listening socket itself, as many connections as are
  // waiting. Node's default (round-robin) has the primary accept every connection and hand it to a
  // worker over IPC, one at a time per worker until it acknowledges: 4,000 Envoys connecting
  // within a second waited up to 0.8 s behind that queue (bench/connections.ts).
  cluster.schedulingPolicy = cluster.SCHED_NONE;
  cluster.setupPrimary({ serialization: 'advanced' });
  const metrics = new Metrics({ defaultMetrics: true, extraTags: settings.extraTags });
  const set = new WorkerSet(plan.count, logger, metrics);
  const config = new ConfigHolder(settings.configType === 'grpc_xds_sotw' ? [] : settings.configPaths, {
    mergeDomains: settings.mergeDomainConfig,
    limits: configLimits(settings),
    logger,
    source: settings.configType === 'grpc_xds_sotw' ? `xds ${settings.xdsServerUrl}` : undefined,
    onLoad: (ok, trigger) => {
      metrics.configLoads.inc({ result: ok ? 'success' : 'error' });
      if (ok) metrics.configLoadTimestamp.setToCurrentTime();
      set.broadcast(configMessage(config, trigger));
    },
  });
  const sources = configSources(settings, config, logger);
  set.configNow = () => configMessage(config, 'startup');
  if (sources.xds === undefined) {
    config.reload('startup');
    sources.watcher?.start();
  } else {
    sources.xds.start();
  }
  set.start();
  stopOnSignals({
    logger,
    stop: async () => {
      sources.watcher?.stop();
      sources.xds?.stop();
      await set.stop(settings.shutdownDelayMs + settings.drainTimeoutMs + EXIT_GRACE_MS);
      logger.info({ event: 'stopped' }, 'sluice stopped');
    },
    hup: () =>
      sources.xds === undefined
        ? config.reload('signal')
        : logger.info({ event: 'config_reload_skipped' }, 'config comes from xDS: nothing to reload (the control plane pushes changes)'),
  });
  let failed = false;
  set.onFatal = (message) => {
    if (failed) return;
    failed = true;
    process.stderr.write(`sluice: ${message}\n`);
    set.stop(settings.drainTimeoutMs).then(() => process.exit(2));
  };
}

// The config the workers serve (undefined while none has loaded) and the latest load's verdict.
function configMessage(config: ConfigHolder, trigger: ReloadTrigger): ToWorker {
  return { type: 'config', config: config.config, rejection: rejectionToWire(config.rejection), trigger };
}

class WorkerSet {
  private readonly slots: Slot[];
  private stopping = false;
  private nextCollect = 0;
  private readonly collecting = new Map<string, (m: Collected | undefined) => void>();
  private readonly restarts: Counter;
  private readonly perWorker: Gauge<'worker'>;
  configNow: () => ToWorker = () => ({ type: 'config', trigger: 'startup' });
  onFatal: (message: string) => void = () => undefined;

  constructor(
    count: number,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
  ) {
    this.slots = Array.from({ length: count }, (_, i) => ({ id: i + 1, state: 'starting', reasons: [], startedAt: 0, quickExits: 0 }));
    const registers = [metrics.registry];
    this.restarts = new Counter({ name: 'sluice_worker_restarts_total', help: 'Workers that exited and were started again (WORKERS > 1)', registers });
    this.perWorker = new Gauge({
      name: 'sluice_worker_requests',
      help: 'ShouldRateLimit calls answered by each worker since it started (WORKERS > 1; their sum is sluice_requests_total)',
      labelNames: ['worker'],
      registers,
    });
    const slots = this.slots;
    // Registered with its collect callback; nothing else touches it.
    new Gauge({
      name: 'sluice_workers',
      help: 'Workers of this process by state: expected (WORKERS), serving (ready on their own)',
      labelNames: ['state'],
      registers,
      collect() {
        this.set({ state: 'expected' }, slots.length);
        this.set({ state: 'serving' }, slots.filter((s) => s.state === 'SERVING').length);
      },
    });
  }

  start(): void {
    for (const slot of this.slots) this.fork(slot);
  }

  broadcast(m: ToWorker): void {
    for (const slot of this.slots) if (slot.worker?.isConnected()) slot.worker.send(m);
  }

  // Every worker asked to drain (SIGTERM: each runs the single-process stop); waits for all exits,
  // at most `timeoutMs`, then kills what is left.
  async stop(timeoutMs: number): Promise<void> {
    this.stopping = true;
    const live = this.slots.map((s) => s.worker).filter((w): w is Worker => w !== undefined && !w.isDead());
    const exits = live.map((w) => new Promise<void>((resolve) => w.once('exit', () => resolve())));
    for (const w of live) w.process.kill('SIGTERM');
    const timer = setTimeout(() => live.forEach((w) => w.isDead() || w.process.kill('SIGKILL')), timeoutMs);
    await Promise.all(exits);
    clearTimeout(timer);
  }

  private fork(slot: Slot): void {
    const worker = cluster.fork({ SLUICE_WORKER: String(slot.id) });
    Object.assign(slot, { worker, state: 'starting', reasons: [], startedAt: Date.now() });
    this.logger.info({ event: 'worker_started', worker: slot.id, pid: worker.process.pid }, `worker ${slot.id} started (pid ${worker.process.pid})`);
    worker.on('message', (m: ToPrimary) => this.onMessage(slot, worker, m));
    worker.on('exit', (code, signal) => this.onExit(slot, worker, code, signal));
    this.peersChanged();
  }

  private onMessage(slot: Slot, worker: Worker, m: ToPrimary): void {
    switch (m.type) {
      case 'hello':
        return void worker.send(this.configNow());
      case 'health':
        Object.assign(slot, { state: m.status, reasons: m.reasons });
        return this.peersChanged();
      case 'start-failed':
        return this.onFatal(m.setting === true ? m.message : `worker ${slot.id} could not start: ${m.message}`);
      case 'scrape':
        return void this.scrape(m.upstream).then((set) => worker.isConnected() && worker.send({ type: 'scraped', id: m.id, ...set } satisfies ToWorker));
      case 'collected':
        this.collecting.get(`${slot.id}:${m.id}`)?.(m);
        return;
    }
  }

  private onExit(slot: Slot, worker: Worker, code: number | null, signal: string | null): void {
    if (slot.worker !== worker || this.stopping) return;
    const how = signal !== null ? `signal ${signal}` : `code ${code}`;
    const quick = Date.now() - slot.startedAt < STABLE_MS;
    slot.quickExits = quick ? slot.quickExits + 1 : 0;
    const delayMs = Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** Math.max(0, slot.quickExits - 1));
    Object.assign(slot, { worker: undefined, state: 'exited', exit: how });
    this.logger.warn(
      { event: 'worker_exit', worker: slot.id, pid: worker.process.pid, code, signal, restartInMs: delayMs },
      `worker ${slot.id} exited (${how}); restarting in ${delayMs} ms`,
    );
    this.peersChanged();
    setTimeout(() => {
      if (this.stopping) return;
      this.restarts.inc();
      this.fork(slot);
    }, delayMs);
  }

  // Each worker is told why the others are not serving.
  private peersChanged(): void {
    for (const slot of this.slots) {
      if (!slot.worker?.isConnected()) continue;
      const reasons = this.slots.filter((o) => o !== slot && o.state !== 'SERVING').map(describe);
      slot.worker.send({ type: 'peers', reasons } satisfies ToWorker);
    }
  }

  // The whole set's series: every live worker's and the primary's own (config loads, restarts),
  // summed by prom-client's aggregator (gauges that every worker reports alike say how to combine).
  // With `upstream` (USE_PROMETHEUS) also the metrics listener's tallies from the same collection:
  // every worker's (calls, hits, response times) and the primary's own (config loads).
  private async scrape(upstream: boolean): Promise<SetScrape> {
    const live = this.slots.filter((s) => s.worker?.isConnected());
    const collected = await Promise.all(live.map((s) => this.collect(s, upstream)));
    const series = collected.map((c) => c?.metrics);
    this.perWorker.reset();
    live.forEach((s, i) => {
      const requests = series[i]?.find((m) => m.name === 'sluice_requests_total');
      if (requests !== undefined)
        this.perWorker.set(
          { worker: String(s.id) },
          requests.values.reduce((sum, v) => sum + v.value, 0),
        );
    });
    const own = await this.metrics.registry.getMetricsAsJSON();
    const text = await AggregatorRegistry.aggregate([own, ...series.filter((c): c is MetricsJson => c !== undefined)]).metrics();
    if (!upstream) return { text };
    const tallies = collected.map((c) => c?.upstream).filter((t): t is UpstreamTallies => t !== undefined);
    return { text, tallies: sumTallies([await upstreamTallies(this.metrics), ...tallies]) };
  }

  private collect(slot: Slot, upstream: boolean): Promise<Collected | undefined> {
    const id = this.nextCollect++;
    const key = `${slot.id}:${id}`;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(undefined), COLLECT_TIMEOUT_MS);
      const done = (m: Collected | undefined) => {
        clearTimeout(timer);
        this.collecting.delete(key);
        resolve(m);
      };
      this.collecting.set(key, done);
      slot.worker!.send({ type: 'collect', id, upstream } satisfies ToWorker);
    });
  }
}

function describe(slot: Slot): string {
  if (slot.state === 'starting') return `worker ${slot.id} starting`;
  if (slot.state === 'exited') return `worker ${slot.id} exited (${slot.exit}), restarting`;
  return `worker ${slot.id}: ${slot.reasons.join(', ')}`;
}
