import { Command } from 'ioredis';

// One Redis command written in RESP (an array of bulk strings) straight into a Buffer.
//
// ioredis builds a command as a string: per argument a byte-length call, a number-to-string
// conversion and a few concatenations, and the socket then encodes the whole string again. For the
// decide call, which carries three arguments per limit of every request of a batch, that was the
// largest single cost of a request in sluice's own code. Here each argument is encoded once, in
// place: a text is written where it belongs, assuming it is ASCII (its UTF-8 length is then its
// length, so its header is known before it is written), and moved when it was not.
export class RespWriter {
  private buf: Buffer;
  private off = 0;

  constructor(count: number, sizeHint: number) {
    this.buf = Buffer.allocUnsafe(Math.max(64, sizeHint));
    this.byte(0x2a); // '*'
    this.digits(count);
    this.crlf();
  }

  text(s: string): this {
    const n = s.length;
    const head = 3 + digitCount(n);
    this.ensure(head + 3 * n + 2);
    const at = this.off + head;
    const written = this.buf.write(s, at, 'utf8');
    if (written === n) this.bulkHeader(n);
    else {
      // Not ASCII: the header is longer or the same; the text moves to follow it.
      const realHead = 3 + digitCount(written);
      if (realHead !== head) this.buf.copyWithin(this.off + realHead, at, at + written);
      this.bulkHeader(written);
    }
    this.off += written;
    this.crlf();
    return this;
  }

  // A whole number >= 0, as its decimal text.
  uint(n: number): this {
    if (!Number.isSafeInteger(n) || n < 0) return this.text(String(n));
    const d = digitCount(n);
    this.ensure(3 + digitCount(d) + d + 2);
    this.bulkHeader(d);
    this.digits(n);
    this.crlf();
    return this;
  }

  done(): Buffer {
    return this.buf.subarray(0, this.off);
  }

  private bulkHeader(length: number): void {
    this.byte(0x24); // '$'
    this.digits(length);
    this.crlf();
  }

  private digits(n: number): void {
    const d = digitCount(n);
    this.ensure(d);
    let at = this.off + d;
    do {
      this.buf[--at] = 0x30 + (n % 10);
      n = Math.floor(n / 10);
    } while (n > 0);
    this.off += d;
  }

  private byte(b: number): void {
    this.ensure(1);
    this.buf[this.off++] = b;
  }

  private crlf(): void {
    this.ensure(2);
    this.buf[this.off++] = 0x0d;
    this.buf[this.off++] = 0x0a;
  }

  private ensure(bytes: number): void {
    if (this.off + bytes <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.off + bytes));
    this.buf.copy(bigger, 0, 0, this.off);
    this.buf = bigger;
  }
}

// `command fn numKeys ...args` (FCALL, EVALSHA) in RESP; numbers as their decimal text.
export function encodeCall(command: string, fn: string, numKeys: number, args: readonly (string | number)[]): Buffer {
  let size = 64 + fn.length;
  for (const a of args) size += typeof a === 'string' ? a.length + 16 : 24;
  const w = new RespWriter(args.length + 3, size).text(command).text(fn).uint(numKeys);
  for (const a of args) {
    if (typeof a === 'number') w.uint(a);
    else w.text(a);
  }
  return w.done();
}

function digitCount(n: number): number {
  let d = 1;
  while (n >= 10) {
    n = Math.floor(n / 10);
    d++;
  }
  return d;
}

// A command sent as bytes written by RespWriter: ioredis queues it, resends it after a reconnect
// and parses its reply (as text) as for any command; only the writing is ours. Not for a cluster
// client, which routes a command by the keys in its arguments (this one has none).
export class WireCommand extends Command {
  constructor(
    name: string,
    private readonly wire: Buffer,
  ) {
    super(name, [], { replyEncoding: 'utf8' });
  }

  override toWritable(): Buffer {
    return this.wire;
  }
}
