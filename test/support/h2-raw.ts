import net from 'node:net';
import type { RequestHeaders } from '../../src/server/h2grpc/call';
import { encodeHeaders } from '../../src/server/h2grpc/hpack';
import { encodeFrame, RST_STREAM, SETTINGS, u32, WINDOW_UPDATE, WireServer, type WireStream } from '../../src/server/h2grpc/wire';

// Raw HTTP/2 for tests of sluice's own wire (test/unit/server/h2-wire.test.ts, test/unit/server/h2-decoder-fuzz.test.ts): an echo
// WireServer, and a client that writes frames byte by byte and records every frame it gets back.

export { GOAWAY, PREFACE, RST_STREAM } from '../../src/server/h2grpc/wire';
export const frame = encodeFrame;
export const hex = (s: string) => Buffer.from(s.replace(/\s+/g, ''), 'hex');

export interface Frame {
  type: number;
  flags: number;
  id: number;
  payload: Buffer;
}

export const SETTINGS_FRAME = frame(SETTINGS, 0, 0);
export const goawayCode = (f: Frame) => f.payload.readUInt32BE(4);
export const headersFrame = (id: number, headers: Record<string, string>, endStream = true) => frame(1, 0x4 | (endStream ? 1 : 0), id, encodeHeaders(headers));
export const GOOD = { ':method': 'POST', ':scheme': 'http', ':path': '/echo' };

export type RawClient = Awaited<ReturnType<typeof raw>>;

// A raw client: sends bytes, collects the server's frames until the socket closes.
export async function raw(port: number) {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise((r) => socket.once('connect', r));
  const frames: Frame[] = [];
  let input = Buffer.alloc(0);
  let closed = false;
  socket.on('data', (chunk: Buffer) => {
    input = Buffer.concat([input, chunk]);
    while (input.length >= 9 && input.length >= 9 + input.readUIntBE(0, 3)) {
      const length = input.readUIntBE(0, 3);
      frames.push({ type: input[3], flags: input[4], id: input.readUInt32BE(5) & 0x7fffffff, payload: input.subarray(9, 9 + length) });
      input = input.subarray(9 + length);
    }
  });
  socket.on('close', () => (closed = true));
  socket.on('error', () => undefined);
  const until = async (what: string, check: () => boolean) => {
    const deadline = Date.now() + 5000;
    while (!check()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; frames: ${JSON.stringify(frames.map((f) => [f.type, f.flags, f.id]))}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  return {
    frames,
    send: (...parts: Buffer[]) => socket.write(Buffer.concat(parts)),
    isClosed: () => closed,
    until,
    // The frame of this type (and stream), once it has come.
    async next(type: number, id?: number): Promise<Frame> {
      let found: Frame | undefined;
      await until(`frame type ${type}`, () => (found = frames.find((f) => f.type === type && (id === undefined || f.id === id))) !== undefined);
      return found!;
    },
    close: () => socket.destroy(),
  };
}

// A WireServer whose streams echo: the request's headers (as JSON, in a response header or the
// body) and the number of body bytes received.
export async function echoServer(options: ConstructorParameters<typeof WireServer>[0] = {}, onStream?: (stream: WireStream, headers: RequestHeaders) => void) {
  const server = new WireServer(
    options,
    onStream ??
      ((stream, headers) => {
        let bytes = 0;
        stream.on('data', (chunk) => (bytes += chunk.length));
        stream.on('end', () => {
          const body = Buffer.from(JSON.stringify({ headers, bytes }));
          stream.respond({ ':status': 200, 'content-type': 'application/json' }, { waitForTrailers: true });
          stream.once('wantTrailers', function (this: WireStream) {
            this.sendTrailers({ 'x-bytes': String(bytes) });
          });
          stream.end(body);
        });
      }),
  );
  await new Promise<void>((r) => server.server.listen(0, '127.0.0.1', r));
  const port = (server.server.address() as net.AddressInfo).port;
  return { server, port, stop: () => new Promise<void>((r) => server.close(r)) };
}

export function settingsFrame(settings: [number, number][]): Buffer {
  const payload = Buffer.alloc(6 * settings.length);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, 6 * i);
    payload.writeUInt32BE(value, 6 * i + 2);
  });
  return encodeFrame(SETTINGS, 0, 0, payload);
}

export function windowUpdate(id: number, increment: number): Buffer {
  return encodeFrame(WINDOW_UPDATE, 0, id, u32(increment));
}

// CANCEL unless told otherwise, as a client gives up on a call.
export function rstStream(id: number, code = 0x8): Buffer {
  return encodeFrame(RST_STREAM, 0, id, u32(code));
}
