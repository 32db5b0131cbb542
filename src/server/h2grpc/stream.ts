import { encodeHeaders } from './hpack';
import { DATA, END_STREAM, NO_ERROR, RST_STREAM, u32, WINDOW_UPDATE } from './frames';

// One stream of sluice's own HTTP/2 (wire.ts). To h2grpc/call.ts it looks like the subset of
// node:http2's ServerHttp2Stream it uses (respond, write, end, sendTrailers, events data, end,
// close and wantTrailers), plus holdCredit/consumed, with which a call gives flow-control credit
// back only for the bytes it has taken out of its buffer.

export type ResponseHeaders = Record<string, string | number | readonly string[] | undefined>;

// What a stream needs of its connection.
export interface StreamOwner {
  readonly socket: { readonly remoteAddress?: string; readonly remotePort?: number };
  sendWindow: number;
  readonly peerMaxFrame: number;
  queue(type: number, flags: number, id: number, payload: Buffer | undefined): void;
  queueHeaders(id: number, block: Buffer, endStream: boolean): void;
  // The stream has DATA and window of its own, but the connection's window is spent.
  waitForWindow(stream: WireStream): void;
  // The request ended: the stream's 'end' listener runs once the frames read with it are handled.
  deferEnd(stream: WireStream): void;
  // Bytes of request body the stream's reader is done with (or dropped): connection credit.
  consumed(bytes: number): void;
  streamClosed(stream: WireStream): void;
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

// RST_STREAM's payload when we ended a stream the client is still sending on.
const NO_ERROR_PAYLOAD = u32(NO_ERROR);

// Listeners a stream can carry: one per event (call.ts sets each once).
type Listener = (this: WireStream, chunk: Buffer) => void;
const NO_CHUNK = Buffer.alloc(0);

export class WireStream {
  destroyed = false;
  closed = false;
  remoteEnded = false;
  // The request's HEADERS end it: a stream answered while they are dispatched needs no RST_STREAM.
  endsNow = false;
  // Waiting in the connection's queue for connection window.
  waitingForConnection = false;
  // When its HEADERS were read (performance.now()).
  openedAt = 0;
  private localEnded = false;
  // Credit: what the client may still send, what it sent that the reader still holds, and what
  // the reader released since the last WINDOW_UPDATE. Without holdCredit(), bytes are released as
  // they are handed to the 'data' listener.
  private recvWindow: number;
  private held = 0;
  private released = 0;
  private manualCredit = false;
  // content-length (-1: none) and the body bytes received.
  private expectedLength = -1;
  private bodyBytes = 0;
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
    readonly session: StreamOwner,
    readonly id: number,
    public sendWindow: number,
    private readonly window: number,
  ) {
    this.recvWindow = window;
  }

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

  get hasPending(): boolean {
    return this.pending !== undefined && !this.closed;
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
        // Blocked by its own window: its WINDOW_UPDATE (or SETTINGS) moves it. Blocked by the
        // connection's: it queues there, so that a connection WINDOW_UPDATE only visits streams
        // that can move.
        if (this.sendWindow > 0) session.waitForWindow(this);
        return;
      }
      session.queue(DATA, 0, this.id, at === 0 && n === data.length ? data : data.subarray(at, at + n));
      session.sendWindow -= n;
      this.sendWindow -= n;
      at += n;
    }
  }

  // Window has opened: what waited goes out, then the end that waited for it.
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

  expectLength(length: number): void {
    this.expectedLength = length;
  }

  // Flow control of what the client sends; false when it sent beyond the window.
  receiveWindow(length: number): boolean {
    this.recvWindow -= length;
    this.held += length;
    if (this.recvWindow < 0) return false;
    this.giveCredit();
    return true;
  }

  // The body bytes of one DATA frame (padding excluded); false when they pass the content-length.
  receive(chunk: Buffer): boolean {
    this.bodyBytes += chunk.length;
    if (this.expectedLength >= 0 && this.bodyBytes > this.expectedLength) return false;
    if (this.onData === undefined || !this.manualCredit) this.consumed(chunk.length);
    this.onData?.call(this, chunk);
    return true;
  }

  // The reader gives credit back itself (call.ts: as whole messages leave its buffer), so that
  // what a client sends and never finishes stays within the window.
  holdCredit(): void {
    this.manualCredit = true;
  }

  // Padding, bytes the reader is done with or dropped: credit for the connection, and for the
  // stream (while the client may still send).
  consumed(bytes: number): void {
    if (bytes <= 0) return;
    bytes = Math.min(bytes, this.held);
    this.held -= bytes;
    this.session.consumed(bytes);
    if (this.remoteEnded || this.closed) return;
    this.released += bytes;
    this.giveCredit();
  }

  // Half the window used, or the client is down to less than half: a message nearly as large as
  // the window must find room once what came before it is read.
  private giveCredit(): void {
    const half = this.window / 2;
    if (this.released > 0 && (this.released >= half || this.recvWindow < half)) {
      this.session.queue(WINDOW_UPDATE, 0, this.id, u32(this.released));
      this.recvWindow += this.released;
      this.released = 0;
    }
  }

  // The request ended (END_STREAM). false: the body was shorter than its content-length.
  remoteEnd(): boolean {
    if (this.remoteEnded) return true;
    this.remoteEnded = true;
    if (this.expectedLength >= 0 && this.bodyBytes !== this.expectedLength) return false;
    if (this.localEnded) this.close();
    else if (this.onEnd !== undefined) this.session.deferEnd(this);
    return true;
  }

  // Called by the connection after the frames read with the END_STREAM are handled: a call reset
  // in the same read is never started.
  fireEnd(): void {
    if (!this.closed) this.onEnd?.call(this, NO_CHUNK);
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
    // What the reader still held is dropped: the connection gets its credit back.
    if (this.held > 0) this.session.consumed(this.held);
    this.held = 0;
    this.session.streamClosed(this);
    this.onClose?.call(this, NO_CHUNK);
  }
}
