import http from 'node:http';
import type { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { spawnShipped, type ServerProcess } from '../test/support/process';
import { processCpuSeconds } from './cpu';
import { fleetConfigDir, H2LOAD_MISSING, h2loadAvailable, runH2load } from './fleet';

// What tracing costs, in one run: the same h2load requests (memory store, one descriptor, one hot
// key, grpc-timeout 1S) to sluice with tracing off and with tracing on (every call sampled, spans
// exported over OTLP/http to a sink in this process that counts them). Two alternating rounds;
// each row is the better of its two.

export interface TracingRow {
  tracing: 'off' | 'on';
  reqPerSec: number;
  serverCpuUsPerReq: number;
}

export interface TracingBench {
  rows: TracingRow[];
  // Spans the sink received, against the two each call made with tracing on should give (the call
  // and its store round trip; warm-up included): fewer means the batch processor dropped some (its
  // queue holds 2048).
  spans: number;
  expectedSpans: number;
  command: string;
}

const REQUEST: RateLimitRequest = { domain: 'bench', descriptors: [{ entries: [{ key: 'fixed_window', value: 'tenant-0' }] }], hitsAddend: 0 };

// An OTLP/http receiver that only counts the spans it gets.
async function spanSink(): Promise<{ endpoint: string; spans: () => number; close(): Promise<void> }> {
  let spans = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
      for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return { endpoint: `http://127.0.0.1:${port}`, spans: () => spans, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

async function row(server: ServerProcess, tracing: TracingRow['tracing'], requests: number): Promise<TracingRow & { command: string }> {
  const cpu0 = processCpuSeconds(server.child.pid!);
  const r = await runH2load({ port: server.grpcPort, request: REQUEST, requests });
  const cpu1 = processCpuSeconds(server.child.pid!);
  if (r.succeeded !== requests || r.status2xx !== requests) throw new Error(`tracing ${tracing}: ${requests - r.succeeded} requests failed:\n${r.output}`);
  return { tracing, reqPerSec: r.reqPerSec, serverCpuUsPerReq: ((cpu1 - cpu0) * 1e6) / requests, command: r.command };
}

export async function tracingBench(requests: number): Promise<TracingBench | string> {
  if (!h2loadAvailable()) return `skipped: ${H2LOAD_MISSING}`;
  const sink = await spanSink();
  const config = fleetConfigDir();
  const servers: ServerProcess[] = [];
  try {
    const off = await spawnShipped(['--config', config, '--log-level', 'info']);
    servers.push(off);
    const on = await spawnShipped(['--config', config, '--log-level', 'info'], { TRACING_ENABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: sink.endpoint });
    servers.push(on);
    const warmUp = Math.min(20_000, requests);
    for (const s of [off, on]) await runH2load({ port: s.grpcPort, request: REQUEST, requests: warmUp });
    const best = new Map<TracingRow['tracing'], TracingRow & { command: string }>();
    for (let round = 0; round < 2; round++) {
      for (const [s, tracing] of [
        [off, 'off'],
        [on, 'on'],
      ] as const) {
        const r = await row(s, tracing, requests);
        if ((best.get(tracing)?.reqPerSec ?? 0) < r.reqPerSec) best.set(tracing, r);
      }
    }
    // Stopping flushes what the batch processor still holds.
    await on.stop();
    const rows = (['off', 'on'] as const).map((t) => best.get(t)!);
    return { rows: rows.map(({ command: _, ...r }) => r), spans: sink.spans(), expectedSpans: 2 * (warmUp + 2 * requests), command: rows[0].command };
  } finally {
    for (const s of servers) await s.stop();
    await sink.close();
  }
}
