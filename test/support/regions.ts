import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { type Settings, SETTINGS } from '../../src/settings';
import { closing, type Running, startApp } from './app';
import { spawnServer } from './process';
import { type DelayProxy, startDelayProxy } from './delay-proxy';
import { type RedisNode, startRedis } from './redis';

// A multi-region deployment in one process, on loopback, for tests and benchmarks.
//
//   startRegions({ regions: [{ name: 'a', replicas: 2 }, { name: 'b', replicas: 2 }], configYaml, delayMs: 40 })
//     → Deployment { regions: [{ name, redis, proxy?, apps }], global?, stop() }
//   drive({ deployment, durationMs, ratePerSecond: (region, t) => n, request: (region, i) => req })
//     → DriveResult { perSecond, latency, totals, regionTotals, samples }
//   admittedInWindows(result, windowSeconds), percentile(values, p), redisInfoCalls(node)
//
// global: true (default): every region has its own redis-server and its own DelayProxy to one
//   global redis-server, so one region's WAN link can be cut alone; apps get
//   { region, globalRedisUrl: that proxy }. Until sluice reads those settings, each region simply
//   limits on its own Redis.
// global: false: the single-region baseline, every replica on one shared redis-server, no region
//   settings. With sharedOverWan, each region reaches that shared Redis through its own DelayProxy
//   (one central Redis across the WAN: the design multi-region replaces).

export type Overrides = Partial<Settings>;

// One replica, in this process (startApp) or as its own process (the CLI): what a caller needs.
export type Replica = Pick<Running, 'client' | 'grpcPort' | 'http' | 'stop'>;

export interface RegionSpec {
  name: string;
  replicas: number;
}

export interface StartRegionsOptions {
  regions: RegionSpec[];
  configYaml: string;
  // One way, per region link; a global-store round trip costs twice this.
  delayMs: number;
  settings?: Overrides;
  // Per region name, applied over `settings`.
  regionSettings?: Record<string, Overrides>;
  global?: boolean;
  sharedOverWan?: boolean;
  readyTimeoutMs?: number;
  // Each replica its own process (`sluice serve`), as deployed: no replica's work delays another's
  // answers (a benchmark's latency). Default: all in this process (faster to start, for tests).
  processes?: boolean;
}

export interface Region {
  name: string;
  redis: RedisNode;
  proxy?: DelayProxy;
  apps: Replica[];
}

export interface Deployment {
  regions: Region[];
  global?: RedisNode;
  degradedHeader: string;
  region(name: string): Region;
  stop(): Promise<void>;
}

export async function startRegions(opts: StartRegionsOptions): Promise<Deployment> {
  const useGlobal = opts.global ?? true;
  const cleanup: (() => Promise<unknown>)[] = [];
  const stop = async () => {
    for (const step of cleanup.reverse()) await step().catch(() => undefined);
  };
  try {
    const configDir = writeConfig(opts.configYaml);
    cleanup.push(async () => fs.rmSync(configDir, { recursive: true, force: true }));
    const central = await startRedis();
    cleanup.push(() => central.stop());
    const regions: Region[] = [];
    for (const spec of opts.regions) {
      const region = await startRegion({ spec, opts, central, useGlobal, configDir, cleanup });
      regions.push(region);
    }
    await Promise.all(regions.flatMap((r) => r.apps.map((app) => waitReady(app, opts.readyTimeoutMs ?? 20_000))));
    return {
      regions,
      global: useGlobal ? central : undefined,
      degradedHeader: String(opts.settings?.degradedHeader ?? 'x-ratelimit-degraded'),
      region: (name) => regions.find((r) => r.name === name) ?? fail(`no region ${name}`),
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

function writeConfig(yaml: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-regions-'));
  fs.writeFileSync(path.join(dir, 'config.yaml'), yaml.endsWith('\n') ? yaml : `${yaml}\n`);
  return dir;
}

interface RegionStart {
  spec: RegionSpec;
  opts: StartRegionsOptions;
  // The global redis-server, or with global: false the one every replica shares.
  central: RedisNode;
  useGlobal: boolean;
  configDir: string;
  cleanup: (() => Promise<unknown>)[];
}

async function startRegion(r: RegionStart): Promise<Region> {
  const { spec, opts, central, useGlobal, cleanup } = r;
  const wan = useGlobal || opts.sharedOverWan;
  const proxy = wan ? await startDelayProxy({ targetPort: central.port, delayMs: opts.delayMs }) : undefined;
  if (proxy) cleanup.push(() => proxy.close());
  const local = useGlobal ? await startRedis() : undefined;
  if (local) cleanup.push(() => local.stop());
  const redisPort = local?.port ?? proxy?.port ?? central.port;
  const overrides: Overrides = {
    store: 'redis',
    redisUrl: `127.0.0.1:${redisPort}`,
    configPaths: [r.configDir],
    ...(useGlobal ? { region: spec.name, globalRedisUrl: `127.0.0.1:${proxy!.port}` } : {}),
    ...opts.settings,
    ...opts.regionSettings?.[spec.name],
  };
  const apps: Replica[] = [];
  for (let i = 0; i < spec.replicas; i++) {
    const app = opts.processes ? await spawnReplica(overrides) : await startApp(overrides);
    cleanup.push(() => app.stop());
    apps.push(app);
  }
  return { name: spec.name, redis: local ?? central, proxy, apps };
}

// The same settings as flags of the real CLI, in a process of its own.
async function spawnReplica(overrides: Overrides): Promise<Replica> {
  const args: string[] = [];
  for (const [key, value] of Object.entries(overrides)) {
    const spec = SETTINGS.find((x) => x.key === key);
    if (spec === undefined) throw new Error(`spawnReplica: no setting ${key}`);
    args.push(`--${spec.flag}=${Array.isArray(value) ? value.join(',') : String(value)}`);
  }
  const server = await spawnServer(args);
  const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
  return {
    client,
    grpcPort: server.grpcPort,
    http: (path, init) => fetch(`http://127.0.0.1:${server.httpPort}${path}`, closing(init)),
    async stop() {
      client.close();
      await server.stop();
    },
  };
}

// Until /healthcheck says 200 (config served, store answered a real decision); throws saying why not.
export async function waitReady(app: Replica, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    try {
      const res = await app.http('/healthcheck');
      last = `${res.status} ${(await res.text()).trim()}`;
      if (res.status === 200) return;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`replica on gRPC port ${app.grpcPort} not ready after ${timeoutMs} ms: ${last}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}

function fail(message: string): never {
  throw new Error(message);
}

// Commands the node has processed since it started (INFO stats total_commands_processed), the
// commands scripts run inside counted too; the INFO behind this call counts on the next reading.
export async function redisInfoCalls(node: RedisNode): Promise<number> {
  const stats = await node.cli('INFO', 'stats');
  const line = stats.split(/\r?\n/).find((l) => l.startsWith('total_commands_processed:'));
  if (!line) throw new Error(`redis-server ${node.port}: no total_commands_processed in INFO stats`);
  return Number(line.slice('total_commands_processed:'.length));
}

export { admittedInWindows, drive, percentile } from './drive';
export { scriptCalls } from './redis';
export type { Counts, DriveOptions, DriveResult, LatencyStats, Sample, Totals, WindowAdmitted } from './drive';
