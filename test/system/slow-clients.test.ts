import assert from 'node:assert/strict';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import { MAX_TTL_MS } from '../../src/algorithms/types';
import type { Algorithm } from '../../src/model';
import { defaultSettings, describeSettings } from '../../src/settings';
import { silentEvents } from '../../src/store/events';
import { MemoryStore } from '../../src/store/memory';
import { RedisStore } from '../../src/store/redis';
import { validateRedisUrl } from '../../src/store/redis/connection';
import type { LimitCheck, Store } from '../../src/store/store';
import { startApp } from '../support/app';
import { makeCerts } from '../support/certs';
import { startRedis, stopAll } from '../support/redis';

// Issue 9, items 7, 8, 11 and 12: slow HTTP clients, /json under TLS, REDIS_URL redaction, and
// the algorithms' numeric edges (through both stores).

const RULES = 'domain: hard\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 100 }\n';
const BODY = JSON.stringify({ domain: 'hard', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-hard-'));
  fs.writeFileSync(path.join(dir, 'hard.yaml'), RULES);
  return dir;
}

// Resolves with how long the socket stayed open, or `undefined` if it was still open at `limitMs`.
function openedFor(socket: net.Socket, limitMs: number): Promise<number | undefined> {
  const start = Date.now();
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), limitMs);
    socket.on('close', () => (clearTimeout(timer), resolve(Date.now() - start)));
    socket.on('error', () => {});
  });
}

describe('slow HTTP clients are cut off (item 7)', () => {
  test('50 sockets trickling headers and 10 trickling a body are all closed within the timeouts', async () => {
    const s = await startApp({ httpHeadersTimeoutMs: 300, httpRequestTimeoutMs: 600, configPaths: [configDir()] });
    const sockets: net.Socket[] = [];
    const timers: NodeJS.Timeout[] = [];
    try {
      const waits: Promise<number | undefined>[] = [];
      for (let i = 0; i < 60; i++) {
        const socket = net.connect(s.httpPort, '127.0.0.1');
        sockets.push(socket);
        waits.push(openedFor(socket, 4000));
        const body = i >= 50;
        socket.write(body ? `POST /json HTTP/1.1\r\nHost: x\r\nContent-Length: ${BODY.length}\r\n\r\n` : 'GET /livez HTTP/1.1\r\n');
        let n = 0;
        timers.push(setInterval(() => socket.writable && socket.write(body ? BODY[n++ % BODY.length] : `X-Slow-${n++}: 1\r\n`), 50));
      }
      const open = await Promise.all(waits);
      assert.equal(open.filter((ms) => ms === undefined).length, 0, 'sockets still open after 4 s');
      assert.ok(Math.max(...(open as number[]).slice(0, 50)) < 2000, `headers: closed after ${Math.max(...(open as number[]).slice(0, 50))} ms`);
      // A normal client is unaffected.
      assert.equal((await s.http('/livez')).status, 200);
    } finally {
      timers.forEach(clearInterval);
      sockets.forEach((x) => x.destroy());
      await s.stop();
    }
  });

  test('HTTP_MAX_CONNECTIONS caps open connections per listener', async () => {
    const s = await startApp({ httpMaxConnections: 5 });
    const sockets = Array.from({ length: 10 }, () => net.connect(s.httpPort, '127.0.0.1'));
    try {
      const open = await Promise.all(sockets.map((x) => openedFor(x, 500)));
      assert.equal(open.filter((ms) => ms === undefined).length, 5);
    } finally {
      sockets.forEach((x) => x.destroy());
      await s.stop();
    }
  });

  test('a request timeout shorter than the headers timeout is a settings error', async () => {
    const { loadSettings } = await import('../../src/settings');
    assert.throws(() => loadSettings(['--http-headers-timeout', '10s', '--http-request-timeout', '5s'], {}), /HTTP_REQUEST_TIMEOUT/);
  });
});

describe('POST /json under gRPC TLS (item 8)', () => {
  const certs = makeCerts();
  certs.issue('server');
  certs.issue('client');
  const ca = fs.readFileSync(certs.file('ca.crt'));
  const tlsSettings = {
    grpcTls: true,
    grpcTlsCert: certs.file('server.crt'),
    grpcTlsKey: certs.file('server.key'),
    grpcTlsClientCa: certs.file('ca.crt'),
    tlsReloadMs: 200,
    configPaths: [configDir()],
  };

  function request(port: number, method: string, p: string, withCert: boolean): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const cert = withCert ? { cert: fs.readFileSync(certs.file('client.crt')), key: fs.readFileSync(certs.file('client.key')) } : {};
      const req = https.request({ host: '127.0.0.1', port, method, path: p, ca, agent: false, ...cert }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end(method === 'POST' ? BODY : undefined);
    });
  }

  const serial = (port: number) =>
    new Promise<string>((resolve, reject) => {
      const socket = tls.connect({ host: '127.0.0.1', port, ca }, () => (resolve(socket.getPeerCertificate().serialNumber), socket.end()));
      socket.on('error', reject);
    });

  test('HTTPS with the gRPC certificate; /json needs a client certificate, health and metrics do not; plaintext reaches health and metrics only', async () => {
    const s = await startApp(tlsSettings);
    try {
      const plainJson = await s.http('/json', { method: 'POST', body: BODY });
      assert.equal(plainJson.status, 403);
      assert.match(await plainJson.text(), /HTTPS is required/);
      // Upstream's HTTP port is plaintext: probes written for it (Envoy Gateway's) keep working.
      assert.equal((await s.http('/healthcheck')).status, 200);
      assert.equal((await s.http('/metrics')).status, 200);
      assert.equal((await request(s.httpPort, 'POST', '/json', true)).status, 200);
      const anonymous = await request(s.httpPort, 'POST', '/json', false);
      assert.equal(anonymous.status, 403);
      assert.equal((await request(s.httpPort, 'GET', '/healthcheck', false)).status, 200);
      assert.equal((await request(s.httpPort, 'GET', '/metrics', false)).status, 200);
      // The admin listener (localhost) stays plaintext.
      assert.equal((await s.admin('/healthcheck')).status, 200);
      // A rotated certificate is served to new connections.
      const first = await serial(s.httpPort);
      certs.issue('server');
      const deadline = Date.now() + 3000;
      while ((await serial(s.httpPort)) === first) {
        assert.ok(Date.now() < deadline, 'rotated certificate not served within 3 s');
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal((await request(s.httpPort, 'POST', '/json', true)).status, 200);
    } finally {
      await s.stop();
    }
  });

  test('HTTP_PLAINTEXT keeps the HTTP port plaintext when asked explicitly', async () => {
    const s = await startApp({ ...tlsSettings, httpPlaintext: true });
    try {
      assert.equal((await s.http('/json', { method: 'POST', body: BODY })).status, 200);
    } finally {
      await s.stop();
    }
  });
});

describe('REDIS_URL redaction (item 11)', () => {
  const cases: [string, string][] = [
    ['redis://:se@cret@host:6379', 'redis://:[redacted]@host:6379'],
    ['redis://user:p@ss:w/rd@host:6379/2', 'redis://user:[redacted]@host:6379/2'],
    ['rediss://user:plain@host:6380', 'rediss://user:[redacted]@host:6380'],
    ['redis://tokenonly@host:6379', 'redis://[redacted]@host:6379'],
    ['redis://host:6379', 'redis://host:6379'],
  ];
  test('describeSettings keeps nothing between // and the last @ but the user name', () => {
    for (const [url, want] of cases) assert.equal(describeSettings(defaultSettings({ redisUrl: url })).redisUrl, want);
  });
  test('a REDIS_URL error message does not show the password either', () => {
    const s = defaultSettings({ redisUrl: 'redis://:se@cret@host:6379', redisType: 'cluster' });
    assert.throws(
      () => validateRedisUrl(s),
      (e: Error) => e.message.includes('redis://:[redacted]@host:6379') && !/se@|cret/.test(e.message),
    );
  });
});

describe('algorithm edges through both stores (item 12)', () => {
  let port = 0;
  const clients: Redis[] = [];
  before(async () => {
    port = (await startRedis()).port;
  });
  after(async () => {
    clients.forEach((c) => c.disconnect());
    await stopAll();
  });
  const redisClient = () => {
    const c = new Redis({ port, host: '127.0.0.1' });
    clients.push(c);
    return c;
  };
  const readyClient = async () => {
    const c = redisClient();
    if (c.status !== 'ready') await new Promise((resolve) => c.once('ready', resolve));
    return c;
  };
  const check = (key: string, algorithm: Algorithm, limit: number, periodMs: number, burst = limit, hits = 1): LimitCheck => ({
    key,
    algorithm,
    limit,
    periodMs,
    burst,
    hits,
    mode: 'enforce',
  });
  const stores: { name: string; make: (clock: ManualClock) => Promise<Store> }[] = [
    { name: 'memory', make: async (clock) => new MemoryStore({ clock }) },
    {
      name: 'redis',
      make: async (clock) => new RedisStore({ clients: [await readyClient()], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 'hard:' }),
    },
  ];
  const once = async (store: Store, c: LimitCheck) => (await store.decide([c], { countDeniedHits: false })).outcomes[0];

  for (const { name, make } of stores) {
    test(`${name}: a full burst at an epoch-ms instant for every per-second limit 1..200 (gcra, token bucket)`, async () => {
      const clock = new ManualClock(1_700_000_000_123);
      const store = await make(clock);
      try {
        const wrong: string[] = [];
        for (const algorithm of ['gcra', 'token_bucket'] as const) {
          // One request per key with limit + 1 shadow-mode checks of that key: each sees the hits of
          // those before it (one script call on Redis, so no key can expire in real time meanwhile,
          // while the explicit clock stands still).
          for (let limit = 1; limit <= 200; limit++) {
            const c: LimitCheck = { ...check(`${name}:burst:${algorithm}:${limit}`, algorithm, limit, 1000), mode: 'shadow' };
            const d = await store.decide(
              Array.from({ length: limit + 1 }, () => c),
              { countDeniedHits: false },
            );
            const admitted = d.outcomes.filter((o) => o.allowed).length;
            if (admitted !== limit || d.outcomes[limit].allowed) wrong.push(`${algorithm} ${limit}: ${admitted}`);
          }
        }
        assert.deepEqual(wrong, []);
      } finally {
        await store.close();
      }
    });

    test(`${name}: a token bucket with requests_per_unit 0 never refills`, async () => {
      const clock = new ManualClock(1_700_000_000_000);
      const store = await make(clock);
      const c = check(`${name}:rate0`, 'token_bucket', 0, 1000, 3);
      try {
        const first = [];
        for (let i = 0; i < 4; i++) first.push((await once(store, c)).allowed);
        assert.deepEqual(first, [true, true, true, false]);
        for (const step of [1000, 1000, 86_400_000]) {
          clock.advance(step);
          const o = await once(store, c);
          assert.equal(o.allowed, false);
          assert.equal(o.retryAfterMs, Infinity);
        }
        if (name === 'redis') {
          const ttl = await redisClient().pttl(c.key);
          assert.ok(ttl > 86_400_000 && ttl <= MAX_TTL_MS, `PTTL ${ttl}`);
        }
      } finally {
        await store.close();
      }
    });

    test(`${name}: a TTL beyond 1e17 ms is clamped, and every counter of the request is written`, async () => {
      const clock = new ManualClock(1_700_000_000_000);
      const store = await make(clock);
      const normal = check(`${name}:ttl-normal`, 'fixed_window', 10, 60_000);
      const huge = check(`${name}:ttl-huge`, 'fixed_window', 10, 2e17);
      try {
        const d = await store.decide([normal, huge], { countDeniedHits: false });
        assert.equal(d.admitted, true);
        assert.deepEqual(
          d.outcomes.map((o) => o.remaining),
          [9, 9],
        );
        const again = await store.decide([normal, huge], { countDeniedHits: false });
        assert.deepEqual(
          again.outcomes.map((o) => o.remaining),
          [8, 8],
        );
        if (name === 'redis') {
          const r = redisClient();
          const ttls = await Promise.all([normal, huge].map((c) => r.pttl(c.key)));
          assert.ok(ttls[0] > 0 && ttls[0] <= 60_000, `PTTL ${ttls[0]}`);
          assert.ok(ttls[1] > 60_000 && ttls[1] <= MAX_TTL_MS, `PTTL ${ttls[1]}`);
        }
      } finally {
        await store.close();
      }
    });
  }
});
