import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import type { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { decideArgs, windowBase } from '../src/store/redis';
import type { LimitCheck } from '../src/store/store';
import { loadScripts } from '../src/store/redis/scripts';
import { type RedisNode, startRedis } from '../test/support/redis';
import { spawnShipped, type ServerProcess } from '../test/support/process';
import { processCpuSeconds, redisCpuSeconds } from './cpu';
import { FLEET_ALGORITHMS, fleetConfigDir, H2LOAD_MISSING, h2loadAvailable, metricSum, percentile, runH2load, runKeysLoad } from './fleet';
import { startEmpty } from './peer';

// The cost of a decision, in one run: the same requests, sent with a deadline (grpc-timeout 1S,
// as Envoy does), to an empty handler on sluice's own gRPC server (bench/empty-server.ts h2grpc,
// the server sluice runs by default), to sluice on the memory store and to sluice on the Redis
// store (automatic leases off, so every answer is a script call), each one process (WORKERS=1:
// the CPU per request is one process' CPU).
// Per row: decisions/s, p50/p99, the server's CPU per request (/proc), and for Redis rows Redis'
// own CPU per request (INFO cpu), next to a minimal INCRBY + PEXPIRE script measured on the same
// Redis in the same run. A Redis row with a degraded answer (one not decided by Redis) fails the run.

const execFileAsync = promisify(execFile);

export type Target = 'empty handler' | 'memory store' | 'Redis store';

export interface DecisionRow {
  target: Target;
  algorithm: string;
  descriptors: number;
  // 1 = the same counters every call (h2load); more = distinct requests in turn (keys-load.ts).
  keys: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  // reqPerSec / the empty handler's with the same requests and load generator.
  ratio: number;
  serverCpuUsPerReq: number;
  redisCpuUsPerReq?: number;
  generator: 'h2load' | 'keys-load';
}

export interface DecisionsBench {
  rows: DecisionRow[];
  // redis-benchmark -c 16 -P 16 of EVALSHA (INCRBY + PEXPIRE), Redis CPU per call.
  minimalScriptUs: number;
  // redis-benchmark -c 4 -P 32 of the decide script alone, 3 fixed-window limits a call, Redis CPU
  // per call: the same keys every call, and keys new to Redis.
  decideScriptUs: { hot: number; fresh: number };
  // The Redis store (fixed window, 1 descriptor) and the empty handler, paced at half the Redis
  // store's measured maximum rate.
  halfRate: Record<'redis' | 'empty', { reqPerSec: number; p50Ms: number; p99Ms: number }>;
  degraded: number;
  commands: string[];
}

interface Target_ {
  name: Target;
  port: number;
  pid: number;
  stop(): Promise<unknown>;
}

// The empty handler on sluice's own gRPC server (bench/empty-server.ts h2grpc), as the peer section starts it.
async function emptyHandler(): Promise<Target_> {
  const e = await startEmpty(false);
  return { name: 'empty handler', port: e.grpcPort, pid: e.pid, stop: e.stop };
}

function fromServer(name: Target, server: ServerProcess): Target_ {
  return { name, port: server.grpcPort, pid: server.child.pid!, stop: () => server.stop() };
}

function request(algorithm: string, descriptors: number): RateLimitRequest {
  return {
    domain: 'bench',
    descriptors: Array.from({ length: descriptors }, (_, i) => ({ entries: [{ key: algorithm, value: `tenant-${i}` }] })),
    hitsAddend: 0,
  };
}

interface Measured {
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerReq: number;
  redisCpuUsPerReq?: number;
}

async function measure(
  target: Target_,
  redis: RedisNode | undefined,
  requests: number,
  run: () => Promise<{ reqPerSec: number; p50Ms: number; p99Ms: number }>,
): Promise<Measured> {
  const cpu0 = processCpuSeconds(target.pid);
  const r0 = redis ? await redisCpuSeconds(redis) : 0;
  const r = await run();
  const cpu1 = processCpuSeconds(target.pid);
  const r1 = redis ? await redisCpuSeconds(redis) : 0;
  return { ...r, serverCpuUsPerReq: ((cpu1 - cpu0) * 1e6) / requests, redisCpuUsPerReq: redis ? ((r1 - r0) * 1e6) / requests : undefined };
}

async function h2loadRow(target: Target_, redis: RedisNode | undefined, algorithm: string, descriptors: number, requests: number): Promise<Measured> {
  const req = request(algorithm, descriptors);
  await runH2load({ port: target.port, request: req, requests: Math.min(20_000, requests) }); // warm-up
  return measure(target, redis, requests, async () => {
    const r = await runH2load({ port: target.port, request: req, requests, latencies: true });
    if (r.succeeded !== requests || r.status2xx !== requests) throw new Error(`${target.name}: ${requests - r.succeeded} requests failed:\n${r.output}`);
    const lat = r.latenciesMs ?? [];
    return { reqPerSec: r.reqPerSec, p50Ms: percentile(lat, 50), p99Ms: percentile(lat, 99) };
  });
}

async function keysRow(target: Target_, redis: RedisNode | undefined, descriptors: number, keys: number, requests: number): Promise<Measured> {
  const run = (n: number) => runKeysLoad({ port: target.port, requests: n, descriptors, keys, label: target.name });
  await run(Math.min(20_000, requests)); // warm-up (and the generator's own start-up)
  return measure(target, redis, requests, () => run(requests));
}

// redis-benchmark of sluice's decide function alone (loaded by the Redis-store server), one
// request of 3 fixed-window limits a call, as the store sends it: what Redis spends deciding,
// without sluice's batching or I/O. Keys the same every call, or new to Redis (__rand_int__).
async function decideScript(node: RedisNode): Promise<{ hot: number; fresh: number }> {
  const fn = loadScripts().functions.decide;
  const n = 200_000;
  const run = async (tag: string, random: string[]) => {
    const all = ['a', 'b', 'c'].map(
      (k): LimitCheck => ({
        key: `bench:decide:{${tag}}:${k}`,
        algorithm: 'fixed_window',
        limit: 1_000_000_000,
        periodMs: 60_000,
        burst: 1_000_000_000,
        hits: 1,
        mode: 'enforce',
      }),
    );
    // As the store sends it (fixed windows in their window's hash, the default).
    const [numKeys, args] = decideArgs([{ all, idx: [0, 1, 2] }], false, '', 'request', windowBase('bench:decide:'));
    const before = await redisCpuSeconds(node);
    await execFileAsync('redis-benchmark', [
      '-p',
      String(node.port),
      '-c',
      '4',
      '-P',
      '32',
      '-n',
      String(n),
      ...random,
      '-q',
      'FCALL',
      fn,
      String(numKeys),
      ...args.map(String),
    ]);
    return (((await redisCpuSeconds(node)) - before) * 1e6) / n;
  };
  return { hot: await run('hot', []), fresh: await run('__rand_int__', ['-r', '100000000']) };
}

// redis-benchmark of the smallest useful script, INCRBY + PEXPIRE, on the same Redis.
async function minimalScript(node: RedisNode): Promise<number> {
  const sha = await node.cli('SCRIPT', 'LOAD', "redis.call('INCRBY', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1");
  const n = 300_000;
  const before = await redisCpuSeconds(node);
  await execFileAsync('redis-benchmark', [
    '-p',
    String(node.port),
    '-c',
    '16',
    '-P',
    '16',
    '-n',
    String(n),
    '-q',
    'EVALSHA',
    sha,
    '1',
    'bench:minimal',
    '1',
    '60000',
  ]);
  return (((await redisCpuSeconds(node)) - before) * 1e6) / n;
}

export async function decisionsBench(requests: number, keyRequests = Math.round(requests / 2)): Promise<DecisionsBench | string> {
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  if (spawnSync('redis-benchmark', ['--version']).error) return 'skipped: redis-benchmark not found (apt-get install redis-tools)';
  const config = fleetConfigDir();
  const node = await startRedis();
  const targets: Target_[] = [];
  try {
    targets.push(await emptyHandler());
    targets.push(fromServer('memory store', await spawnShipped(['--config', config, '--log-level', 'info'])));
    const redisServer = await spawnShipped([
      '--config',
      config,
      '--log-level',
      'info',
      '--store',
      'redis',
      '--redis-url',
      `127.0.0.1:${node.port}`,
      '--lease-auto-threshold',
      '0',
      '--workers',
      '1',
    ]);
    await redisServer.waitForLog((l) => l.event === 'redis_ready');
    targets.push(fromServer('Redis store', redisServer));

    const rows: DecisionRow[] = [];
    const add = (t: Target_, algorithm: string, descriptors: number, keys: number, m: Measured, generator: DecisionRow['generator']) => {
      const base = rows.find((r) => r.target === 'empty handler' && r.descriptors === descriptors && r.keys === keys);
      rows.push({ target: t.name, algorithm, descriptors, keys, ...m, ratio: base ? m.reqPerSec / base.reqPerSec : 1, generator });
    };
    const redisOf = (t: Target_) => (t.name === 'Redis store' ? node : undefined);
    for (const descriptors of [1, 3]) {
      for (const t of targets) {
        const algorithms =
          t.name === 'empty handler' ? ['fixed_window'] : descriptors === 1 && t.name === 'Redis store' ? [...FLEET_ALGORITHMS] : ['fixed_window'];
        for (const a of algorithms) add(t, a, descriptors, 1, await h2loadRow(t, redisOf(t), a, descriptors, requests), 'h2load');
      }
      for (const t of targets) add(t, 'fixed_window', descriptors, 100_000, await keysRow(t, redisOf(t), descriptors, 100_000, keyRequests), 'keys-load');
    }

    // Latency at half the maximum rate (fixed window, 1 descriptor, one hot key): requests paced
    // (h2load --rps) on 4 connections, one stream each (32 paced streams come out of h2load in
    // bursts, which measures the bursts); the empty handler at the same rate alongside.
    const max = rows.find((r) => r.target === 'Redis store' && r.algorithm === 'fixed_window' && r.descriptors === 1 && r.keys === 1)!;
    const perConnection = Math.max(1, Math.round(max.reqPerSec / 2 / 4));
    const paced = async (t: Target_) => {
      const r = await runH2load({
        port: t.port,
        request: request('fixed_window', 1),
        requests: perConnection * 4 * 10,
        streams: 1,
        rpsPerConnection: perConnection,
        latencies: true,
      });
      const lat = r.latenciesMs ?? [];
      return { reqPerSec: r.reqPerSec, p50Ms: percentile(lat, 50), p99Ms: percentile(lat, 99) };
    };
    const halfRate = { redis: await paced(targets[2]), empty: await paced(targets[0]) };

    const metrics = await (await fetch(`http://127.0.0.1:${redisServer.httpPort}/metrics`)).text();
    const degraded = metricSum(metrics, 'sluice_degraded_decisions_total');
    const failed = metricSum(metrics, 'sluice_requests_total', { code: 'UNAVAILABLE' }) + metricSum(metrics, 'sluice_requests_total', { code: 'INTERNAL' });
    if (degraded > 0 || failed > 0)
      throw new Error(`the Redis store answered ${degraded} requests without Redis (degraded) and failed ${failed}: its rows are not Redis decisions`);
    const minimalScriptUs = await minimalScript(node);
    const decideScriptUs = await decideScript(node);
    return {
      rows,
      minimalScriptUs,
      decideScriptUs,
      halfRate,
      degraded,
      commands: [
        "h2load -n N -c 4 -m 32 -t 1 -d <request> -H 'content-type: application/grpc' -H 'te: trailers' -H 'grpc-timeout: 1S' --log-file <latencies>",
        'node dist/bench/keys-load.js (100,000 distinct requests in turn, 4 connections x 32 streams, grpc-timeout 1S)',
        'redis-benchmark -c 16 -P 16 EVALSHA <INCRBY + PEXPIRE> 1 key 1 60000',
        "redis-benchmark -c 4 -P 32 [-r 100000000] FCALL <decide> 3 <3 keys> <decide's arguments for one request of 3 fixed-window limits, as the store sends them (decideArgs)>",
      ],
    };
  } finally {
    for (const t of targets) await t.stop();
    await node.stop();
  }
}
