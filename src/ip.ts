import { isIP } from 'node:net';

// IP prefix aggregation for counter keys: "198.51.100.7" → "198.51.100.0/24",
// "2001:db8:1:2:3:4:5:6" → "2001:db8:1:2::/64". A value Envoy already masked
// (masked_remote_address, "198.51.100.0/24") is re-masked only if the configured prefix is
// shorter. Anything that is not an IP address is returned as it is.

export interface IpPrefix {
  v4: number;
  v6: number;
}

function maskBits(bytes: number[], bits: number): number[] {
  return bytes.map((b, i) => {
    const keep = Math.max(0, Math.min(8, bits - i * 8));
    return b & (0xff << (8 - keep)) & 0xff;
  });
}

function v4Bytes(addr: string): number[] {
  return addr.split('.').map(Number);
}

function v6Bytes(addr: string): number[] {
  let text = addr;
  const tail: number[] = [];
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    tail.push(...v4Bytes(dotted[1]));
    text = text.slice(0, -dotted[1].length) + '0:0';
  }
  const [head, rest] = text.split('::');
  const parse = (s: string | undefined) =>
    s
      ? s
          .split(':')
          .filter((x) => x !== '')
          .map((h) => parseInt(h, 16))
      : [];
  const left = parse(head);
  const right = parse(rest);
  const groups = rest === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill(0), ...right];
  const bytes = groups.flatMap((g) => [g >> 8, g & 0xff]);
  if (tail.length) bytes.splice(12, 4, ...tail);
  return bytes;
}

// Canonical text (RFC 5952): lower case, no leading zeros, the longest run of zero groups as "::".
function v6Text(bytes: number[]): string {
  const groups = Array.from({ length: 8 }, (_, i) => (bytes[2 * i] << 8) | bytes[2 * i + 1]);
  let best = { start: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.len && j - i > 1) best = { start: i, len: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.start < 0) return hex.join(':');
  return `${hex.slice(0, best.start).join(':')}::${hex.slice(best.start + best.len).join(':')}`;
}

// An IPv4-mapped IPv6 address (::ffff:a.b.c.d, how a dual-stack socket reports an IPv4 client)
// is that IPv4 client: its bytes, and the prefix given with it in IPv4 terms.
function unmapped(bytes: number[]): number[] | undefined {
  const mapped = bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff;
  return mapped ? bytes.slice(12) : undefined;
}

// The value unchanged when it is not an address, or its prefix is not a whole number of bits the
// family has ("1.2.3.4/" must not become 0.0.0.0/0, one counter for everyone).
export function aggregateIp(value: string, prefix: IpPrefix): string {
  const slash = value.indexOf('/');
  const addr = slash < 0 ? value : value.slice(0, slash);
  const family = isIP(addr);
  if (family === 0) return value;
  const suffix = slash < 0 ? undefined : value.slice(slash + 1);
  if (suffix !== undefined && !/^\d{1,3}$/.test(suffix)) return value;
  let given = suffix === undefined ? undefined : Number(suffix);
  if (given !== undefined && given > (family === 4 ? 32 : 128)) return value;
  let bytes = family === 4 ? v4Bytes(addr) : v6Bytes(addr);
  let v4 = family === 4;
  const inner = v4 ? undefined : unmapped(bytes);
  if (inner !== undefined && (given === undefined || given >= 96)) {
    bytes = inner;
    v4 = true;
    if (given !== undefined) given -= 96;
  }
  const wanted = v4 ? prefix.v4 : prefix.v6;
  const bits = given !== undefined && given < wanted ? given : wanted;
  if (v4) return `${maskBits(bytes, bits).join('.')}/${bits}`;
  return `${v6Text(maskBits(bytes, bits))}/${bits}`;
}
