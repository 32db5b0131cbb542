import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { windowBase } from '../../src/store/redis';

// Spawns throwaway redis-server processes on free loopback ports, so that no test ever touches the
// machine's shared Redis on 6379.

export interface RedisNode {
  host: '127.0.0.1';
  port: number;
  process: ChildProcess;
  // Default SIGKILL: tests want the node gone, not a graceful shutdown.
  stop(signal?: NodeJS.Signals): Promise<void>;
  pause(): void;
  resume(): void;
  // Runs `redis-cli -p <port> ...args` and returns stdout trimmed. redis-cli exits 0 on error
  // replies, so those come back as text (e.g. "ERR ...", "MOVED ...").
  cli(...args: string[]): Promise<string>;
}

export interface SentinelSet {
  primary: RedisNode;
  replica: RedisNode;
  sentinel: RedisNode;
  masterName: string;
  stop(): Promise<void>;
}

export interface Cluster {
  nodes: RedisNode[];
  stop(): Promise<void>;
  primaries(): Promise<RedisNode[]>;
}

const HOST = '127.0.0.1';
const SHARED_PORT = 6379;
const BUS_OFFSET = 10_000;
const READY_TIMEOUT_MS = 10_000;
const CLUSTER_TIMEOUT_MS = 30_000;
const POLL_MS = 50;

const live = new Map<RedisNode, string>();
const paused = new WeakSet<RedisNode>();
const cliChildren = new Set<ChildProcess>();
// Ports handed out by this process: the OS may return a just-closed port to the next bind(0).
const handedOut = new Set<number>();

let binaries: { server: string; cli: string } | undefined;

export function requireRedisBinaries(): { server: string; cli: string } {
  if (binaries) return binaries;
  const server = which('redis-server');
  const cli = which('redis-cli');
  if (!server || !cli) {
    const missing = [server ? '' : 'redis-server', cli ? '' : 'redis-cli'].filter(Boolean).join(' and ');
    throw new Error(
      `${missing} not found on PATH. The Redis tests start their own redis-server processes (Redis >= 7). ` +
        'Install them: on Debian/Ubuntu `apt-get install redis-server` (it pulls in redis-cli via redis-tools), ' +
        'on macOS `brew install redis`.',
    );
  }
  binaries = { server, cli };
  return binaries;
}

function which(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, name);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      if (fs.statSync(candidate).isFile()) return candidate;
    } catch {
      // not here; keep looking
    }
  }
  return undefined;
}

// Ports are taken below the kernel's ephemeral range when it leaves room (10,000 ports): a port
// from that range (what bind(0) gives) can become the source port of any outgoing connection
// between the moment it is handed out and the moment a server binds it (EADDRINUSE), and the
// servers under test open connections (to Redis, to each other) all the time.
function ephemeralLow(): number {
  try {
    return Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || 0;
  } catch {
    return 0;
  }
}
const FIXED_LOW = 10_000;
const EPHEMERAL_LOW = ephemeralLow();

// A port to try: random below the ephemeral range (and its cluster bus port too), else bind(0)'s.
async function candidatePort(clusterBus: boolean): Promise<number | undefined> {
  const high = EPHEMERAL_LOW - 1 - (clusterBus ? BUS_OFFSET : 0);
  if (high - FIXED_LOW < 5_000) return bindAndRelease(0);
  const port = FIXED_LOW + Math.floor(Math.random() * (high - FIXED_LOW + 1));
  return (await bindAndRelease(port)) === undefined ? -1 : port;
}

// clusterBus: also require port+10000 free, which Redis Cluster binds for its node-to-node bus.
export async function freePort(opts: { clusterBus?: boolean } = {}): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = await candidatePort(opts.clusterBus === true);
    if (port === -1) continue;
    if (port === undefined) break;
    if (port === SHARED_PORT || handedOut.has(port)) continue;
    handedOut.add(port);
    if (!opts.clusterBus) return port;
    const bus = port + BUS_OFFSET;
    if (bus > 65_535 || handedOut.has(bus)) continue;
    if ((await bindAndRelease(bus)) === undefined) continue;
    handedOut.add(bus);
    return port;
  }
  throw new Error(`no free port on ${HOST}${opts.clusterBus ? ' with a free cluster bus port (port+10000)' : ''}`);
}

function bindAndRelease(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.unref();
    server.once('error', () => resolve(undefined));
    server.listen({ port, host: HOST, exclusive: true }, () => {
      const bound = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(bound));
    });
  });
}

// Redis 7 waits 5 s before a diskless full sync to batch replicas; tests want the sync now.
const DATA_NODE_ARGS = ['--repl-diskless-sync-delay', '0'];

export function startRedis(opts: { args?: string[]; port?: number } = {}): Promise<RedisNode> {
  return onFreePort(opts.port, false, (port) => launch(makeDir(), port, [], [...DATA_NODE_ARGS, ...(opts.args ?? [])]));
}

function makeDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-redis-'));
}

// The port can be taken between freePort() and redis-server's bind(), so retry on a fresh one.
async function onFreePort(fixed: number | undefined, clusterBus: boolean, start: (port: number) => Promise<RedisNode>): Promise<RedisNode> {
  if (fixed === SHARED_PORT) throw new Error(`refusing port ${SHARED_PORT}: that is the machine's shared Redis, not a test one`);
  if (fixed !== undefined) return start(fixed);
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(await freePort({ clusterBus }));
    } catch (err) {
      if (attempt >= 3 || !/Address already in use/.test(String(err))) throw err;
    }
  }
}

async function launch(dir: string, port: number, leading: string[], args: string[]): Promise<RedisNode> {
  const { server } = requireRedisBinaries();
  const logPath = path.join(dir, 'redis.log');
  const child = spawnServer(server, logPath, [
    ...leading,
    ...['--port', String(port), '--bind', HOST, '--save', '', '--appendonly', 'no'],
    ...['--dir', dir, '--protected-mode', 'no', ...args],
  ]);
  const node = makeNode(child, port, dir);
  live.set(node, dir);
  try {
    await waitUntilReady(node, logPath);
  } catch (err) {
    await node.stop();
    throw err;
  }
  return node;
}

// Output goes to a file rather than a pipe and the child is unref'd, so a test that forgets to stop
// a node cannot keep the test process alive; the exit handler then kills it.
function spawnServer(server: string, logPath: string, argv: string[]): ChildProcess {
  const fd = fs.openSync(logPath, 'a');
  try {
    const child = spawn(server, argv, { stdio: ['ignore', fd, fd] });
    child.on('error', (err) => fs.appendFileSync(logPath, `spawn ${server} failed: ${err.message}\n`));
    child.unref();
    return child;
  } finally {
    fs.closeSync(fd);
  }
}

function makeNode(child: ChildProcess, port: number, dir: string): RedisNode {
  const exited = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.once('error', () => resolve());
  });
  const node: RedisNode = {
    host: HOST,
    port,
    process: child,
    async stop(signal: NodeJS.Signals = 'SIGKILL') {
      child.ref();
      if (isRunning(child)) {
        child.kill(signal);
        // A paused process only acts on catchable signals once it runs again.
        if (signal !== 'SIGKILL') child.kill('SIGCONT');
      }
      await exited;
      live.delete(node);
      paused.delete(node);
      fs.rmSync(dir, { recursive: true, force: true });
    },
    pause() {
      child.kill('SIGSTOP');
      paused.add(node);
    },
    resume() {
      child.kill('SIGCONT');
      paused.delete(node);
    },
    cli: (...args) => runCli(['-h', HOST, '-p', String(port), ...args]),
  };
  return node;
}

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null && child.pid !== undefined;
}

// Sentinel never logs "Ready to accept connections", hence the PING fallback.
async function waitUntilReady(node: RedisNode, logPath: string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  const cmd = `redis-server on port ${node.port}`;
  for (;;) {
    if (!isRunning(node.process)) throw new Error(`${cmd} exited (${exitReason(node.process)}):\n${readLog(logPath)}`);
    if (readLog(logPath).includes('Ready to accept connections')) return;
    if ((await node.cli('PING').catch(() => '')) === 'PONG') return;
    if (Date.now() > deadline) throw new Error(`${cmd} not ready after ${READY_TIMEOUT_MS} ms:\n${readLog(logPath)}`);
    await sleep(POLL_MS);
  }
}

function exitReason(child: ChildProcess): string {
  if (child.pid === undefined) return 'spawn failed';
  return child.signalCode ? `signal ${child.signalCode}` : `code ${child.exitCode}`;
}

function readLog(logPath: string): string {
  try {
    return fs.readFileSync(logPath, 'utf8').slice(-8_000);
  } catch {
    return '';
  }
}

function runCli(args: string[], timeoutMs?: number): Promise<string> {
  const { cli } = requireRedisBinaries();
  return new Promise((resolve, reject) => {
    const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    cliChildren.add(child);
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      cliChildren.delete(child);
      if (code === 0) return resolve(stdout.trim());
      const why = signal ? `was killed (${signal}${timer ? `, timeout ${timeoutMs} ms` : ''})` : `exited with ${code}`;
      reject(new Error(`redis-cli ${args.join(' ')} ${why}: ${(stderr + stdout).trim()}`));
    });
  });
}

export async function startSentinelSet(): Promise<SentinelSet> {
  const masterName = 'sluice';
  const primary = await startRedis();
  let others: RedisNode[];
  try {
    others = await startAll([() => startRedis({ args: ['--replicaof', HOST, String(primary.port)] }), () => startSentinel(masterName, primary.port)]);
  } catch (err) {
    await primary.stop();
    throw err;
  }
  const [replica, sentinel] = others;
  // Sentinel first, so it cannot start a failover while the data nodes go away.
  const stop = async () => {
    await sentinel.stop();
    await stopNodes([replica, primary]);
  };
  try {
    await waitFor('the replica to sync', () => replicaLinkUp(replica), READY_TIMEOUT_MS);
    await waitFor('the sentinel to report the primary', () => sentinelReports(sentinel, masterName, primary.port), READY_TIMEOUT_MS);
  } catch (err) {
    await stop();
    throw err;
  }
  return { primary, replica, sentinel, masterName, stop };
}

function startSentinel(masterName: string, primaryPort: number): Promise<RedisNode> {
  return onFreePort(undefined, false, (port) => {
    const dir = makeDir();
    // Sentinel rewrites its config file, so it lives in the node's own tmp dir.
    const conf = path.join(dir, 'sentinel.conf');
    fs.writeFileSync(conf, sentinelConf(port, masterName, primaryPort));
    return launch(dir, port, [conf, '--sentinel'], []);
  });
}

function sentinelConf(port: number, masterName: string, primaryPort: number): string {
  return [
    `port ${port}`,
    `bind ${HOST}`,
    'protected-mode no',
    `sentinel monitor ${masterName} ${HOST} ${primaryPort} 1`,
    `sentinel down-after-milliseconds ${masterName} 1000`,
    `sentinel failover-timeout ${masterName} 3000`,
    '',
  ].join('\n');
}

async function replicaLinkUp(replica: RedisNode): Promise<true | string> {
  const info = await replica.cli('INFO', 'replication');
  const link = infoField(info, 'master_link_status');
  return link === 'up' || `replica ${replica.port}: role ${infoField(info, 'role')}, master_link_status ${link}`;
}

async function sentinelReports(sentinel: RedisNode, masterName: string, primaryPort: number): Promise<true | string> {
  const addr = await sentinel.cli('SENTINEL', 'get-master-addr-by-name', masterName);
  return addr.split('\n')[1]?.trim() === String(primaryPort) || `sentinel says ${JSON.stringify(addr)}`;
}

export async function startCluster(opts: { primaries?: number; replicasPerPrimary?: number } = {}): Promise<Cluster> {
  const primaryCount = opts.primaries ?? 3;
  const replicas = opts.replicasPerPrimary ?? 1;
  if (primaryCount < 3) throw new Error(`startCluster: redis-cli --cluster create needs at least 3 primaries, got ${primaryCount}`);
  const starters = Array.from({ length: primaryCount * (1 + replicas) }, () => startClusterNode);
  const nodes = await startAll(starters);
  const cluster: Cluster = { nodes, stop: () => stopNodes(nodes), primaries: () => currentPrimaries(nodes) };
  try {
    const addrs = nodes.map((n) => `${HOST}:${n.port}`);
    await runCli(['--cluster', 'create', ...addrs, '--cluster-replicas', String(replicas), '--cluster-yes'], CLUSTER_TIMEOUT_MS);
    await waitFor('the cluster to converge', () => clusterConverged(nodes, primaryCount), CLUSTER_TIMEOUT_MS);
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

function startClusterNode(): Promise<RedisNode> {
  return onFreePort(undefined, true, (port) => {
    const dir = makeDir();
    // Low node timeout so failover tests take seconds, not the default 15 s.
    const args = [...DATA_NODE_ARGS, '--cluster-enabled', 'yes', '--cluster-config-file', path.join(dir, 'nodes.conf'), '--cluster-node-timeout', '1000'];
    return launch(dir, port, [], args);
  });
}

async function clusterConverged(nodes: RedisNode[], primaryCount: number): Promise<true | string> {
  const states = await Promise.all(nodes.map((n) => clusterNodeState(n, nodes.length)));
  const notReady = states.filter((s) => s !== 'master' && s !== 'replica');
  if (notReady.length > 0) return notReady.join('; ');
  const masters = states.filter((s) => s === 'master').length;
  return masters === primaryCount || `${masters} masters, want ${primaryCount}`;
}

// 'master' / 'replica' when the node is fully part of the cluster, else a description.
async function clusterNodeState(node: RedisNode, total: number): Promise<string> {
  const info = await node.cli('CLUSTER', 'INFO');
  const state = infoField(info, 'cluster_state');
  if (state !== 'ok') return `${node.port}: cluster_state ${state}`;
  const known = infoField(info, 'cluster_known_nodes');
  if (known !== String(total)) return `${node.port}: knows ${known} of ${total} nodes`;
  const role = await roleOf(node);
  if (role === 'master') return 'master';
  const link = await replicaLinkUp(node);
  return link === true ? 'replica' : link;
}

async function roleOf(node: RedisNode): Promise<string> {
  return (await node.cli('ROLE')).split('\n')[0].trim();
}

// Paused or stopped nodes are skipped: they cannot answer, and a paused one would hang the call.
async function currentPrimaries(nodes: RedisNode[]): Promise<RedisNode[]> {
  const reachable = nodes.filter((n) => isRunning(n.process) && !paused.has(n));
  const roles = await Promise.all(reachable.map((n) => roleOf(n).catch(() => 'unreachable')));
  return reachable.filter((_, i) => roles[i] === 'master');
}

// Starts in parallel; if any fails, stops the ones that started so nothing is left behind.
async function startAll(starters: (() => Promise<RedisNode>)[]): Promise<RedisNode[]> {
  const results = await Promise.allSettled(starters.map((start) => start()));
  const started = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (!failed) return started;
  await stopNodes(started);
  throw failed.reason;
}

async function stopNodes(nodes: RedisNode[]): Promise<void> {
  await Promise.all(nodes.map((n) => n.stop()));
}

export async function stopAll(): Promise<void> {
  await stopNodes([...live.keys()]);
}

async function waitFor(what: string, check: () => Promise<true | string>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  for (;;) {
    try {
      const state = await check();
      if (state === true) return;
      last = state;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last state: ${last}`);
    await sleep(POLL_MS * 2);
  }
}

// Reads `key:value` from INFO-style output.
function infoField(text: string, key: string): string | undefined {
  const line = text.split(/\r?\n/).find((l) => l.startsWith(`${key}:`));
  return line?.slice(key.length + 1).trim();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Synchronous on purpose: 'exit' handlers cannot wait. Covers crashed or forgetful tests.
function killLeftovers(): void {
  for (const [node, dir] of live) {
    if (isRunning(node.process)) node.process.kill('SIGKILL');
    try {
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      // the dying server may still hold files; the OS tmp cleaner gets the rest
    }
  }
  for (const child of cliChildren) child.kill('SIGKILL');
}

process.on('exit', killLeftovers);
// A bare `node file.js` dies on these signals without running 'exit' handlers. Under `node --test`
// the runner handles them itself and exits normally, which runs the handler above.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  if (process.listenerCount(signal) === 0) {
    process.once(signal, () => {
      killLeftovers();
      process.kill(process.pid, signal);
    });
  }
}

// Lua calls (FCALL of sluice's functions, EVALSHA and EVAL on servers without Functions) a node
// has served so far, from INFO commandstats.
export async function scriptCalls(node: RedisNode): Promise<number> {
  const stats = await node.cli('INFO', 'commandstats');
  return [...stats.matchAll(/cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/g)].reduce((a, m) => a + Number(m[1]), 0);
}

// A fixed window's count as sluice keeps it on `node`, for the window Redis' clock is in: the field
// of its window's hash (WINDOW_COUNTERS=hash, the default), else its own key ("start:count"); 0
// when there is neither.
export async function fixedWindowCount(node: RedisNode, key: string, periodMs: number, prefix = 'sluice:'): Promise<number> {
  const [seconds, micros] = (await node.cli('TIME')).split('\n').map(Number);
  const now = seconds * 1000 + micros / 1000;
  const field = await node.cli('HGET', `${windowBase(prefix)(periodMs)}${Math.floor(now / periodMs) * periodMs}`, key);
  if (field !== '') return Number(field);
  const raw = await node.cli('GET', key);
  return raw === '' ? 0 : Number(raw.split(':')[1]);
}

// The names of the counters on `node` that match the glob `pattern`: keys, and the fields of
// window hashes (fixed windows with WINDOW_COUNTERS=hash, the default), each once.
export async function counterNames(node: RedisNode, pattern: string): Promise<string[]> {
  const names = new Set<string>();
  for (const key of (await node.cli('--scan', '--pattern', pattern)).split('\n')) if (key !== '' && !key.includes('{}windows|')) names.add(key);
  for (const hash of (await node.cli('--scan', '--pattern', '*{}windows|*')).split('\n')) {
    if (hash === '') continue;
    for (const f of (await node.cli('HKEYS', hash)).split('\n')) if (f !== '' && globMatch(pattern, f)) names.add(f);
  }
  return [...names];
}

// Redis' glob for the patterns tests use: `*` and `?`, everything else literal.
function globMatch(pattern: string, text: string): boolean {
  const re = new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );
  return re.test(text);
}
