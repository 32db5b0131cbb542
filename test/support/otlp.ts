import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

// OTLP trace receivers written for the tests (http JSON, and gRPC), and the spans they got.

const PROTO = path.resolve(__dirname, '../../../test/fixtures/otlp/trace_service.proto');

export interface Span {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  traceState: string;
  attributes: Record<string, unknown>;
  status: number;
  resource: Record<string, unknown>;
}

export interface Receiver {
  endpoint: string;
  spans: Span[];
  // Headers (gRPC metadata) of each export request.
  headers: Record<string, unknown>[];
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; boolValue?: boolean; intValue?: string | number; doubleValue?: number };
type KeyValue = { key: string; value?: AnyValue };

function attributes(list: KeyValue[] = []): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value: v = {} } of list) out[key] = v.stringValue ?? v.boolValue ?? (v.intValue !== undefined ? Number(v.intValue) : v.doubleValue);
  return out;
}

// An ExportTraceServiceRequest, from OTLP/JSON (ids in hex) or protobuf (ids as bytes).
function collect(into: Span[], request: any): void {
  const hex = (id: unknown) => (Buffer.isBuffer(id) ? id.toString('hex') : String(id ?? ''));
  for (const rs of request.resourceSpans ?? []) {
    const resource = attributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        into.push({
          name: s.name,
          kind: s.kind,
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          traceState: s.traceState ?? '',
          attributes: attributes(s.attributes),
          status: s.status?.code ?? 0,
          resource,
        });
      }
    }
  }
}

// `status`: what it answers (400 refuses the spans for good: the exporter does not retry).
export async function httpReceiver(status = 200): Promise<Receiver> {
  const spans: Span[] = [];
  const headers: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      assert.equal(`${req.method} ${req.url} ${req.headers['content-type']}`, 'POST /v1/traces application/json');
      headers.push(req.headers);
      collect(spans, JSON.parse(Buffer.concat(chunks).toString('utf8')));
      res.writeHead(status, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { endpoint: `http://127.0.0.1:${port}`, spans, headers, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

export async function grpcReceiver(): Promise<Receiver> {
  const spans: Span[] = [];
  const headers: Record<string, unknown>[] = [];
  const definition = protoLoader.loadSync(PROTO, { defaults: false, oneofs: false, longs: String });
  const service = (grpc.loadPackageDefinition(definition) as any).opentelemetry.proto.collector.trace.v1.TraceService;
  const server = new grpc.Server();
  server.addService(service.service, {
    Export(call: grpc.ServerUnaryCall<any, any>, callback: grpc.sendUnaryData<any>) {
      headers.push(call.metadata.getMap());
      collect(spans, call.request);
      callback(null, {});
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { endpoint: `http://127.0.0.1:${port}`, spans, headers, close: () => new Promise((resolve) => server.tryShutdown(() => resolve())) };
}
