import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { envoyBinary, type HostPort, type RunningEnvoy, startEnvoy } from '../test/support/envoy';
import { REPO, type ServerProcess, spawnShipped } from '../test/support/process';
import { type RedisNode, startRedis } from '../test/support/redis';
import { awayFromWindowEdge } from '../test/support/time';
import { type Answer, EnvoyClient, startCpuBurner } from './envoy-load';
import {
  BURNER_BURST,
  BURST,
  type EnvoyScale,
  type Figures,
  FREE_LIMIT,
  type FilterCounts,
  type Measured,
  PER_TENANT,
  sumMeasured,
} from './envoy-in-front-table';
import { processCpuSeconds } from './cpu';
import { watchSteal } from './host-steal';
import { metricSum, waitReady } from './fleet';
import { goAvailable, type Running, startUpstream, UPSTREAM_MISSING, upstreamBinary } from './peer';
import { childrenOf } from './process-memory';

// "Envoy in front" (`BENCH_SECTIONS=envoy-in-front npm run bench`, issue 36): the shipped
// envoy/envoy.yaml, its addresses and nothing else rewritten (test/support/envoy.ts), in front of
// two sluice replicas on one Redis, then the same Envoy in front of two envoyproxy/ratelimit
// replicas on a Redis of their own, the same rules for both. What is reported is what Envoy itself
// counted (cluster.upstream.ratelimit.ok / over_limit / error from its admin /stats) and what its
// clients got. A missed decision is an `error`: the call did not answer within Envoy's 20 ms, and
// `failure_mode_deny: false` let the request through unlimited.

const ENVOY_YAML = path.join(REPO, 'envoy/envoy.yaml');
const REPLICAS = 2;
const MINUTE_MS = 60_000;

// examples/config/edge.yaml's rules for what these requests send ([tenant] on `/`), in upstream's
// format only (upstream rejects sluice's extensions): one file for both services.
export const BENCH_RULES = [
  'domain: edge',
  'descriptors:',
  '  - key: tenant',
  '    value: internal',
  '    rate_limit: { unlimited: true }',
  '  - key: tenant',
  `    rate_limit: { name: tenant_free, unit: minute, requests_per_unit: ${FREE_LIMIT} }`,
  '',
].join('\n');

interface Backend {
  endpoints: HostPort[];
  // Decisions made without Redis so far, where the service counts them (sluice).
  degraded(): Promise<number | undefined>;
  // Whether an answer shows the service has noticed Redis is gone.
  outageNoticed(answer: Answer, envoyErrors: number): boolean;
  // CPU seconds its processes (sluice: primaries and their workers) used so far.
  cpuSeconds(): number;
  stop(): Promise<void>;
}

function treeCpuSeconds(pids: readonly number[]): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      for (const p of [pid, ...childrenOf(pid)]) sum += processCpuSeconds(p);
    } catch {
      // exited meanwhile
    }
  }
  return sum;
}

async function startSluice(root: string, redis: RedisNode, scale: EnvoyScale): Promise<Backend> {
  const args = ['--config', path.join(root, 'bench', 'config'), '--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`, '--workers', scale.workers];
  if (scale.warmUpCalls !== undefined) args.push('--warm-up-calls', String(scale.warmUpCalls));
  // One after the other: started together, on a busy 2-core machine, each of their worker
  // processes could miss spawnShipped's time to say it listens.
  const replicas: ServerProcess[] = [];
  try {
    for (let i = 0; i < REPLICAS; i++) replicas.push(await spawnShipped(args));
    await Promise.all(replicas.map((r) => waitReady(r)));
  } catch (err) {
    await Promise.all(replicas.map((r) => r.stop()));
    throw err;
  }
  return {
    endpoints: replicas.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    async degraded() {
      const pages = await Promise.all(replicas.map(async (r) => (await fetch(`http://127.0.0.1:${r.httpPort}/metrics`)).text()));
      return pages.reduce((n, page) => n + metricSum(page, 'sluice_degraded_decisions_total'), 0);
    },
    // sluice marks what its fallback decided; before that it answers UNAVAILABLE for a moment.
    outageNoticed: (answer) => answer.headers['x-ratelimit-degraded'] === 'true',
    cpuSeconds: () => treeCpuSeconds(replicas.map((r) => r.child.pid!)),
    stop: async () => void (await Promise.all(replicas.map((r) => r.stop()))),
  };
}

// As many Go threads as sluice has workers (auto: one per core).
const goMaxProcs = (workers: string) => (workers === 'auto' ? String(os.cpus().length) : workers);

async function startUpstreamPair(binary: string, root: string, redis: RedisNode, workers: string): Promise<Backend> {
  const env = { GOMAXPROCS: goMaxProcs(workers) };
  const replicas: Running[] = [];
  for (let i = 0; i < REPLICAS; i++) replicas.push(await startUpstream('upstream', binary, root, redis.port, false, env));
  return {
    endpoints: replicas.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    degraded: async () => undefined,
    // Upstream has no fallback: every decision fails, and Envoy counts an error.
    outageNoticed: (_answer, envoyErrors) => envoyErrors > 0,
    cpuSeconds: () => treeCpuSeconds(replicas.map((r) => r.pid)),
    stop: async () => void (await Promise.all(replicas.map(stopOrKill))),
  };
}

// Upstream does not exit on SIGTERM while its Redis is gone (seen with the pinned version): after
// a grace period it is killed.
async function stopOrKill(r: Running): Promise<void> {
  const timer = setTimeout(() => {
    try {
      process.kill(r.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }, 5_000);
  await r.stop();
  clearTimeout(timer);
}

async function filterCounts(envoy: RunningEnvoy): Promise<FilterCounts> {
  const s = await envoy.stats('^cluster\\.upstream\\.ratelimit\\.');
  const at = (n: string) => s[`cluster.upstream.ratelimit.${n}`] ?? 0;
  return { ok: at('ok'), over_limit: at('over_limit'), error: at('error'), failure_mode_allowed: at('failure_mode_allowed') };
}

interface Stage {
  envoy: RunningEnvoy;
  client: EnvoyClient;
  backend: Backend;
}

// What Envoy counted and its clients got while `work` ran (nothing else goes through meanwhile).
async function counted(s: Stage, work: () => Promise<Answer[]>): Promise<Measured> {
  const [c0, d0, cpu0] = [await filterCounts(s.envoy), await s.backend.degraded(), s.backend.cpuSeconds()];
  const watch = await watchSteal(async () => (await filterCounts(s.envoy)).error);
  const answers = await work();
  const steal = await watch.stop();
  const cpu1 = s.backend.cpuSeconds();
  const [c1, d1] = [await filterCounts(s.envoy), await s.backend.degraded()];
  const envoy = Object.fromEntries(Object.entries(c1).map(([k, v]) => [k, v - c0[k as keyof FilterCounts]])) as unknown as FilterCounts;
  const with_ = (pred: (a: Answer) => boolean) => answers.filter(pred).length;
  return {
    n: answers.length,
    s200: with_((a) => a.status === 200),
    s429: with_((a) => a.status === 429),
    s5xx: with_((a) => a.status >= 500),
    noAnswer: with_((a) => a.status === 0),
    withHeaders: with_((a) => a.headers['x-ratelimit-limit'] !== undefined),
    envoy,
    degraded: d0 === undefined || d1 === undefined ? undefined : d1 - d0,
    cpuMs: (cpu1 - cpu0) * 1000,
    ...(steal === undefined ? {} : { stealMs: steal.stealMs, errorsInSteal: Math.min(steal.errorsInSteal, envoy.error) }),
  };
}

// Progress on stderr: a full run takes minutes.
const step = (what: string) => process.stderr.write(`  [envoy-in-front ${new Date().toISOString().slice(11, 19)}] ${what}\n`);

const tenants = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

// Envoy restarted `starts` times (new workers, new connections to each replica); right after each
// start, a burst of requests for new tenants: how many of those first decisions Envoy missed.
async function firstDecisions(s: Stage, clusters: Record<string, HostPort[]>, starts: number, run: string): Promise<Measured> {
  const parts: Measured[] = [];
  for (let i = 0; i < starts; i++) {
    const envoy = await startEnvoy(ENVOY_YAML, clusters);
    const client = new EnvoyClient(envoy.port);
    try {
      parts.push(await counted({ ...s, envoy, client }, () => client.burst(tenants(`first-${run}-${i}`, BURST))));
    } finally {
      client.close();
      await envoy.stop();
    }
  }
  return sumMeasured(parts);
}

// Redis killed: once the service has noticed, a burst for a tenant nobody has seen (limit 10).
async function outage(s: Stage, redis: RedisNode, run: string): Promise<Measured> {
  step('Redis killed');
  await redis.stop('SIGKILL');
  const deadline = Date.now() + 20_000;
  for (let i = 0, inRow = 0; inRow < 4; i++) {
    if (Date.now() > deadline) throw new Error('Redis killed: the service did not show it noticed within 20 s');
    const before = (await filterCounts(s.envoy)).error;
    const answer = await s.client.get(`probe-${run}-${i}`);
    inRow = s.backend.outageNoticed(answer, (await filterCounts(s.envoy)).error - before) ? inRow + 1 : 0;
    await new Promise((r) => setTimeout(r, 25));
  }
  return counted(s, () => s.client.burst(Array(BURST).fill(`outage-${run}`)));
}

async function withBurner(s: Stage, scale: EnvoyScale, run: string): Promise<Pick<Figures, 'burnerBurst' | 'burnerSteady'>> {
  const burner = startCpuBurner();
  try {
    const burnerBurst = await counted(s, () => s.client.burst(tenants(`burner-${run}`, BURNER_BURST)));
    const burnerSteady = await counted(s, () => s.client.paced(scale.burnerSteady, scale.rate, (i) => `burner-steady-${run}-${Math.floor(i / PER_TENANT)}`));
    return { burnerBurst, burnerSteady };
  } finally {
    await burner.stop();
  }
}

type Start = (redis: RedisNode) => Promise<Backend>;

// Redis, the service's replicas and an Envoy in front, for `work`; all stopped after it.
async function onStage<T>(start: Start, appPort: number, work: (s: Stage, redis: RedisNode, clusters: Record<string, HostPort[]>) => Promise<T>): Promise<T> {
  const redis = await startRedis();
  let stage: Stage | undefined;
  try {
    const backend = await start(redis);
    const clusters = { upstream: [{ host: '127.0.0.1', port: appPort }], sluice: backend.endpoints };
    try {
      const envoy = await startEnvoy(ENVOY_YAML, clusters);
      stage = { envoy, backend, client: new EnvoyClient(envoy.port) };
    } catch (err) {
      await backend.stop();
      throw err;
    }
    return await work(stage, redis, clusters);
  } finally {
    stage?.client.close();
    await stage?.envoy.stop();
    await stage?.backend.stop();
    await redis.stop();
  }
}

// The first rows on a fresh stage: Envoy connected to every replica, a second of traffic, then the
// steady row on replicas that have just started, whose code V8 has not optimised yet (sluice's CPU
// per request is 2-3 times its warm figure for the first 10-20 s).
async function coldRow(s: Stage, scale: EnvoyScale, run: string): Promise<Measured> {
  // Both Envoy workers connected to both replicas before the counts; new connections are row 4's.
  await s.client.burst(Array(BURST).fill('internal'));
  await s.client.burst(Array(BURST).fill(`warm-${run}`));
  await s.client.paced(scale.rate, scale.rate, () => 'internal');
  step(`steady right after start: ${scale.steady} requests at ${scale.rate}/s`);
  return counted(s, () => s.client.paced(scale.steady, scale.rate, (i) => `cold-${run}-${Math.floor(i / PER_TENANT)}`));
}

// Every row for one service, on its own Redis and Envoys; the cold row also on coldStarts - 1 more
// fresh stages.
async function measureService(name: string, start: Start, appPort: number, scale: EnvoyScale): Promise<Figures> {
  const colds: Measured[] = [];
  for (let i = 1; i < scale.coldStarts; i++) {
    step(`${name}: start ${i + 1} of ${scale.coldStarts} for the cold row`);
    colds.push(await onStage(start, appPort, (s) => coldRow(s, scale, `${Date.now().toString(36)}-${i}`)));
  }
  step(`${name}: starting Redis, 2 replicas, Envoy`);
  const figures = await onStage(start, appPort, (s, redis, clusters) => measureAll(s, redis, clusters, scale));
  colds.unshift(figures.coldSteady);
  return { ...figures, coldSteady: sumMeasured(colds), coldErrors: colds.map((m) => m.envoy.error) };
}

async function measureAll(s: Stage, redis: RedisNode, clusters: Record<string, HostPort[]>, scale: EnvoyScale): Promise<Figures> {
  const run = Date.now().toString(36);
  const coldSteady = await coldRow(s, scale, run);
  // Warm-up traffic, so the other rows measure warm services.
  step(`warm-up: ${scale.warmS} s at ${scale.rate}/s`);
  await s.client.paced(Math.round(scale.warmS * scale.rate), scale.rate, (i) => `warm-up-${run}-${Math.floor(i / PER_TENANT)}`);
  await awayFromWindowEdge(MINUTE_MS, 5_000);
  step('burst');
  const burst = await counted(s, () => s.client.burst(Array(BURST).fill(`free-${run}`)));
  step(`steady: ${scale.steady} requests at ${scale.rate}/s`);
  const steady = await counted(s, () => s.client.paced(scale.steady, scale.rate, (i) => `steady-${run}-${Math.floor(i / PER_TENANT)}`));
  step(`first decisions: ${scale.starts} Envoy starts`);
  const first = await firstDecisions(s, clusters, scale.starts, run);
  if (scale.burner) step('beside a CPU burner');
  const burner = scale.burner ? await withBurner(s, scale, run) : {};
  return { burst, coldSteady, steady, firstDecisions: first, ...burner, outage: await outage(s, redis, run) };
}

export interface EnvoyInFront {
  sluice: Figures;
  // Why upstream's column is empty, when it is.
  upstream: Figures | string;
  commands: string[];
}

export async function envoyInFrontBench(scale: EnvoyScale): Promise<EnvoyInFront | string> {
  let envoyBin: string;
  try {
    envoyBin = envoyBinary();
  } catch (err) {
    return `skipped: ${(err as Error).message}`;
  }
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-envoy-bench-'));
  fs.mkdirSync(path.join(root, 'bench', 'config'), { recursive: true });
  fs.writeFileSync(path.join(root, 'bench', 'config', 'edge.yaml'), BENCH_RULES);
  // The application behind Envoy. Keep-alive off: Envoy reusing a connection node is closing
  // would be a 503 that is nobody's decision.
  const app = http.createServer((_req, res) => res.end('hello'));
  app.keepAliveTimeout = 0;
  await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
  const appPort = (app.address() as AddressInfo).port;
  try {
    const sluice = await measureService('sluice', (redis) => startSluice(root, redis, scale), appPort, scale);
    let upstream: Figures | string = UPSTREAM_MISSING;
    let install = '';
    if (goAvailable()) {
      try {
        const bin = upstreamBinary();
        install = bin.install;
        upstream = await measureService('upstream', (redis) => startUpstreamPair(bin.binary, root, redis, scale.workers), appPort, scale);
      } catch (err) {
        upstream = `failed: ${(err as Error).message.split('\n')[0]}`;
      }
    }
    const commands = [
      `${envoyBin} -c <envoy/envoy.yaml, addresses rewritten> --disable-hot-restart --concurrency 2 (test/support/envoy.ts startEnvoy)`,
      `sluice x${REPLICAS}: node dist/src/main.js serve --config <dir>/bench/config --store redis --redis-url 127.0.0.1:<port> --workers ${scale.workers}${scale.warmUpCalls === undefined ? '' : ` --warm-up-calls ${scale.warmUpCalls}`}`,
      `upstream x${REPLICAS}: GOMAXPROCS=${goMaxProcs(scale.workers)} BACKEND_TYPE=redis REDIS_URL=127.0.0.1:<port> RUNTIME_ROOT=<dir> RUNTIME_SUBDIRECTORY=bench service_cmd${install ? ` (${install})` : ''}`,
      'rules: BENCH_RULES in bench/envoy-in-front.ts (the same file for both); clients: HTTP/1.1 GET / with x-tenant-id (bench/envoy-load.ts)',
    ];
    return { sluice, upstream, commands };
  } finally {
    app.close();
    fs.rmSync(root, { recursive: true, force: true });
  }
}
