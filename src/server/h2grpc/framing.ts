import zlib from 'node:zlib';
import { status as Status } from '@grpc/grpc-js';

// gRPC's length-prefixed messages: a flag byte (1 = compressed with the call's grpc-encoding), a
// 4-byte big-endian length, the message. A message may span DATA frames and a DATA frame may hold
// several messages.

export const PREFIX_BYTES = 5;

// A gRPC status a call ends with, as grpc-js' handlers pass it (`details`, optional trailers).
export interface CallError {
  code: number;
  details: string;
}

export class FrameError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

// Splits a request body into whole frames (prefix included). Chunks are kept as they arrived and
// joined once a frame is complete, so a message sent whole in one DATA frame is never copied and a
// large one split over many is copied once.
export class FrameReader {
  private first: Buffer | undefined;
  private more: Buffer[] | undefined;
  private total = 0;

  // -1: no limit.
  constructor(private readonly maxMessageBytes: number) {}

  push(chunk: Buffer): void {
    if (this.first === undefined) this.first = chunk;
    else (this.more ??= []).push(chunk);
    this.total += chunk.length;
  }

  // The next whole frame, or undefined until more bytes arrive. The length is checked as soon as
  // the prefix is in, before the message is buffered (grpc-js' RESOURCE_EXHAUSTED and wording).
  next(): Buffer | undefined {
    if (this.total < PREFIX_BYTES) return undefined;
    if (this.first!.length < PREFIX_BYTES) this.join();
    const length = this.first!.readUInt32BE(1);
    if (this.maxMessageBytes !== -1 && length > this.maxMessageBytes) {
      throw new FrameError(Status.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs ${this.maxMessageBytes})`);
    }
    const size = PREFIX_BYTES + length;
    if (this.total < size) return undefined;
    if (this.first!.length < size) this.join();
    const whole = this.first!;
    this.total -= size;
    this.first = this.total === 0 ? undefined : whole.subarray(size);
    if (this.total === 0) this.more = undefined;
    return whole.subarray(0, size);
  }

  // Bytes held: of the frame being read, and any after it.
  get buffered(): number {
    return this.total;
  }

  // Bytes of an unfinished frame are left (the body ended mid-message).
  get partial(): boolean {
    return this.total > 0;
  }

  private join(): void {
    this.first = Buffer.concat([this.first!, ...this.more!], this.total);
    this.more = undefined;
  }
}

// The message of a frame, decompressed as its call's grpc-encoding says (grpc-js accepts gzip and
// deflate, and refuses other encodings with UNIMPLEMENTED).
export function frameMessage(frame: Buffer, encoding: string, maxMessageBytes: number): Buffer {
  const message = frame.subarray(PREFIX_BYTES);
  if (frame[0] === 0) return message;
  if (frame[0] !== 1) throw new FrameError(Status.INTERNAL, `Invalid compressed flag ${frame[0]}`);
  // The spec makes a compressed message without an encoding a protocol error.
  if (encoding === 'identity') throw new FrameError(Status.INTERNAL, 'Received a compressed message but no grpc-encoding');
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    throw new FrameError(Status.UNIMPLEMENTED, `Received message compressed with unsupported encoding "${encoding}"`);
  }
  const options = maxMessageBytes === -1 ? {} : { maxOutputLength: maxMessageBytes };
  try {
    return encoding === 'gzip' ? zlib.gunzipSync(message, options) : zlib.inflateSync(message, options);
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE') {
      throw new FrameError(Status.RESOURCE_EXHAUSTED, `Received message that decompresses to a size larger than ${maxMessageBytes}`);
    }
    throw new FrameError(Status.INTERNAL, 'Failed to decompress message');
  }
}

export function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(PREFIX_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, PREFIX_BYTES);
  return out;
}

// grpc-js' reading of grpc-timeout (the same pattern and units), in ms.
const TIMEOUT = /(\d{1,8})\s*([HMSmun])/;

export function parseTimeout(header: string): number | undefined {
  const match = TIMEOUT.exec(header);
  return match === null ? undefined : (Number(match[1]) * unitMs(match[2])) | 0;
}

// A unit's milliseconds. A switch, not a lookup in an object by the unit: V8 optimises such a
// lookup for the names it has seen, and the warm-up's '1S' left it expecting 'S' where Envoy sends
// 'm' (its first calls then threw the optimised code away).
function unitMs(unit: string): number {
  switch (unit) {
    case 'H':
      return 3_600_000;
    case 'M':
      return 60_000;
    case 'S':
      return 1000;
    case 'm':
      return 1;
    case 'u':
      return 0.001;
    default:
      return 0.000001; // 'n', the last unit TIMEOUT accepts
  }
}

// grpc-message is percent-encoded: every byte outside printable ASCII, and '%' itself.
const PLAIN = /^[\x20-\x24\x26-\x7e]*$/;

export function encodeMessage(details: string): string {
  if (PLAIN.test(details)) return details;
  let out = '';
  for (const byte of Buffer.from(details, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}
