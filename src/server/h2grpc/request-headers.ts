import type { RequestHeaders } from './call';

const CONNECTION_SPECIFIC = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade']);
const REQUEST_PSEUDO = new Set([':method', ':scheme', ':path', ':authority']);

// RFC 9110 5.1's token characters, lower case only (RFC 9113 8.2.1): what a field name may hold.
const NAME_CHAR = new Uint8Array(128);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz") NAME_CHAR[c.charCodeAt(0)] = 1;

function validName(name: string, from: number): boolean {
  if (name.length <= from) return false;
  for (let i = from; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 128 || NAME_CHAR[c] === 0) return false;
  }
  return true;
}

// The fields of a request's header block as node:http2 gives them (a repeated field: an array),
// or undefined when the request is malformed (RFC 9113 8.2, 8.3): a name that is not a lower-case
// token, a pseudo-header that is unknown, repeated or after a regular field, a connection-specific
// field, no :method, :scheme or :path, an empty :path. (NUL, CR and LF, and white space at the ends
// of a value, are found by the HPACK decoder on the octets: hpack.ts UNSAFE.)
export function requestHeaders(fields: string[]): RequestHeaders | undefined {
  const headers: RequestHeaders = {};
  let regular = false;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    const value = fields[i + 1];
    if (name.charCodeAt(0) === 0x3a) {
      if (regular || !REQUEST_PSEUDO.has(name) || headers[name] !== undefined) return undefined;
    } else {
      regular = true;
      if (!validName(name, 0) || CONNECTION_SPECIFIC.has(name) || (name === 'te' && value !== 'trailers')) return undefined;
    }
    const had = headers[name];
    if (had === undefined) headers[name] = value;
    else if (typeof had === 'string') headers[name] = [had, value];
    else (had as string[]).push(value);
  }
  if (headers[':method'] === undefined || headers[':scheme'] === undefined || headers[':path'] === undefined || headers[':path'] === '') return undefined;
  return headers;
}

// The request's content-length: -1 when absent, undefined when malformed (not digits, or several
// that differ).
export function contentLength(headers: RequestHeaders): number | undefined {
  const value = headers['content-length'];
  if (value === undefined) return -1;
  if (typeof value === 'string') return digits(value);
  const values = value as string[];
  return values.every((v) => v === values[0]) ? digits(values[0]) : undefined;
}

// 1 to 15 decimal digits as a number (below 2^53, exact), else undefined. Every request of a
// client that sends content-length goes through here: no regular expression, no array.
function digits(s: string): number | undefined {
  if (s.length === 0 || s.length > 15) return undefined;
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const d = s.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return undefined;
    n = n * 10 + d;
  }
  return n;
}
