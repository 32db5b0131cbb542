// HPACK (RFC 7541) for the server side of sluice's own HTTP/2 (wire.ts): a decoder for request
// header blocks (static and dynamic table, Huffman-coded strings) and an encoder for response
// header blocks that never indexes (literals without indexing, plain strings), so that nothing we
// send changes the client's decoder state and a constant block can be encoded once.

export class HpackError extends Error {}
// A block that decodes to far more than its limit (small references to large table entries): the
// connection is closed rather than kept in step.
export class HpackBomb extends HpackError {}

// RFC 7541 Appendix A.
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];

// RFC 7541 Appendix B: the code length of each symbol (0..255, then EOS). The code is canonical,
// so the lengths determine every code: codes of one length are consecutive in symbol order, and
// each length's first code follows the last of the shorter lengths, shifted.
// prettier-ignore
const HUFFMAN_LENGTHS = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11,
  10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7,
  8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23,
  22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23,
  23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26,
  27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27,
  27, 27, 26, 30,
];
const EOS = 256;

// The decoding tree, flattened: node n's children are at 2n (bit 0) and 2n + 1 (bit 1); a child
// is another node's index (> 0), ~symbol for a leaf (< 0), or 0 when no code has that prefix.
const HUFFMAN_TREE = buildHuffmanTree();

function buildHuffmanTree(): Int32Array {
  const symbols = HUFFMAN_LENGTHS.map((_, s) => s).sort((a, b) => HUFFMAN_LENGTHS[a] - HUFFMAN_LENGTHS[b] || a - b);
  const tree = new Int32Array(2 * 2 * symbols.length);
  let nodes = 1;
  let code = 0;
  let length = HUFFMAN_LENGTHS[symbols[0]];
  symbols.forEach((symbol, i) => {
    if (i > 0) {
      code = (code + 1) << (HUFFMAN_LENGTHS[symbol] - length);
      length = HUFFMAN_LENGTHS[symbol];
    }
    let node = 0;
    for (let bit = length - 1; bit > 0; bit--) {
      const slot = 2 * node + ((code >>> bit) & 1);
      if (tree[slot] === 0) tree[slot] = nodes++;
      node = tree[slot];
    }
    tree[2 * node + (code & 1)] = ~symbol;
  });
  return tree;
}

// Bytes of one Huffman-coded string, decoded into `out` from 0; returns the decoded length.
// Padding longer than 7 bits, padding that is not the EOS code's leading ones, and EOS itself are
// decoding errors (RFC 7541 5.2).
function huffmanDecode(src: Buffer, start: number, end: number, out: Buffer): number {
  let node = 0;
  let n = 0;
  // Bits since the last symbol, and whether they were all ones.
  let depth = 0;
  let ones = true;
  for (let i = start; i < end; i++) {
    const byte = src[i];
    for (let bit = 7; bit >= 0; bit--) {
      const b = (byte >>> bit) & 1;
      const next = HUFFMAN_TREE[2 * node + b];
      if (next < 0) {
        const symbol = ~next;
        if (symbol === EOS) throw new HpackError('Huffman-coded string holds EOS');
        out[n++] = symbol;
        node = 0;
        depth = 0;
        ones = true;
      } else if (next === 0) {
        throw new HpackError('invalid Huffman code');
      } else {
        node = next;
        depth++;
        ones &&= b === 1;
      }
    }
  }
  if (depth > 7 || !ones) throw new HpackError('invalid Huffman padding');
  return n;
}

interface Entry {
  readonly name: string;
  readonly value: string;
  // Its name or value holds a byte no field may hold (see UNSAFE).
  readonly unsafe?: boolean;
}

// Bytes no field name or value may hold (RFC 9113 8.2.1): NUL, LF, CR. Checked on the octets as
// they are decoded, which costs a fraction of a pass over the strings; white space at either end
// of a value is checked too (UNSAFE_EDGE).
const UNSAFE = new Uint8Array(256);
UNSAFE[0] = UNSAFE[0x0a] = UNSAFE[0x0d] = 1;
const UNSAFE_EDGE = new Uint8Array(256);
UNSAFE_EDGE[0x20] = UNSAFE_EDGE[0x09] = 1;

function unsafeOctets(b: Uint8Array, start: number, end: number): boolean {
  if (end === start) return false;
  if (UNSAFE_EDGE[b[start]] === 1 || UNSAFE_EDGE[b[end - 1]] === 1) return true;
  for (let i = start; i < end; i++) if (UNSAFE[b[i]] === 1) return true;
  return false;
}

// `kept` equals the octets of `block` from `start` (a loop: for these lengths, cheaper than the
// native compare's argument checks).
function sameOctets(kept: Buffer, block: Buffer, start: number): boolean {
  for (let i = 0; i < kept.length; i++) if (kept[i] !== block[start + i]) return false;
  return true;
}

const STATIC_ENTRIES: readonly Entry[] = STATIC_TABLE.map(([name, value]) => ({ name, value }));

// A literal string decoded lately, kept by its encoded octets. A client that does not index a field
// it sends with every request (nghttp2, and so Envoy, never indexes :path or content-length) sends
// the same octets each time, and comparing them costs a fraction of decoding them again.
interface Recent {
  readonly octets: Buffer;
  readonly huffman: boolean;
  readonly value: string;
  readonly unsafe: boolean;
}
// Kept by their place among a block's literal strings (the n-th literal of one request is mostly
// the n-th of the next, and one that changes every time only ever replaces its own place): the
// first RECENT of a block, of the encoded lengths worth keeping (shorter ones decode faster than
// they compare; longer ones are seldom the same every time). At most 8 x 128 octets per connection.
const RECENT = 8;
const RECENT_MIN = 8;
const RECENT_MAX = 128;

// Header names and values as latin1 strings: octets in, the same octets out.
export class HpackDecoder {
  // Newest first; sizes as RFC 7541 4.1 counts them.
  private readonly dynamic: Entry[] = [];
  private size = 0;
  private maxSize: number;
  private pos = 0;
  private scratch = Buffer.allocUnsafe(256);
  private readonly recent: (Recent | undefined)[] = new Array(RECENT).fill(undefined);
  // Literal strings of the block being decoded so far.
  private literals = 0;
  // A string of the block being decoded was unsafe (see UNSAFE).
  private unsafe = false;

  // `limit`: the SETTINGS_HEADER_TABLE_SIZE we announced, the most a size update may ask for.
  constructor(private readonly limit = 4096) {
    this.maxSize = limit;
  }

  // One header block's fields as [name, value, name, value, ...]; an HpackError is a connection
  // error (COMPRESSION_ERROR), after which the decoder's state is undefined. `maxListBytes` bounds
  // the decoded list (names, values and 32 per field, as SETTINGS_MAX_HEADER_LIST_SIZE counts);
  // past it the block is still decoded (the table must stay in step) and `tooLarge` is set, up to
  // `bombBytes`, past which it throws HpackBomb.
  // `unsafe`: a name or value holds NUL, CR or LF, or a value starts or ends with white space
  // (names may not hold white space at all, which the caller checks).
  decode(block: Buffer, maxListBytes: number, bombBytes = Infinity): { fields: string[]; tooLarge: boolean; unsafe: boolean } {
    const fields: string[] = [];
    let listBytes = 0;
    let tooLarge = false;
    this.pos = 0;
    this.unsafe = false;
    this.literals = 0;
    let first = true;
    while (this.pos < block.length) {
      const byte = block[this.pos];
      let name: string;
      let value: string;
      if (byte & 0x80) {
        const entry = this.entry(this.integer(block, 7));
        name = entry.name;
        value = entry.value;
        if (entry.unsafe === true) this.unsafe = true;
      } else if (byte & 0x40) {
        const index = this.integer(block, 6);
        const before: boolean = this.unsafe;
        this.unsafe = false;
        name = index === 0 ? this.string(block) : this.indexedName(index);
        value = this.string(block);
        this.insert(name, value, this.unsafe);
        this.unsafe ||= before;
      } else if (byte & 0x20) {
        if (!first) throw new HpackError('dynamic table size update after the first field');
        const size = this.integer(block, 5);
        if (size > this.limit) throw new HpackError(`dynamic table size update to ${size}, above ${this.limit}`);
        this.maxSize = size;
        this.evict(0);
        continue;
      } else {
        // Without indexing (0000) or never indexed (0001): not added to the table.
        const index = this.integer(block, 4);
        name = index === 0 ? this.string(block) : this.indexedName(index);
        value = this.string(block);
      }
      first = false;
      listBytes += name.length + value.length + 32;
      if (listBytes > maxListBytes) {
        tooLarge = true;
        if (listBytes > bombBytes) throw new HpackBomb('HPACK bomb');
      } else fields.push(name, value);
    }
    return { fields, tooLarge, unsafe: this.unsafe };
  }

  private indexedName(index: number): string {
    const entry = this.entry(index);
    if (entry.unsafe === true) this.unsafe = true;
    return entry.name;
  }

  private integer(block: Buffer, prefixBits: number): number {
    const max = (1 << prefixBits) - 1;
    let value = block[this.pos++] & max;
    if (value < max) return value;
    let shift = 0;
    for (;;) {
      if (this.pos >= block.length) throw new HpackError('truncated integer');
      const byte = block[this.pos++];
      value += (byte & 0x7f) * 2 ** shift;
      shift += 7;
      if ((byte & 0x80) === 0) break;
      if (shift > 28) throw new HpackError('integer too large');
    }
    return value;
  }

  private string(block: Buffer): string {
    if (this.pos >= block.length) throw new HpackError('truncated string');
    const huffman = (block[this.pos] & 0x80) !== 0;
    const length = this.integer(block, 7);
    const start = this.pos;
    const end = start + length;
    if (end > block.length) throw new HpackError('truncated string');
    this.pos = end;
    const place = this.literals++;
    const keep = place < RECENT && length >= RECENT_MIN && length <= RECENT_MAX;
    if (keep) {
      const r = this.recent[place];
      if (r !== undefined && r.octets.length === length && r.huffman === huffman && sameOctets(r.octets, block, start)) {
        if (r.unsafe) this.unsafe = true;
        return r.value;
      }
    }
    let value: string;
    let unsafe: boolean;
    if (!huffman) {
      unsafe = unsafeOctets(block, start, end);
      value = block.toString('latin1', start, end);
    } else {
      // A Huffman code is at least 5 bits: at most 8/5 symbols per byte.
      if (this.scratch.length < length * 2) this.scratch = Buffer.allocUnsafe(length * 2);
      const n = huffmanDecode(block, start, end, this.scratch);
      unsafe = unsafeOctets(this.scratch, 0, n);
      value = this.scratch.toString('latin1', 0, n);
    }
    if (unsafe) this.unsafe = true;
    if (keep) this.recent[place] = { octets: Buffer.from(block.subarray(start, end)), huffman, value, unsafe };
    return value;
  }

  private entry(index: number): Entry {
    if (index === 0) throw new HpackError('index 0');
    if (index <= STATIC_ENTRIES.length) return STATIC_ENTRIES[index - 1];
    const entry = this.dynamic[index - STATIC_ENTRIES.length - 1];
    if (entry === undefined) throw new HpackError(`index ${index} beyond the tables`);
    return entry;
  }

  private insert(name: string, value: string, unsafe: boolean): void {
    const size = name.length + value.length + 32;
    // An entry larger than the table empties it and is not added (RFC 7541 4.4).
    this.evict(size);
    if (size <= this.maxSize) {
      this.dynamic.unshift(unsafe ? { name, value, unsafe } : { name, value });
      this.size += size;
    }
  }

  // Evicts the oldest entries until `room` more fits (or the table is empty).
  private evict(room: number): void {
    while (this.dynamic.length > 0 && this.size + room > this.maxSize) {
      const old = this.dynamic.pop()!;
      this.size -= old.name.length + old.value.length + 32;
    }
  }
}

// A response header block: `:status` from the static table, every other field a literal without
// indexing with a literal name, plain (not Huffman-coded) octets. Values are strings or numbers;
// arrays are sent as one field per value.
export function encodeHeaders(headers: Record<string, string | number | readonly string[] | undefined>): Buffer {
  let size = 0;
  const names = Object.keys(headers);
  // Pseudo-headers first (RFC 9113 8.3).
  names.sort((a, b) => (a.charCodeAt(0) === 0x3a ? 0 : 1) - (b.charCodeAt(0) === 0x3a ? 0 : 1));
  const fields: [string, string][] = [];
  for (const name of names) {
    const value = headers[name];
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) fields.push([name, String(v)]);
    else fields.push([name, String(value)]);
  }
  for (const [name, value] of fields) size += 2 * 5 + 1 + name.length + value.length;
  const out = Buffer.allocUnsafe(size);
  let pos = 0;
  for (const [name, value] of fields) {
    if (name === ':status' && value === '200') {
      out[pos++] = 0x88;
      continue;
    }
    if (name === ':status') {
      pos = writeInteger(out, pos, 0x00, 4, 8);
    } else {
      out[pos++] = 0x00;
      pos = writeString(out, pos, name);
    }
    pos = writeString(out, pos, value);
  }
  return out.subarray(0, pos);
}

function writeString(out: Buffer, pos: number, s: string): number {
  pos = writeInteger(out, pos, 0x00, 7, s.length);
  return pos + out.write(s, pos, 'latin1');
}

function writeInteger(out: Buffer, pos: number, high: number, prefixBits: number, value: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out[pos++] = high | value;
    return pos;
  }
  out[pos++] = high | max;
  value -= max;
  while (value >= 0x80) {
    out[pos++] = (value & 0x7f) | 0x80;
    value = Math.floor(value / 0x80);
  }
  out[pos++] = value;
  return pos;
}
