import assert from 'node:assert/strict';
import http2 from 'node:http2';
import path from 'node:path';
import { describe, test } from 'node:test';
import { RateLimitRequest, RateLimitResponse } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { d, startApp } from '../support/app';
import { REPO } from '../support/process';

// A graceful stop answers every call the server had received when it began, including one whose
// HEADERS arrived but whose message had not: the drain used to count only calls whose handler had
// started, and closed everything once none had run for 50 ms, resetting such a stream.

const CONFIG = path.join(REPO, 'examples/config');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function framed(request: RateLimitRequest): Buffer {
  const body = Buffer.from(RateLimitRequest.encode(request).finish());
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}

for (const impl of ['sluice', 'http2', 'grpc-js'] as const) {
  describe(`GRPC_SERVER_IMPL=${impl}`, () => {
    test('a call whose message arrives after the stop began is answered', async () => {
      const app = await startApp({ configPaths: [CONFIG], grpcServerImpl: impl });
      const session = http2.connect(`http://127.0.0.1:${app.grpcPort}`);
      session.on('error', () => undefined);
      try {
        const stream = session.request({
          ':method': 'POST',
          ':path': '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
          'content-type': 'application/grpc',
          te: 'trailers',
        });
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        const trailers = new Promise<http2.IncomingHttpHeaders | string>((resolve) => {
          stream.on('trailers', (t) => resolve(t));
          stream.on('close', () => resolve(`stream closed without trailers (RST_STREAM code ${stream.rstCode})`));
        });
        stream.on('error', () => undefined);
        // The HEADERS reach the server before the stop; the message comes 200 ms into it.
        await sleep(100);
        const stopped = app.app.stop();
        await sleep(200);
        stream.end(framed({ domain: 'rl', descriptors: [d(['tenant', 'late'])], hitsAddend: 0 }));
        const got = await trailers;
        await stopped;
        assert.equal(typeof got, 'object', typeof got === 'string' ? got : '');
        assert.equal((got as http2.IncomingHttpHeaders)['grpc-status'], '0', JSON.stringify(got));
        const body = Buffer.concat(chunks);
        assert.ok(body.length >= 5, `no response message (${body.length} bytes)`);
        const response = RateLimitResponse.decode(body.subarray(5));
        assert.equal(response.statuses.length, 1);
      } finally {
        session.destroy();
        app.client.close();
      }
    });
  });
}
