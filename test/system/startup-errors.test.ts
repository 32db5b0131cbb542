import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { runCli } from '../support/process';

// A listener that cannot bind stops the start with exit code 2 and one line on stderr naming the
// setting as the user gave it (its flag, sluice's variable or upstream's), never a stack trace.

const CONFIG = ['--config', 'examples/config'];
// Every listener on a free port unless a case says otherwise.
const FREE = { GRPC_PORT: '0', HTTP_PORT: '0', ADMIN_PORT: '0', GRPC_HOST: '127.0.0.1', HOST: '127.0.0.1', ADMIN_HOST: '127.0.0.1' };

let taken: net.Server;
let port: number;
before(async () => {
  taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  port = (taken.address() as net.AddressInfo).port;
});
after(() => new Promise<void>((resolve) => taken.close(() => resolve())));

async function startFails(args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { code, stderr } = await runCli(['serve', ...CONFIG, ...args], { ...FREE, ...env });
  assert.equal(code, 2, stderr);
  const lines = stderr.trim().split('\n');
  assert.equal(lines.length, 1, `one line on stderr, got:\n${stderr}`);
  assert.doesNotMatch(stderr, /\n\s+at |Error:/);
  return lines[0];
}

describe('a port in use', () => {
  for (const impl of ['sluice', 'grpc-js']) {
    test(`gRPC (GRPC_SERVER_IMPL=${impl})`, async () => {
      const line = await startFails([], { GRPC_PORT: String(port), GRPC_SERVER_IMPL: impl });
      // grpc-js logs its own "E No address added" line before ours; only ours is sluice's.
      assert.equal(line, `sluice: GRPC_PORT=${port}: address 127.0.0.1:${port} is already in use`);
    });
  }

  test("HTTP, named PORT when that is upstream's name the user gave", async () => {
    const { HTTP_PORT: _, ...env } = FREE;
    const { code, stderr } = await runCli(['serve', ...CONFIG], { ...env, PORT: String(port) });
    assert.equal(code, 2);
    assert.equal(stderr.trim(), `sluice: PORT=${port}: address 127.0.0.1:${port} is already in use`);
  });

  test('admin, named by the flag it was given with', async () => {
    const line = await startFails(['--admin-port', String(port)], {});
    assert.equal(line, `sluice: --admin-port=${port}: address 127.0.0.1:${port} is already in use`);
  });

  test("upstream's Prometheus listener (PROMETHEUS_ADDR)", async () => {
    const line = await startFails([], { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: `127.0.0.1:${port}` });
    assert.equal(line, `sluice: PROMETHEUS_ADDR=127.0.0.1:${port}: address 127.0.0.1:${port} is already in use`);
  });

  test('WORKERS=2: the primary says it once and exits 2, without restarting workers', async () => {
    const { code, stdout, stderr } = await runCli(['serve', ...CONFIG], {
      ...FREE,
      GRPC_PORT: String(port),
      WORKERS: '2',
      STORE: 'redis',
      REDIS_URL: '127.0.0.1:1',
    });
    assert.equal(code, 2, stderr);
    assert.equal(stderr.trim(), `sluice: GRPC_PORT=${port}: address 127.0.0.1:${port} is already in use`);
    const events = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => (JSON.parse(l) as { event?: string }).event);
    assert.equal(events.filter((e) => e === 'worker_started').length, 2);
    assert.equal(events.filter((e) => e === 'worker_exit').length, 0);
  });
});

describe('an address that cannot be listened on', () => {
  test('not an address of this machine (EADDRNOTAVAIL)', async () => {
    // 192.0.2.0/24 is TEST-NET-1: documentation only, never a local address.
    const line = await startFails([], { GRPC_HOST: '192.0.2.1' });
    assert.equal(line, 'sluice: GRPC_HOST=192.0.2.1: address 192.0.2.1:0 is not an address of this machine');
  });

  test('a host name that does not resolve', async () => {
    const line = await startFails([], { HOST: 'no-such-host.invalid' });
    assert.equal(line, "sluice: HOST=no-such-host.invalid: 'no-such-host.invalid' is not a host name or address this machine can listen on");
  });
});

describe('configuration mistakes found while starting (SettingsError)', () => {
  test('GRPC_SERVER_USE_TLS without its certificate and key', async () => {
    const line = await startFails([], { GRPC_SERVER_USE_TLS: 'true' });
    assert.equal(line, 'sluice: GRPC_SERVER_USE_TLS needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY');
  });

  test('gRPC TLS files that cannot be read, named as given', async () => {
    const line = await startFails([], {
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: '/nonexistent/cert.pem',
      GRPC_SERVER_TLS_KEY: '/nonexistent/key.pem',
    });
    assert.equal(line, 'sluice: cannot read the gRPC TLS files GRPC_SERVER_TLS_CERT=/nonexistent/cert.pem, GRPC_SERVER_TLS_KEY=/nonexistent/key.pem');
  });

  test('a Redis TLS file that cannot be read', async () => {
    const line = await startFails([], { STORE: 'redis', REDIS_URL: 'rediss://127.0.0.1:1', REDIS_TLS_CACERT: '/nonexistent/ca.pem' });
    assert.match(line, /^sluice: REDIS_TLS_CACERT: cannot read '\/nonexistent\/ca\.pem': /);
  });
});
