import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { describe, test } from 'node:test';
import YAML from 'yaml';
import { loadSettings, SETTINGS } from '../../src/settings';

// No Docker engine runs on the development machines, so docker-compose.yml and the Dockerfile are
// checked for structure and for agreement with sluice's settings and envoy/envoy.yaml.

// Parsed YAML, navigated freely: the assertions are what check its shape.
type Yaml = any;

const REPO = path.resolve(__dirname, '../../..');
const readRepo = (file: string) => fs.readFileSync(path.join(REPO, file), 'utf8');
const compose: Yaml = YAML.parse(readRepo('docker-compose.yml'));
const services: Record<string, Yaml> = compose.services;

const DEFAULT_SERVICES = ['redis', 'sluice', 'upstream', 'envoy'];
const CLUSTER_NODES = ['redis-1', 'redis-2', 'redis-3'];
const CLUSTER_SERVICES = [...CLUSTER_NODES, 'redis-cluster-init', 'sluice-cluster'];
const SLUICE_SERVICES = ['sluice', 'sluice-cluster'];
const UPSTREAM_LAYOUT_ENV = ['RUNTIME_ROOT', 'RUNTIME_SUBDIRECTORY', 'RUNTIME_APPDIRECTORY'];

interface Port {
  ip?: string;
  host: number;
  container: number;
}

function ports(service: Yaml): Port[] {
  return (service.ports ?? []).map((p: string) => {
    const parts = String(p).split(':');
    assert.ok(parts.length >= 2 && parts.length <= 3, `port '${p}': write host:container (or ip:host:container)`);
    const [container, host, ip] = parts.reverse();
    return { ip, host: Number(host), container: Number(container) };
  });
}

function environment(service: Yaml): Record<string, string> {
  const env = service.environment ?? {};
  if (!Array.isArray(env)) return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, String(v)]));
  return Object.fromEntries(env.map((e: string) => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)]));
}

interface Volume {
  source: string;
  target: string;
  readOnly: boolean;
}

function volumes(service: Yaml): Volume[] {
  return (service.volumes ?? []).map((v: string) => {
    const [source, target, mode] = v.split(':');
    return { source, target, readOnly: mode === 'ro' };
  });
}

function dependsOn(service: Yaml): Record<string, string> {
  const deps = service.depends_on ?? {};
  if (Array.isArray(deps)) return Object.fromEntries(deps.map((d: string) => [d, 'service_started']));
  return Object.fromEntries(Object.entries(deps).map(([name, d]) => [name, (d as Yaml).condition ?? 'service_started']));
}

function flat(command: string | string[] | undefined): string {
  return Array.isArray(command) ? command.join(' ') : (command ?? '');
}

// ---- Dockerfile -----------------------------------------------------------------------------

interface Instruction {
  stage: number;
  op: string;
  args: string;
}

function dockerfile(): Instruction[] {
  const lines = readRepo('Dockerfile').replace(/\\\n/g, ' ').split('\n');
  const out: Instruction[] = [];
  let stage = -1;
  for (const line of lines.map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))) {
    const [, op, args] = /^(\S+)\s*(.*)$/.exec(line)!;
    if (op.toUpperCase() === 'FROM') stage++;
    out.push({ stage, op: op.toUpperCase(), args });
  }
  return out;
}

interface Copy {
  stage: number;
  from?: string;
  sources: string[];
}

function copies(instructions: Instruction[]): Copy[] {
  return instructions
    .filter((i) => i.op === 'COPY')
    .map((i) => {
      const words = i.args.split(/\s+/);
      const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
      const paths = words.filter((w) => !w.startsWith('--'));
      return { stage: i.stage, from, sources: paths.slice(0, -1).map((p) => p.replace(/^\.\//, '').replace(/\/$/, '')) };
    });
}

function dockerIgnored(file: string): boolean {
  const patterns = readRepo('.dockerignore')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('!'));
  const regexes = patterns.map((p) => {
    const glob = p
      .replace(/^\/|\/$/g, '')
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*\*/g, '\0')
      .replace(/\*/g, '[^/]*')
      .replace(/\?/g, '[^/]')
      .replace(/\0/g, '.*');
    return new RegExp(`^${glob}$`);
  });
  const ancestors = file.split('/').map((_, i, parts) => parts.slice(0, i + 1).join('/'));
  return ancestors.some((a) => regexes.some((r) => r.test(a)));
}

describe('docker-compose.yml', () => {
  test('has the demo services by default, the Redis Cluster ones behind profile cluster, the RLQS Envoy behind profile rlqs', () => {
    assert.deepEqual(Object.keys(services).sort(), [...DEFAULT_SERVICES, ...CLUSTER_SERVICES, 'envoy-rlqs'].sort());
    assert.deepEqual(services['envoy-rlqs'].profiles, ['rlqs']);
    const mount = volumes(services['envoy-rlqs']).find((v) => v.source === './envoy/envoy-rlqs.yaml');
    assert.ok(mount?.readOnly, 'envoy-rlqs.yaml mounted read-only');
    assert.match(flat(services['envoy-rlqs'].command), new RegExp(`-c ${mount.target}\\b`));
    for (const name of DEFAULT_SERVICES) assert.equal(services[name].profiles, undefined, `${name} runs by default`);
    for (const name of CLUSTER_SERVICES) assert.deepEqual(services[name].profiles, ['cluster'], `${name} is in profile cluster`);
  });

  test('images', () => {
    for (const name of ['redis', ...CLUSTER_NODES, 'redis-cluster-init']) assert.equal(services[name].image, 'redis:7-alpine');
    assert.match(services.envoy.image, /^envoyproxy\/envoy:v1\.\d+/);
    assert.match(services.upstream.image, /^hashicorp\/http-echo/);
  });

  test('publishes Envoy on 10000, its admin on the host loopback, sluice on 8080/8081, and no host port twice', () => {
    assert.deepEqual(ports(services.envoy), [
      { ip: undefined, host: 10000, container: 10000 },
      { ip: '127.0.0.1', host: 9901, container: 9901 },
    ]);
    assert.deepEqual(
      ports(services.sluice).map((p) => [p.host, p.container]),
      [
        [8080, 8080],
        [8081, 8081],
      ],
    );
    assert.deepEqual(
      ports(services['sluice-cluster']).map((p) => p.container),
      [8080, 8081],
    );
    const hostPorts = Object.values(services).flatMap((s) => ports(s).map((p) => p.host));
    assert.equal(new Set(hostPorts).size, hostPorts.length, 'the cluster profile runs alongside the default services');
  });

  test('health checks where something waits on health', () => {
    for (const name of ['redis', ...CLUSTER_NODES]) assert.deepEqual(services[name].healthcheck.test, ['CMD', 'redis-cli', 'ping']);
    for (const name of SLUICE_SERVICES) assert.match(flat(services[name].healthcheck.test), /fetch\('http:\/\/127\.0\.0\.1:8080\/healthcheck'\)/);
    for (const [name, service] of Object.entries(services)) {
      for (const [dep, condition] of Object.entries(dependsOn(service))) {
        assert.ok(services[dep], `${name} depends on unknown service ${dep}`);
        if (condition === 'service_healthy') assert.ok(services[dep].healthcheck, `${name} waits for ${dep} to be healthy, which has no healthcheck`);
        if (services[name].profiles === undefined) assert.equal(services[dep].profiles, undefined, `${name} must not need profile services`);
      }
    }
  });

  test('start order: Redis healthy → sluice healthy → Envoy; cluster created → sluice-cluster', () => {
    assert.deepEqual(dependsOn(services.sluice), { redis: 'service_healthy' });
    assert.deepEqual(dependsOn(services.envoy), { sluice: 'service_healthy', upstream: 'service_started' });
    assert.deepEqual(dependsOn(services['redis-cluster-init']), Object.fromEntries(CLUSTER_NODES.map((n) => [n, 'service_healthy'])));
    assert.deepEqual(dependsOn(services['sluice-cluster']), { 'redis-cluster-init': 'service_completed_successfully' });
  });

  test('the Redis Cluster: three cluster-enabled primaries, created once by redis-cli', () => {
    for (const name of CLUSTER_NODES) assert.match(flat(services[name].command), /--cluster-enabled yes/);
    const init = flat(services['redis-cluster-init'].command);
    assert.match(init, /redis-cli --cluster create .* --cluster-yes/);
    for (const name of CLUSTER_NODES) assert.ok(init.includes(name), `cluster create names ${name}`);
    assert.equal(services['redis-cluster-init'].restart, 'no');
  });

  test('the sluice services are built from the Dockerfile', () => {
    for (const name of SLUICE_SERVICES) {
      const build = services[name].build;
      const context = typeof build === 'string' ? build : build.context;
      assert.equal(path.resolve(REPO, context), REPO);
      assert.ok(fs.existsSync(path.join(REPO, context, build.dockerfile ?? 'Dockerfile')));
    }
  });

  test('every environment variable given to sluice is one sluice reads, with a value it accepts', () => {
    const known = new Set([...SETTINGS.flatMap((s) => s.env), ...UPSTREAM_LAYOUT_ENV]);
    const cmd = JSON.parse(
      dockerfile()
        .filter((i) => i.op === 'CMD')
        .pop()!.args,
    ) as string[];
    for (const name of SLUICE_SERVICES) {
      const env = environment(services[name]);
      for (const variable of Object.keys(env)) assert.ok(known.has(variable), `${name}: sluice does not read ${variable}`);
      const settings = loadSettings(cmd.slice(1), env);
      assert.equal(settings.store, 'redis');
      assert.equal(settings.responseHeadersEnabled, true);
      assert.deepEqual(settings.configPaths, [env.CONFIG_PATH]);
    }
    const clustered = loadSettings([], environment(services['sluice-cluster']));
    assert.equal(clustered.redisType, 'cluster');
    assert.deepEqual(
      clustered.redisUrl.split(',').map((n) => n.split(':')[0]),
      CLUSTER_NODES,
    );
    assert.equal(loadSettings([], environment(services.sluice)).redisUrl, 'redis://redis:6379');
  });

  test('mounts the example config read-only where CONFIG_PATH points', () => {
    for (const name of SLUICE_SERVICES) {
      const target = environment(services[name]).CONFIG_PATH;
      const mount = volumes(services[name]).find((v) => v.target === target);
      assert.ok(mount, `${name}: nothing mounted at ${target}`);
      assert.equal(mount.readOnly, true);
      assert.ok(fs.statSync(path.join(REPO, mount.source)).isDirectory(), `${mount.source} exists`);
    }
  });

  test('agrees with envoy/envoy.yaml: the file Envoy reads, the hosts and ports it dials', () => {
    const mount = volumes(services.envoy).find((v) => v.source === './envoy/envoy.yaml');
    assert.ok(mount?.readOnly, 'envoy.yaml mounted read-only');
    assert.match(flat(services.envoy.command), new RegExp(`-c ${mount.target}\\b`));
    const envoy: Yaml = YAML.parse(readRepo('envoy/envoy.yaml'));
    const dialled = envoy.static_resources.clusters.map((c: Yaml) => c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address);
    const listening: Record<string, number> = {
      sluice: loadSettings([], environment(services.sluice)).grpcPort,
      upstream: Number(/-listen=:(\d+)/.exec(flat(services.upstream.command))![1]),
    };
    assert.deepEqual(Object.fromEntries(dialled.map((a: Yaml) => [a.address, a.port_value])), listening);
    const published = ports(services.envoy).map((p) => p.container);
    assert.ok(published.includes(envoy.static_resources.listeners[0].address.socket_address.port_value));
    assert.ok(published.includes(envoy.admin.address.socket_address.port_value));
  });
});

describe('Dockerfile', () => {
  const instructions = dockerfile();
  const last = Math.max(...instructions.map((i) => i.stage));
  const runtime = instructions.filter((i) => i.stage === last);

  test('is multi-stage: a build stage and a runtime stage', () => {
    const froms = instructions.filter((i) => i.op === 'FROM');
    assert.ok(froms.length >= 2);
    assert.match(froms[0].args, /^node:20\S* AS build$/i);
    const build = instructions.filter((i) => i.stage === 0 && i.op === 'RUN').map((i) => i.args);
    assert.ok(build.some((a) => /\bnpm ci\b/.test(a)) && build.some((a) => /\bnpm run build\b/.test(a)));
    assert.ok(runtime.some((i) => i.op === 'RUN' && /npm ci --omit=dev/.test(i.args)));
  });

  test('runs as a non-root user', () => {
    const user = runtime.filter((i) => i.op === 'USER').pop();
    assert.ok(user, 'the runtime stage sets USER');
    assert.doesNotMatch(user.args, /^(root|0)(:|$)/);
  });

  test('exposes 8080 and 8081 and health-checks /healthcheck', () => {
    const exposed = runtime.filter((i) => i.op === 'EXPOSE').flatMap((i) => i.args.split(/\s+/));
    assert.ok(exposed.includes('8080') && exposed.includes('8081'));
    const health = runtime.find((i) => i.op === 'HEALTHCHECK');
    assert.ok(health);
    assert.match(health.args, /CMD \["node", "-e", ".*fetch\('http:\/\/127\.0\.0\.1:8080\/healthcheck'\)/);
  });

  test('starts dist/src/main.js serve on /etc/sluice', () => {
    const entrypoint = JSON.parse(runtime.find((i) => i.op === 'ENTRYPOINT')!.args);
    assert.deepEqual(entrypoint, ['node', 'dist/src/main.js']);
    assert.ok(fs.existsSync(path.join(REPO, 'src/main.ts')));
    assert.deepEqual(JSON.parse(runtime.find((i) => i.op === 'CMD')!.args), ['serve', '--config', '/etc/sluice']);
  });

  test("installs envoyproxy/ratelimit's command, /bin/ratelimit, executable", () => {
    const install = runtime.find((i) => i.op === 'COPY' && /\/bin\/ratelimit$/.test(i.args));
    assert.ok(install, 'no COPY to /bin/ratelimit in the runtime stage');
    assert.match(install.args, /^--chmod=0755 deploy\/image\/ratelimit \/bin\/ratelimit$/);
    assert.ok((fs.statSync(path.join(REPO, 'deploy/image/ratelimit')).mode & 0o111) !== 0, 'deploy/image/ratelimit is executable in the repo');
    assert.ok(runtime.findIndex((i) => i.op === 'COPY' && i === install) < runtime.findIndex((i) => i.op === 'USER'), 'installed before USER drops root');
  });

  test('/bin/ratelimit starts sluice from the environment alone, as Envoy Gateway runs it', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-image-'));
    fs.mkdirSync(path.join(root, 'ratelimit/config'), { recursive: true });
    fs.writeFileSync(
      path.join(root, 'ratelimit/config/eg.yaml'),
      'domain: eg\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n',
    );
    // Envoy Gateway's environment (internal/infrastructure/kubernetes/ratelimit), file config,
    // ports free on this machine.
    const env = {
      PATH: process.env.PATH,
      SLUICE_HOME: REPO,
      RUNTIME_ROOT: root,
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_IGNOREDOTFILES: 'true',
      RUNTIME_WATCH_ROOT: 'false',
      LOG_LEVEL: 'info',
      USE_STATSD: 'false',
      GRPC_SERVER_TLS_CA_CERT: '/certs/ca.crt',
      PORT: '0',
      GRPC_PORT: '0',
      DEBUG_PORT: '0',
    };
    const child = spawn('/bin/sh', [path.join(REPO, 'deploy/image/ratelimit')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    const logs: Record<string, unknown>[] = [];
    const listening = new Promise<Record<string, unknown>>((resolve, reject) => {
      readline.createInterface({ input: child.stdout! }).on('line', (line) => {
        const l = JSON.parse(line) as Record<string, unknown>;
        logs.push(l);
        if (l.event === 'listening') resolve(l);
      });
      child.on('exit', (code) => reject(new Error(`exited with ${code}`)));
    });
    try {
      const { httpPort } = (await listening) as { httpPort: number };
      const ask = () =>
        fetch(`http://127.0.0.1:${httpPort}/json`, {
          method: 'POST',
          body: JSON.stringify({ domain: 'eg', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }),
        }).then((r) => r.json());
      assert.equal(((await ask()) as { overallCode: string }).overallCode, 'OK');
      assert.equal(((await ask()) as { overallCode: string }).overallCode, 'OVER_LIMIT');
      // Read by neither upstream nor sluice: said, not silently dropped.
      const warning = logs.find((l) => l.event === 'upstream_settings_not_read');
      assert.deepEqual(warning?.names, ['GRPC_SERVER_TLS_CA_CERT']);
    } finally {
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  test('copies into the runtime only what package.json publishes, from files that exist and are not dockerignored', () => {
    const published: string[] = JSON.parse(readRepo('package.json')).files;
    for (const copy of copies(instructions)) {
      if (copy.from !== undefined) {
        assert.deepEqual(copy.sources, ['/app/dist/src'], 'only the compiled service comes from the build stage');
        continue;
      }
      for (const source of copy.sources) {
        assert.ok(fs.existsSync(path.join(REPO, source)), `COPY ${source}: no such file in the repo`);
        assert.ok(!dockerIgnored(source), `COPY ${source}: excluded by .dockerignore`);
        if (copy.stage === last && !source.startsWith('package')) {
          assert.ok(
            published.some((p) => source === p || source.startsWith(p + '/')),
            `runtime COPY ${source} is not in package.json files`,
          );
        }
      }
    }
    for (const heavy of ['node_modules', 'dist']) assert.ok(dockerIgnored(heavy), `.dockerignore leaves out ${heavy}`);
  });
});
