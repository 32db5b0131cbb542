import net from 'node:net';
import tls from 'node:tls';
import type { RequestHeaders } from './call';
import { type AbuseLimits, Budget, DEFAULT_LIMITS } from './budget';
import {
  ACK,
  COMPRESSION_ERROR,
  CONTINUATION,
  DATA,
  DEFAULT_FRAME_SIZE,
  DEFAULT_WINDOW,
  END_HEADERS,
  END_STREAM,
  ENHANCE_YOUR_CALM,
  FLOW_CONTROL_ERROR,
  FRAME_SIZE_ERROR,
  GOAWAY,
  HEADERS,
  INTERNAL_ERROR,
  MAX_WINDOW,
  NO_ERROR,
  PADDED,
  PING,
  PREFACE,
  PRIORITY,
  PRIORITY_FLAG,
  PROTOCOL_ERROR,
  PUSH_PROMISE,
  REFUSED_STREAM,
  RST_STREAM,
  SETTINGS,
  SETTINGS_ENABLE_PUSH,
  SETTINGS_HEADER_TABLE_SIZE,
  SETTINGS_INITIAL_WINDOW_SIZE,
  SETTINGS_MAX_CONCURRENT_STREAMS,
  SETTINGS_MAX_FRAME_SIZE,
  SETTINGS_MAX_HEADER_LIST_SIZE,
  STREAM_CLOSED,
  u32,
  WINDOW_UPDATE,
  writeFrameHeader,
} from './frames';
import { HpackBomb, HpackDecoder, HpackError } from './hpack';
import { contentLength, requestHeaders } from './request-headers';
import { type StreamOwner, WireStream } from './stream';

export * from './frames';
export { WireStream } from './stream';

// sluice's own HTTP/2 (RFC 9113) server side, on plain sockets (GRPC_SERVER_IMPL=sluice): what a
// gRPC server needs and nothing else. Compared with node:http2 a connection is one socket and one
// object, a stream one small object with no event emitter (stream.ts), and everything a connection
// sends in one turn of the event loop goes out in one write. What a peer can make a connection
// cost is bounded (budget.ts); past a bound the peer is sent GOAWAY ENHANCE_YOUR_CALM and closed.

const DEFAULT_TABLE_SIZE = 4096;
// HPACK's dynamic table size update to 0.
const TABLE_SIZE_ZERO = Buffer.from([0x20]);
// What we let a client send before it hears from us again, per stream and per connection, unless
// the largest message allowed needs more. Credit comes back only as call.ts takes whole messages
// out of its buffer, so unfinished bodies hold at most this much per connection.
const LOCAL_WINDOW = 1 << 20;
const MAX_HEADER_LIST_BYTES = 65_536;
// A header block (HEADERS and its CONTINUATIONs) beyond this closes the connection unread; a
// block that decodes to more than HPACK_BOMB_BYTES (small references to large table entries) too.
const MAX_HEADER_BLOCK_BYTES = 4 * MAX_HEADER_LIST_BYTES;
const HPACK_BOMB_BYTES = 4 * MAX_HEADER_LIST_BYTES;
// Stream ids a connection remembers having reset (see WireConnection.resetIds).
const RECENT_RESETS = 1024;
// The PING payload of the heads-up GOAWAY before an idle connection is closed.
const IDLE_PING = Buffer.from('sluiceGA', 'latin1');

export interface WireOptions {
  // SETTINGS_MAX_CONCURRENT_STREAMS; undefined: no limit announced.
  maxConcurrentStreams?: number;
  // A PING every keepaliveMs, the connection closed when one is not answered within keepaliveTimeoutMs.
  keepaliveMs?: number;
  keepaliveTimeoutMs?: number;
  // The preface and the client's first SETTINGS (and the TLS handshake) must arrive within this.
  handshakeTimeoutMs?: number;
  // A connection with no stream for this long is told GOAWAY and closed (0 or undefined: never).
  idleTimeoutMs?: number;
  // The largest gRPC message a call accepts (-1: none): the receive window holds at least one.
  maxMessageBytes?: number;
  limits?: Partial<AbuseLimits>;
  onAbuse?: (c: WireConnection, what: string) => void;
}

export type StreamHandler = (stream: WireStream, headers: RequestHeaders) => void;

function receiveWindowFor(options: WireOptions): number {
  const max = options.maxMessageBytes ?? -1;
  return max < 0 ? LOCAL_WINDOW : Math.min(MAX_WINDOW, Math.max(LOCAL_WINDOW, max + 5));
}

// Our SETTINGS and the connection window, sent first on every connection; one block per option set.
function openingFrames(options: WireOptions): Buffer {
  const window = receiveWindowFor(options);
  const settings: [number, number][] = [
    [SETTINGS_ENABLE_PUSH, 0],
    [SETTINGS_INITIAL_WINDOW_SIZE, window],
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
  out.writeUInt32BE(window - DEFAULT_WINDOW, at + 9);
  return out;
}

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

function isControl(type: number, flags: number): boolean {
  return type === RST_STREAM || ((type === PING || type === SETTINGS) && (flags & ACK) !== 0);
}

// What one WireServer hands each of its connections.
interface Shared {
  readonly opening: Buffer;
  readonly options: WireOptions;
  readonly limits: AbuseLimits;
  readonly window: number;
  readonly onStream: StreamHandler;
  readonly onClose: (c: WireConnection) => void;
  // A peer past its budget (what it sent too much of), just before it is closed.
  readonly onAbuse?: (c: WireConnection, what: string) => void;
}

export class WireConnection implements StreamOwner {
  readonly streams = new Map<number, WireStream>();
  // Peer's SETTINGS.
  private peerWindow = DEFAULT_WINDOW;
  peerMaxFrame = DEFAULT_FRAME_SIZE;
  // Connection-level windows: what we may send, what the client may still send us, and the credit
  // released by readers since our last WINDOW_UPDATE.
  sendWindow = DEFAULT_WINDOW;
  private recvWindow: number;
  private released = 0;
  private readonly decoder = new HpackDecoder();
  private lastStreamId = 0;
  private input: Buffer | undefined;
  private prefaceSeen = false;
  private settingsSeen = false;
  readonly openedAt = performance.now();
  // For the server's sweep: a stream opened since its last visit, and for how long it has found
  // none open and none opened (no clock read per call).
  streamOpened = false;
  idleMs = 0;
  // A header block in CONTINUATION frames: its stream, the HEADERS frame's flags, the fragments.
  private headerStream = 0;
  private headerFlags = 0;
  private headerParts: Buffer[] | undefined;
  private headerBytes = 0;
  private headerSelfDependent = false;
  // Frames to send, four slots each: type, flags, stream id, payload.
  private out: (number | Buffer | undefined)[] = [];
  private outBytes = 0;
  private outControl = 0;
  private queued = false;
  // Streams with DATA and window of their own, waiting for connection window, oldest first.
  private waiting: (WireStream | undefined)[] = [];
  private waitingHead = 0;
  // Streams we sent RST_STREAM on, the newest RECENT_RESETS: what the client still sends on them
  // was in flight and is ignored.
  private readonly resetIds = new Set<number>();
  // Streams whose request ended in the frames being handled: their 'end' runs after them.
  private ending: WireStream[] = [];
  // What the peer made us spend (budget.ts).
  private readonly budget: Budget;
  private streamsOpened = 0;
  private dataSent = 0;
  private windowUpdates = 0;
  private priorities = 0;
  private stuckControl = 0;
  private paused = false;
  // GOAWAY sent (no new streams) or received (none will come); closed: the socket is gone.
  private goingAway = false;
  // The heads-up GOAWAY of an idle close was sent; abusive: GOAWAY ENHANCE_YOUR_CALM was.
  private idleClosing = false;
  private abusive = false;
  closed = false;
  private keepaliveTimer: NodeJS.Timeout | undefined;
  private pingOutstanding = false;
  // A dynamic table size update owed to the client's decoder, and whether it was sent.
  private tableSizeSignal = false;
  private tableSizeSignalled = false;
  // When the bytes being handled were read (performance.now()): when streams opened, for resets.
  private readAt = 0;

  constructor(
    readonly socket: net.Socket,
    private readonly shared: Shared,
  ) {
    this.recvWindow = shared.window;
    this.budget = new Budget(shared.limits.burst, shared.limits.perSecond);
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', () => socket.destroy());
    socket.on('close', () => this.socketClosed());
    socket.on('drain', () => this.drained());
    socket.write(shared.opening);
    if (shared.options.keepaliveMs !== undefined) this.scheduleKeepalive();
  }

  private get options(): WireOptions {
    return this.shared.options;
  }

  get handshakeDone(): boolean {
    return this.settingsSeen;
  }

  // Graceful: GOAWAY naming the last stream we will answer; the connection closes once those are.
  close(): void {
    if (this.closed || this.goingAway) return;
    this.goingAway = true;
    this.queue(GOAWAY, 0, 0, goaway(this.lastStreamId, NO_ERROR));
    this.closeIfIdle();
  }

  // Idle, or the server stopping: GOAWAY naming no stream limit, then a PING; once it is answered,
  // every stream the client opened before it saw the GOAWAY has arrived, and the real GOAWAY can
  // name the last (grpc-go's graceful close). So no call the client sent before it knew is refused:
  // a refused call is retried once, and a retry that lands on another worker stopping too fails.
  // A client that does not answer within a second is closed anyway.
  closeGracefully(): void {
    if (this.closed || this.goingAway || this.idleClosing) return;
    this.idleClosing = true;
    this.queue(GOAWAY, 0, 0, goaway(MAX_WINDOW, NO_ERROR));
    this.queue(PING, 0, 0, IDLE_PING);
    setTimeout(() => this.close(), 1000).unref();
  }

  destroy(): void {
    this.socket.destroy();
  }

  private receive(chunk: Buffer): void {
    this.readAt = performance.now();
    if (this.closed || this.abusive) return;
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
        pos = end;
        if (this.closed || this.abusive) break;
      }
      if (this.ending.length > 0) this.endRequests();
    } catch (err) {
      this.ending.length = 0;
      if (err instanceof HpackBomb || (err instanceof ConnectionError && err.code === ENHANCE_YOUR_CALM)) {
        this.shared.onAbuse?.(this, err.message);
        return this.fail(ENHANCE_YOUR_CALM);
      }
      if (err instanceof ConnectionError) return this.fail(err.code);
      if (err instanceof HpackError) return this.fail(COMPRESSION_ERROR);
      // A fault of ours (or of a handler's callback): this connection ends, the process serves on,
      // and stderr says why.
      process.emitWarning(err instanceof Error ? err : new Error(String(err)), 'SluiceHttp2Warning');
      return this.fail(INTERNAL_ERROR);
    }
    if (this.closed || this.abusive) return;
    if (pos < buf.length) this.input = pos === 0 ? buf : buf.subarray(pos);
  }

  // Requests that ended in this read start now: a call the same read also reset never runs.
  private endRequests(): void {
    const ending = this.ending;
    // A handler does not read frames, so nothing is added to the list while it runs.
    for (let i = 0; i < ending.length; i++) ending[i].fireEnd();
    ending.length = 0;
  }

  deferEnd(stream: WireStream): void {
    this.ending.push(stream);
  }

  private frame(type: number, flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (!this.settingsSeen) {
      if (type !== SETTINGS || (flags & ACK) !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'first frame not SETTINGS');
      this.settingsSeen = true;
    } else if (type === SETTINGS && (flags & ACK) === 0) this.spend('SETTINGS frames');
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
        if (++this.priorities > this.shared.limits.priorities * (this.streamsOpened + 1)) return this.abuse('PRIORITY frames');
        if (end - start !== 5) return this.resetStream(id, FRAME_SIZE_ERROR);
        if ((buf.readUInt32BE(start) & 0x7fffffff) === id) return this.resetStream(id, PROTOCOL_ERROR);
        return;
      case RST_STREAM: {
        if (end - start !== 4) throw new ConnectionError(FRAME_SIZE_ERROR, 'RST_STREAM size');
        if (id === 0 || id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
        const stream = this.streams.get(id);
        if (stream === undefined) return;
        // A call reset before we answered it: Rapid Reset when it comes at once and is most of
        // what a peer sends. A late one is a client giving up on a slow answer (Envoy at its
        // timeout when this process is starved of CPU): not counted, or an overloaded replica
        // would close its busiest Envoy's connection.
        const rapid = this.readAt - stream.openedAt < this.shared.limits.lateResetMs;
        stream.peerReset();
        if (rapid) this.spend('calls reset');
        this.closeIfIdle();
        return;
      }
      case SETTINGS:
        return this.settings(flags, id, buf, start, end);
      case PUSH_PROMISE:
        throw new ConnectionError(PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
      case PING:
        if (end - start !== 8) throw new ConnectionError(FRAME_SIZE_ERROR, 'PING size');
        if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'PING on a stream');
        if (flags & ACK) return this.pingAnswered(buf.subarray(start, end));
        this.spend('PING frames');
        this.queue(PING, ACK, 0, Buffer.from(buf.subarray(start, end)));
        return;
      case GOAWAY:
        if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'GOAWAY on a stream');
        if (end - start < 8) throw new ConnectionError(FRAME_SIZE_ERROR, 'GOAWAY size');
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

  // One unit of the abuse budget; past it, GOAWAY ENHANCE_YOUR_CALM.
  private spend(what: string): void {
    if (!this.budget.spend()) this.abuse(what);
  }

  // The peer spent its budget: GOAWAY ENHANCE_YOUR_CALM naming the last stream we took, nothing it
  // sends is read any more, calls in flight have graceMs to be answered, then the socket goes.
  private abuse(what: string): void {
    if (this.abusive || this.closed) return;
    this.abusive = true;
    this.shared.onAbuse?.(this, what);
    this.goingAway = true;
    this.ending.length = 0;
    this.input = undefined;
    this.headerParts = undefined;
    this.queue(GOAWAY, 0, 0, goaway(this.lastStreamId, ENHANCE_YOUR_CALM));
    this.flush();
    this.socket.pause();
    setTimeout(() => this.socket.destroy(), this.shared.limits.graceMs).unref();
    this.closeIfIdle();
  }

  private data(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0) throw new ConnectionError(PROTOCOL_ERROR, 'DATA on stream 0');
    const length = end - start;
    this.recvWindow -= length;
    if (this.recvWindow < 0) throw new ConnectionError(FLOW_CONTROL_ERROR, 'connection window exceeded');
    this.giveCredit();
    if (length === 0 && (flags & END_STREAM) === 0) this.spend('empty DATA frames');
    let padding = 0;
    if (flags & PADDED) {
      if (length < 1 || buf[start] >= length) throw new ConnectionError(PROTOCOL_ERROR, 'DATA padding');
      padding = buf[start] + 1;
      end -= buf[start];
      start++;
    }
    const stream = this.streams.get(id);
    if (stream === undefined || stream.remoteEnded) {
      if (id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'DATA on an idle stream');
      this.consumed(length);
      // After our RST_STREAM, frames the client sent before it saw it are ignored (RFC 9113
      // 5.4.2); otherwise the stream is half-closed or closed by the client: STREAM_CLOSED (5.1).
      if (stream === undefined && this.resetIds.has(id)) return;
      this.resetStream(id, STREAM_CLOSED);
      return;
    }
    if (!stream.receiveWindow(length)) return this.resetStream(id, FLOW_CONTROL_ERROR);
    stream.consumed(padding);
    if (end > start && !stream.receive(buf.subarray(start, end))) return this.resetStream(id, PROTOCOL_ERROR);
    if (flags & END_STREAM && !stream.remoteEnd()) this.resetStream(id, PROTOCOL_ERROR);
  }

  private headers(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id === 0 || (id & 1) === 0) throw new ConnectionError(PROTOCOL_ERROR, `HEADERS on stream ${id}`);
    if (flags & PADDED) {
      if (end - start < 1 || buf[start] >= end - start) throw new ConnectionError(PROTOCOL_ERROR, 'HEADERS padding');
      end -= buf[start];
      start++;
    }
    let selfDependent = false;
    if (flags & PRIORITY_FLAG) {
      if (end - start < 5) throw new ConnectionError(FRAME_SIZE_ERROR, 'HEADERS priority');
      selfDependent = (buf.readUInt32BE(start) & 0x7fffffff) === id;
      start += 5;
    }
    if (flags & END_HEADERS) return this.headerBlock(id, flags, buf.subarray(start, end), selfDependent);
    if (end === start) this.spend('empty HEADERS frames');
    this.headerStream = id;
    this.headerFlags = flags;
    this.headerSelfDependent = selfDependent;
    this.headerParts = [Buffer.from(buf.subarray(start, end))];
    this.headerBytes = end - start;
  }

  private continuation(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    const parts = this.headerParts;
    if (parts === undefined) throw new ConnectionError(PROTOCOL_ERROR, 'CONTINUATION without HEADERS');
    this.headerBytes += end - start;
    if (this.headerBytes > MAX_HEADER_BLOCK_BYTES) throw new ConnectionError(ENHANCE_YOUR_CALM, 'header block bytes');
    if (parts.length > this.shared.limits.continuations) throw new ConnectionError(ENHANCE_YOUR_CALM, 'CONTINUATION frames');
    if (end === start && (flags & END_HEADERS) === 0) this.spend('empty CONTINUATION frames');
    parts.push(Buffer.from(buf.subarray(start, end)));
    if ((flags & END_HEADERS) === 0) return;
    const block = Buffer.concat(parts);
    this.headerParts = undefined;
    this.headerBlock(id, this.headerFlags, block, this.headerSelfDependent);
  }

  private headerBlock(id: number, flags: number, block: Buffer, selfDependent: boolean): void {
    // Decoded whatever follows: the table must stay in step with the client's encoder.
    const { fields, tooLarge, unsafe } = this.decoder.decode(block, MAX_HEADER_LIST_BYTES, HPACK_BOMB_BYTES);
    const existing = this.streams.get(id);
    if (existing !== undefined) {
      // Trailers: they must end the stream.
      if (existing.remoteEnded) return this.resetStream(id, STREAM_CLOSED);
      if ((flags & END_STREAM) === 0) return this.resetStream(id, PROTOCOL_ERROR);
      if (!existing.remoteEnd()) this.resetStream(id, PROTOCOL_ERROR);
      return;
    }
    if (this.resetIds.has(id)) return; // trailers in flight when we reset it (RFC 9113 5.4.2)
    if (id <= this.lastStreamId) throw new ConnectionError(STREAM_CLOSED, `HEADERS on closed stream ${id}`);
    this.lastStreamId = id;
    if (this.goingAway) return this.resetStream(id, REFUSED_STREAM);
    const max = this.options.maxConcurrentStreams;
    if (max !== undefined && this.streams.size >= max) return this.resetStream(id, REFUSED_STREAM);
    const headers = tooLarge || unsafe || selfDependent ? undefined : requestHeaders(fields);
    const length = headers === undefined ? undefined : contentLength(headers);
    if (length === undefined) return this.resetStream(id, PROTOCOL_ERROR);
    const stream = new WireStream(this, id, this.peerWindow, this.shared.window);
    stream.openedAt = this.readAt;
    this.streams.set(id, stream);
    this.streamsOpened++;
    this.streamOpened = true;
    if (length >= 0) stream.expectLength(length);
    stream.endsNow = (flags & END_STREAM) !== 0;
    this.shared.onStream(stream, headers!);
    if (stream.endsNow && !stream.remoteEnd()) this.resetStream(id, PROTOCOL_ERROR);
  }

  private settings(flags: number, id: number, buf: Buffer, start: number, end: number): void {
    if (id !== 0) throw new ConnectionError(PROTOCOL_ERROR, 'SETTINGS on a stream');
    if (flags & ACK) {
      if (end !== start) throw new ConnectionError(FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      return;
    }
    if ((end - start) % 6 !== 0) throw new ConnectionError(FRAME_SIZE_ERROR, 'SETTINGS size');
    let opened = false;
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
          if (delta === 0) break;
          for (const stream of this.streams.values()) {
            stream.sendWindow += delta;
            if (stream.sendWindow > MAX_WINDOW) throw new ConnectionError(FLOW_CONTROL_ERROR, 'stream window overflow');
          }
          opened ||= delta > 0;
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
    // Only a larger initial window can let blocked answers move; each stream is visited once.
    if (opened)
      for (const stream of this.streams.values()) if (stream.hasPending && stream.sendWindow > 0 && !stream.waitingForConnection) stream.sendPending();
  }

  private windowUpdate(id: number, buf: Buffer, start: number, end: number): void {
    if (end - start !== 4) throw new ConnectionError(FRAME_SIZE_ERROR, 'WINDOW_UPDATE size');
    const limits = this.shared.limits;
    if (++this.windowUpdates > limits.windowUpdates + 2 * this.streamsOpened + limits.windowUpdatesPerData * this.dataSent)
      return this.abuse('WINDOW_UPDATE frames');
    const increment = buf.readUInt32BE(start) & 0x7fffffff;
    if (id === 0) {
      if (increment === 0) throw new ConnectionError(PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) throw new ConnectionError(FLOW_CONTROL_ERROR, 'connection window overflow');
      this.moveWaiting();
      return;
    }
    const stream = this.streams.get(id);
    if (stream === undefined) {
      if (id > this.lastStreamId) throw new ConnectionError(PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    if (increment === 0) return this.resetStream(id, PROTOCOL_ERROR);
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) return this.resetStream(id, FLOW_CONTROL_ERROR);
    if (stream.hasPending && !stream.waitingForConnection) stream.sendPending();
  }

  // Connection window opened: streams waiting for it move, oldest first, while it lasts. Each
  // visit sends DATA or ends the visits, so the work is what can move, not what waits.
  private moveWaiting(): void {
    const waiting = this.waiting;
    while (this.waitingHead < waiting.length && this.sendWindow > 0) {
      const stream = waiting[this.waitingHead];
      waiting[this.waitingHead++] = undefined;
      stream!.waitingForConnection = false;
      stream!.sendPending();
    }
    // The queue's head moves; its array is cut when half of it is behind the head.
    if (this.waitingHead === waiting.length) {
      waiting.length = 0;
      this.waitingHead = 0;
    } else if (this.waitingHead > 64 && this.waitingHead * 2 > waiting.length) {
      this.waiting = waiting.slice(this.waitingHead);
      this.waitingHead = 0;
    }
  }

  waitForWindow(stream: WireStream): void {
    if (stream.waitingForConnection) return;
    stream.waitingForConnection = true;
    this.waiting.push(stream);
  }

  // A stream error: RST_STREAM for it, and the stream (if we still hold it) ends as cancelled. A
  // peer whose frames keep drawing them spends its budget (MadeYouReset, CVE-2019-9514).
  resetStream(id: number, code: number): void {
    this.queue(RST_STREAM, 0, id, u32(code));
    this.streams.get(id)?.peerReset();
    this.spend('frames drawing RST_STREAM');
  }

  consumed(bytes: number): void {
    this.released += bytes;
    this.giveCredit();
  }

  // As a stream's (stream.ts): at half the window, or at once when the client is low on it.
  private giveCredit(): void {
    const half = this.shared.window / 2;
    if (this.released > 0 && (this.released >= half || this.recvWindow < half) && !this.closed) {
      this.queue(WINDOW_UPDATE, 0, 0, u32(this.released));
      this.recvWindow += this.released;
      this.released = 0;
    }
  }

  // GOAWAY with the code, what is queued and the GOAWAY written, the socket closed.
  private fail(code: number): void {
    if (this.closed) return;
    this.queue(GOAWAY, 0, 0, goaway(this.lastStreamId, code));
    this.flush();
    this.closed = true;
    this.socket.destroySoon();
    this.endStreams();
  }

  private socketClosed(): void {
    this.closed = true;
    clearTimeout(this.keepaliveTimer);
    this.endStreams();
    this.shared.onClose(this);
  }

  private endStreams(): void {
    for (const stream of this.streams.values()) stream.peerReset();
    this.streams.clear();
    this.waiting.length = 0;
    this.waitingHead = 0;
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
    if (type === DATA) this.dataSent++;
    else if (isControl(type, flags)) {
      this.outControl++;
      if (type === RST_STREAM) this.rememberReset(id);
    }
    if (!this.queued) {
      this.queued = true;
      if (dirty.push(this) === 1) setImmediate(flushAll);
    }
  }

  private rememberReset(id: number): void {
    const ids = this.resetIds;
    ids.add(id);
    if (ids.size > RECENT_RESETS) ids.delete(ids.values().next().value!);
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

  flush(): void {
    this.queued = false;
    const control = this.outControl;
    this.outControl = 0;
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
    const backlog = this.socket.writableLength;
    if (backlog > 0) this.backlogged(backlog, control);
  }

  // The socket did not take all we wrote: the peer reads slower than it makes us write. Control
  // answers pile up only to a bound (PING and SETTINGS floods, CVE-2019-9512/9515); past a lower
  // one nothing more is read until the socket drains, so answers stop being asked for.
  private backlogged(bytes: number, control: number): void {
    const limits = this.shared.limits;
    this.stuckControl += control;
    if (this.stuckControl > limits.queuedControlFrames || bytes > limits.maxQueuedBytes) {
      if (!this.abusive) this.abuse(bytes > limits.maxQueuedBytes ? 'unread answers' : 'unread control frames');
      else this.socket.destroy();
      return;
    }
    if (bytes > limits.pauseReadingBytes && !this.paused) {
      this.paused = true;
      this.socket.pause();
    }
  }

  private drained(): void {
    this.stuckControl = 0;
    if (this.paused && !this.abusive) {
      this.paused = false;
      this.socket.resume();
    }
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

  private pingAnswered(payload: Buffer): void {
    if (this.idleClosing && payload.equals(IDLE_PING)) return this.close();
    if (!this.pingOutstanding) return;
    this.pingOutstanding = false;
    clearTimeout(this.keepaliveTimer);
    if (!this.closed) this.scheduleKeepalive();
  }
}

function goaway(lastStreamId: number, code: number): Buffer {
  const payload = Buffer.alloc(8);
  payload.writeUInt32BE(lastStreamId, 0);
  payload.writeUInt32BE(code, 4);
  return payload;
}

// A listening server: plain TCP, or TLS offering only h2.
export class WireServer {
  private readonly connections = new Set<WireConnection>();
  private readonly shared: Shared;
  private readonly sweeper: NodeJS.Timeout | undefined;
  readonly server: net.Server;

  constructor(options: WireOptions, onStream: StreamHandler, tlsOptions?: tls.TlsOptions, acceptsPeer?: (socket: tls.TLSSocket) => boolean) {
    const onClose = (c: WireConnection) => this.connections.delete(c);
    this.shared = {
      opening: openingFrames(options),
      options,
      limits: { ...DEFAULT_LIMITS, ...options.limits },
      window: receiveWindowFor(options),
      onStream,
      onClose,
      onAbuse: options.onAbuse,
    };
    const accept = (socket: net.Socket) => this.connections.add(new WireConnection(socket, this.shared));
    if (tlsOptions === undefined) {
      this.server = net.createServer(accept);
    } else {
      const server = tls.createServer({ ...tlsOptions, ALPNProtocols: ['h2'], handshakeTimeout: options.handshakeTimeoutMs || undefined });
      server.on('secureConnection', (socket: tls.TLSSocket) => {
        // gRPC is HTTP/2 only: a client that did not negotiate h2 is not served.
        if (socket.alpnProtocol !== 'h2' || (acceptsPeer !== undefined && !acceptsPeer(socket))) return socket.destroy();
        accept(socket);
      });
      server.on('tlsClientError', () => {});
      this.server = server;
    }
    // One timer for every connection's handshake and idle deadlines, a quarter of the shorter apart.
    const handshake = options.handshakeTimeoutMs ?? 0;
    const idle = options.idleTimeoutMs ?? 0;
    const shortest = Math.min(handshake || Infinity, idle || Infinity);
    if (shortest !== Infinity) {
      const every = Math.max(10, Math.min(5000, shortest / 4));
      this.sweeper = setInterval(() => this.sweep(handshake, idle, every), every).unref();
    }
  }

  // Idle time is counted in sweeps: a connection that had no stream open at one sweep and opened
  // none before the next was idle in between. The first idle sweep may come just after its last
  // stream closed, so one sweep more than the time is needed: closed between idleMs and idleMs +
  // everyMs after its last call.
  private sweep(handshakeMs: number, idleMs: number, everyMs: number): void {
    const now = performance.now();
    for (const c of this.connections) {
      if (!c.handshakeDone) {
        if (handshakeMs > 0 && now - c.openedAt >= handshakeMs) c.destroy();
        continue;
      }
      if (idleMs <= 0) continue;
      if (c.streams.size > 0 || c.streamOpened) c.idleMs = 0;
      else if ((c.idleMs += everyMs) >= idleMs + everyMs) c.closeGracefully();
      c.streamOpened = false;
    }
  }

  // Stop accepting; a graceful GOAWAY on every connection, each closed once its streams are
  // answered.
  close(done: () => void): void {
    clearInterval(this.sweeper);
    this.server.close(() => done());
    for (const c of this.connections) c.closeGracefully();
  }

  destroy(): void {
    clearInterval(this.sweeper);
    for (const c of this.connections) c.destroy();
    this.server.close();
  }
}
