import { DATA, encodeFrame, END_HEADERS, END_STREAM, HEADERS } from '../../src/server/h2grpc/wire';
import { attackRequest, requestHeaders } from './h2-attacks';
import { RawH2 } from './h2-attacker';
import { grpcFrame } from './raw-grpc';
import { RateLimitRequest } from '../../src/gen/envoy/service/ratelimit/v3/rls';

// Malformed requests no client library would send, for comparing servers: each one call on a new
// raw connection, its outcome reduced to what a client can tell apart.

export interface Malformed {
  name: string;
  // Header fields over (or beside) a well-formed gRPC request's.
  headers: Record<string, string>;
}

export const MALFORMED: Malformed[] = [
  { name: 'a well-formed call', headers: {} },
  { name: 'content-type text/plain', headers: { 'content-type': 'text/plain' } },
  { name: 'an unknown method', headers: { ':path': '/no.such.Service/Method' } },
  { name: 'a grpc-timeout that does not parse', headers: { 'grpc-timeout': 'soon' } },
  { name: 'an empty :path', headers: { ':path': '' } },
  { name: 'content-length not the body length', headers: { 'content-length': '3' } },
  { name: 'an upper-case field name', headers: { 'X-Upper': 'x' } },
  { name: 'CR LF in a field value', headers: { 'x-split': 'a\r\nx-injected: b' } },
];

const BODY = grpcFrame(RateLimitRequest.encode(attackRequest('malformed')).finish());

// ":status 200 grpc-status 0", "RST_STREAM 0x1", "GOAWAY 0x1"...: what the server did, in that
// order when it did several; "nothing" when it did nothing within a second.
export async function malformedOutcome(port: number, m: Malformed): Promise<string> {
  const c = await RawH2.open(port);
  try {
    c.send(Buffer.concat([encodeFrame(HEADERS, END_HEADERS, 1, requestHeaders(m.headers)), encodeFrame(DATA, END_STREAM, 1, BODY)]));
    const settled = () => {
      const a = c.answers.get(1);
      return c.resets.has(1) || c.goaway !== undefined || a?.grpcStatus !== undefined || (a?.status !== undefined && a.status !== '200');
    };
    await c.until(settled, 1_000);
    // An RST_STREAM that follows an answer.
    await new Promise((r) => setTimeout(r, 50));
    const a = c.answers.get(1);
    const parts: string[] = [];
    if (a !== undefined) parts.push(`:status ${a.status} grpc-status ${a.grpcStatus ?? '-'}`);
    const reset = c.resets.get(1);
    // RST_STREAM NO_ERROR after a whole answer only asks us to stop sending (RFC 9113 8.1).
    if (reset !== undefined && !(a !== undefined && reset === 0)) parts.push(`RST_STREAM 0x${reset.toString(16)}`);
    if (c.goaway !== undefined) parts.push(`GOAWAY 0x${c.goaway.code.toString(16)}`);
    return parts.length === 0 ? 'nothing' : parts.join(', ');
  } finally {
    c.destroy();
  }
}
