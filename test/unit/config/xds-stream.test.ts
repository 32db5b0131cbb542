import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { Writable } from 'node:stream';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { type DeepPartial, type RateLimitConfig, RateLimitUnit } from '../../../src/gen/ratelimit/config/ratelimit/v3/rls_conf';
import { createLogger } from '../../../src/logger';
import type { Settings } from '../../../src/settings';
import { type ControlPlane, type ReceivedRequest, startControlPlane } from '../../support/ads-server';
import { d, type Running, startApp } from '../../support/app';
import { type Certs, makeCerts } from '../../support/certs';

// Config over xDS (issue 15): sluice against a control plane written here, over mTLS.

let certs: Certs;
before(() => {
  certs = makeCerts();
  certs.issue('server');
  certs.issue('client');
});
after(() => fs.rmSync(certs.dir, { recursive: true, force: true }));

function serverCredentials(): grpc.ServerCredentials {
  const pair = { cert_chain: fs.readFileSync(certs.file('server.crt')), private_key: fs.readFileSync(certs.file('server.key')) };
  // true: a client without a certificate signed by the CA is refused (mTLS).
  return grpc.ServerCredentials.createSsl(fs.readFileSync(certs.file('ca.crt')), [pair], true);
}

function xdsSettings(port: number, more: Partial<Settings> = {}): Partial<Settings> {
  return {
    configType: 'grpc_xds_sotw',
    xdsServerUrl: `127.0.0.1:${port}`,
    xdsNodeId: 'envoy-ratelimit',
    xdsNodeMetadata: ['team=edge'],
    xdsAdditionalHeaders: ['x-token:s3cret'],
    xdsTls: true,
    xdsTlsCaCert: certs.file('ca.crt'),
    xdsTlsClientCert: certs.file('client.crt'),
    xdsTlsClientKey: certs.file('client.key'),
    xdsTlsSan: 'localhost',
    xdsBackoffInitialMs: 20,
    xdsBackoffMaxMs: 200,
    ...more,
  };
}

function limitConfig(domain: string, perMinute: number): DeepPartial<RateLimitConfig> {
  return { name: domain, domain, descriptors: [{ key: 'tenant', rateLimit: { unit: RateLimitUnit.MINUTE, requestsPerUnit: perMinute } }] };
}

const isAck = (version: string) => (r: ReceivedRequest) => r.versionInfo === version && r.responseNonce !== '' && r.errorDetail === undefined;

// Codes of `n` calls for one tenant, sent one after the other.
async function codes(s: Running, domain: string, tenant: string, n: number): Promise<Code[]> {
  const out: Code[] = [];
  for (let i = 0; i < n; i++) out.push((await s.call({ domain, descriptors: [d(['tenant', tenant])] })).overallCode);
  return out;
}

const pause = () => new Promise((r) => setTimeout(r, 10));

async function acks(cp: ControlPlane, version: string, count: number): Promise<void> {
  while (cp.requests.filter(isAck(version)).length < count) await pause();
}

function metric(text: string, name: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function capture(): { logger: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write: (chunk, _e, cb) => (
      lines.push(
        ...String(chunk)
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l)),
      ),
      cb()
    ),
  });
  return { logger: createLogger('info', sink), lines };
}

describe('config over xDS (CONFIG_TYPE=GRPC_XDS_SOTW)', () => {
  test('first push, update, NACK of an invalid push, /rlconfig and metrics; over mTLS', { timeout: 30_000 }, async () => {
    const cp = await startControlPlane({ credentials: serverCredentials() });
    const s = await startApp(xdsSettings(cp.port));
    try {
      const subscribe = await cp.waitForRequest((r) => r.responseNonce === '');
      assert.equal(subscribe.typeUrl, 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig');
      assert.deepEqual(subscribe.resourceNames, [], 'a wildcard subscription');
      assert.equal(subscribe.node?.id, 'envoy-ratelimit');
      assert.deepEqual(subscribe.node?.metadata, { team: 'edge' });
      assert.equal(subscribe.metadata['x-token'], 's3cret');
      assert.equal((await s.http('/healthcheck')).status, 500, 'not ready before the first config');

      const nonce1 = cp.push('v1', [limitConfig('edge', 2)]);
      assert.equal((await cp.waitForRequest(isAck('v1'))).responseNonce, nonce1);
      assert.deepEqual(await codes(s, 'edge', 'a', 3), [Code.OK, Code.OK, Code.OVER_LIMIT]);
      assert.equal((await s.http('/healthcheck')).status, 200);
      assert.match(await (await s.admin('/rlconfig')).text(), /edge\.tenant: unit=MINUTE requests_per_unit=2/);

      // An update applies without a restart (tenant b is fresh; the new limit is 4).
      cp.push('v2', [limitConfig('edge', 4)]);
      await cp.waitForRequest(isAck('v2'));
      assert.deepEqual(await codes(s, 'edge', 'b', 5), [Code.OK, Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT]);

      // Invalid: a unit that does not exist. NACKed with the compiler's reason; v2 keeps deciding.
      const bad = limitConfig('edge', 1);
      bad.descriptors![0].rateLimit!.unit = RateLimitUnit.UNKNOWN;
      const nonce3 = cp.push('v3', [bad]);
      const nack = await cp.waitForRequest((r) => r.responseNonce === nonce3);
      assert.equal(nack.versionInfo, 'v2', 'a NACK names the version still served');
      assert.match(nack.errorDetail?.message ?? '', /xds:edge: invalid rate limit unit 'UNKNOWN'/);
      assert.deepEqual(await codes(s, 'edge', 'c', 5), [Code.OK, Code.OK, Code.OK, Code.OK, Code.OVER_LIMIT]);

      const metrics = await (await s.http('/metrics')).text();
      assert.equal(metric(metrics, 'ratelimit_service_config_load_success'), 2);
      assert.equal(metric(metrics, 'ratelimit_service_config_load_error'), 1);
      const explain = (await (
        await s.admin('/explain', { method: 'POST', body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: 'z' }] }] }) })
      ).json()) as Record<string, unknown>;
      assert.match(JSON.stringify(explain), /xds:edge/, '/explain names the pushed resource as the rule source');
    } finally {
      await s.stop();
      await cp.stop();
    }
  });

  test('the control plane restarts mid-run: no decision lost, the client resubscribes, a new push applies', { timeout: 30_000 }, async () => {
    let cp: ControlPlane = await startControlPlane({ credentials: serverCredentials() });
    const port = cp.port;
    const s = await startApp(xdsSettings(port));
    try {
      cp.push('v1', [limitConfig('edge', 1000)]);
      await cp.waitForRequest(isAck('v1'));
      await cp.stop();
      // While no control plane exists, every call is still decided by v1.
      assert.deepEqual(await codes(s, 'edge', 'a', 20), Array(20).fill(Code.OK));
      cp = await startControlPlane({ port, credentials: serverCredentials() });
      const resubscribe = await cp.waitForRequest((r) => r.responseNonce === '');
      assert.equal(resubscribe.versionInfo, 'v1', 'resubscribes with the version last ACKed');
      assert.deepEqual(await codes(s, 'edge', 'a', 5), Array(5).fill(Code.OK));
      cp.push('v2', [limitConfig('edge', 1)]);
      await cp.waitForRequest(isAck('v2'));
      assert.deepEqual(await codes(s, 'edge', 'b', 2), [Code.OK, Code.OVER_LIMIT]);
    } finally {
      await s.stop();
      await cp.stop();
    }
  });

  test('FORCE_START_WITHOUT_INITIAL_CONFIG: ready at once, every domain unknown (OK) until the first push', { timeout: 30_000 }, async () => {
    const cp = await startControlPlane({ credentials: serverCredentials() });
    const s = await startApp(xdsSettings(cp.port, { forceStartWithoutInitialConfig: true }));
    try {
      assert.equal((await s.http('/healthcheck')).status, 200);
      const before = await s.call({ domain: 'edge', descriptors: [d(['tenant', 'a'])] });
      assert.equal(before.overallCode, Code.OK);
      assert.deepEqual(
        before.statuses.map((x) => x.code),
        [Code.OK],
      );
      cp.push('v1', [limitConfig('edge', 1)]);
      await cp.waitForRequest(isAck('v1'));
      assert.deepEqual(await codes(s, 'edge', 'a', 2), [Code.OK, Code.OVER_LIMIT]);
    } finally {
      await s.stop();
      await cp.stop();
    }
  });

  test('without it, calls are UNAVAILABLE until the first config; HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED wants a domain', { timeout: 30_000 }, async () => {
    const cp = await startControlPlane({ credentials: serverCredentials() });
    const s = await startApp(xdsSettings(cp.port, { forceStartWithoutInitialConfig: true, healthyWithAtLeastOneConfigLoaded: true }));
    const plain = await startApp(xdsSettings(cp.port));
    try {
      assert.equal((await s.http('/healthcheck')).status, 500, 'forced start, but no domain yet');
      await assert.rejects(plain.call({ domain: 'edge', descriptors: [d(['tenant', 'a'])] }), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE);
      // Both replicas subscribed before the push, so both get it.
      while (cp.requests.filter((r) => r.responseNonce === '').length < 2) await pause();
      cp.push('v0', []);
      await acks(cp, 'v0', 2);
      assert.equal((await s.http('/healthcheck')).status, 500, 'a config with no domain does not count');
      assert.equal((await plain.http('/healthcheck')).status, 200, 'an empty config is a config');
      cp.push('v1', [limitConfig('edge', 3)]);
      await acks(cp, 'v1', 2);
      assert.equal((await s.http('/healthcheck')).status, 200);
    } finally {
      await s.stop();
      await plain.stop();
      await cp.stop();
    }
  });

  test('a control plane whose certificate lacks CONFIG_GRPC_XDS_SERVER_TLS_SAN is refused', { timeout: 30_000 }, async () => {
    const cp = await startControlPlane({ credentials: serverCredentials() });
    const { logger, lines } = capture();
    const s = await startApp({ ...xdsSettings(cp.port, { xdsTlsSan: 'control-plane.example' }), logLevel: 'info' }, { logger });
    try {
      cp.push('v1', [limitConfig('edge', 3)]);
      while (!lines.some((l) => l.event === 'xds_stream_lost')) await pause();
      const lost = lines.find((l) => l.event === 'xds_stream_lost')!;
      assert.match(String(lost.reason), /control-plane\.example|altnames|certificate/i);
      assert.equal(cp.requests.length, 0, 'no request reached the control plane');
      assert.equal(s.app.config.config, undefined);
    } finally {
      await s.stop();
      await cp.stop();
    }
  });

  test('FORCE_START_WITHOUT_INITIAL_CONFIG applies to files too: a start with a broken config answers every domain as unknown', {
    timeout: 30_000,
  }, async () => {
    const missing = `${certs.dir}/no-such-config`;
    const forced = await startApp({ configPaths: [missing], forceStartWithoutInitialConfig: true });
    const plain = await startApp({ configPaths: [missing] });
    try {
      assert.equal((await forced.call({ domain: 'edge', descriptors: [d(['tenant', 'a'])] })).overallCode, Code.OK);
      assert.equal((await forced.http('/healthcheck')).status, 200);
      await assert.rejects(plain.call({ domain: 'edge', descriptors: [d(['tenant', 'a'])] }), (e: grpc.ServiceError) => e.code === grpc.status.UNAVAILABLE);
      assert.equal((await plain.http('/healthcheck')).status, 500);
    } finally {
      await forced.stop();
      await plain.stop();
    }
  });
});
