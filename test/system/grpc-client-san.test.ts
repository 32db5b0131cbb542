import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { loadSettings, SettingsError } from '../../src/settings';
import { callRls, d, startApp } from '../support/app';
import { type Certs, makeCerts } from '../support/certs';

// GRPC_CLIENT_TLS_SAN: with mTLS, a client certificate signed by the client CA is served only when
// it also carries the name (as upstream checks it); others are refused at the connection.

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-san-'));
  fs.writeFileSync(path.join(dir, 'c.yaml'), 'domain: san\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 100 }\n');
  return dir;
}

// A client certificate signed by the test CA with exactly these SANs.
function issueClient(certs: Certs, name: string, san: string): void {
  const ssl = (...args: string[]) => execFileSync('openssl', args, { stdio: 'pipe' });
  fs.writeFileSync(certs.file(`${name}.ext`), `subjectAltName=${san}\n`);
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`, '-keyout', certs.file(`${name}.key`), '-out', certs.file(`${name}.csr`));
  ssl(
    'x509',
    '-req',
    '-in',
    certs.file(`${name}.csr`),
    '-CA',
    certs.file('ca.crt'),
    '-CAkey',
    certs.file('ca.key'),
    '-CAcreateserial',
    '-days',
    '1',
    '-extfile',
    certs.file(`${name}.ext`),
    '-out',
    certs.file(`${name}.crt`),
  );
}

describe('GRPC_CLIENT_TLS_SAN', () => {
  const certs = makeCerts();
  certs.issue('server');
  issueClient(certs, 'envoy', 'DNS:envoy.client.test');
  issueClient(certs, 'other', 'DNS:other.client.test');
  issueClient(certs, 'byip', 'IP:10.1.2.3');
  const ca = fs.readFileSync(certs.file('ca.crt'));
  const client = (port: number, name: string) =>
    new RateLimitServiceClient(
      `127.0.0.1:${port}`,
      grpc.credentials.createSsl(ca, fs.readFileSync(certs.file(`${name}.key`)), fs.readFileSync(certs.file(`${name}.crt`))),
    );
  const tlsSettings = (san: string) => ({
    grpcTls: true,
    grpcTlsCert: certs.file('server.crt'),
    grpcTlsKey: certs.file('server.key'),
    grpcTlsClientCa: certs.file('ca.crt'),
    grpcTlsClientSan: san,
    configPaths: [configDir()],
  });
  const call = (c: RateLimitServiceClient) => callRls(c, { domain: 'san', descriptors: [d(['k', 'v'])] });

  test('a client whose certificate carries the DNS name is served; one signed by the same CA without it is refused', async () => {
    const s = await startApp(tlsSettings('envoy.client.test'));
    const good = client(s.grpcPort, 'envoy');
    const bad = client(s.grpcPort, 'other');
    try {
      for (let i = 0; i < 3; i++) assert.equal((await call(good)).overallCode, RateLimitResponse_Code.OK);
      await assert.rejects(call(bad), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE);
      // Only the served client's calls reached sluice.
      const grpcCalls = (await s.app.metrics.requests.get()).values.filter((v) => v.labels.transport === 'grpc');
      assert.deepEqual(
        grpcCalls.map((v) => [v.labels.code, v.value]),
        [['OK', 3]],
      );
    } finally {
      good.close();
      bad.close();
      await s.stop();
    }
  });

  test('an IP address is matched against IP SANs', async () => {
    const s = await startApp(tlsSettings('10.1.2.3'));
    const good = client(s.grpcPort, 'byip');
    const bad = client(s.grpcPort, 'envoy');
    try {
      assert.equal((await call(good)).overallCode, RateLimitResponse_Code.OK);
      await assert.rejects(call(bad), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE);
    } finally {
      good.close();
      bad.close();
      await s.stop();
    }
  });

  test('the HTTPS listener (POST /json) disconnects a verified client without the name; health stays open to clients without a certificate', async () => {
    const s = await startApp(tlsSettings('envoy.client.test'));
    const request = (p: string, name?: string) =>
      new Promise<number>((resolve, reject) => {
        const cert = name === undefined ? {} : { cert: fs.readFileSync(certs.file(`${name}.crt`)), key: fs.readFileSync(certs.file(`${name}.key`)) };
        const body = JSON.stringify({ domain: 'san', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] });
        const req = https.request(
          { host: '127.0.0.1', port: s.httpPort, method: p === '/json' ? 'POST' : 'GET', path: p, ca, agent: false, ...cert },
          (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          },
        );
        req.on('error', reject);
        req.end(p === '/json' ? body : undefined);
      });
    try {
      assert.equal(await request('/json', 'envoy'), 200);
      await assert.rejects(request('/json', 'other'), /ECONNRESET|socket hang up/);
      assert.equal(await request('/healthcheck'), 200);
    } finally {
      await s.stop();
    }
  });

  test('refused at start without a client CA or without TLS, naming the settings', () => {
    const base = { GRPC_CLIENT_TLS_SAN: 'envoy.client.test', GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: 'c', GRPC_SERVER_TLS_KEY: 'k' };
    assert.throws(
      () => loadSettings([], base),
      (err: Error) => err instanceof SettingsError && /GRPC_CLIENT_TLS_SAN needs GRPC_SERVER_USE_TLS and GRPC_CLIENT_TLS_CACERT/.test(err.message),
    );
    assert.throws(() => loadSettings([], { GRPC_CLIENT_TLS_SAN: 'x', GRPC_CLIENT_TLS_CACERT: 'ca' }), /GRPC_CLIENT_TLS_SAN needs/);
    assert.equal(loadSettings([], { ...base, GRPC_CLIENT_TLS_CACERT: 'ca' }).grpcTlsClientSan, 'envoy.client.test');
  });
});
