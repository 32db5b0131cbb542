import net from 'node:net';
import tls from 'node:tls';
import type { RequestHeaders } from './call';
import { encodeHeaders, HpackDecoder, HpackError } from './hpack';

// sluice's own HTTP/2 (RFC 9113) server side, on plain sockets (GRPC_SERVER_IMPL=sluice): what a
// gRPC server needs and nothing else. Compared with node:http2 a connection is one socket and one
// object, a stream one small object with no event emitter, and everything a connection sends in one
// turn of the event loop goes out in one write. Streams look to h2grpc/call.ts like the subset of
// node:http2's ServerHttp2Stream it uses (respond, write, end, sendTrailers, events data, end,
// close and wantTrailers).

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export const DATA = 0x0;
export const HEADERS = 0x1;
const PRIORITY = 0x2;
export const RST_STREAM = 0x3;
export const SETTINGS = 0x4;
const PUSH_PROMISE = 0x5;
export const PING = 0x6;
export const GOAWAY = 0x7;
export const WINDOW_UPDATE = 0x8;
const CONTINUATION = 0x9;

export const END_STREAM = 0x1;
export const ACK = 0x1;
export const END_HEADERS = 0x4;
const PADDED = 0x8;
const PRIORITY_FLAG = 0x20;

const NO_ERROR = 0x0;
const PROTOCOL_ERROR = 0x1;
const INTERNAL_ERROR = 0x2;
const FLOW_CONTROL_ERROR = 0x3;
const STREAM_CLOSED = 0x5;
const FRAME_SIZE_ERROR = 0x6;
const REFUSED_STREAM = 0x7;
const COMPRESSION_ERROR = 0x9;
const ENHANCE_YOUR_CALM = 0xb;

const SETTINGS_HEADER_TABLE_SIZE = 0x1;
const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
export const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE = 0x6;

const DEFAULT_WINDOW = 65_535;
export const MAX_WINDOW = 2 ** 31 - 1;
const DEFAULT_FRAME_SIZE = 16_384;
const DEFAULT_TABLE_SIZE = 4096;
// HPACK's dynamic table size update to 0.
const TABLE_SIZE_ZERO = Buffer.from([0x20]);
// What we let a client send before it hears from us again: per stream and per connection.
const LOCAL_WINDOW = 1 << 20;
// Windows are given back once this much of them is used.
const WINDOW_REFILL = LOCAL_WINDOW / 2;
const MAX_HEADER_LIST_BYTES = 65_536;
// A header block (HEADERS and its CONTINUATIONs) beyond this closes the connection unread.
const MAX_HEADER_BLOCK_BYTES = 4 * MAX_HEADER_LIST_BYTES;

type ResponseHeaders = Record<string, string | number | readonly string[] | undefined>;

export interface WireOptions {
  // SETTINGS_MAX_CONCURRENT_STREAMS; undefined: no limit announced.
  maxConcurrentStreams?: number;
  // A PING every keepaliveMs, the connection closed when one is not answered within keepaliveTimeoutMs.
  keepaliveMs?: number;
  keepaliveTimeoutMs?: number;
}

export type StreamHandler = (stream: WireStream, headers: RequestHeaders) => void;

// Our SETTINGS and the connection window, sent first on every connection; one block per option set.
function openingFrames(options: WireOptions): Buffer {
  const settings: [number, number][] = [
    [SETTINGS_ENABLE_PUSH, 0],
    [SETTINGS_INITIAL_WINDOW_SIZE, LOCAL_WINDOW],
    [SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST_BYTES],
  ];
  if (options.maxConcurrentStreams !== undefined) settings.push([SETTINGS_MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams]);
  const out = Buffer.alloc(9 + 6 * settings.length + 9 + 4);
  writeFrameHeader(out, 0, 6 * settings.length, SETTINGS, 0, 0);
  settings.forEach(([id, value], i) => {
    out.writeUInt16BE(id, 9 + 6 * i);
    out.writeUInt32BE(value, 9 + 6 * i + 2);
  });
  const at = 9 + 6 * settings.length;
  writeFrameHeader(out, at, 4, WINDOW_UPDATE, 0, 0);
  out.writeUInt32BE(LOCAL_WINDOW - DEFAULT_WINDOW, at + 9);
  return out;
}

function writeFrameHeader(out: Buffer, at: number, length: number, type: number, flags: number, id: number): void {
  out[at] = length >>> 16;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(id, at + 5);
}

export function u32(value: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(value, 0);
  return b;
}

const NO_PAYLOAD = Buffer.alloc(0);

// One frame on its own (raw clients: bench/keys-load.ts, test/wire.test.ts); a connection writes
// its frames into one buffer per flush instead.
export function encodeFrame(type: number, flags: number, id: number, payload: Buffer = NO_PAYLOAD): Buffer {
  const out = Buffer.allocUnsafe(9 + payload.length);
  writeFrameHeader(out, 0, payload.length, type, flags, id);
  payload.copy(out, 9);
  return out;
}

// RST_STREAM's payload when we ended a stream the client is still sending on.
const NO_ERROR_PAYLOAD = u32(NO_ERROR);

// A connection error: GOAWAY with this code, then the connection is closed.
class ConnectionError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

// Connections with frames waiting, written once per turn of the event loop (setImmediate: after
// every I/O callback of the turn has had its say, as node:http2 does).
const dirty: WireConnection[] = [];
function flushAll(): void {
  for (let i = 0; i < dirty.length; i++) dirty[i].flush();
  dirty.length = 0;
}

// Header blocks encoded once per headers object: the constant ones call.ts sends on every call,
// which it freezes for that.
const encoded = new WeakMap<object, Buffer>();
function headerBlock(headers: ResponseHeaders): Buffer {
  let block = encoded.get(headers);
  if (block === undefined) {
    block = encodeHeaders(headers);
    if (Object.isFrozen(headers)) encoded.set(headers, block);
  }
  return block;
}


export class WireConnection {
  readonly streams = new Map<number, WireStream>();
  // Peer's SETTINGS.
  private peerWindow = DEFAULT_WINDOW;
  peerMaxFrame = DEFAULT_FRAME_SIZE;
  // Connection-level windows: what we may send, and what the client may still send us.
  sendWindow = DEFAULT_WINDOW;
  private recvWindow = LOCAL_WINDOW;
  private recvUsed = 0;
  private readonly decoder = new HpackDecoder();
  private lastStreamId = 0;
  private input: Buffer | undefined;
  private prefaceSeen = false;
  private settingsSeen = false;
  // A header block in CONTINUATION frames: its stream, the HEADERS frame's flags, the fragments.
  private headerStream = 0;
  private headerFlags = 0;
  private headerParts: Buffer[] | undefined;
  private headerBytes = 0;
  // Frames to send, four slots each: type, flags, stream id, payload.
  private out: (number | Buffer | undefined)[] = [];
  private outBytes = 0;
  private queued = false;
  // Streams whose DATA waits for window.
  private blocked: WireStream[] = [];
  // GOAWAY sent (no new streams) or received (none will come); closed: the socket is gone.
  private goingAway = false;
  closed = false;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private pingOutstanding = false;
  // A dynamic table size update owed to the client's decoder, and whether it was sent.
  private tableSizeSignal = false;
  private tableSizeSignalled = false;

  constructor(
    readonly socket: net.Socket,
    opening: Buffer,
    private readonly options: WireOptions,
    private readonly onStream: StreamHandler,
    private readonly onClose: (c: WireConnection) => void,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.socketClosed());
    socket.write(opening);
    if (options.keepaliveMs !== undefined) this.scheduleKeepalive();
  }

  // Graceful: GOAWAY naming the last stream we will answer; the connection closes once those are.
  close(): void {
    if (this.closed || this.goingAway) return;
    this.goingAway = true;
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(this.lastStreamId, 0);
    this.queue(GOAWAY, 0, 0, payload);
    this.closeIfIdle();
  }

  destroy(): void {
    this.socket.destroy();
  }

  private receive(chunk: Buffer): void {
    if (this.closed) return;
    const buf = this.input === undefined ? chunk : Buffer.concat([this.input, chunk]);
    this.input = undefined;
    let pos = 0;
    try {
      if (!this.prefaceSeen) {
        const n = Math.min(buf.length, PREFACE.length);
        if (buf.compare(PREFACE, 0, n, 0, n) !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'not an HTTP/2 connection preface');
        if (n < PREFACE.length) {
          this.input = buf;
          return;
        }
        this.prefaceSeen = true;
        pos = PREFACE.length;
      }
      while (buf.length - pos >= 9) {
        const length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2];
        if (length > DEFAULT_FRAME_SIZE) throw new ConnectionError(FRAME_SIZE_ERROR, `frame of ${length} bytes`);
        const end = pos + 9 + length;
        if (buf.length < end) break;
        this.frame(buf[pos + 3], buf[pos + 4], buf.readUInt32BE(pos + 5) & 0x7fffffff, buf, pos + 9, end);
        if (this.closed) return;
        pos = end;
      }
    } catch (err) {
      if (err instanceof ConnectionError) return this.fail(err.code);
      if (err instanceof HpackError) return this.fail(COMPRESSION_ERROR);
      // A fault of ours (or of a handler's callback): this connection ends, the process serves on,
      // and stderr says why.
      process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'SluiceHttp2Warning');
      return this.fail(INTERNAL_ERROR);
    }
    if (pos < buf.length) this.input = pos === 0 ? buf : buf.subarray(pos);
  }

  private frame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (!this.settingsSeen) {
      if (type !== SETTINGS || (flags & ACK) !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'first frame not SETTINGS');
      this.settingsSeen = true;
    }
    if (this.headerParts !== undefined && (type !== CONTINUATION || id !== this.headerStream)) {
      throw new ConnectionError(PROTOCOL_ERROR, 'header block interrupted');
    }
    switch (type) {
      case DATA:
        return this.data(flags, id, buf, start, end);
      case HEADERS:
        return this.headers(flags, id, buf, start, end);
      case PRIORITY:
        if (id === 0) throw new ConnectionError(PROTOCOL_ERROR, 'PRIORITY on stream 0');
        if (end - start !== 5) this.resetStream(id, FRAME_SIZE_ERROR);
        return;
      case RST_STREAM:
        if (end - start !== 4) throw new ConnectionError(FRAME_SIZE_ERROR, 'RST_STREAM size');
        if (id === 0 || id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
        this.streams.get(id)?.peerReset();
        this.closeIfIdle();
        return;
      case SETTINGS:
        return this.settings(flags, id, buf, start, end);
      case PUSH_PROMISE:
        throw new ConnectionError(PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      case PING:
        if (end - start !== 8) throw new ConnectionError(FRAME_SIZE_ERROR, 'PING size');
        if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'PING on a stream');
        if (flags & ACK) this.pingAnswered();
        else this.queue(PING, ACK, 0, Buffer.from(buf.subarray(start, end)));
        return;
      case GOAWAY:
        if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'GOAWAY on a stream');
        this.goingAway = true;
        this.closeIfIdle();
        return;
      case WINDOW_UPDATE:
        return this.windowUpdate(id, buf, start, end);
      case CONTINUATION:
        return this.continuation(flags, id, buf, start, end);
      default:
        return; // unknown frame types are ignored
    }
  }

  private data(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new ConnectionError(PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    this.recvWindow -= length;
    if (this.recvWindow < 0) throw new ConnectionError(FLOW_CONTROL_ERROR, 'connection window exceeded');
    this.recvUsed += length;
    if (this.recvUsed >= WINDOW_REFILL) {
      this.queue(WINDOW_UPDATE, 0, 0, u32(this.recvUsed));
      this.recvWindow += this.recvUsed;
      this.recvUsed = 0;
    }
    if (flags & PADDED) {
      if (length < 1 || buf[start] >= length) throw new ConnectionError(PROTOCOL_ERROR, 'DATA padding');
      end -= buf[start];
      start++;
    }
    const stream = this.streams.get(id);
    if (stream === undefined || stream.remoteEnded) {
      if (id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'DATA on an idle stream');
      // A stream we ended or reset: frames in flight are expected.
      if (stream !== undefined) this.resetStream(id, STREAM_CLOSED);
      return;
    }
    if (!stream.receiveWindow(length)) return this.resetStream(id, FLOW_CONTROL_ERROR);
    if (end > start) stream.receive(buf.subarray(start, end));
    if (flags & END_STREAM) stream.remoteEnd();
  }

  private headers(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0 || (id & 1) === 0) throw new ConnectionError(PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    if (flags & PADDED) {
      if (end - start < 1 || buf[start] >= end - start) throw new ConnectionError(PROTOCOL_ERROR, 'HEADERS padding');
      end -= buf[start];
      start++;
    }
    if (flags & PRIORITY_FLAG) {
      if (end - start < 5) throw new ConnectionError(FRAME_SIZE_ERROR, 'HEADERS priority');
      start += 5;
    }
    if (flags & END_HEADERS) return this.headerBlock(id, flags, buf.subarray(start, end));
    this.headerStream = id;
    this.headerFlags = flags;
    this.headerParts = [Buffer.from(buf.subarray(start, end))];
    this.headerBytes = end - start;
  }

  private continuation(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (this.headerParts === undefined) throw new ConnectionError(PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    this.headerBytes += end - start;
    if (this.headerBytes > MAX_HEADER_BLOCK_BYTES) throw new ConnectionError(ENHANCE_YOUR_CALM, 'header block too large');
    this.headerParts.push(Buffer.from(buf.subarray(start, end)));
    if ((flags & END_HEADERS) === 0) return;
    const block = Buffer.concat(this.headerParts);
    this.headerParts = undefined;
    this.headerBlock(id, this.headerFlags, block);
  }

  private headerBlock(id: number, flags: number, block: Buffer): void {
    const { fields, tooLarge } = this.decoder.decode(block, MAX_HEADER_LIST_BYTES);
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers: they must end the stream.
      if ((flags & END_STREAM) === 0 || existing.remoteEnded) return this.resetStream(id, PROTOCOL_ERROR);
      existing.remoteEnd();
      return;
    }
    if (id <= this.lastStreamId) throw new ConnectionError(STREAM_CLOSED, `HEADERS on closed stream ${id}`);
    this.lastStreamId = id;
    if (this.goingAway) return this.resetStream(id, REFUSED_STREAM);
    const max = this.options.maxConcurrentStreams;
    if (max !== undefined && this.streams.size >= max) return this.resetStream(id, REFUSED_STREAM);
    const headers = tooLarge ? undefined : requestHeaders(fields);
    if (headers === undefined) return this.resetStream(id, PROTOCOL_ERROR);
    const stream = new WireStream(this, id, this.peerWindow);
    this.streams.set(id, stream);
    stream.endsNow = (flags & END_STREAM) !== 0;
    this.onStream(stream, headers);
    if (stream.endsNow) stream.remoteEnd();
  }

  private settings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & ACK) {
      if (end !== start) throw new ConnectionError(FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if ((end - start) % 6 !== 0) throw new ConnectionError(FRAME_SIZE_ERROR, 'SETTINGS size');
    for (let at = start; at < end; at += 6) {
      const value = buf.readUInt32BE(at + 2);
      switch (buf.readUInt16BE(at)) {
        case SETTINGS_ENABLE_PUSH:
          if (value > 1) throw new ConnectionError(PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH');
          break;
        case SETTINGS_INITIAL_WINDOW_SIZE: {
          if (value > MAX_WINDOW) throw new ConnectionError(FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE');
          const delta = value - this.peerWindow;
          this.peerWindow = value;
          for (const stream of this.streams.values()) stream.sendWindow += delta;
          break;
        }
        case SETTINGS_MAX_FRAME_SIZE:
          if (value < DEFAULT_FRAME_SIZE || value > 2 ** 24 - 1) throw new ConnectionError(PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE');
          this.peerMaxFrame = value;
          break;
        case SETTINGS_HEADER_TABLE_SIZE:
          // We never index, but a decoder told to shrink its table waits for the encoder to say
          // so (RFC 7541 4.2): our next header block sets it to 0, for good.
          if (value < DEFAULT_TABLE_SIZE && !this.tableSizeSignalled) this.tableSizeSignal = true;
          break;
        default:
          // MAX_CONCURRENT_STREAMS: we never push;
          // MAX_HEADER_LIST_SIZE: our responses are small; unknown: ignored.
          break;
      }
    }
    this.queue(SETTINGS, ACK, 0, undefined);
    this.unblock();
  }

  private windowUpdate(id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) throw new ConnectionError(FRAME_SIZE_ERROR, 'WINDOW_UPDATE size');
    const increment = buf.readUInt32BE(start) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw new ConnectionError(PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) throw new ConnectionError(FLOW_CONTROL_ERROR, 'connection window overflow');
    } else {
      const stream = this.streams.get(id);
      if (stream === undefined) {
        if (id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
        return;
      }
      if (increment === 0) return this.resetStream(id, PROTOCOL_ERROR);
      stream.sendWindow += increment;
      if (stream.sendWindow > MAX_WINDOW) return this.resetStream(id, FLOW_CONTROL_ERROR);
    }
    this.unblock();
  }

  // A stream error: RST_STREAM, and the stream (if we still hold it) ends as cancelled.
  resetStream(id: number, code: number): void {
    this.queue(RST_STREAM, 0, id, u32(code));
    this.streams.get(id)?.peerReset();
  }

  // GOAWAY with the code, what is queued and the GOAWAY written, the socket closed.
  private fail(code: number): void {
    if (this.closed) return;
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(this.lastStreamId, 0);
    payload.writeUInt32BE(code, 4);
    this.queue(GOAWAY, 0, 0, payload);
    this.flush();
    this.closed = true;
    this.socket.destroySoon();
    this.endStreams();
  }

  private socketClosed(): void {
    this.closed = true;
    clearTimeout(this.keepaliveTimer);
    this.endStreams();
    this.onClose(this);
  }

  private endStreams(): void {
    for (const stream of this.streams.values()) stream.peerReset();
    this.streams.clear();
    this.blocked.length = 0;
  }

  streamClosed(stream: WireStream): void {
    this.streams.delete(stream.id);
    this.closeIfIdle();
  }

  private closeIfIdle(): void {
    if (this.goingAway && this.streams.size === 0 && !this.closed) {
      this.flush();
      this.closed = true;
      this.socket.destroySoon();
    }
  }

  // --- sending

  queue(type: number, flags: number, id: number, payload: Buffer | undefined): void {
    if (this.closed) return;
    this.out.push(type, flags, id, payload);
    this.outBytes += 9 + (payload === undefined ? 0 : payload.length);
    if (!this.queued) {
      this.queued = true;
      if (dirty.push(this) === 1) setImmediate(flushAll);
    }
  }

  // A header block, split into CONTINUATION frames when the client's frame size asks for it.
  queueHeaders(id: number, block: Buffer, endStream: boolean): void {
    if (this.tableSizeSignal) {
      this.tableSizeSignal = false;
      this.tableSizeSignalled = true;
      block = Buffer.concat([TABLE_SIZE_ZERO, block]);
    }
    const max = this.peerMaxFrame;
    const flags = endStream ? END_STREAM : 0;
    if (block.length <= max) return this.queue(HEADERS, flags | END_HEADERS, id, block);
    this.queue(HEADERS, flags, id, block.subarray(0, max));
    for (let at = max; at < block.length; at += max) {
      const last = at + max >= block.length;
      this.queue(CONTINUATION, last ? END_HEADERS : 0, id, block.subarray(at, Math.min(at + max, block.length)));
    }
  }

  block(stream: WireStream): void {
    if (!this.blocked.includes(stream)) this.blocked.push(stream);
  }

  private unblock(): void {
    if (this.blocked.length === 0) return;
    const waiting = this.blocked;
    this.blocked = [];
    for (const stream of waiting) stream.sendPending();
  }

  flush(): void {
    this.queued = false;
    if (this.out.length === 0 || this.socket.destroyed) {
      this.out.length = 0;
      this.outBytes = 0;
      return;
    }
    const out = Buffer.allocUnsafe(this.outBytes);
    let at = 0;
    const frames = this.out;
    for (let i = 0; i < frames.length; i += 4) {
      const payload = frames[i + 3] as Buffer | undefined;
      const length = payload === undefined ? 0 : payload.length;
      writeFrameHeader(out, at, length, frames[i] as number, frames[i + 1] as number, frames[i + 2] as number);
      at += 9;
      if (length > 0) at += payload!.copy(out, at);
    }
    frames.length = 0;
    this.outBytes = 0;
    this.socket.write(out);
  }

  // grpc-js' server keepalive: a PING every keepaliveMs, the connection closed when one is not
  // acknowledged within keepaliveTimeoutMs.
  private scheduleKeepalive(): void {
    this.keepaliveTimer = setTimeout(() => {
      if (this.closed) return;
      this.pingOutstanding = true;
      this.queue(PING, 0, 0, Buffer.alloc(8));
      this.keepaliveTimer = setTimeout(() => this.socket.destroy(), this.options.keepaliveTimeoutMs ?? 20_000).unref();
    }, this.options.keepaliveMs).unref();
  }

  private pingAnswered(): void {
    if (!this.pingOutstanding) return;
    this.pingOutstanding = false;
    clearTimeout(this.keepaliveTimer);
    if (!this.closed) this.scheduleKeepalive();
  }
}

// Listeners a stream can carry: one per event (call.ts sets each once).
type Listener = (this: WireStream, chunk: Buffer) => void;
const NO_CHUNK = Buffer.alloc(0);

export class WireStream {
  destroyed = false;
  closed = false;
  remoteEnded = false;
  // The request's HEADERS end it: a stream answered while they are dispatched needs no RST_STREAM.
  endsNow = false;
  private localEnded = false;
  private recvWindow = LOCAL_WINDOW;
  private recvUsed = 0;
  private onData: Listener | undefined;
  private onEnd: Listener | undefined;
  private onClose: Listener | undefined;
  private onWantTrailers: Listener | undefined;
  private waitForTrailers = false;
  // DATA waiting for window, and whether the stream ends after it (trailers or END_STREAM).
  private pending: Buffer[] | undefined;
  private pendingTrailers: Buffer | undefined;
  private pendingEnd = false;
  [key: symbol]: unknown;

  constructor(
    readonly session: WireConnection,
    readonly id: number,
    public sendWindow: number,
  ) {}

  on(event: string, listener: Listener): this {
    switch (event) {
      case 'data':
        this.onData = listener;
        break;
      case 'end':
        this.onEnd = listener;
        break;
      case 'close':
        this.onClose = listener;
        break;
      case 'wantTrailers':
        this.onWantTrailers = listener;
        break;
      default:
        break; // 'error': streams here do not emit it
    }
    return this;
  }

  once(event: string, listener: Listener): this {
    return this.on(event, listener);
  }

  respond(headers: ResponseHeaders, options?: { endStream?: boolean; waitForTrailers?: boolean }): void {
    if (this.closed) return;
    const end = options?.endStream === true;
    this.waitForTrailers = options?.waitForTrailers === true;
    this.session.queueHeaders(this.id, headerBlock(headers), end);
    if (end) this.localEnd();
  }

  write(data: Buffer): boolean {
    if (this.closed) return false;
    this.sendData(data);
    return this.pending === undefined;
  }

  end(data?: Buffer): void {
    if (this.closed) return;
    if (data !== undefined && data.length > 0) this.sendData(data);
    if (this.waitForTrailers) {
      const listener = this.onWantTrailers;
      this.onWantTrailers = undefined;
      listener?.call(this, NO_CHUNK);
    } else if (this.pending === undefined) {
      this.session.queue(DATA, END_STREAM, this.id, undefined);
      this.localEnd();
    } else this.pendingEnd = true;
  }

  sendTrailers(headers: ResponseHeaders): void {
    if (this.closed) return;
    const block = headerBlock(headers);
    if (this.pending !== undefined) {
      this.pendingTrailers = block;
      return;
    }
    this.session.queueHeaders(this.id, block, true);
    this.localEnd();
  }

  private sendData(data: Buffer): void {
    if (this.pending !== undefined) {
      this.pending.push(data);
      return;
    }
    const session = this.session;
    let at = 0;
    while (at < data.length) {
      const n = Math.min(data.length - at, session.peerMaxFrame, session.sendWindow, this.sendWindow);
      if (n <= 0) {
        this.pending = [data.subarray(at)];
        session.block(this);
        return;
      }
      session.queue(DATA, 0, this.id, at === 0 && n === data.length ? data : data.subarray(at, at + n));
      session.sendWindow -= n;
      this.sendWindow -= n;
      at += n;
    }
  }

  // The connection has window again: what waited goes out, then the end that waited for it.
  sendPending(): void {
    const pending = this.pending;
    if (pending === undefined || this.closed) return;
    this.pending = undefined;
    for (let i = 0; i < pending.length; i++) {
      this.sendData(pending[i]);
      const still = this.pending as Buffer[] | undefined;
      if (still !== undefined) {
        still.push(...pending.slice(i + 1));
        return;
      }
    }
    if (this.pendingTrailers !== undefined) {
      this.session.queueHeaders(this.id, this.pendingTrailers, true);
      this.localEnd();
    } else if (this.pendingEnd) {
      this.session.queue(DATA, END_STREAM, this.id, undefined);
      this.localEnd();
    }
  }

  // Flow control of what the client sends: false when it sent beyond the window. Window is given
  // back as it is used (call.ts holds what it needs), in WINDOW_UPDATEs of half the window.
  receiveWindow(length: number): boolean {
    this.recvWindow -= length;
    if (this.recvWindow < 0) return false;
    this.recvUsed += length;
    if (this.recvUsed >= WINDOW_REFILL) {
      this.session.queue(WINDOW_UPDATE, 0, this.id, u32(this.recvUsed));
      this.recvWindow += this.recvUsed;
      this.recvUsed = 0;
    }
    return true;
  }

  receive(chunk: Buffer): void {
    this.onData?.call(this, chunk);
  }

  remoteEnd(): void {
    if (this.remoteEnded) return;
    this.remoteEnded = true;
    this.onEnd?.call(this, NO_CHUNK);
    if (this.localEnded) this.close();
  }

  // We sent END_STREAM. A client still sending is asked to stop (RST_STREAM NO_ERROR, RFC 9113
  // 8.1): the answer is complete.
  private localEnd(): void {
    this.localEnded = true;
    if (!this.remoteEnded && !this.endsNow) this.session.queue(RST_STREAM, 0, this.id, NO_ERROR_PAYLOAD);
    this.close();
  }

  // Reset by the client, or the connection went away: closed, as a cancelled call sees it.
  peerReset(): void {
    if (this.closed) return;
    this.destroyed = true;
    this.close();
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    this.pending = undefined;
    this.session.streamClosed(this);
    this.onClose?.call(this, NO_CHUNK);
  }
}

const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
const REQUEST_PSEUDO = new Set([':method', ':scheme', ':path', ':authority']);

// The fields of a request's header block as node:http2 gives them (a repeated field: an array),
// or undefined when the request is malformed (RFC 9113 8.2, 8.3): an upper-case name, a pseudo-header
// that is unknown, repeated or after a regular field, a connection-specific field, no :method,
// :scheme or :path.
function requestHeaders(fields: string[]): RequestHeaders | undefined {
  const headers: RequestHeaders = {};
  let regular = false;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    const value = fields[i + 1];
    if (name.length === 0 || name !== name.toLowerCase()) return undefined;
    if (name.charCodeAt(0) === 0x3a) {
      if (regular || !REQUEST_PSEUDO.has(name) || headers[name] !== undefined) return undefined;
    } else {
      regular = true;
      if (CONNECTION_SPECIFIC.has(name) || (name === 'te' && value !== 'trailers')) return undefined;
    }
    const had = headers[name];
    if (had === undefined) headers[name] = value;
    else if (typeof had === 'string') headers[name] = [had, value];
    else (had as string[]).push(value);
  }
  if (headers[':method'] === undefined || headers[':scheme'] === undefined || headers[':path'] === undefined) return undefined;
  return headers;
}

// A listening server: plain TCP, or TLS offering only h2.
export class WireServer {
  private readonly connections = new Set<WireConnection>();
  private readonly opening: Buffer;
  readonly server: net.Server;

  constructor(
    options: WireOptions,
    onStream: StreamHandler,
    tlsOptions?: tls.TlsOptions,
    acceptsPeer?: (socket: tls.TLSSocket) => boolean,
  ) {
    this.opening = openingFrames(options);
    const onClose = (c: WireConnection) => this.connections.delete(c);
    const accept = (socket: net.Socket) => this.connections.add(new WireConnection(socket, this.opening, options, onStream, onClose));
    if (tlsOptions === undefined) {
      this.server = net.createServer(accept);
    } else {
      const server = tls.createServer({ ...tlsOptions, ALPNProtocols: ['h2'] });
      server.on('secureConnection', (socket: tls.TLSSocket) => {
        // gRPC is HTTP/2 only: a client that did not negotiate h2 is not served.
        if (socket.alpnProtocol !== 'h2' || (acceptsPeer !== undefined && !acceptsPeer(socket))) return socket.destroy();
        accept(socket);
      });
      server.on('tlsClientError', () => {});
      this.server = server;
    }
  }

  // Stop accepting; GOAWAY on every connection, each closed once its streams are answered.
  close(done: () => void): void {
    this.server.close(() => done());
    for (const c of this.connections) c.close();
  }

  destroy(): void {
    for (const c of this.connections) c.destroy();
    this.server.close();
  }
}
