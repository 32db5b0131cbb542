import assert from 'node:assert/strict';
import fs from 'node:fs';
import { Writable } from 'node:stream';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import {
  type RateLimitRequest,
  type RateLimitResponse,
  RateLimitResponse_Code as Code,
  RateLimitServiceClient,
} from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { GRPC_SPAN, HTTP_SPAN, STORE_SPAN, tracesUrl } from '../../src/telemetry/tracing';
import { defaultSettings, loadSettings, type Settings } from '../../src/settings';
import { createLogger } from '../../src/logger';
import { d, type Running, startApp } from '../support/app';
import { spawnServer } from '../support/process';
import { freePort } from '../support/redis';
import { grpcReceiver, httpReceiver, type Receiver, type Span } from '../support/otlp';

// OpenTelemetry tracing end to end: sluice exports over OTLP (http JSON, or gRPC) to a receiver
// written here, and the spans it gets are checked field by field.

const KIND = { INTERNAL: 1, SERVER: 2, CLIENT: 3 };
const STATUS_ERROR = 2;

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-tracing-'));
  fs.writeFileSync(path.join(dir, 'traced.yaml'), 'domain: traced\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n');
  return dir;
}

function call(client: RateLimitServiceClient, request: Partial<RateLimitRequest>, metadata = new grpc.Metadata()): Promise<RateLimitResponse> {
  const full: RateLimitRequest = { domain: '', descriptors: [], hitsAddend: 0, ...request };
  return new Promise((resolve, reject) => client.shouldRateLimit(full, metadata, (err, r) => (err ? reject(err) : resolve(r))));
}

function traceparent(traceId: string, parentId: string, flags = '01'): grpc.Metadata {
  const m = new grpc.Metadata();
  m.set('traceparent', `00-${traceId}-${parentId}-${flags}`);
  return m;
}

const TRACE_A = '0af7651916cd43dd8448eb211c80319c';
const PARENT_A = 'b7ad6b7169203331';
const TRACE_B = '4bf92f3577b34da6a3ce929d0e0e4736';
const PARENT_B = '00f067aa0ba902b7';

function tracingSettings(receiver: Receiver, protocol: 'http' | 'grpc', overrides: Partial<Settings> = {}): Partial<Settings> {
  return {
    configPaths: [configDir()],
    tracingEnabled: true,
    tracingExporterProtocol: protocol,
    otlpEndpoint: receiver.endpoint,
    tracingServiceName: 'sluice-test',
    tracingServiceNamespace: 'rls',
    tracingServiceInstanceId: 'replica-1',
    otlpHeaders: 'x-otlp-token=t%20one',
    ...overrides,
  };
}

const servers = (spans: Span[]) => spans.filter((s) => s.kind === KIND.SERVER);
const children = (spans: Span[]) => spans.filter((s) => s.name === STORE_SPAN);

// Both exporter protocols, and both gRPC servers (GRPC_SERVER_IMPL).
const SUITES = [
  ['http', 'grpc-js'],
  ['grpc', 'grpc-js'],
  ['http', 'http2'],
] as const;

for (const [protocol, grpcServerImpl] of SUITES) {
  describe(`tracing, OTLP over ${protocol}, gRPC server ${grpcServerImpl}`, () => {
    let receiver: Receiver;
    before(async () => {
      receiver = protocol === 'http' ? await httpReceiver() : await grpcReceiver();
      const s = await startApp(tracingSettings(receiver, protocol, { grpcServerImpl }));
      try {
        await runCalls(s);
      } finally {
        // Stopping flushes the batch: every span is at the receiver once stop() resolves.
        await s.stop();
      }
    });
    after(() => receiver.close());

    test('one SERVER span per ShouldRateLimit, with the domain, descriptor count, code, store and degraded', () => {
      const got = servers(receiver.spans).map((s) => [
        s.name,
        s.attributes['ratelimit.code'],
        s.attributes['ratelimit.domain'],
        s.attributes['ratelimit.descriptors'],
        s.attributes['ratelimit.store'],
        s.attributes['ratelimit.degraded'],
        s.status,
      ]);
      const expected = [
        [GRPC_SPAN, 'OK', 'traced', 1, 'memory', false, 0],
        [GRPC_SPAN, 'OK', 'traced', 1, 'memory', false, 0],
        [GRPC_SPAN, 'OVER_LIMIT', 'traced', 1, 'memory', false, 0],
        // Refused before its domain was read: no domain, no count; the caller's fault, not an error of ours.
        [GRPC_SPAN, 'INVALID_ARGUMENT', undefined, undefined, 'memory', false, 0],
        [GRPC_SPAN, 'OK', 'traced', 1, 'memory', false, 0],
        [HTTP_SPAN, 'OVER_LIMIT', 'traced', 2, 'memory', false, 0],
      ];
      assert.deepEqual(sortRows(got), sortRows(expected));
      assert.equal(receiver.spans.length, 6 + 4, 'six calls, four of which reached the store');
    });

    test('transport attributes: rpc.* on gRPC spans, http.* on the POST /json span', () => {
      const grpcSpans = servers(receiver.spans).filter((s) => s.name === GRPC_SPAN);
      assert.deepEqual(grpcSpans.map((s) => [s.attributes['rpc.system.name'], s.attributes['rpc.method'], s.attributes['rpc.status_code']]).sort(), [
        ['grpc', GRPC_SPAN, 'INVALID_ARGUMENT'],
        ...Array(4).fill(['grpc', GRPC_SPAN, 'OK']),
      ]);
      const [json] = servers(receiver.spans).filter((s) => s.name === HTTP_SPAN);
      assert.deepEqual(
        [json.attributes['http.request.method'], json.attributes['http.route'], json.attributes['http.response.status_code']],
        ['POST', '/json', 429],
      );
    });

    test("a caller's traceparent (gRPC metadata, HTTP header) is continued: its trace id, its span as parent", () => {
      const a = servers(receiver.spans).filter((s) => s.traceId === TRACE_A);
      assert.deepEqual(
        a.map((s) => [s.name, s.parentSpanId, s.traceState]),
        [[GRPC_SPAN, PARENT_A, 'vendor=1']],
      );
      const b = servers(receiver.spans).filter((s) => s.traceId === TRACE_B);
      assert.deepEqual(
        b.map((s) => [s.name, s.parentSpanId]),
        [[HTTP_SPAN, PARENT_B]],
      );
      const roots = servers(receiver.spans).filter((s) => s.parentSpanId === '');
      assert.equal(roots.length, 4, 'the other calls start their own traces');
      assert.equal(new Set(roots.map((s) => s.traceId)).size, 4);
    });

    test('a store span is a child of its call, for each call that reached the store', () => {
      const byId = new Map(servers(receiver.spans).map((s) => [s.spanId, s]));
      const parents = children(receiver.spans).map((c) => {
        const parent = byId.get(c.parentSpanId);
        assert.ok(parent, `store span ${c.spanId} has no server span as parent`);
        assert.equal(c.traceId, parent.traceId);
        assert.deepEqual(
          [c.kind, c.attributes['ratelimit.store'], c.attributes['ratelimit.checks'], c.attributes['ratelimit.degraded']],
          [KIND.INTERNAL, 'memory', 1, false],
        );
        return parent.attributes['ratelimit.code'];
      });
      // The call with no matching limit and the refused one never reach the store.
      assert.deepEqual(parents.sort(), ['OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
      assert.equal(children(receiver.spans).filter((c) => c.traceId === TRACE_A || c.traceId === TRACE_B).length, 2);
    });

    test('resource and export headers come from the settings', () => {
      for (const s of receiver.spans) {
        assert.deepEqual([s.resource['service.name'], s.resource['service.namespace'], s.resource['service.instance.id']], ['sluice-test', 'rls', 'replica-1']);
      }
      assert.ok(receiver.headers.length >= 1);
      for (const h of receiver.headers) assert.equal(h['x-otlp-token'], 't one');
    });
  });
}

// The calls both protocol suites make: limit 2 a minute on tenant=a.
async function runCalls(s: Running): Promise<void> {
  const a = d(['tenant', 'a']);
  const withState = traceparent(TRACE_A, PARENT_A);
  withState.set('tracestate', 'vendor=1');
  assert.equal((await call(s.client, { domain: 'traced', descriptors: [a] }, withState)).overallCode, Code.OK);
  assert.equal((await call(s.client, { domain: 'traced', descriptors: [a] })).overallCode, Code.OK);
  assert.equal((await call(s.client, { domain: 'traced', descriptors: [a] })).overallCode, Code.OVER_LIMIT);
  await assert.rejects(call(s.client, { domain: '', descriptors: [a] }), (err: grpc.ServiceError) => err.code === grpc.status.INVALID_ARGUMENT);
  assert.equal((await call(s.client, { domain: 'traced', descriptors: [d(['other', 'x'])] })).overallCode, Code.OK);
  const res = await s.http('/json', {
    method: 'POST',
    headers: { traceparent: `00-${TRACE_B}-${PARENT_B}-01` },
    body: JSON.stringify({ domain: 'traced', descriptors: [{ entries: [{ key: 'tenant', value: 'a' }] }, { entries: [{ key: 'other', value: 'x' }] }] }),
  });
  assert.equal(res.status, 429);
  await res.text();
}

function sortRows(rows: unknown[][]): string[] {
  return rows.map((r) => JSON.stringify(r)).sort();
}

// The spans an OTLP/http receiver gets from an app with these settings making these calls.
async function spansOf(overrides: Partial<Settings>, calls: (s: Running) => Promise<void>): Promise<Span[]> {
  const receiver = await httpReceiver();
  try {
    const s = await startApp(tracingSettings(receiver, 'http', overrides));
    try {
      await calls(s);
    } finally {
      await s.stop();
    }
    return receiver.spans;
  } finally {
    await receiver.close();
  }
}

describe('tracing: sampling and degraded answers', () => {
  test('TRACING_SAMPLING_RATE=0: no span for traces started here; a sampled caller still decides its own', async () => {
    const spans = await spansOf({ tracingSamplingRate: 0 }, async (s) => {
      for (let i = 0; i < 3; i++) await call(s.client, { domain: 'traced', descriptors: [d(['tenant', `t${i}`])] });
      await call(s.client, { domain: 'traced', descriptors: [d(['tenant', 'u'])] }, traceparent(TRACE_B, PARENT_B, '00'));
      await call(s.client, { domain: 'traced', descriptors: [d(['tenant', 'v'])] }, traceparent(TRACE_A, PARENT_A, '01'));
    });
    assert.deepEqual(spans.map((sp) => [sp.name, sp.traceId]).sort(), [
      [GRPC_SPAN, TRACE_A],
      [STORE_SPAN, TRACE_A],
    ]);
  });

  test('a degraded answer (Redis unreachable, local fallback) is marked on the call and on its store span', async () => {
    const spans = await spansOf({ store: 'redis', redisUrl: `redis://127.0.0.1:${await freePort()}`, fallbackPolicy: 'local' }, async (s) => {
      const r = await call(s.client, { domain: 'traced', descriptors: [d(['tenant', 'a'])] });
      assert.equal(r.overallCode, Code.OK);
      assert.ok(
        r.responseHeadersToAdd.some((h) => h.key === 'x-ratelimit-degraded' && h.value === 'true'),
        'the answer is degraded',
      );
    });
    const [server] = servers(spans);
    const [store] = children(spans);
    assert.deepEqual(
      [server.attributes['ratelimit.store'], server.attributes['ratelimit.degraded'], server.attributes['ratelimit.code']],
      ['redis', true, 'OK'],
    );
    assert.deepEqual(
      [store.kind, store.parentSpanId, store.attributes['ratelimit.store'], store.attributes['ratelimit.degraded']],
      [KIND.CLIENT, server.spanId, 'redis', true],
    );
    assert.equal(spans.length, 2);
  });

  test('a store failure (fallback deny) ends the call UNAVAILABLE, both spans marked as errors', async () => {
    const spans = await spansOf({ store: 'redis', redisUrl: `redis://127.0.0.1:${await freePort()}`, fallbackPolicy: 'deny' }, async (s) => {
      await assert.rejects(
        call(s.client, { domain: 'traced', descriptors: [d(['tenant', 'a'])] }),
        (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE,
      );
    });
    const [server] = servers(spans);
    const [store] = children(spans);
    assert.deepEqual([server.attributes['ratelimit.code'], server.attributes['rpc.status_code'], server.status], ['UNAVAILABLE', 'UNAVAILABLE', STATUS_ERROR]);
    assert.deepEqual([store.parentSpanId, store.status], [server.spanId, STATUS_ERROR]);
    assert.equal(spans.length, 2);
  });
});

describe('tracing: a collector that refuses the spans', () => {
  test('fails no call and no stop; a warning says the last spans were not exported', async () => {
    const receiver = await httpReceiver(400);
    const lines: Record<string, unknown>[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        for (const l of chunk.toString().split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
        done();
      },
    });
    try {
      const s = await startApp(tracingSettings(receiver, 'http'), { logger: createLogger('info', sink) });
      assert.equal((await call(s.client, { domain: 'traced', descriptors: [d(['tenant', 'a'])] })).overallCode, Code.OK);
      await s.stop();
      assert.equal(receiver.spans.length, 2, 'the call and its store span reached the collector, which refused them');
      const warnings = lines.filter((l) => l.event === 'tracing_error');
      assert.deepEqual(
        warnings.map((l) => [l.level, /^tracing: the spans buffered at shutdown were not exported \(/.test(String(l.msg))]),
        [['warn', true]],
      );
      assert.equal(lines.filter((l) => l.event === 'stopped').length, 1);
    } finally {
      await receiver.close();
    }
  });
});

describe('tracing settings', () => {
  test('where spans are sent, per the OTLP exporter rules', () => {
    const s = (o: Partial<Settings>) => tracesUrl(defaultSettings(o));
    assert.equal(s({}), 'http://localhost:4318/v1/traces');
    assert.equal(s({ tracingExporterProtocol: 'grpc' }), 'http://localhost:4317');
    assert.equal(s({ otlpEndpoint: 'http://collector:4318/' }), 'http://collector:4318/v1/traces');
    assert.equal(s({ otlpEndpoint: 'http://collector:4317', tracingExporterProtocol: 'grpc' }), 'http://collector:4317');
    assert.equal(s({ otlpEndpoint: 'http://collector:4318', otlpTracesEndpoint: 'https://traces.example/otlp' }), 'https://traces.example/otlp');
  });

  test("upstream's names and defaults; bad values are refused naming the variable", () => {
    const s = loadSettings([], {
      TRACING_ENABLED: 'true',
      TRACING_SAMPLING_RATE: '0.25',
      TRACING_EXPORTER_PROTOCOL: 'grpc',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317',
    });
    assert.deepEqual(
      [s.tracingEnabled, s.tracingServiceName, s.tracingSamplingRate, s.tracingExporterProtocol, s.otlpEndpoint],
      [true, 'RateLimit', 0.25, 'grpc', 'http://c:4317'],
    );
    assert.throws(() => loadSettings([], { TRACING_SAMPLING_RATE: '2' }), /^SettingsError: TRACING_SAMPLING_RATE: expected a number between 0 and 1, got '2'$/);
    assert.throws(
      () => loadSettings([], { TRACING_EXPORTER_PROTOCOL: 'zipkin' }),
      /^SettingsError: TRACING_EXPORTER_PROTOCOL: expected one of http, grpc, got 'zipkin'$/,
    );
    assert.throws(
      () => loadSettings([], { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }),
      /^SettingsError: OTEL_EXPORTER_OTLP_ENDPOINT: expected an http:\/\/ or https:\/\/ URL, got 'collector:4318'$/,
    );
    assert.throws(() => loadSettings([], { OTEL_EXPORTER_OTLP_HEADERS: 'authorization' }), /^SettingsError: OTEL_EXPORTER_OTLP_HEADERS: expected key=value/);
    assert.throws(
      () => loadSettings([], { OTEL_EXPORTER_OTLP_HEADERS: 'a=%zz-secret' }),
      (err: Error) => err.message === "OTEL_EXPORTER_OTLP_HEADERS: the value of 'a' is not valid URL encoding" && !err.message.includes('secret'),
    );
  });
});

describe('tracing off', () => {
  // The real binary, with a preload that writes the modules it loaded when it exits.
  async function loadedOtelPackages(env: NodeJS.ProcessEnv): Promise<string[]> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-modules-'));
    const preload = path.join(dir, 'report.js');
    const out = path.join(dir, 'loaded.json');
    fs.writeFileSync(preload, `process.on('exit', () => require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify(Object.keys(require.cache))));\n`);
    const server = await spawnServer(['--config', configDir()], { NODE_OPTIONS: `--require ${preload}`, ...env });
    const client = new RateLimitServiceClient(`127.0.0.1:${server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      assert.equal((await call(client, { domain: 'traced', descriptors: [d(['tenant', 'a'])] }, traceparent(TRACE_A, PARENT_A))).overallCode, Code.OK);
      const res = await fetch(`http://127.0.0.1:${server.httpPort}/json`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'traced', descriptors: [{ entries: [{ key: 'other', value: 'x' }] }] }),
      });
      assert.equal(res.status, 200);
    } finally {
      client.close();
      assert.equal(await server.stop(), 0);
    }
    const packages = (JSON.parse(fs.readFileSync(out, 'utf8')) as string[])
      .map((file) => /node_modules\/(@opentelemetry\/[^/]+)\//.exec(file)?.[1])
      .filter((p) => p !== undefined);
    return [...new Set(packages)].sort();
  }

  test('no OpenTelemetry SDK or exporter module is loaded (only the API, which prom-client loads for exemplars)', async () => {
    assert.deepEqual(await loadedOtelPackages({}), ['@opentelemetry/api']);
  });

  test('the same check sees the SDK when tracing is on', async () => {
    const receiver = await httpReceiver();
    try {
      const loaded = await loadedOtelPackages({ TRACING_ENABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint });
      for (const p of ['@opentelemetry/sdk-trace-base', '@opentelemetry/exporter-trace-otlp-http', '@opentelemetry/resources', '@opentelemetry/core'])
        assert.ok(loaded.includes(p), `${p} not loaded: ${loaded.join(', ')}`);
      assert.ok(!loaded.includes('@opentelemetry/exporter-trace-otlp-grpc'), 'the grpc exporter only with TRACING_EXPORTER_PROTOCOL=grpc');
      assert.deepEqual(
        servers(receiver.spans)
          .map((s) => [s.name, s.traceId === TRACE_A ? s.parentSpanId : 'root'])
          .sort(),
        [
          [HTTP_SPAN, 'root'],
          [GRPC_SPAN, PARENT_A],
        ],
      );
    } finally {
      await receiver.close();
    }
  });
});
