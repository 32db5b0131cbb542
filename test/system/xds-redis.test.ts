import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { RateLimitUnit } from '../../src/gen/ratelimit/config/ratelimit/v3/rls_conf';
import { type ReceivedRequest, startControlPlane } from '../support/ads-server';
import { callRls, closing, d } from '../support/app';
import { makeCerts } from '../support/certs';
import { spawnServer, spawnServers, type ServerProcess } from '../support/process';
import { freePort, startRedis, stopAll } from '../support/redis';
import { httpReceiver } from '../support/otlp';
import { GRPC_SPAN } from '../../src/telemetry/tracing';

// Issue 15: two replicas started with Envoy Gateway's environment (config over xDS with mTLS, TLS
// on the gRPC port, REDIS_URL and no BACKEND_TYPE, metrics and tracing on) share one budget on one
// Redis; their metrics listeners serve upstream's series and their spans reach an OTLP receiver.

after(() => stopAll());

const LIMIT = 10;

describe("Envoy Gateway's environment", () => {
  test('REDIS_URL without BACKEND_TYPE: redis, said at start; two replicas admit the limit once in total', { timeout: 30_000 }, async () => {
    const certs = makeCerts();
    certs.issue('server');
    certs.issue('client');
    const redis = await startRedis();
    const pair = { cert_chain: fs.readFileSync(certs.file('server.crt')), private_key: fs.readFileSync(certs.file('server.key')) };
    const receiver = await httpReceiver();
    const cp = await startControlPlane({ credentials: grpc.ServerCredentials.createSsl(fs.readFileSync(certs.file('ca.crt')), [pair], true) });
    const env = {
      RUNTIME_ROOT: '/data',
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_IGNOREDOTFILES: 'true',
      RUNTIME_WATCH_ROOT: 'false',
      LOG_LEVEL: 'info',
      USE_STATSD: 'false',
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${cp.port}`,
      CONFIG_GRPC_XDS_NODE_ID: 'envoy-ratelimit',
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
      CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.file('client.crt'),
      CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.file('client.key'),
      CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.file('ca.crt'),
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: certs.file('server.crt'),
      GRPC_SERVER_TLS_KEY: certs.file('server.key'),
      GRPC_SERVER_TLS_CA_CERT: certs.file('ca.crt'),
      REDIS_SOCKET_TYPE: 'tcp',
      REDIS_URL: `127.0.0.1:${redis.port}`,
      USE_PROMETHEUS: 'true',
      TRACING_ENABLED: 'true',
      TRACING_SERVICE_NAME: 'envoy-ratelimit',
      TRACING_SERVICE_NAMESPACE: 'envoy-gateway-system',
      TRACING_SAMPLING_RATE: '1',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    };
    const metricsPorts = [await freePort(), await freePort()];
    let replicas: ServerProcess[] = [];
    let clients: RateLimitServiceClient[] = [];
    try {
      replicas = await spawnServers(
        metricsPorts.map((port, i) => () => spawnServer([], { ...env, PROMETHEUS_ADDR: `:${port}`, TRACING_SERVICE_INSTANCE_ID: `replica-${i}` })),
      );
      // Envoy Gateway sets GRPC_SERVER_TLS_CA_CERT, which upstream does not read: no client certificate.
      const tls = grpc.credentials.createSsl(fs.readFileSync(certs.file('ca.crt')));
      clients = replicas.map((r) => new RateLimitServiceClient(`127.0.0.1:${r.grpcPort}`, tls));
      for (const r of replicas) {
        const line = await r.waitForLog((l) => l.event === 'store_implied');
        assert.equal(line.by, 'REDIS_URL');
        const listening = r.logs.find((l) => l.event === 'listening')!;
        assert.match(String(listening.store), /^redis/);
        assert.deepEqual(r.logs.find((l) => l.event === 'upstream_settings_not_read')?.names, ['GRPC_SERVER_TLS_CA_CERT']);
      }
      while (cp.requests.filter((r) => r.responseNonce === '').length < 2) await pause();
      cp.push('v1', [{ name: 'gw', domain: 'gateway', descriptors: [{ key: 'tenant', rateLimit: { unit: RateLimitUnit.DAY, requestsPerUnit: LIMIT } }] }]);
      const acked = (r: ReceivedRequest) => r.versionInfo === 'v1' && r.errorDetail === undefined && r.responseNonce !== '';
      while (cp.requests.filter(acked).length < 2) await pause();
      for (const r of replicas) await r.waitForLog((l) => l.event === 'config_loaded');
      // Ready means Redis answered a real decision: from then on no answer is a local fallback's.
      // Envoy Gateway's probes ask in plain HTTP although the port serves TLS.
      for (const r of replicas) while ((await fetch(`http://127.0.0.1:${r.httpPort}/healthcheck`, closing())).status !== 200) await pause();
      let ok = 0;
      for (let i = 0; i < 3 * LIMIT; i++) {
        const response = await callRls(clients[i % 2], { domain: 'gateway', descriptors: [d(['tenant', 'shared'])] });
        if (response.overallCode === Code.OK) ok++;
      }
      assert.equal(ok, LIMIT);
      // Upstream's series on the metrics listeners (PROMETHEUS_ADDR), summed over both replicas.
      const sum = async (series: string) => {
        let total = 0;
        for (const port of metricsPorts) {
          const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, closing())).text();
          total += Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
        }
        return total;
      };
      assert.equal(await sum('ratelimit_service_rate_limit_total_hits{domain="gateway",key1="tenant"}'), 3 * LIMIT);
      assert.equal(await sum('ratelimit_service_rate_limit_over_limit{domain="gateway",key1="tenant"}'), 2 * LIMIT);
      assert.equal(await sum('ratelimit_service_config_load_success'), 2);
      // Stopping flushes the spans: one per call, with the domain and the overall code.
      await Promise.all(replicas.map((r) => r.stop()));
      const calls = receiver.spans.filter((sp) => sp.name === GRPC_SPAN && sp.attributes['ratelimit.domain'] === 'gateway');
      assert.equal(calls.length, 3 * LIMIT);
      assert.equal(calls.filter((sp) => sp.attributes['ratelimit.code'] === 'OVER_LIMIT').length, 2 * LIMIT);
      assert.deepEqual([...new Set(calls.map((sp) => sp.resource['service.instance.id']))].sort(), ['replica-0', 'replica-1']);
    } finally {
      clients.forEach((c) => c.close());
      await Promise.all(replicas.map((r) => r.stop()));
      await receiver.close();
      await cp.stop();
      fs.rmSync(certs.dir, { recursive: true, force: true });
    }
  });
});

const pause = () => new Promise((r) => setTimeout(r, 10));
