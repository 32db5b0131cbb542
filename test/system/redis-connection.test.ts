import assert from 'node:assert/strict';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, describe, test } from 'node:test';
import { RateLimitResponse_Code as Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../src/logger';
import type { Settings } from '../../src/settings';
import { d, startApp } from '../support/app';
import { makeCerts } from '../support/certs';
import { freePort, startCluster, startRedis, startSentinelSet, stopAll } from '../support/redis';

// The connection settings, end to end: the real service configured as a user would, against
// real Redis servers (ACL users, TLS, mutual TLS, Sentinel, Cluster, pool size).

const EXAMPLE = path.resolve(__dirname, '../../../examples/config');
after(() => stopAll());

async function decideThrough(settings: Partial<Settings>): Promise<{ code: Code; logs: string }> {
  let logs = '';
  const sink = new Writable({ write: (c: Buffer, _e, done) => ((logs += c.toString()), done()) });
  // Fallback deny: health then tracks Redis itself, and an answer proves the connection works.
  const s = await startApp(
    { configPaths: [EXAMPLE], store: 'redis', fallbackPolicy: 'deny', storeDeadlineMs: 2000, ...settings },
    { logger: createLogger('info', sink) },
  );
  try {
    const deadline = Date.now() + 10_000;
    while (s.app.health.status !== 'SERVING' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(s.app.health.status, 'SERVING', logs);
    const r = await s.call({ domain: 'edge', descriptors: [d(['tenant', `conn-${Math.random()}`])] });
    return { code: r.overallCode, logs };
  } finally {
    await s.stop();
  }
}

describe('Redis connection settings', () => {
  test('ACL user and password, in REDIS_URL or REDIS_AUTH; never logged', async () => {
    const node = await startRedis({ args: ['--user', 'default', 'off', '--user', 'sluice', 'on', '>s3cret-pw', '~*', '&*', '+@all'] });
    const viaUrl = await decideThrough({ redisUrl: `redis://sluice:s3cret-pw@127.0.0.1:${node.port}` });
    assert.equal(viaUrl.code, Code.OK);
    const viaAuth = await decideThrough({ redisUrl: `127.0.0.1:${node.port}`, redisAuth: 'sluice:s3cret-pw' });
    assert.equal(viaAuth.code, Code.OK);
    assert.doesNotMatch(viaUrl.logs + viaAuth.logs, /s3cret-pw/);
    assert.match(viaUrl.logs, /\[redacted\]/);
  });

  test("a password holding '@', ':', '/', '#', '?' and '%', pasted unencoded in REDIS_URL, connects and is never logged", async () => {
    const password = 'p@ss:w/rd#1?%zz@é-Kx9Q';
    const node = await startRedis({ args: ['--requirepass', password] });
    const unencoded = await decideThrough({ redisUrl: `redis://:${password}@127.0.0.1:${node.port}/1` });
    assert.equal(unencoded.code, Code.OK);
    const encoded = await decideThrough({ redisUrl: `redis://:${encodeURIComponent(password)}@127.0.0.1:${node.port}` });
    assert.equal(encoded.code, Code.OK);
    assert.doesNotMatch(unencoded.logs + encoded.logs, /Kx9Q|p@ss|w\/rd|%zz/);
    assert.match(unencoded.logs, new RegExp(`redis://:\\[redacted\\]@127\\.0\\.0\\.1:${node.port}/1`));
  });

  test('TLS with a CA, and mutual TLS with a client certificate', async () => {
    const certs = makeCerts();
    certs.issue('server');
    certs.issue('client');
    const f = certs.file;
    const tlsPort = await freePort();
    const mtlsPort = await freePort();
    const tlsArgs = ['--tls-cert-file', f('server.crt'), '--tls-key-file', f('server.key'), '--tls-ca-cert-file', f('ca.crt')];
    await startRedis({ args: ['--tls-port', String(tlsPort), ...tlsArgs, '--tls-auth-clients', 'no'] });
    await startRedis({ args: ['--tls-port', String(mtlsPort), ...tlsArgs, '--tls-auth-clients', 'yes'] });
    const tls = await decideThrough({ redisUrl: `rediss://127.0.0.1:${tlsPort}`, redisTlsCaCert: f('ca.crt') });
    assert.equal(tls.code, Code.OK);
    const mtls = await decideThrough({
      redisUrl: `127.0.0.1:${mtlsPort}`,
      redisTls: true,
      redisTlsCaCert: f('ca.crt'),
      redisTlsClientCert: f('client.crt'),
      redisTlsClientKey: f('client.key'),
    });
    assert.equal(mtls.code, Code.OK);
  });

  test('Sentinel, in upstream form "<master>,host:port"', async () => {
    const set = await startSentinelSet();
    const r = await decideThrough({ redisType: 'sentinel', redisUrl: `${set.masterName},127.0.0.1:${set.sentinel.port}` });
    assert.equal(r.code, Code.OK);
  });

  test('Cluster, from one seed node', async () => {
    const cluster = await startCluster();
    const r = await decideThrough({ redisType: 'cluster', redisUrl: `127.0.0.1:${cluster.nodes[0].port}` });
    assert.equal(r.code, Code.OK);
  });

  test('REDIS_POOL_SIZE opens that many connections', async () => {
    const node = await startRedis();
    const s = await startApp({
      configPaths: [EXAMPLE],
      store: 'redis',
      fallbackPolicy: 'deny',
      storeDeadlineMs: 2000,
      redisUrl: `127.0.0.1:${node.port}`,
      redisPoolSize: 3,
    });
    try {
      const deadline = Date.now() + 10_000;
      while (s.app.health.status !== 'SERVING' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      for (let i = 0; i < 6; i++) await s.call({ domain: 'edge', descriptors: [d(['tenant', 'pool'])] });
      const clients = (await node.cli('CLIENT', 'LIST')).split('\n').filter((l) => !l.includes('cmd=client'));
      assert.equal(clients.length, 3, clients.join('\n'));
    } finally {
      await s.stop();
    }
  });
});
