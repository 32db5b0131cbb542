import http2 from 'node:http2';
import { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { grpcFrame, percentile } from './fleet';

// A load generator for what h2load cannot do: a different request body per call (h2load sends
// one body), here `keys` distinct requests in turn, so that every call touches counters spread
// over that many keys. Run as its own process by keys-bench (bench/decisions.ts); prints one JSON
// line. It costs more CPU per call than h2load: compare its rows with each other (same generator,
// same run), not with h2load's.
//
// argv: JSON { port, requests, connections, streams, descriptors, keys, template? }

interface Args {
  port: number;
  requests: number;
  connections: number;
  streams: number;
  descriptors: number;
  keys: number;
  // A request whose entry values get `-<i>` appended for the i-th distinct request (bench/peer.ts:
  // its config's keys); without it, `descriptors` fixed-window descriptors of their own.
  template?: RateLimitRequest;
}

const METHOD = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

function frames(a: Args): Buffer[] {
  const { template } = a;
  return Array.from({ length: a.keys }, (_, i) =>
    grpcFrame(
      RateLimitRequest.encode(
        template !== undefined
          ? { ...template, descriptors: template.descriptors.map((d) => ({ ...d, entries: d.entries.map((e) => ({ ...e, value: `${e.value}-${i}` })) })) }
          : {
              domain: 'bench',
              descriptors: Array.from({ length: a.descriptors }, (_, d) => ({ entries: [{ key: 'fixed_window', value: `key-${d}-${i}` }] })),
              hitsAddend: 0,
            },
      ).finish(),
    ),
  );
}

async function main(): Promise<void> {
  const a = JSON.parse(process.argv[2]) as Args;
  const bodies = frames(a);
  const latencies: number[] = [];
  let sent = 0;
  let failed = 0;
  const started = performance.now();
  const sessions = Array.from({ length: a.connections }, () => http2.connect(`http://127.0.0.1:${a.port}`));
  await Promise.all(sessions.map((s) => new Promise((resolve, reject) => (s.once('connect', resolve), s.once('error', reject)))));
  const headers = { ':method': 'POST', ':path': METHOD, 'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '1S' };
  await new Promise<void>((resolve) => {
    let done = 0;
    const next = (session: http2.ClientHttp2Session): void => {
      if (sent >= a.requests) return;
      const body = bodies[sent++ % bodies.length];
      const t0 = performance.now();
      const stream = session.request(headers);
      let ok = false;
      stream.on('trailers', (t) => (ok = t['grpc-status'] === '0'));
      stream.on('data', () => undefined);
      stream.on('close', () => {
        latencies.push(performance.now() - t0);
        if (!ok) failed++;
        if (++done === a.requests) resolve();
        else next(session);
      });
      stream.end(body);
    };
    for (const s of sessions) for (let i = 0; i < a.streams; i++) next(s);
  });
  const seconds = (performance.now() - started) / 1000;
  for (const s of sessions) s.close();
  latencies.sort((x, y) => x - y);
  console.log(JSON.stringify({ reqPerSec: a.requests / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), failed }));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
