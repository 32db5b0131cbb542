import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { callRls, closing, d } from '../support/app';
import { makeCerts } from '../support/certs';
import { spawnServer } from '../support/process';
import { startRedis, stopAll } from '../support/redis';

// Running sluice as an operator does: config edits picked up live (including Kubernetes'
// ConfigMap symlink swap), SIGTERM while calls are in flight, TLS and mTLS with certificate
// rotation, the explain endpoint.

after(() => stopAll());

const rules = (n: number) => `domain: ops\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: ${n} }\n`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function limitOf(client: RateLimitServiceClient): Promise<number | undefined> {
  const r = await callRls(client, { domain: 'ops', descriptors: [d(['k', `probe-${Math.random()}`])] });
  return r.statuses[0].currentLimit?.requestsPerUnit;
}

async function until(check: () => Promise<boolean>, ms: number): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < ms) {
    if (await check()) return Date.now() - start;
    await sleep(20);
  }
  throw new Error(`not within ${ms} ms`);
}

describe('hot reload', () => {
  test('a valid edit is live within a second; an invalid one changes nothing and is reported', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-watch-'));
    const file = path.join(dir, 'ops.yaml');
    fs.writeFileSync(file, rules(10));
    const server = await spawnServer(['--config', dir]);
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      assert.equal(await limitOf(client), 10);
      const start = Date.now();
      fs.writeFileSync(file, rules(20));
      await until(async () => (await limitOf(client)) === 20, 1000);
      assert.ok(Date.now() - start < 1000);
      fs.writeFileSync(file, rules(30).replace('requests_per_unit', 'requests_per_unitt'));
      const rejected = await server.waitForLog((l) => l.event === 'config_rejected', 2000);
      assert.equal(rejected.keptPrevious, true);
      assert.ok(server.logs.some((l) => l.event === 'config_error' && String(l.error).includes("unknown key 'requests_per_unitt'")));
      assert.equal(await limitOf(client), 20);
      const metrics = await (await fetch(`http://127.0.0.1:${server.httpPort}/metrics`, closing())).text();
      assert.match(metrics, /^sluice_config_loads_total\{result="error"\} 1$/m);
      assert.match(metrics, /^sluice_config_loads_total\{result="success"\} 2$/m);
    } finally {
      client.close();
      await server.stop();
    }
  });

  test('a Kubernetes ConfigMap update (the ..data symlink swap) reloads', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-configmap-'));
    const version = (name: string, n: number) => {
      fs.mkdirSync(path.join(dir, name));
      fs.writeFileSync(path.join(dir, name, 'ops.yaml'), rules(n));
    };
    version('..2026_11_30_01', 10);
    fs.symlinkSync('..2026_11_30_01', path.join(dir, '..data'));
    fs.symlinkSync('..data/ops.yaml', path.join(dir, 'ops.yaml'));
    const server = await spawnServer(['--config', dir]);
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      assert.equal(await limitOf(client), 10);
      version('..2026_11_30_02', 40);
      fs.symlinkSync('..2026_11_30_02', path.join(dir, '..data_tmp'));
      fs.renameSync(path.join(dir, '..data_tmp'), path.join(dir, '..data'));
      fs.rmSync(path.join(dir, '..2026_11_30_01'), { recursive: true });
      await until(async () => (await limitOf(client)) === 40, 1000);
    } finally {
      client.close();
      await server.stop();
    }
  });
});

describe('graceful shutdown', () => {
  test('SIGTERM with calls in flight: health NOT_SERVING at once, every in-flight call completes, exit 0', async () => {
    const redis = await startRedis();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-term-'));
    fs.writeFileSync(path.join(dir, 'ops.yaml'), rules(1000));
    const server = await spawnServer([
      '--config',
      dir,
      '--store',
      'redis',
      '--redis-url',
      `127.0.0.1:${redis.port}`,
      '--store-deadline',
      '5s',
      '--fallback-policy',
      'deny',
    ]);
    // Ready as a whole (every worker of WORKERS=auto): a worker still starting when Redis freezes
    // would keep the set NOT_SERVING already, and the SIGTERM would change nothing to see.
    for (const until = Date.now() + 20_000; (await fetch(`http://127.0.0.1:${server.httpPort}/healthcheck`, closing())).status !== 200; await sleep(20)) {
      assert.ok(Date.now() < until, 'not ready within 20 s');
    }
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    assert.equal(await limitOf(client), 1000);
    // A frozen Redis keeps these calls in flight until we let it go.
    redis.pause();
    const inFlight = Array.from({ length: 20 }, (_, i) => callRls(client, { domain: 'ops', descriptors: [d(['k', `f${i}`])] }));
    await sleep(200);
    server.child.kill('SIGTERM');
    await server.waitForLog((l) => l.event === 'health' && l.status === 'NOT_SERVING', 2000);
    await sleep(300);
    assert.equal(server.child.exitCode, null, 'exited with calls in flight');
    redis.resume();
    const answers = await Promise.all(inFlight);
    assert.ok(answers.every((a) => a.overallCode === Code.OK));
    assert.equal(await server.stop(), 0);
    client.close();
  });
});

describe('TLS on the gRPC listener', () => {
  // The serial number of the certificate the server presents on a new connection.
  const peerSerial = (port: number, certs: ReturnType<typeof makeCerts>) =>
    new Promise<string>((resolve, reject) => {
      const options = {
        host: '127.0.0.1',
        port,
        ca: fs.readFileSync(certs.file('ca.crt')),
        cert: fs.readFileSync(certs.file('client.crt')),
        key: fs.readFileSync(certs.file('client.key')),
        ALPNProtocols: ['h2'],
      };
      const socket = tls.connect(options, () => {
        resolve(socket.getPeerCertificate().serialNumber);
        socket.end();
      });
      socket.on('error', reject);
    });

  test('TLS, mTLS, and a rotated certificate picked up without a restart', async () => {
    const certs = makeCerts();
    certs.issue('server');
    certs.issue('client');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-tlscfg-'));
    fs.writeFileSync(path.join(dir, 'ops.yaml'), rules(10));
    const server = await spawnServer([
      '--config',
      dir,
      '--grpc-tls',
      '--grpc-tls-cert',
      certs.file('server.crt'),
      '--grpc-tls-key',
      certs.file('server.key'),
      '--grpc-tls-client-ca',
      certs.file('ca.crt'),
      '--tls-reload-interval',
      '200ms',
    ]);
    const ca = fs.readFileSync(certs.file('ca.crt'));
    const mtls = grpc.credentials.createSsl(ca, fs.readFileSync(certs.file('client.key')), fs.readFileSync(certs.file('client.crt')));
    const address = `127.0.0.1:${server.grpcPort}`;
    try {
      const good = new RateLimitServiceClient(address, mtls);
      assert.equal(await limitOf(good), 10);
      good.close();
      const noClientCert = new RateLimitServiceClient(address, grpc.credentials.createSsl(ca));
      await assert.rejects(limitOf(noClientCert), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE);
      noClientCert.close();
      const plain = new RateLimitServiceClient(address, grpc.credentials.createInsecure());
      await assert.rejects(limitOf(plain));
      plain.close();
      const before = await peerSerial(server.grpcPort, certs);
      certs.issue('server');
      await until(async () => (await peerSerial(server.grpcPort, certs)) !== before, 3000);
      const after = new RateLimitServiceClient(address, mtls, { 'grpc.use_local_subchannel_pool': 1 });
      assert.equal(await limitOf(after), 10);
      after.close();
    } finally {
      await server.stop();
    }
  });
});

describe('explain endpoint (admin port, localhost)', () => {
  test('shows the rule, key, counter state and decision, and consumes nothing', async () => {
    const server = await spawnServer(['--config', path.resolve(__dirname, '../../../examples/config')]);
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    const body = JSON.stringify({
      domain: 'edge',
      descriptors: [{ entries: [{ key: 'tenant', value: 'explained' }] }, { entries: [{ key: 'nothing', value: 'x' }] }],
    });
    const explain = async () => (await (await fetch(`http://127.0.0.1:${server.adminPort}/explain`, closing({ method: 'POST', body }))).json()) as any;
    try {
      for (let i = 0; i < 3; i++) await callRls(client, { domain: 'edge', descriptors: [d(['tenant', 'explained'])] });
      // Time moves between the calls: compare all but the reset times.
      const timeless = (e: any) => JSON.stringify(e, (k, v) => (k === 'resetMs' ? undefined : v));
      const first = await explain();
      const second = await explain();
      assert.equal(timeless(first), timeless(second), 'explain consumed something');
      assert.equal(first.consumed, false);
      const [t, none] = first.descriptors;
      assert.equal(t.rule.name, 'tenant_free');
      assert.ok(String(t.rule.source.file).endsWith('examples/config/edge.yaml'));
      assert.equal(t.key, 'sluice:{edge|tenant=explained}|fixed_window:60000');
      assert.equal(t.usedNow, 3);
      assert.equal(t.wouldAllow, true);
      assert.equal(t.remaining, 7);
      assert.equal(none.rule, null);
      const real = await callRls(client, { domain: 'edge', descriptors: [d(['tenant', 'explained'])] });
      assert.equal(real.statuses[0].limitRemaining, 6);
      assert.equal((await fetch(`http://127.0.0.1:${server.httpPort}/explain`, closing({ method: 'POST', body }))).status, 404);
      const listening = server.logs.find((l) => l.event === 'listening');
      assert.ok(listening);
    } finally {
      client.close();
      await server.stop();
    }
  });
});
