import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { callBytes, callOnNewConnection, LooseStore, nghttp2Calls, nghttp2Share, oneByOne, sequentialShare, warmUpPlan } from '../../src/server/warm-up';
import { MemoryStore } from '../../src/store/memory';
import type { DecideOptions, Decision, LimitCheck } from '../../src/store/store';
import { defaultSettings } from '../../src/settings';
import { parseExposition, value } from '../support/exposition';
import { spawnServer } from '../support/process';
import { startRedis, stopAll } from '../support/redis';
import { closing } from '../support/app';

// The first ShouldRateLimit a process answers must not be the first run of the code that answers
// it: V8 compiles a function lazily on its first call, and the whole path compiled at once took
// 50-100 ms, past Envoy's 20 ms default. Counted with V8's own log of first executions
// (--log-function-events), not timed. These tests start the service with its default warm-up, not
// the suite's shorter one.
const DEFAULT_WARM_UP = { WARM_UP_CALLS: undefined };

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-first-call-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
after(() => stopAll());
fs.mkdirSync(path.join(dir, 'config'));
fs.writeFileSync(
  path.join(dir, 'config', 'first.yaml'),
  'domain: first\ndescriptors:\n  - key: tenant\n    value: internal\n    rate_limit: { unlimited: true }\n  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n',
);
const request = { domain: 'first', descriptors: [{ entries: [{ key: 'tenant', value: 'warm-up' }], hitsAddend: undefined, limit: undefined }], hitsAddend: 0 };
// The code that answers a call: the HTTP/2 wire, gRPC, protobuf, the service, config match, keys,
// the limiter and the memory store.
// With STORE=redis, the store's stages, the Redis store and ioredis too.
const REQUEST_PATH = /\/dist\/src\/(server\/h2grpc\/|server\/grpc\.js|gen\/|service\/|config\/match\.js|limiter\/|keys\.js|store\/)|\/node_modules\/ioredis\//;

// Functions of the request path that V8 first ran between the "listening" line and the start of
// the stop, from the log's script-details (id → url) and function,first-execution lines.
function firstRunsWhileServing(log: string): string[] {
  const urls = new Map<string, string>();
  const out: string[] = [];
  let serving = false;
  for (const line of log.split('\n')) {
    const script = /^script-details,(\d+),([^,]*)/.exec(line);
    if (script !== null) urls.set(script[1], script[2]);
    if (!line.startsWith('function,first-execution,')) continue;
    const f = line.split(',');
    const url = urls.get(f[2]) ?? '';
    const name = f.slice(7).join(',');
    if (url.endsWith('/dist/src/app.js') && name === 'listeningLine') serving = true;
    else if (url.endsWith('/dist/src/server/health.js') && name === 'setShuttingDown') break;
    else if (serving && REQUEST_PATH.test(url)) out.push(`${url.replace(/.*\/(dist|node_modules)\//, '')} ${name}`);
  }
  return out;
}

// Starts the service with V8's log of first executions, makes one call on a new connection (or, with
// `nghttp2`, that many calls as Envoy's codec sends them) and returns what of the request path
// those calls ran for the first time.
async function firstRunsOfOneCall(args: string[], nghttp2 = 0): Promise<string[]> {
  const log = path.join(dir, 'v8.log');
  const server = await spawnServer(['--config', path.join(dir, 'config'), '--workers', '1', ...args], DEFAULT_WARM_UP, [
    '--log-function-events',
    `--logfile=${log}`,
    '--no-logfile-per-isolate',
  ]);
  try {
    if (nghttp2 > 0) assert.equal(await nghttp2Calls(server.grpcPort, request, nghttp2, 5000), nghttp2);
    else await callOnNewConnection(server.grpcPort, callBytes(request, `127.0.0.1:${server.grpcPort}`, '20m'), 1, 5000);
  } finally {
    await server.stop();
  }
  return firstRunsWhileServing(fs.readFileSync(log, 'utf8'));
}

test('the first call on a new connection runs no function of the request path for the first time', async () => {
  const firsts = await firstRunsOfOneCall([]);
  assert.deepEqual(firsts, [], `run for the first time by the first real call:\n${firsts.join('\n')}`);
});

test('calls as nghttp2 sends them (Huffman-coded, indexed, a full dynamic table, WINDOW_UPDATE) run no function of the request path for the first time', async () => {
  const firsts = await firstRunsOfOneCall([], 96);
  assert.deepEqual(firsts, [], `run for the first time by the first real calls:\n${firsts.join('\n')}`);
});

// Each key layout: sluice's windows as hash fields (the default) or keys of their own, and upstream's.
for (const layout of [[], ['--window-counters', 'keys'], ['--compat-mode', 'upstream']]) {
  test(`with STORE=redis too${layout.length > 0 ? ` (${layout.join(' ')})` : ''}: the warm-up ran the Redis store on a key prefix of its own, whose keys expire within seconds`, async () => {
    const redis = await startRedis();
    const args = ['--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`, ...layout];
    const firsts = await firstRunsOfOneCall(args);
    assert.deepEqual(firsts, [], `run for the first time by the first real call:\n${firsts.join('\n')}`);
    const keys = async () => (await redis.cli('--scan')).split('\n').filter((k) => k !== '');
    const counters = (all: string[]) => all.filter((k) => !k.includes('{sluice-fleet}'));
    // Under the service's prefix, the one real call's counter alone (a field of its window's hash, or
    // a key of its own); the warm-up's under sluice:warm-up:.
    let all = await keys();
    const real: string[] = [];
    for (const key of counters(all).filter((k) => !k.startsWith('sluice:warm-up:')))
      real.push(...((await redis.cli('type', key)) === 'hash' ? (await redis.cli('hkeys', key)).split('\n') : [key]));
    assert.equal(real.length, 1, `one counter under the service's prefix: ${real.join(', ')}`);
    assert.match(real[0], /first\|tenant=warm-up|first_tenant_warm-up/);
    const until = Date.now() + 8000;
    while (counters(all).some((k) => k.startsWith('sluice:warm-up:')) && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      all = await keys();
    }
    assert.deepEqual(
      counters(all).filter((k) => k.startsWith('sluice:warm-up:')),
      [],
      "the warm-up's counters expire",
    );
    await redis.stop();
  });
}

test('the warm-up answers its calls before the port is bound, on a store and metrics of its own', async () => {
  const server = await spawnServer(['--config', path.join(dir, 'config'), '--workers', '1'], DEFAULT_WARM_UP);
  try {
    const warm = server.logs.findIndex((l) => l.event === 'warm_up');
    assert.ok(warm >= 0 && warm < server.logs.findIndex((l) => l.event === 'listening'), 'a warm_up line before "listening"');
    assert.equal(defaultSettings().warmUpCalls, 8192);
    assert.equal(server.logs[warm].calls, 8192, 'every warm-up call answered');
    // 3968 on 124 connections, 32 at once on each; 3968 one after another on 4; 256 on one
    // node:http2 connection.
    assert.equal(server.logs[warm].connections, 129);
    const requests = async () =>
      value(parseExposition(await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text()), 'sluice_requests_total');
    assert.equal(await requests(), 0);
    const bytes = callBytes(request, `127.0.0.1:${server.grpcPort}`, '20m');
    for (let i = 0; i < 10; i++) await callOnNewConnection(server.grpcPort, bytes, 1, 5000);
    assert.equal(await requests(), 10);
    // The warm-up's hits were not taken from the real budget: 10 of 10 used, the 11th is over.
    const over = await rawDecision(server.httpPort);
    assert.equal(over, 'OVER_LIMIT');
  } finally {
    await server.stop();
  }
});

test('WARM_UP_CALLS=0 starts without a warm-up; a small number still opens a connection per call', async () => {
  const cold = await spawnServer(['--config', path.join(dir, 'config'), '--workers', '1'], { WARM_UP_CALLS: '0' });
  try {
    assert.equal(
      cold.logs.findIndex((l) => l.event === 'warm_up'),
      -1,
    );
    assert.equal(await rawDecision(cold.httpPort), 'OK');
  } finally {
    await cold.stop();
  }
  const few = await spawnServer(['--config', path.join(dir, 'config'), '--workers', '1'], { WARM_UP_CALLS: '5' });
  try {
    const warm = few.logs.find((l) => l.event === 'warm_up');
    assert.deepEqual([warm?.calls, warm?.connections], [5, 5]);
  } finally {
    await few.stop();
  }
});

test('oneByOne: each call sent once the one before is answered, on one connection, every one counted by the service', async () => {
  const server = await spawnServer(['--config', path.join(dir, 'config'), '--workers', '1'], { WARM_UP_CALLS: '0' });
  try {
    assert.equal(await oneByOne(server.grpcPort, request, 40, 5000), 40);
    const text = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text();
    assert.equal(value(parseExposition(text), 'sluice_requests_total'), 40);
  } finally {
    await server.stop();
  }
});

test('warmUpPlan: at least 16 connections, at most 32 calls at once on each, at least the calls asked, fewer than one more per connection', () => {
  assert.deepEqual([0, 63, 64, 2048, 4096].map(nghttp2Share), [0, 0, 8, 256, 256]);
  assert.deepEqual([0, 63, 64, 2048, 8192].map(sequentialShare), [0, 0, 28, 896, 3968]);
  assert.deepEqual(warmUpPlan(0), { connections: 0, streams: 0 });
  assert.deepEqual(warmUpPlan(1), { connections: 1, streams: 1 });
  assert.deepEqual(warmUpPlan(16), { connections: 16, streams: 1 });
  assert.deepEqual(warmUpPlan(32), { connections: 16, streams: 2 });
  assert.deepEqual(warmUpPlan(2048), { connections: 64, streams: 32 });
  assert.deepEqual(warmUpPlan(2049), { connections: 65, streams: 32 });
  for (const calls of [3, 17, 100, 513, 5000]) {
    const { connections, streams } = warmUpPlan(calls);
    assert.ok(connections * streams >= calls && connections * streams < calls + connections && streams <= 32, `${calls}: ${connections}×${streams}`);
  }
});

// A real memory store under LooseStore, with the keys each call reached it with written down.
class KeysSeen extends MemoryStore {
  readonly calls: string[][] = [];
  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    this.calls.push(checks.map((c) => c.key));
    return super.decide(checks, options);
  }
}

test("LooseStore: every other warm-up call a new tenant's, the rest 16 returning tenants' far below a lease's rate, none ever denied", async () => {
  const inner = new KeysSeen();
  const loose = new LooseStore(inner);
  const check: LimitCheck = { key: 'd|tenant=a', algorithm: 'fixed_window', limit: 1, periodMs: 60_000, burst: 1, hits: 1, mode: 'enforce' };
  const other: LimitCheck = { ...check, key: 'd|route=b' };
  for (let i = 0; i < 2048; i++) {
    const decision = await loose.decide([check, other], { countDeniedHits: false });
    assert.ok(decision.admitted, `call ${i} admitted`);
  }
  const firsts = inner.calls.map((keys) => keys[0]);
  // Both checks of a call carry the same suffix.
  assert.ok(inner.calls.every(([a, b]) => a.slice(a.indexOf('#')) === b.slice(b.indexOf('#'))));
  const uses = new Map<string, number>();
  for (const k of firsts) uses.set(k, (uses.get(k) ?? 0) + 1);
  const returning = [...uses].filter(([, n]) => n > 1);
  // Not every call's records survive (V8 would then make them in the old generation for good:
  // docs/security.md), and the returning keys stay at 64 calls each, far below LEASE_AUTO_THRESHOLD's 1000/s.
  assert.equal(returning.length, 16);
  assert.ok(
    returning.every(([, n]) => n === 64),
    JSON.stringify(returning),
  );
  assert.equal(uses.size - returning.length, 1024, 'the other calls each on keys of their own');
  await loose.close();
});

async function rawDecision(httpPort: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${httpPort}/json`, {
    method: 'POST',
    body: JSON.stringify({ domain: 'first', descriptors: [{ entries: [{ key: 'tenant', value: 'warm-up' }] }] }),
  });
  return ((await res.json()) as { overallCode: string }).overallCode;
}
