import { EventEmitter } from 'node:events';
import type http2 from 'node:http2';
import { Metadata, status as Status } from '@grpc/grpc-js';
import type { DeadlineList, Expiring } from '../../deadline-list';
import { type CallError, encodeMessage, frame, FrameError, FrameReader, frameMessage, parseTimeout } from './framing';

// One gRPC call on one HTTP/2 stream. To a handler it looks like the grpc-js call objects sluice's
// handlers are written for (server/grpc.ts grpcServices): a unary call is this object (request,
// getDeadline(), metadata, cancelled) with a callback; a streaming call is a StreamingCall.

export interface Method {
  path: string;
  requestStream: boolean;
  responseStream: boolean;
  requestDeserialize(bytes: Buffer): unknown;
  responseSerialize(value: unknown): Buffer;
  handler: (call: never, callback?: never) => void;
}

export interface CallOwner {
  readonly deadlines: DeadlineList;
  // -1: no limit.
  readonly maxMessageBytes: number;
}

const CALL = Symbol('h2grpc call');

// What a call needs of its HTTP/2 stream: node:http2's ServerHttp2Stream, or wire.ts' WireStream.
export interface GrpcStream {
  readonly destroyed: boolean;
  readonly closed: boolean;
  readonly session?: { readonly socket?: { readonly remoteAddress?: string; readonly remotePort?: number } | null } | null;
  respond(headers: Readonly<Record<string, string | number>>, options?: { endStream?: boolean; waitForTrailers?: boolean }): void;
  write(data: Buffer): boolean;
  end(data?: Buffer): unknown;
  sendTrailers(headers: Readonly<Record<string, string>>): void;
  // Events: 'data' (a chunk), 'end', 'close', 'wantTrailers', 'error'.
  on(event: string, listener: (this: never, chunk: Buffer) => void): unknown;
  once(event: string, listener: (this: never) => void): unknown;
  // sluice's own HTTP/2 (stream.ts): flow-control credit is given back as the call releases bytes.
  holdCredit?(): void;
  consumed?(bytes: number): void;
}
export type RequestHeaders = Record<string, string | string[] | undefined>;
type CallStream = GrpcStream & { [CALL]?: Call };

// As grpc-js answers (it advertises the encodings it can read).
// Frozen: the constant header blocks are encoded once (wire.ts).
const RESPONSE_HEADERS = Object.freeze({
  ':status': 200,
  'content-type': 'application/grpc+proto',
  'grpc-accept-encoding': 'identity,deflate,gzip',
  'grpc-encoding': 'identity',
});
const WAIT_FOR_TRAILERS = { waitForTrailers: true };
const END_STREAM = { endStream: true };
const OK_TRAILERS = Object.freeze({ 'grpc-status': '0', 'grpc-message': 'OK' });

// Stream listeners shared by every call (no closure per call): the call rides on the stream.
function onData(this: CallStream, chunk: Buffer): void {
  this[CALL]!.receive(chunk);
}
function onEnd(this: CallStream): void {
  this[CALL]!.halfClose();
}
function onClose(this: CallStream): void {
  this[CALL]!.closed();
}
function sendTrailers(this: CallStream): void {
  this.sendTrailers(this[CALL]!.trailers);
}
// Each 'error' is followed by 'close', which is where a call learns it was cancelled; without a
// listener an error (a client's RST_STREAM with an error code) would be thrown.
export function ignoreError(): void {}

// grpc-js' reading of an error a handler passes (serverErrorToStatus): a numeric code with its
// details, anything else UNKNOWN with its message.
function statusOf(err: { code?: unknown; details?: unknown; message?: unknown; metadata?: unknown }): CallError & { metadata?: Metadata } {
  const metadata = err.metadata instanceof Metadata ? err.metadata : undefined;
  if (typeof err.code === 'number' && Number.isInteger(err.code)) {
    const details = typeof err.details === 'string' ? err.details : typeof err.message === 'string' ? err.message : 'Unknown Error';
    return { code: err.code, details, metadata };
  }
  return { code: Status.UNKNOWN, details: typeof err.message === 'string' ? err.message : 'Unknown Error', metadata };
}

export class Call implements Expiring {
  deadlineAt = Infinity;
  prev: Expiring | undefined = undefined;
  next: Expiring | undefined = undefined;
  listed = false;
  request: unknown = undefined;
  trailers: Readonly<Record<string, string>> = OK_TRAILERS;
  private received = 0;
  private headersSent = false;
  private done = false;
  private readonly reader: FrameReader;
  private readonly encoding: string;
  private streaming: StreamingCall | undefined;

  constructor(
    private readonly stream: CallStream,
    private readonly headers: RequestHeaders,
    private readonly method: Method,
    private readonly owner: CallOwner,
  ) {
    this.reader = new FrameReader(owner.maxMessageBytes);
    const encoding = headers['grpc-encoding'];
    this.encoding = typeof encoding === 'string' ? encoding : 'identity';
  }

  start(): void {
    const stream = this.stream;
    const timeout = this.headers['grpc-timeout'];
    if (typeof timeout === 'string') {
      const ms = parseTimeout(timeout);
      if (ms === undefined) return this.finish(Status.INTERNAL, `Invalid grpc-timeout value "${timeout}"`);
      this.deadlineAt = Date.now() + ms;
      this.owner.deadlines.add(this);
    }
    stream[CALL] = this;
    stream.holdCredit?.();
    stream.on('data', onData);
    stream.on('end', onEnd);
    if (this.method.requestStream || this.method.responseStream) {
      stream.on('close', onClose);
      this.streaming = new StreamingCall(this);
      if (this.method.requestStream) this.invoke(this.streaming);
    }
  }

  // grpc-js' ServerUnaryCall / ServerSurfaceCall members the handlers use.
  getDeadline(): number {
    return this.deadlineAt;
  }

  get metadata(): Metadata {
    return Metadata.fromHttp2Headers(this.headers as http2.IncomingHttpHeaders);
  }

  get cancelled(): boolean {
    return this.stream.destroyed || this.stream.closed;
  }

  getPeer(): string {
    const socket = this.stream.session?.socket;
    return socket?.remoteAddress === undefined ? 'unknown' : `${socket.remoteAddress}:${socket.remotePort}`;
  }

  // Credit for what the client sent goes back as whole messages leave the reader: a body never
  // finished holds its bytes (and the window they took) until the call ends.
  receive(chunk: Buffer): void {
    if (this.done) {
      this.stream.consumed?.(chunk.length);
      return;
    }
    const before = this.reader.buffered + chunk.length;
    this.reader.push(chunk);
    try {
      for (let f = this.reader.next(); f !== undefined && !this.done; f = this.reader.next()) this.message(f);
    } catch (err) {
      if (!(err instanceof FrameError)) throw err;
      this.finish(err.code, err.message);
    }
    this.stream.consumed?.(before - this.reader.buffered);
  }

  private message(f: Buffer): void {
    const bytes = frameMessage(f, this.encoding, this.owner.maxMessageBytes);
    if (!this.method.requestStream && this.received > 0) {
      return this.finish(Status.UNIMPLEMENTED, `Received a second request message for server streaming method ${this.method.path}`);
    }
    this.received++;
    let request: unknown;
    try {
      request = this.method.requestDeserialize(bytes);
    } catch {
      return this.finish(Status.INTERNAL, 'Error deserializing request');
    }
    if (this.method.requestStream) this.streaming!.emit('data', request);
    else this.request = request;
  }

  // The client sent its last message (END_STREAM). Bytes of an unfinished message are dropped, as
  // grpc-js does.
  halfClose(): void {
    if (this.done) return;
    if (this.method.requestStream) {
      this.streaming!.emit('end');
      return;
    }
    if (this.received === 0) {
      return this.finish(Status.UNIMPLEMENTED, `Received no request message for server streaming method ${this.method.path}`);
    }
    if (this.streaming === undefined) this.invoke(this, (err: CallError | null, value?: unknown) => this.reply(err, value));
    else {
      this.streaming.request = this.request;
      this.invoke(this.streaming);
    }
  }

  private invoke(call: unknown, callback?: unknown): void {
    try {
      (this.method.handler as (call: unknown, callback?: unknown) => void)(call, callback);
    } catch {
      this.finish(Status.INTERNAL, 'Server method handler threw error');
    }
  }

  reply(err: CallError | null, value?: unknown): void {
    if (err !== null) return this.fail(err);
    if (this.done) return;
    const message = this.serialize(value);
    if (message === undefined) return;
    this.done = true;
    this.owner.deadlines.remove(this);
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return;
    stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
    stream.once('wantTrailers', sendTrailers);
    stream.end(message);
  }

  write(value: unknown): boolean {
    if (this.done || this.cancelled) return false;
    const message = this.serialize(value);
    if (message === undefined) return false;
    this.sendHeaders();
    return this.stream.write(message);
  }

  fail(err: object): void {
    const status = statusOf(err);
    this.finish(status.code, status.details, status.metadata);
  }

  // The call's status: in trailers after a message, or alone in the headers (trailers-only).
  finish(code: number, details: string, metadata?: Metadata): void {
    if (this.done) return;
    this.done = true;
    this.owner.deadlines.remove(this);
    const stream = this.stream;
    if (!stream.destroyed && !stream.closed) {
      const trailers = { 'grpc-status': String(code), 'grpc-message': encodeMessage(details), ...(metadata?.toHttp2Headers() as Record<string, string>) };
      if (this.headersSent) {
        this.trailers = trailers;
        stream.once('wantTrailers', sendTrailers);
        stream.end();
      } else stream.respond({ ...RESPONSE_HEADERS, ...trailers }, END_STREAM);
    }
    this.streaming?.cancel();
  }

  expire(): void {
    this.finish(Status.DEADLINE_EXCEEDED, 'Deadline exceeded');
  }

  closed(): void {
    if (this.done) return;
    this.done = true;
    this.owner.deadlines.remove(this);
    this.streaming?.cancel();
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.stream.respond(RESPONSE_HEADERS, WAIT_FOR_TRAILERS);
  }

  private serialize(value: unknown): Buffer | undefined {
    try {
      return frame(this.method.responseSerialize(value));
    } catch {
      this.finish(Status.INTERNAL, 'Error serializing response');
      return undefined;
    }
  }
}

// What grpc-js hands a streaming handler: events 'data' and 'end' (client messages), 'cancelled'
// (the call ended, however), write(), end(), and emit('error', status) to end it with an error.
export class StreamingCall extends EventEmitter {
  request: unknown = undefined;
  private cancelNotified = false;

  constructor(private readonly call: Call) {
    super();
    this.on('error', (err: object) => call.fail(err));
  }

  get cancelled(): boolean {
    return this.cancelNotified || this.call.cancelled;
  }

  get metadata(): Metadata {
    return this.call.metadata;
  }

  getDeadline(): number {
    return this.call.getDeadline();
  }

  getPeer(): string {
    return this.call.getPeer();
  }

  write(value: unknown): boolean {
    return this.call.write(value);
  }

  end(): void {
    this.call.finish(Status.OK, 'OK');
  }

  cancel(): void {
    if (this.cancelNotified) return;
    this.cancelNotified = true;
    this.emit('cancelled', 'cancelled');
  }
}

// An answer before any call exists (unknown method): status only.
export function respondStatus(stream: GrpcStream, code: number, details: string): void {
  stream.respond({ ...RESPONSE_HEADERS, 'grpc-status': String(code), 'grpc-message': encodeMessage(details) }, END_STREAM);
}
