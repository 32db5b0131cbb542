import assert from 'node:assert/strict';
import http2 from 'node:http2';
import path from 'node:path';
import zlib from 'node:zlib';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitRequest, RateLimitResponse, RateLimitResponse_Code as Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { HealthClient } from '../../src/gen/grpc/health/v1/health';
import { encodeMessage, parseTimeout } from '../../src/server/h2grpc/framing';
import { H2GrpcServer } from '../../src/server/h2grpc/server';
import { createLogger } from '../../src/logger';
import { d, type Running, startApp } from '../support/app';
import { REPO } from '../support/process';
import { grpcFrame, grpcMessages, SHOULD_RATE_LIMIT } from '../support/raw-grpc';

// GRPC_SERVER_IMPL=sluice and http2 (src/server/h2grpc/, on sluice's own HTTP/2 and on
// node:http2) at the edges of the protocol, each case sent as raw HTTP/2 to every server: where
// grpc-js has an answer, both must give the same one. The rest of the gRPC behaviour runs through
// the whole suite on the default server (SLUICE_GRPC_SERVER_IMPL picks another).

const CONFIG = path.join(REPO, 'examples/config');
const REQUEST = RateLimitRequest.encode({ domain: 'edge', descriptors: [d(['tenant', 'internal'])], hitsAddend: 0 }).finish();
const IMPLS = ['grpc-js', 'http2', 'sluice'] as const;
const OWN = ['sluice', 'http2'] as const;

interface Answer {
  httpStatus: number;
  // grpc-status and grpc-message came in the response headers (a trailers-only answer).
  trailersOnly: boolean;
  grpcStatus: number | undefined;
  grpcMessage: string | undefined;
  messages: Buffer[];
}

interface Send {
  path?: string;
  headers?: http2.OutgoingHttpHeaders;
  // Written one by one, each after the previous has been flushed (its own DATA frame).
  chunks: Buffer[];
  // false: the request stream stays open (no END_STREAM).
  end?: boolean;
}

function send(session: http2.ClientHttp2Session, s: Send): Promise<Answer> {
  const req = session.request({
    ':method': 'POST',
    ':path': s.path ?? SHOULD_RATE_LIMIT,
    'content-type': 'application/grpc',
    te: 'trailers',
    ...s.headers,
  });
  return new Promise((resolve, reject) => {
    const answer: Answer = { httpStatus: 0, trailersOnly: false, grpcStatus: undefined, grpcMessage: undefined, messages: [] };
    const body: Buffer[] = [];
    const take = (h: http2.IncomingHttpHeaders) => {
      if (h['grpc-status'] !== undefined) answer.grpcStatus = Number(h['grpc-status']);
      if (h['grpc-message'] !== undefined) answer.grpcMessage = decodeURIComponent(String(h['grpc-message']));
    };
    req.on('response', (h) => {
      answer.httpStatus = Number(h[':status']);
      answer.trailersOnly = h['grpc-status'] !== undefined;
      take(h);
    });
    req.on('trailers', take);
    req.on('data', (c: Buffer) => body.push(c));
    req.on('end', () => {
      // The answer came before the request was finished: the stream is not needed any more.
      if (s.end === false) req.close();
      resolve({ ...answer, messages: grpcMessages(Buffer.concat(body)) });
    });
    req.on('error', reject);
    (async () => {
      for (const chunk of s.chunks) await new Promise<void>((r) => req.write(chunk, () => r()));
      if (s.end !== false) req.end();
    })().catch(reject);
  });
}

const status = (a: Answer) => ({
  httpStatus: a.httpStatus,
  grpcStatus: a.grpcStatus,
  grpcMessage: a.grpcMessage,
  trailersOnly: a.trailersOnly,
  messages: a.messages.length,
});

function gzipFrame(message: Uint8Array): Buffer {
  const frame = grpcFrame(zlib.gzipSync(message));
  frame[0] = 1;
  return frame;
}

describe('raw HTTP/2 edge cases: the sluice and http2 servers answer as grpc-js does', () => {
  const apps = new Map<string, Running>();
  const sessions = new Map<string, http2.ClientHttp2Session>();

  before(async () => {
    for (const impl of IMPLS) {
      const app = await startApp({ configPaths: [CONFIG], grpcServerImpl: impl, maxRequestBytes: 1000 });
      apps.set(impl, app);
      sessions.set(impl, http2.connect(`http://127.0.0.1:${app.grpcPort}`));
    }
  });
  after(async () => {
    for (const s of sessions.values()) s.close();
    for (const a of apps.values()) await a.stop();
  });

  const every = async (s: Send) => {
    const [grpcJs, ...own] = await Promise.all(IMPLS.map((impl) => send(sessions.get(impl)!, s)));
    return { grpcJs, own };
  };

  const frame = grpcFrame(REQUEST);
  const cases: [string, Send, Partial<ReturnType<typeof status>>][] = [
    [
      'one message split over DATA frames (inside the prefix and inside the message)',
      { chunks: [frame.subarray(0, 2), frame.subarray(2, 7), frame.subarray(7)] },
      { grpcStatus: 0, messages: 1 },
    ],
    ['two messages in one DATA frame of a unary call', { chunks: [Buffer.concat([frame, frame])] }, { grpcStatus: grpc.status.UNIMPLEMENTED, messages: 0 }],
    ['no message at all', { chunks: [] }, { grpcStatus: grpc.status.UNIMPLEMENTED, trailersOnly: true }],
    ['a gzip-compressed message (grpc-encoding gzip)', { headers: { 'grpc-encoding': 'gzip' }, chunks: [gzipFrame(REQUEST)] }, { grpcStatus: 0, messages: 1 }],
    [
      'a compressed message in an encoding the server lacks',
      { headers: { 'grpc-encoding': 'snappy' }, chunks: [gzipFrame(REQUEST)] },
      { grpcStatus: grpc.status.UNIMPLEMENTED },
    ],
    [
      'a gzip message that inflates past the limit',
      { headers: { 'grpc-encoding': 'gzip' }, chunks: [gzipFrame(Buffer.alloc(5000))] },
      { grpcStatus: grpc.status.RESOURCE_EXHAUSTED },
    ],
    [
      'an oversized length prefix: refused before the message is sent',
      { chunks: [Buffer.from([0, 0, 0, 0x03, 0xe9])], end: false },
      { grpcStatus: grpc.status.RESOURCE_EXHAUSTED, trailersOnly: true },
    ],
    [
      'a malformed request: INVALID_ARGUMENT, trailers-only',
      { chunks: [grpcFrame(Buffer.from([0x0a, 0x05, 0x61]))] },
      { grpcStatus: grpc.status.INVALID_ARGUMENT, trailersOnly: true },
    ],
    ['an unknown method', { path: '/no.Such/Method', chunks: [frame] }, { grpcStatus: grpc.status.UNIMPLEMENTED, trailersOnly: true }],
    ['an invalid grpc-timeout', { headers: { 'grpc-timeout': 'soon' }, chunks: [frame] }, { grpcStatus: grpc.status.INTERNAL, trailersOnly: true }],
    [
      'not gRPC (content-type text/plain): HTTP 415',
      { headers: { 'content-type': 'text/plain' }, chunks: [frame] },
      { httpStatus: 415, grpcStatus: undefined },
    ],
  ];
  for (const [name, s, expected] of cases) {
    test(name, async () => {
      const { grpcJs, own } = await every(s);
      assert.equal(own.length, 2);
      for (const h2 of own) {
        assert.deepEqual(status(h2), status(grpcJs));
        assert.deepEqual({ ...status(h2), ...expected }, status(h2));
        if (h2.messages.length === 1) assert.equal(RateLimitResponse.decode(h2.messages[0]).overallCode, Code.OK);
      }
    });
  }

  test('a compressed flag without grpc-encoding: INTERNAL (grpc-js reads it as uncompressed; the spec calls it a protocol error)', async () => {
    const flagged = Buffer.from(frame);
    flagged[0] = 1;
    for (const impl of OWN) {
      const h2 = await send(sessions.get(impl)!, { chunks: [flagged] });
      assert.equal(h2.grpcStatus, grpc.status.INTERNAL);
      assert.equal(h2.grpcMessage, 'Received a compressed message but no grpc-encoding');
    }
  });

  test('grpc-message is percent-encoded: bytes outside printable ASCII and % itself', () => {
    assert.equal(encodeMessage('plain: text (ok)'), 'plain: text (ok)');
    assert.equal(encodeMessage('domain é at 100%\n'), 'domain %C3%A9 at 100%25%0A');
    assert.equal(decodeURIComponent(encodeMessage('domain é at 100%\n')), 'domain é at 100%\n');
  });

  test('grpc-timeout in every unit, read as grpc-js reads it (whole ms, rounded down)', () => {
    const cases: [string, number | undefined][] = [
      ['2H', 7_200_000],
      ['3M', 180_000],
      ['1S', 1000],
      ['20m', 20],
      ['1500u', 1],
      ['999u', 0],
      ['3000000n', 3],
      ['soon', undefined],
      ['20', undefined],
    ];
    for (const [header, ms] of cases) assert.equal(parseTimeout(header), ms, header);
  });
});

// Holds every ShouldRateLimit decision of `app` until released, recording the deadline each got.
function holdDecisions(app: Running) {
  const service = app.app.service;
  const original = service.shouldRateLimit.bind(service);
  const held: { deadlineAt?: number; release: () => void }[] = [];
  service.shouldRateLimit = (request, call = {}) =>
    new Promise<void>((resolve) => held.push({ deadlineAt: call.deadlineAt, release: resolve })).then(() => original(request, call));
  return { held, releaseAll: () => held.forEach((h) => h.release()) };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 5));
}

for (const impl of OWN)
  describe(`deadlines, cancellation and drain on the ${impl} server`, () => {
    test('grpc-timeout: the handler gets the deadline as grpc-js gives it, DEADLINE_EXCEEDED when it passes, nothing written after', async () => {
      const app = await startApp({ configPaths: [CONFIG], grpcServerImpl: impl });
      const { held, releaseAll } = holdDecisions(app);
      const session = http2.connect(`http://127.0.0.1:${app.grpcPort}`);
      const before = Date.now();
      const answer = await send(session, { headers: { 'grpc-timeout': '50m' }, chunks: [grpcFrame(REQUEST)] });
      const afterAnswer = Date.now();
      assert.equal(held.length, 1);
      assert.ok(
        held[0].deadlineAt! >= before + 50 && held[0].deadlineAt! <= afterAnswer,
        `deadlineAt ${held[0].deadlineAt} not in [${before + 50}, ${afterAnswer}]`,
      );
      assert.deepEqual(status(answer), {
        httpStatus: 200,
        grpcStatus: grpc.status.DEADLINE_EXCEEDED,
        grpcMessage: 'Deadline exceeded',
        trailersOnly: true,
        messages: 0,
      });
      releaseAll();
      // The late decision is dropped; the connection still serves.
      const next = send(session, { headers: { 'grpc-timeout': '10S' }, chunks: [grpcFrame(REQUEST)] });
      await until(() => held.length === 2);
      held[1].release();
      assert.deepEqual(status(await next), { httpStatus: 200, grpcStatus: 0, grpcMessage: 'OK', trailersOnly: false, messages: 1 });
      session.close();
      await app.stop();
    });

    test("a client RST_STREAM: a unary call's late answer is dropped and the connection serves on; a health Watch stops watching", async () => {
      const app = await startApp({ configPaths: [CONFIG], grpcServerImpl: impl });
      const { held } = holdDecisions(app);
      const session = http2.connect(`http://127.0.0.1:${app.grpcPort}`);
      const req = session.request({ ':method': 'POST', ':path': SHOULD_RATE_LIMIT, 'content-type': 'application/grpc', te: 'trailers' });
      req.on('error', () => undefined);
      req.end(grpcFrame(REQUEST));
      await until(() => held.length === 1);
      const closed = new Promise((r) => req.on('close', r));
      req.close(http2.constants.NGHTTP2_CANCEL);
      await closed;
      held[0].release();
      // Another call on the same connection is answered in full.
      const ok = send(session, { chunks: [grpcFrame(REQUEST)] });
      await until(() => held.length === 2);
      held[1].release();
      assert.equal((await ok).grpcStatus, 0);

      const listeners = app.app.health.listenerCount('change');
      const health = new HealthClient(`127.0.0.1:${app.grpcPort}`, grpc.credentials.createInsecure());
      const watch = health.watch({ service: '' });
      const first = await new Promise((resolve) => watch.once('data', resolve));
      assert.deepEqual(first, { status: 1 });
      assert.equal(app.app.health.listenerCount('change'), listeners + 1);
      watch.on('error', () => undefined);
      watch.cancel();
      await until(() => app.app.health.listenerCount('change') === listeners);
      health.close();
      session.close();
      await app.stop();
    });

    test('drain: GOAWAY, the call in flight answered, the idle connection closed, no new streams', async () => {
      const app = await startApp({ configPaths: [CONFIG], grpcServerImpl: impl });
      const { held } = holdDecisions(app);
      const busy = http2.connect(`http://127.0.0.1:${app.grpcPort}`);
      const idle = http2.connect(`http://127.0.0.1:${app.grpcPort}`);
      await new Promise((r) => idle.once('connect', r));
      const goaways = [busy, idle].map((s) => new Promise((r) => s.once('goaway', r)));
      const idleClosed = new Promise((r) => idle.once('close', r));
      const inFlight = send(busy, { chunks: [grpcFrame(REQUEST)] });
      await until(() => held.length === 1);
      const stopped = app.app.stop();
      await Promise.all(goaways);
      assert.throws(() => idle.request({ ':path': SHOULD_RATE_LIMIT }), /GOAWAY|closed|destroyed/i);
      held[0].release();
      const answer = await inFlight;
      assert.equal(answer.grpcStatus, 0);
      assert.equal(RateLimitResponse.decode(answer.messages[0]).overallCode, Code.OK);
      await stopped;
      await idleClosed;
      busy.close();
      app.client.close();
    });

    test('keepalive: with grpc.keepalive_time_ms set the server pings every connection', async () => {
      const server = new H2GrpcServer({ 'grpc.keepalive_time_ms': 20, 'grpc.keepalive_timeout_ms': 5000 }, { calls: 0 }, impl);
      const port = await server.bind('127.0.0.1', 0);
      const session = http2.connect(`http://127.0.0.1:${port}`);
      let pings = 0;
      session.on('ping', () => pings++);
      await until(() => pings >= 2);
      session.close();
      await server.drain(1000, createLogger('silent'));
    });

    test('a grpc-js option the http2 server does not implement is refused at start, by name', () => {
      assert.throws(
        () => new H2GrpcServer({ 'grpc.max_connection_age_ms': 1000 }, { calls: 0 }, impl),
        new RegExp(`GRPC_SERVER_IMPL=${impl} does not implement the grpc-js server option\\(s\\) grpc.max_connection_age_ms`),
      );
    });
  });
