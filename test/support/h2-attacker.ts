import fs from 'node:fs';
import net from 'node:net';
import { setImmediate as yieldToEvents } from 'node:timers/promises';
import { HpackDecoder } from '../../src/server/h2grpc/hpack';
import {
  ACK,
  CONTINUATION,
  DEFAULT_WINDOW,
  encodeFrame,
  END_HEADERS,
  GOAWAY,
  HEADERS,
  PING,
  PREFACE,
  RST_STREAM,
  SETTINGS,
  WINDOW_UPDATE,
} from '../../src/server/h2grpc/wire';

import { settingsFrame } from './h2-raw';

export { rstStream, settingsFrame, windowUpdate } from './h2-raw';

// A raw HTTP/2 client for attacks (test/support/h2-attacks.ts): it writes whatever frames it is
// given, and records what the server did about them (GOAWAY, RST_STREAMs, credit, answers, when
// the socket closed) without keeping every frame, as a flood draws hundreds of thousands
// (test/support/h2-raw.ts' client keeps them all, for protocol tests). With `read: false` it never reads after the
// first 16 KB Node buffers, as a peer that lets the server's answers pile up.

// What may wait to be written before a flood waits for the kernel to take it.
const MAX_UNSENT = 1 << 20;

export interface RawOptions {
  // false: a peer that does not read what the server sends.
  read?: boolean;
  // Our SETTINGS, sent after the preface.
  settings?: [number, number][];
}

// What the server said on one stream: the first header block's :status and grpc-status from the
// header block that carried it (headers of a trailers-only answer, or trailers).
export interface StreamAnswer {
  status?: string;
  grpcStatus?: string;
}

export class RawH2 {
  readonly connectedAt = performance.now();
  // When the first abusive frame was written (set by the attack); durations count from it.
  abuseAt: number | undefined;
  goaway: { code: number; lastStreamId: number; at: number } | undefined;
  // The server closed the connection: its FIN or reset reached us, or a write failed.
  closedAt: number | undefined;
  closeReason: string | undefined;
  readonly serverSettings = new Map<number, number>();
  settingsSeen = false;
  // First RST_STREAM code per stream, and how many RST_STREAMs of each code.
  readonly resets = new Map<number, number>();
  readonly resetCodes = new Map<number, number>();
  readonly answers = new Map<number, StreamAnswer>();
  // Credit the server gave on the connection: the initial window plus its WINDOW_UPDATEs on stream 0.
  connectionCredit = DEFAULT_WINDOW;
  framesReceived = 0;
  framesSent = 0;
  bytesSent = 0;
  private input: Buffer | undefined;
  private readonly decoder = new HpackDecoder();
  private headerStream = 0;
  private headerParts: Buffer[] = [];
  private readonly closeWaiters: (() => void)[] = [];
  private readonly unsent: Buffer[] = [];
  private unsentBytes = 0;
  private pumpTimer: NodeJS.Timeout | undefined;
  // Our preface is sent: the server's SETTINGS and PINGs are acknowledged from then on.
  private handshaken = false;

  private constructor(
    readonly socket: net.Socket,
    readonly options: RawOptions,
  ) {
    socket.setNoDelay(true);
    const closed = (why: string) => () => this.markClosed(why);
    socket.on('error', (err: NodeJS.ErrnoException) => this.markClosed(err.code ?? err.message));
    socket.on('end', closed('end'));
    socket.on('close', closed('close'));
    if (options.read !== false) socket.on('data', (chunk: Buffer) => this.receive(chunk));
  }

  static connect(port: number, options: RawOptions = {}): Promise<RawH2> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.once('error', reject);
      socket.once('connect', () => {
        socket.off('error', reject);
        resolve(new RawH2(socket, options));
      });
    });
  }

  // Preface and our SETTINGS: a connection the server should serve.
  static async open(port: number, options: RawOptions = {}): Promise<RawH2> {
    const c = await RawH2.connect(port, options);
    c.send(Buffer.concat([PREFACE, settingsFrame(options.settings ?? [])]));
    c.handshaken = true;
    // Our acknowledgement of the server's SETTINGS goes before anything the attack sends (it would
    // otherwise land inside a header block).
    if (options.read !== false) await c.until(() => c.settingsSeen, 1_000);
    return c;
  }

  get closed(): boolean {
    return this.closedAt !== undefined;
  }

  // Writes straight to the socket's descriptor, not through the stream: a write the server's close
  // makes fail (EPIPE, ECONNRESET) does not destroy the socket, so what the server said before
  // closing (its GOAWAY) is still read. What the kernel will not take yet waits in `unsent`.
  send(bytes: Buffer, frames = 1): boolean {
    if (this.closed) return false;
    this.framesSent += frames;
    this.bytesSent += bytes.length;
    this.unsent.push(bytes);
    this.unsentBytes += bytes.length;
    this.pump();
    return true;
  }

  private pump(): void {
    clearTimeout(this.pumpTimer);
    const fd = (this.socket as unknown as { _handle: { fd: number } | null })._handle?.fd;
    while (this.unsent.length > 0 && !this.closed && fd !== undefined) {
      const head = this.unsent[0];
      let n: number;
      try {
        n = fs.writeSync(fd, head);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? String(err);
        if (code === 'EAGAIN') break;
        this.markClosed(code);
        break;
      }
      this.unsentBytes -= n;
      if (n === head.length) this.unsent.shift();
      else this.unsent[0] = head.subarray(n);
    }
    if (this.closed) {
      this.unsent.length = 0;
      this.unsentBytes = 0;
    } else if (this.unsent.length > 0) this.pumpTimer = setTimeout(() => this.pump(), 1);
  }

  // Sends frames made by `next` in batches until the server closes the connection, `maxFrames`
  // are sent or `maxMs` have passed; events (the server's frames, a close) are taken between
  // batches. The first batch is where the abuse starts, unless the attack said otherwise.
  async flood(next: (i: number) => Buffer, o: { maxFrames: number; maxMs: number; batch?: number }): Promise<void> {
    const batch = o.batch ?? 100;
    const start = performance.now();
    this.abuseAt ??= start;
    for (let i = 0; i < o.maxFrames && !this.closed && performance.now() - start < o.maxMs; ) {
      const parts: Buffer[] = [];
      for (const end = Math.min(i + batch, o.maxFrames); i < end; i++) parts.push(next(i));
      this.send(Buffer.concat(parts), parts.length);
      await this.drained(start + o.maxMs);
      await yieldToEvents();
    }
  }

  // Resolves once the connection is closed, or after `ms`.
  waitClosed(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.closeWaiters.push(() => (clearTimeout(timer), resolve()));
    });
  }

  // Resolves once `done()` holds (checked as frames arrive), the connection closes, or after `ms`.
  async until(done: () => boolean, ms: number): Promise<boolean> {
    const end = performance.now() + ms;
    while (!done() && !this.closed && performance.now() < end) await new Promise((r) => setTimeout(r, 5));
    return done();
  }

  destroy(): void {
    clearTimeout(this.pumpTimer);
    this.socket.destroy();
  }

  // Resolves once little enough waits to be written, the connection closed, or at `deadline`.
  private async drained(deadline: number): Promise<void> {
    while (this.unsentBytes > MAX_UNSENT && !this.closed && performance.now() < deadline) await new Promise((r) => setTimeout(r, 1));
  }

  private markClosed(why: string): void {
    if (this.closedAt !== undefined) return;
    this.closedAt = performance.now();
    this.closeReason = why;
    for (const w of this.closeWaiters.splice(0)) w();
  }

  private receive(chunk: Buffer): void {
    const buf = this.input === undefined ? chunk : Buffer.concat([this.input, chunk]);
    let pos = 0;
    while (buf.length - pos >= 9) {
      const length = (buf[pos] << 16) | (buf[pos + 1] << 8) | buf[pos + 2];
      if (buf.length - pos < 9 + length) break;
      this.frame(buf[pos + 3], buf[pos + 4], buf.readUInt32BE(pos + 5) & 0x7fffffff, buf.subarray(pos + 9, pos + 9 + length));
      pos += 9 + length;
    }
    this.input = pos === buf.length ? undefined : buf.subarray(pos);
  }

  private frame(type: number, flags: number, id: number, payload: Buffer): void {
    this.framesReceived++;
    switch (type) {
      case SETTINGS:
        if (flags & ACK) return;
        this.settingsSeen = true;
        for (let at = 0; at + 6 <= payload.length; at += 6) this.serverSettings.set(payload.readUInt16BE(at), payload.readUInt32BE(at + 2));
        // A polite peer acknowledges; one that does not read never sees this.
        if (this.handshaken) this.send(encodeFrame(SETTINGS, ACK, 0));
        return;
      case PING:
        if ((flags & ACK) === 0 && this.handshaken) this.send(encodeFrame(PING, ACK, 0, Buffer.from(payload)));
        return;
      case GOAWAY:
        this.goaway ??= { lastStreamId: payload.readUInt32BE(0) & 0x7fffffff, code: payload.readUInt32BE(4), at: performance.now() };
        return;
      case RST_STREAM: {
        const code = payload.readUInt32BE(0);
        if (!this.resets.has(id)) this.resets.set(id, code);
        this.resetCodes.set(code, (this.resetCodes.get(code) ?? 0) + 1);
        return;
      }
      case WINDOW_UPDATE:
        if (id === 0) this.connectionCredit += payload.readUInt32BE(0) & 0x7fffffff;
        return;
      case HEADERS:
      case CONTINUATION:
        return this.headerFragment(type, flags, id, payload);
      default:
        return;
    }
  }

  // Header blocks are decoded in order (the decoder's table depends on it); what is kept is
  // :status and grpc-status.
  private headerFragment(type: number, flags: number, id: number, payload: Buffer): void {
    if (type === HEADERS) {
      this.headerStream = id;
      // Servers here send neither padding nor priority.
      this.headerParts = [payload];
    } else this.headerParts.push(payload);
    if ((flags & END_HEADERS) === 0) return;
    const { fields } = this.decoder.decode(Buffer.concat(this.headerParts), 1 << 20);
    this.headerParts = [];
    const answer = this.answers.get(this.headerStream) ?? {};
    for (let i = 0; i < fields.length; i += 2) {
      if (fields[i] === ':status') answer.status ??= fields[i + 1];
      if (fields[i] === 'grpc-status') answer.grpcStatus = fields[i + 1];
    }
    this.answers.set(this.headerStream, answer);
  }
}
