import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitRequest,
  type RateLimitResponse,
  RateLimitResponse_Code as Code,
  RateLimitServiceClient,
} from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { cgroupCpuLimit, planWorkers } from '../../src/server/workers';
import { defaultSettings, loadSettings } from '../../src/settings';
import { metricSum, waitReady } from '../../bench/fleet';
import { d } from '../support/app';
import { runCli, type ServerProcess, spawnServer } from '../support/process';
import { freePort, type RedisNode, startRedis, stopAll } from '../support/redis';
import { DAY_MS, awayFromWindowEdge } from '../support/time';

// WORKERS=2 on one real Redis: one budget, one set of metrics, one health, config from the primary.

const LIMIT = 40;
const CALLS = 200;
const CONNECTIONS = 8;

function configDir(limit: number): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-workers-'));
  writeConfig(dir, limit);
  return dir;
}

function writeConfig(dir: string, limit: number): void {
  fs.writeFileSync(path.join(dir, 'w.yaml'), `domain: w\ndescriptors:\n  - key: k\n    rate_limit: { unit: day, requests_per_unit: ${limit} }\n`);
}

// Separate HTTP/2 connections (grpc-js would otherwise share one between clients to one address).
function connect(port: number, n: number): RateLimitServiceClient[] {
  return Array.from(
    { length: n },
    () => new RateLimitServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
}

const workerRequests = async (httpPort: number) => {
  const text = (await get(httpPort, '/metrics')).body;
  return [1, 2].map((w) => metricSum(text, 'sluice_worker_requests', { worker: String(w) }));
};

// Connections, CONNECTIONS at a time, until every worker has answered one of them. Each worker
// accepts from the shared socket itself, so which one takes a connection is the kernel's choice:
// a few connections can all land on one.
async function connectToEveryWorker(ports: { grpcPort: number; httpPort: number }): Promise<RateLimitServiceClient[]> {
  const clients: RateLimitServiceClient[] = [];
  const base = await workerRequests(ports.httpPort);
  let now = base;
  for (let round = 0; round < 10; round++) {
    const fresh = connect(ports.grpcPort, CONNECTIONS);
    clients.push(...fresh);
    await Promise.all(fresh.map((c) => call(c, { descriptors: [d(['k', `connect-${Date.now()}-${round}`])] })));
    now = await workerRequests(ports.httpPort);
    if (now.every((n, i) => n > base[i])) return clients;
  }
  for (const c of clients) c.close();
  throw new Error(
    `after ${clients.length} connections a worker had answered none of them: calls per worker ${base.join(', ')} before, ${now.join(', ')} after`,
  );
}

function call(client: RateLimitServiceClient, request: Partial<RateLimitRequest>): Promise<RateLimitResponse> {
  const full: RateLimitRequest = { domain: 'w', descriptors: [], hitsAddend: 0, ...request };
  return new Promise((resolve, reject) => {
    client.shouldRateLimit(full, new grpc.Metadata(), { deadline: Date.now() + 5000 }, (err, res) => (err ? reject(err) : resolve(res)));
  });
}

// Each on a new connection (no keep-alive agent), so each may land on either worker.
function get(port: number, p: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
      .on('error', reject);
  });
}

const workerLog = (event: string, worker: number) => (l: Record<string, unknown>) => l.event === event && l.worker === worker;

describe('WORKERS=2 with the Redis store', () => {
  let redis: RedisNode;
  let server: ServerProcess;
  let dir: string;
  let clients: RateLimitServiceClient[] = [];
  // upstream's metrics listener (USE_PROMETHEUS), which every worker serves for the whole set
  let listenerPort: number;
  before(async () => {
    redis = await startRedis();
    dir = configDir(LIMIT);
    listenerPort = await freePort();
    const listener = { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${listenerPort}` };
    server = await spawnServer(
      ['--config', dir, '--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`, '--workers', '2', '--drain-timeout', '30s'],
      listener,
    );
    await waitReady(server);
    clients = await connectToEveryWorker(server);
  });
  after(async () => {
    for (const c of clients) c.close();
    await server?.stop('SIGKILL');
    await stopAll();
  });

  test('start-up: the workers event says 2 and why; each worker starts once', async () => {
    const workers = await server.waitForLog((l) => l.event === 'workers');
    assert.equal(workers.workers, 2);
    assert.equal(workers.why, 'WORKERS=2');
    assert.deepEqual(
      server.logs
        .filter((l) => l.event === 'worker_started')
        .map((l) => l.worker)
        .sort(),
      [1, 2],
    );
  });

  test(`${CALLS} concurrent calls over connections to both workers: exactly ${LIMIT} admitted; both workers answered; metrics and the USE_PROMETHEUS listener count each call once`, async () => {
    await awayFromWindowEdge(DAY_MS, 60_000);
    const first = (await get(server.httpPort, '/metrics')).body;
    const before = metricSum(first, 'sluice_requests_total');
    const hitsBefore = metricSum(first, 'ratelimit_service_rate_limit_total_hits', { domain: 'w' });
    const upstream = async () => {
      const text = (await get(listenerPort, '/metrics')).body;
      return {
        hits: metricSum(text, 'ratelimit_service_rate_limit_total_hits', { domain: 'w', key1: 'k' }),
        over: metricSum(text, 'ratelimit_service_rate_limit_over_limit', { domain: 'w', key1: 'k' }),
        calls: metricSum(text, 'ratelimit_service_total_requests', { grpc_method: 'ShouldRateLimit' }),
        timed: metricSum(text, 'ratelimit_service_response_time_seconds_count', { grpc_method: 'ShouldRateLimit' }),
        loads: metricSum(text, 'ratelimit_service_config_load_success'),
      };
    };
    const listenerBefore = await upstream();
    assert.ok(listenerBefore.calls > 0 && listenerBefore.calls === listenerBefore.timed, JSON.stringify(listenerBefore));
    const request = { descriptors: [d(['k', `budget-${Date.now()}`])] };
    const answers = await Promise.all(Array.from({ length: CALLS }, (_, i) => call(clients[i % clients.length], request)));
    assert.equal(answers.filter((a) => a.overallCode === Code.OK).length, LIMIT);
    assert.equal(answers.filter((a) => a.overallCode === Code.OVER_LIMIT).length, CALLS - LIMIT);
    // Several scrapes, each on a new connection (so on either worker): the same totals every time.
    for (let i = 0; i < 4; i++) {
      const text = (await get(server.httpPort, '/metrics')).body;
      assert.equal(metricSum(text, 'sluice_requests_total') - before, CALLS);
      assert.equal(metricSum(text, 'sluice_requests_total', { code: 'OK' }) + metricSum(text, 'sluice_requests_total', { code: 'OVER_LIMIT' }) - before, CALLS);
      assert.equal(metricSum(text, 'ratelimit_service_rate_limit_total_hits', { domain: 'w' }) - hitsBefore, CALLS);
      const perWorker = [1, 2].map((w) => metricSum(text, 'sluice_worker_requests', { worker: String(w) }));
      assert.ok(
        perWorker.every((n) => n > 0),
        `calls per worker: ${perWorker.join(', ')}`,
      );
      assert.equal(perWorker[0] + perWorker[1], metricSum(text, 'sluice_requests_total'));
      assert.equal(metricSum(text, 'sluice_workers', { state: 'expected' }), 2);
      assert.equal(metricSum(text, 'sluice_workers', { state: 'serving' }), 2);
      // Loaded once, by the primary: not once per worker.
      assert.equal(metricSum(text, 'sluice_config_loads_total', { result: 'success' }), 1);
      // The listener, on a new connection each time (so on either worker), speaks for the set too.
      const u = await upstream();
      assert.deepEqual(
        {
          hits: u.hits - listenerBefore.hits,
          over: u.over - listenerBefore.over,
          calls: u.calls - listenerBefore.calls,
          timed: u.timed - listenerBefore.timed,
          loads: u.loads,
        },
        { hits: CALLS, over: CALLS - LIMIT, calls: CALLS, timed: CALLS, loads: 1 },
      );
    }
  });

  test('a config change on the primary reaches every worker', async () => {
    const loadsBefore = server.logs.filter((l) => l.event === 'config_loaded').length;
    writeConfig(dir, LIMIT + 7);
    server.child.kill('SIGHUP');
    // The primary's load, then each worker's adoption of it.
    await server.waitForLog((l) => l.event === 'config_loaded' && l.worker === undefined && server.logs.indexOf(l) >= loadsBefore);
    for (const w of [1, 2]) await server.waitForLog((l) => workerLog('config_loaded', w)(l) && server.logs.indexOf(l) >= loadsBefore);
    const request = { descriptors: [d(['k', `reload-${Date.now()}`])] };
    const answers = await Promise.all(clients.map((c) => call(c, request)));
    assert.deepEqual(
      answers.map((a) => a.statuses[0].currentLimit?.requestsPerUnit),
      clients.map(() => LIMIT + 7),
    );
  });

  test('health speaks for the set; a killed worker is restarted and decisions keep working', async () => {
    const started = server.logs.filter((l) => l.event === 'worker_started');
    const victim = started[started.length - 1];
    const survivor = victim.worker === 1 ? 2 : 1;
    process.kill(victim.pid as number, 'SIGKILL');
    const exit = await server.waitForLog((l) => l.event === 'worker_exit' && l.pid === victim.pid);
    assert.equal(exit.signal, 'SIGKILL');
    // The survivor stops being ready for the set while its peer is gone, and says why.
    const down = await server.waitForLog((l) => workerLog('health', survivor as number)(l) && l.status === 'NOT_SERVING');
    assert.ok((down.reasons as string[]).includes(`worker ${victim.worker} exited (signal SIGKILL), restarting`), JSON.stringify(down.reasons));
    const restarted = await server.waitForLog((l) => l.event === 'worker_started' && l.worker === victim.worker && l.pid !== victim.pid);
    assert.notEqual(restarted.pid, victim.pid);
    await waitReady(server);
    // New connections reach the restarted worker too (connectToEveryWorker fails otherwise).
    const fresh = await connectToEveryWorker(server);
    try {
      const request = { descriptors: [d(['k', `after-${Date.now()}`])] };
      const answers = await Promise.all(fresh.map((c) => call(c, request)));
      assert.equal(answers.filter((a) => a.overallCode === Code.OK).length, fresh.length);
      const text = (await get(server.httpPort, '/metrics')).body;
      assert.equal(metricSum(text, 'sluice_worker_restarts_total'), 1);
      assert.ok(metricSum(text, 'sluice_worker_requests', { worker: String(victim.worker) }) > 0, 'the restarted worker answers');
    } finally {
      for (const c of fresh) c.close();
    }
  });

  test('SIGTERM to the primary drains every worker and exits 0 without hitting the drain timeout', async () => {
    const code = await server.stop('SIGTERM');
    assert.equal(code, 0);
    for (const w of [1, 2]) assert.ok(server.logs.some(workerLog('stopped', w)), `worker ${w} logged stopped`);
    assert.ok(
      server.logs.some((l) => l.event === 'stopped' && l.worker === undefined),
      'the primary logged stopped',
    );
    assert.equal(server.logs.filter((l) => l.event === 'drain_timeout').length, 0);
  });
});

describe('WORKERS with the memory store', () => {
  test('WORKERS=2 with STORE=memory: exit code 2 and a message naming both settings', async () => {
    const r = await runCli(['serve', '--config', configDir(5)], { WORKERS: '2', STORE: 'memory' });
    assert.equal(r.code, 2);
    assert.match(r.stderr, /WORKERS=2 needs STORE=redis: with STORE=memory each worker would keep its own counters/);
  });

  test('WORKERS=auto with STORE=memory: one process, and the log says why', async () => {
    const server = await spawnServer(['--config', configDir(5)], { WORKERS: 'auto' });
    try {
      const workers = await server.waitForLog((l) => l.event === 'workers');
      assert.equal(workers.workers, 1);
      assert.match(workers.why as string, /STORE=memory/);
      assert.equal(server.logs.filter((l) => l.event === 'worker_started').length, 0);
      assert.equal(server.logs.filter((l) => l.event === 'listening').length, 1);
    } finally {
      await server.stop();
    }
  });
});

describe('WORKERS=auto: the cores this process may use, within the container CPU limit', () => {
  const redis = defaultSettings({ store: 'redis' });
  test('no CPU limit: every core', () => {
    assert.equal(planWorkers(redis, { cores: 4, cpuLimit: undefined }).count, 4);
  });
  test('a fractional limit rounds up; a limit below one core is one worker', () => {
    assert.equal(planWorkers(redis, { cores: 8, cpuLimit: 1.5 }).count, 2);
    assert.equal(planWorkers(redis, { cores: 8, cpuLimit: 0.25 }).count, 1);
    assert.equal(planWorkers(redis, { cores: 2, cpuLimit: 6 }).count, 2);
    assert.equal(planWorkers(redis, { cores: 8, cpuLimit: 1.5 }).why, 'WORKERS=auto: 8 cores this process may use, container CPU limit 1.5');
  });
  test('USE_PROMETHEUS: auto uses every core, and a number is taken (every worker serves the listener for the set)', () => {
    assert.deepEqual(planWorkers({ ...redis, prometheusEnabled: true }, { cores: 4, cpuLimit: undefined }).count, 4);
    assert.equal(loadSettings([], { STORE: 'redis', USE_PROMETHEUS: 'true', WORKERS: '2' }).workers, 2);
  });
  test('a number is taken as given', () => {
    assert.deepEqual(planWorkers({ ...redis, workers: 3 }, { cores: 1, cpuLimit: undefined }), { count: 3, why: 'WORKERS=3' });
  });
  test('cgroup v2 cpu.max and v1 cfs quota', () => {
    const files = (m: Record<string, string>) => (f: string) => {
      if (m[f] === undefined) throw new Error(`ENOENT ${f}`);
      return m[f];
    };
    assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': '150000 100000\n' })), 1.5);
    assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' })), undefined);
    assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '200000\n', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' })), 2);
    assert.equal(cgroupCpuLimit(files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1\n', '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' })), undefined);
    assert.equal(cgroupCpuLimit(files({})), undefined);
  });
  test('WORKERS: auto, a number ≥ 1, anything else named in the error', async () => {
    const r = await runCli(['serve', '--config', configDir(5), '--workers', '0']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /--workers: expected an integer 1\.\./);
  });
});
