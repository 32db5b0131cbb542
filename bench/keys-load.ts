import net from 'node:net';
import { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { encodeHeaders, HpackDecoder } from '../src/server/h2grpc/hpack';
import {
  ACK,
  DATA,
  encodeFrame as frame,
  END_HEADERS,
  END_STREAM,
  GOAWAY,
  HEADERS,
  MAX_WINDOW,
  PING,
  PREFACE,
  RST_STREAM,
  SETTINGS,
  SETTINGS_INITIAL_WINDOW_SIZE,
  u32,
  WINDOW_UPDATE,
} from '../src/server/h2grpc/wire';
import { distinctRequest, grpcFrame, percentile } from './fleet';

// A load generator for what h2load cannot do: a different request body per call (h2load sends
// one body), here `keys` distinct requests in turn, so that every call touches counters spread
// over that many keys. Run as its own process by keys-bench (bench/decisions.ts); prints one JSON
// line. It speaks HTTP/2 itself on plain sockets (prior knowledge, like h2load): a constant header
// block, each request one HEADERS and one DATA frame, the frames of one socket read answered in one
// write, responses read with sluice's HPACK decoder (the grpc-status of every answer is checked).
// A call costs it a few µs, so that the server is what the rows measure; still, compare its rows
// with each other (same generator, same run), not with h2load's.
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
          ? distinctRequest(template, i)
          : {
              domain: 'bench',
              descriptors: Array.from({ length: a.descriptors }, (_, d) => ({ entries: [{ key: 'fixed_window', value: `key-${d}-${i}` }] })),
              hitsAddend: 0,
            },
      ).finish(),
    ),
  );
}

interface Shared {
  a: Args;
  bodies: Buffer[];
  block: Buffer;
  sent: number;
  done: number;
  failed: number;
  latencies: number[];
  finish: () => void;
  fail: (err: Error) => void;
}

// One connection: `streams` calls in flight, a new one sent as each ends.
class Connection {
  private readonly socket: net.Socket;
  private readonly decoder = new HpackDecoder();
  private readonly started = new Map<number, number>();
  private readonly status = new Map<number, boolean>();
  private nextId = 1;
  private input: Buffer | undefined;
  private out: Buffer[] = [];
  private sendWindow = 65_535;
  private received = 0;
  // Requests owed while the server's connection window is short.
  private owed = 0;

  constructor(private readonly s: Shared) {
    this.socket = net.connect(s.a.port, '127.0.0.1');
    this.socket.setNoDelay(true);
    this.socket.on('error', (err) => s.fail(err));
    this.socket.on('data', (chunk: Buffer) => this.receive(chunk));
    // Our SETTINGS (stream windows as large as they go) and the connection window to match.
    const settings = Buffer.alloc(6);
    settings.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, 0);
    settings.writeUInt32BE(MAX_WINDOW, 2);
    this.socket.write(Buffer.concat([PREFACE, frame(SETTINGS, 0, 0, settings), frame(WINDOW_UPDATE, 0, 0, u32(MAX_WINDOW - 65_535))]));
    for (let i = 0; i < s.a.streams; i++) this.send();
    this.flush();
  }

  close(): void {
    this.socket.end(frame(GOAWAY, 0, 0, Buffer.alloc(8)));
  }

  // The next call, or one more owed until the server's connection window has room for it.
  private send(): void {
    if (this.owed > 0 || !this.trySend()) this.owed++;
  }

  // False when the window is short (nothing sent); true otherwise, also when all calls are out.
  private trySend(): boolean {
    const s = this.s;
    if (s.sent >= s.a.requests) return true;
    const body = s.bodies[s.sent % s.bodies.length];
    if (this.sendWindow < body.length) return false;
    s.sent++;
    this.sendWindow -= body.length;
    const id = this.nextId;
    this.nextId += 2;
    this.started.set(id, performance.now());
    this.out.push(frame(HEADERS, END_HEADERS, id, s.block), frame(DATA, END_STREAM, id, body));
    return true;
  }

  private flush(): void {
    if (this.out.length === 0) return;
    this.socket.write(this.out.length === 1 ? this.out[0] : Buffer.concat(this.out));
    this.out = [];
  }

  private receive(chunk: Buffer): void {
    const buf = this.input === undefined ? chunk : Buffer.concat([this.input, chunk]);
    let pos = 0;
    while (buf.length - pos >= 9) {
      const length = buf.readUIntBE(pos, 3);
      if (buf.length - pos < 9 + length) break;
      this.frame(buf[pos + 3], buf[pos + 4], buf.readUInt32BE(pos + 5) & 0x7fffffff, buf.subarray(pos + 9, pos + 9 + length));
      pos += 9 + length;
    }
    this.input = pos < buf.length ? buf.subarray(pos) : undefined;
    // What the server sent counts against the window we gave: give it back in large steps.
    if (this.received >= 1 << 24) {
      this.out.push(frame(WINDOW_UPDATE, 0, 0, u32(this.received)));
      this.received = 0;
    }
    this.flush();
  }

  private frame(type: number, flags: number, id: number, payload: Buffer): void {
    switch (type) {
      case DATA:
        this.received += payload.length;
        return;
      case HEADERS: {
        // Responses are small: one frame (no CONTINUATION). grpc-status is in the trailers, or in
        // the headers of a trailers-only answer.
        const { fields } = this.decoder.decode(payload, 1 << 20);
        for (let i = 0; i < fields.length; i += 2) if (fields[i] === 'grpc-status') this.status.set(id, fields[i + 1] === '0');
        if (flags & END_STREAM) this.ended(id);
        return;
      }
      case RST_STREAM:
        return this.ended(id);
      case SETTINGS:
        if ((flags & ACK) === 0) this.out.push(frame(SETTINGS, ACK, 0, Buffer.alloc(0)));
        return;
      case PING:
        if ((flags & ACK) === 0) this.out.push(frame(PING, ACK, 0, payload));
        return;
      case WINDOW_UPDATE:
        if (id === 0) {
          this.sendWindow += payload.readUInt32BE(0) & 0x7fffffff;
          while (this.owed > 0 && this.trySend()) this.owed--;
        }
        return;
      case GOAWAY:
        return this.s.fail(new Error(`GOAWAY, code ${payload.readUInt32BE(4)}`));
      default:
        return;
    }
  }

  private ended(id: number): void {
    const t0 = this.started.get(id);
    if (t0 === undefined) return;
    const s = this.s;
    s.latencies.push(performance.now() - t0);
    this.started.delete(id);
    if (this.status.get(id) !== true) s.failed++;
    this.status.delete(id);
    if (++s.done === s.a.requests) return s.finish();
    this.send();
  }
}

async function main(): Promise<void> {
  const a = JSON.parse(process.argv[2]) as Args;
  const block = encodeHeaders({
    ':method': 'POST',
    ':scheme': 'http',
    ':path': METHOD,
    ':authority': `127.0.0.1:${a.port}`,
    'content-type': 'application/grpc',
    te: 'trailers',
    'grpc-timeout': '1S',
  });
  const started = performance.now();
  let connections: Connection[] = [];
  const shared = await new Promise<Shared>((resolve, reject) => {
    const s: Shared = { a, bodies: frames(a), block, sent: 0, done: 0, failed: 0, latencies: [], finish: () => resolve(s), fail: reject };
    connections = Array.from({ length: a.connections }, () => new Connection(s));
  });
  const seconds = (performance.now() - started) / 1000;
  for (const c of connections) c.close();
  const latencies = shared.latencies.sort((x, y) => x - y);
  console.log(JSON.stringify({ reqPerSec: a.requests / seconds, p50: percentile(latencies, 50), p99: percentile(latencies, 99), failed: shared.failed }));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
