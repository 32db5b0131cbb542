import http from 'node:http';
import http2 from 'node:http2';

// Raw unary gRPC over node:http2, so that tests can send bytes no client library would produce
// (a client validates and encodes its own messages). One frame: flag byte (0 = uncompressed),
// 4-byte big-endian length, message.

export const SHOULD_RATE_LIMIT = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

export interface RawGrpcAnswer {
  httpStatus: number | undefined;
  // From the trailers, or from the headers of a trailers-only answer; undefined when absent.
  grpcStatus: number | undefined;
  grpcMessage: string | undefined;
  body: Buffer;
}

export function grpcFrame(message: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(message.length, 1);
  return Buffer.concat([head, message]);
}

// The messages in a gRPC response body; throws when the framing is broken.
export function grpcMessages(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < body.length; ) {
    if (body.length - at < 5) throw new Error(`truncated frame header at ${at}`);
    if (body[at] !== 0) throw new Error(`compressed flag ${body[at]} at ${at}`);
    const len = body.readUInt32BE(at + 1);
    if (at + 5 + len > body.length) throw new Error(`frame of ${len} bytes overruns the body at ${at}`);
    out.push(body.subarray(at + 5, at + 5 + len));
    at += 5 + len;
  }
  return out;
}

export function rawGrpcCall(session: http2.ClientHttp2Session, message: Uint8Array, timeoutMs = 10_000): Promise<RawGrpcAnswer> {
  return new Promise((resolve, reject) => {
    const req = session.request({
      ':method': 'POST',
      ':path': SHOULD_RATE_LIMIT,
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-timeout': `${timeoutMs}m`,
    });
    const chunks: Buffer[] = [];
    const answer: RawGrpcAnswer = { httpStatus: undefined, grpcStatus: undefined, grpcMessage: undefined, body: Buffer.alloc(0) };
    const take = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) answer.grpcStatus = Number(h['grpc-status']);
      if (h['grpc-message'] !== undefined) answer.grpcMessage = decodeURIComponent(String(h['grpc-message']));
    };
    const timer = setTimeout(() => (req.close(http2.constants.NGHTTP2_CANCEL), reject(new Error(`no answer within ${timeoutMs} ms`))), timeoutMs + 1_000);
    req.on('response', (h) => ((answer.httpStatus = Number(h[':status'])), take(h)));
    req.on('trailers', take);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      clearTimeout(timer);
      answer.body = Buffer.concat(chunks);
      resolve(answer);
    });
    req.on('error', (err) => (clearTimeout(timer), reject(err)));
    req.end(grpcFrame(message));
  });
}

// POST with a raw body; resolves with status and body text.
export function rawPost(port: number, path: string, body: Buffer | string, contentType = 'application/json'): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path, method: 'POST', headers: { 'content-type': contentType, 'content-length': Buffer.byteLength(body) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

export function rawGet(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      })
      .on('error', reject);
  });
}
