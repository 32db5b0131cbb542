import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { BinaryWriter } from '@bufbuild/protobuf/wire';
import * as grpc from '@grpc/grpc-js';
import { RateLimitRequest, RateLimitResponse, RateLimitResponse_Code } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { createLogger } from '../../src/logger';
import { loadSettings } from '../../src/settings';
import { MemoryStore } from '../../src/store/memory';
import type { Store } from '../../src/store/store';
import { type Running, d, startApp } from '../support/app';
import { counterNames, type RedisNode, startRedis, stopAll } from '../support/redis';

// Issue 9, items 1, 4, 5, 9 and 10: nothing a caller sends crashes sluice, stalls it, or makes two
// different requests share a counter; a refused request never reaches the store.

const RLS = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

function configDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-bounds-'));
  fs.writeFileSync(path.join(dir, 'b.yaml'), 'domain: b\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: hour, requests_per_unit: 1000000 }\n');
  return dir;
}

// A store that counts the calls that reach it.
function countingStore(): { store: Store; calls: () => number } {
  const inner = new MemoryStore({});
  let calls = 0;
  const store: Store = {
    kind: inner.kind,
    decide: (checks, options) => (calls++, inner.decide(checks, options)),
    peek: (checks, options) => (calls++, inner.peek(checks, options)),
    ready: () => inner.ready(),
    close: () => inner.close(),
  };
  return { store, calls: () => calls };
}

interface Outcome {
  code: grpc.status;
  details: string;
  response?: RateLimitResponse;
}

// Sends bytes as they are (no client-side encoding), so that a test can send what no well-behaved
// encoder would: invalid UTF-8, a 2^53 hits_addend, 220,000 descriptors without building them.
function sendRaw(port: number, bytes: Uint8Array): Promise<Outcome> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), {
    'grpc.max_send_message_length': -1,
  });
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      RLS,
      (b: Buffer) => b,
      (b: Buffer) => RateLimitResponse.decode(b),
      Buffer.from(bytes),
      (err, response) => {
        client.close();
        resolve(err ? { code: err.code, details: err.details } : { code: grpc.status.OK, details: '', response });
      },
    );
  });
}

const utf8 = (s: string) => Buffer.from(s, 'utf8');

// A RateLimitRequest on the wire; strings given as raw bytes.
function wire(domain: Uint8Array, descriptors: { entries: [Uint8Array, Uint8Array][]; hitsAddend?: bigint }[]): Uint8Array {
  const w = new BinaryWriter();
  w.uint32(10).bytes(domain);
  for (const desc of descriptors) {
    w.uint32(18).fork();
    for (const [k, v] of desc.entries) w.uint32(10).fork().uint32(10).bytes(k).uint32(18).bytes(v).join();
    if (desc.hitsAddend !== undefined) w.uint32(26).fork().uint32(8).uint64(desc.hitsAddend).join();
    w.join();
  }
  return w.finish();
}

function manyDescriptors(n: number, prefix: string) {
  return Array.from({ length: n }, (_, i) => d(['tenant', `${prefix}${i}`]));
}

async function postJson(s: Running, body: string | Uint8Array, where: 'http' | 'admin' = 'http', urlPath = '/json') {
  const res = await s[where](urlPath, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  const text = await res.text();
  return {
    status: res.status,
    text,
    json: (() => {
      try {
        return JSON.parse(text);
      } catch {
        return undefined;
      }
    })(),
  };
}

describe('request bounds (memory store)', () => {
  let s: Running;
  let calls: () => number;
  before(async () => {
    const counting = countingStore();
    calls = counting.calls;
    s = await startApp({ configPaths: [configDir()] }, { store: counting.store });
  });
  after(() => s.stop());

  test('item 4: more descriptors than MAX_DESCRIPTORS → INVALID_ARGUMENT naming the bound, store untouched', async () => {
    const before = calls();
    const over = await sendRaw(s.grpcPort, RateLimitRequest.encode({ domain: 'b', descriptors: manyDescriptors(257, 'x'), hitsAddend: 0 }).finish());
    assert.equal(over.code, grpc.status.INVALID_ARGUMENT);
    assert.match(over.details, /257 descriptors; at most 256 allowed \(MAX_DESCRIPTORS, --max-descriptors\)/);
    const json = await postJson(s, JSON.stringify({ domain: 'b', descriptors: manyDescriptors(257, 'x') }));
    assert.equal(json.status, 400);
    assert.equal(json.json.code, 'INVALID_ARGUMENT');
    assert.match(json.json.error, /MAX_DESCRIPTORS/);
    assert.equal(calls(), before, 'a refused request never reaches the store');
    const at = await s.call({ domain: 'b', descriptors: manyDescriptors(256, 'at') });
    assert.equal(at.overallCode, RateLimitResponse_Code.OK);
    assert.equal(at.statuses.length, 256);
  });

  test('item 4: 65,000 descriptors (1 MB) are refused from a walk over the bytes, 220,000 (3.3 MB) from the length prefix, without stalling the loop', async () => {
    // One descriptor {tenant=x}, repeated: built by copying bytes, not by an encoder.
    const one = Buffer.from(RateLimitRequest.encode({ domain: '', descriptors: [d(['tenant', 'x'])], hitsAddend: 0 }).finish());
    const request = (n: number) => Buffer.concat([Buffer.from(wire(utf8('b'), [])), ...Array(n).fill(one)]);
    const under = request(65_000);
    const over = request(220_000);
    assert.ok(under.length < 1_048_576 && over.length > 3_000_000, `${under.length}, ${over.length} bytes`);
    const before = calls();
    const h = monitorEventLoopDelay({ resolution: 1 });
    h.enable();
    const rssBefore = process.memoryUsage().rss;
    const refused = await sendRaw(s.grpcPort, under);
    const tooBig = await sendRaw(s.grpcPort, over);
    h.disable();
    assert.equal(refused.code, grpc.status.INVALID_ARGUMENT);
    assert.match(refused.details, /at most 256 allowed \(MAX_DESCRIPTORS/);
    assert.equal(tooBig.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.match(tooBig.details, /larger than max \(\d+ vs 1048576\)/);
    assert.equal(calls(), before);
    // The code before the bounds decoded every descriptor (an object each) and kept the loop busy
    // for over a second on 220,000; refusing at descriptor 257 takes a few milliseconds.
    assert.ok(h.max / 1e6 < 250, `event loop blocked ${(h.max / 1e6).toFixed(0)} ms`);
    assert.ok(process.memoryUsage().rss - rssBefore < 150 * 2 ** 20, 'no object per descriptor');
  });

  // Issue 34, item 9: the count used to stop at the bound, so 10,000 were reported as "257".
  test('too many descriptors over gRPC: the message gives the real count, or "more than" when the rest is malformed', async () => {
    const before = calls();
    const tenThousand = manyDescriptors(10_000, 'x');
    await assert.rejects(s.call({ domain: 'b', descriptors: tenThousand }), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
      assert.equal(err.details, 'request has 10000 descriptors; at most 256 allowed (MAX_DESCRIPTORS, --max-descriptors)');
      return true;
    });
    // Ten thousand whole descriptors, then one cut short: the count past the bound is not known.
    const whole = RateLimitRequest.encode({ domain: 'b', descriptors: tenThousand, hitsAddend: 0 }).finish();
    const cut = Buffer.concat([whole, Buffer.from([18, 50, 10])]);
    const truncated = await sendRaw(s.grpcPort, cut);
    assert.equal(truncated.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(truncated.details, 'request has more than 256 descriptors; at most 256 allowed (MAX_DESCRIPTORS, --max-descriptors)');
    const json = await postJson(s, JSON.stringify({ domain: 'b', descriptors: tenThousand }));
    assert.equal(json.json.error, 'request has 10000 descriptors; at most 256 allowed (MAX_DESCRIPTORS, --max-descriptors)');
    assert.equal(calls(), before);
  });

  test('item 4: more entries than MAX_DESCRIPTOR_ENTRIES, longer values than MAX_VALUE_BYTES → INVALID_ARGUMENT', async () => {
    const before = calls();
    const entries = Array.from({ length: 33 }, (_, i): [string, string] => [i === 0 ? 'tenant' : `k${i}`, 'v']);
    await assert.rejects(s.call({ domain: 'b', descriptors: [d(...entries)] }), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
      assert.match(err.details, /descriptor 0 has 33 entries; at most 32 allowed \(MAX_DESCRIPTOR_ENTRIES, --max-descriptor-entries\)/);
      return true;
    });
    await assert.rejects(s.call({ domain: 'b', descriptors: [d(['tenant', 'é'.repeat(32_769)])] }), (err: grpc.ServiceError) => {
      assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
      assert.match(err.details, /entry 0 value has 65538 bytes; at most 65536 allowed \(MAX_VALUE_BYTES, --max-value-bytes\)/);
      return true;
    });
    await assert.rejects(s.call({ domain: 'b'.repeat(65_537), descriptors: [d(['tenant', 'v'])] }), /domain has 65537 bytes/);
    assert.equal(calls(), before);
    // At the bounds: accepted.
    const at = await s.call({ domain: 'b', descriptors: [d(['tenant', 'x'.repeat(65_536)]), d(...entries.slice(0, 32))] });
    assert.equal(at.overallCode, RateLimitResponse_Code.OK);
  });

  test('item 5: invalid UTF-8 in a key, value or domain → INVALID_ARGUMENT, not U+FFFD sharing one counter', async () => {
    const before = calls();
    for (const bytes of [
      wire(utf8('b'), [{ entries: [[utf8('tenant'), Buffer.from([0xff])]] }]),
      wire(utf8('b'), [{ entries: [[utf8('tenant'), Buffer.from([0x61, 0xc3])]] }]), // truncated sequence
      wire(utf8('b'), [{ entries: [[utf8('tenant'), Buffer.from([0xed, 0xa0, 0x80])]] }]), // encoded surrogate
      wire(utf8('b'), [{ entries: [[Buffer.from([0x74, 0xfe]), utf8('v')]] }]),
      wire(Buffer.from([0x62, 0x80]), [{ entries: [[utf8('tenant'), utf8('v')]] }]),
    ]) {
      const out = await sendRaw(s.grpcPort, bytes);
      assert.equal(out.code, grpc.status.INVALID_ARGUMENT, out.details);
      assert.match(out.details, /not valid UTF-8/);
    }
    // /json: the body must be UTF-8, and a lone surrogate escape has no UTF-8 form.
    const raw = Buffer.concat([utf8('{"domain":"b","descriptors":[{"entries":[{"key":"tenant","value":"'), Buffer.from([0xff]), utf8('"}]}]}')]);
    const bad = await postJson(s, raw);
    assert.equal(bad.status, 400);
    assert.match(bad.json.error, /not valid UTF-8/);
    const surrogate = await postJson(s, '{"domain":"b","descriptors":[{"entries":[{"key":"tenant","value":"\\ud800"}]}]}');
    assert.equal(surrogate.status, 400);
    assert.match(surrogate.json.error, /not valid UTF-8/);
    assert.equal(calls(), before);
    // Valid multi-byte text still works, over both transports.
    const ok = await sendRaw(s.grpcPort, wire(utf8('b'), [{ entries: [[utf8('tenant'), utf8('Zürich ☃ 𝄞')]] }]));
    assert.equal(ok.code, grpc.status.OK);
    assert.equal(ok.response?.statuses[0].limitRemaining, 999_999);
  });

  test('item 10: a descriptor hits_addend of 2^53 or more → INVALID_ARGUMENT, not INTERNAL', async () => {
    for (const n of [2n ** 53n, 2n ** 64n - 1n]) {
      const out = await sendRaw(s.grpcPort, wire(utf8('b'), [{ entries: [[utf8('tenant'), utf8('h')]], hitsAddend: n }]));
      assert.equal(out.code, grpc.status.INVALID_ARGUMENT, out.details);
      assert.match(out.details, /malformed RateLimitRequest/);
    }
    const under = await sendRaw(s.grpcPort, wire(utf8('b'), [{ entries: [[utf8('tenant'), utf8('h')]], hitsAddend: 2n ** 53n - 1n }]));
    assert.equal(under.code, grpc.status.INVALID_ARGUMENT);
    assert.match(under.details, /hits_addend must be 0\.\.1000000000/);
    const truncated = await sendRaw(s.grpcPort, wire(utf8('b'), [{ entries: [[utf8('tenant'), utf8('h')]] }]).subarray(0, 8));
    assert.equal(truncated.code, grpc.status.INVALID_ARGUMENT);
  });

  test('item 9: /json type-checks every field; 400 with a message, never a 500 or a stack trace', async () => {
    const desc = (extra: Record<string, unknown>) => ({ entries: [{ key: 'tenant', value: 'j' }], ...extra });
    const cases: [unknown, RegExp][] = [
      [{ domain: 'b', descriptors: [null] }, /descriptors\[0\]: expected a JSON object/],
      [{ domain: 'b', descriptors: [{ entries: [null] }] }, /descriptors\[0\]\.entries\[0\]: expected a JSON object/],
      [{ domain: 'b', descriptors: 'x' }, /descriptors: expected an array/],
      [{ domain: 7, descriptors: [desc({})] }, /domain: expected a string/],
      [{ domain: 'b', descriptors: [{ entries: [{ key: 'tenant', value: 5 }] }] }, /value: expected a string/],
      [{ domain: 'b', hitsAddend: 'abc', descriptors: [desc({})] }, /hitsAddend: expected an integer 0\.\.4294967295/],
      [{ domain: 'b', hitsAddend: -1, descriptors: [desc({})] }, /hitsAddend: expected an integer/],
      [{ domain: 'b', hitsAddend: 1.5, descriptors: [desc({})] }, /hitsAddend: expected an integer/],
      [{ domain: 'b', hitsAddend: true, descriptors: [desc({})] }, /hitsAddend: expected an integer/],
      [{ domain: 'b', hitsAddend: 2 ** 32, descriptors: [desc({})] }, /hitsAddend: expected an integer/],
      [{ domain: 'b', descriptors: [desc({ hitsAddend: 'abc' })] }, /descriptors\[0\]\.hitsAddend: expected an integer/],
      [{ domain: 'b', descriptors: [desc({ hits_addend: -2 })] }, /descriptors\[0\]\.hitsAddend: expected an integer/],
      [{ domain: 'b', descriptors: [desc({ hitsAddend: 2 ** 53 })] }, /descriptors\[0\]\.hitsAddend: expected an integer/],
      [{ domain: 'b', descriptors: [desc({ hitsAddend: 2_000_000_000 })] }, /hits_addend must be 0\.\.1000000000/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: -1, unit: 'MINUTE' } })] }, /limit\.requestsPerUnit: expected an integer 0\.\.4294967295/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 'abc', unit: 'MINUTE' } })] }, /limit\.requestsPerUnit/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 1.5, unit: 'MINUTE' } })] }, /limit\.requestsPerUnit/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 2 ** 32, unit: 'MINUTE' } })] }, /limit\.requestsPerUnit/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 5, unit: 'FORTNIGHT' } })] }, /limit\.unit: expected one of UNKNOWN, SECOND/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 5, unit: true } })] }, /limit\.unit/],
      [{ domain: 'b', descriptors: [desc({ limit: { requestsPerUnit: 5 } })] }, /limit override has no valid unit/],
      [{ domain: 'b', descriptors: [desc({ limit: 'x' })] }, /limit: expected a JSON object/],
      [{ domain: 'b', hitsadded: 2, descriptors: [desc({})] }, /unknown field 'hitsadded'/],
    ];
    const before = calls();
    for (const [body, message] of cases) {
      const res = await postJson(s, JSON.stringify(body));
      assert.equal(res.status, 400, `${JSON.stringify(body)} → ${res.status} ${res.text}`);
      assert.equal(res.json.code, 'INVALID_ARGUMENT');
      assert.match(res.json.error, message, JSON.stringify(body));
      assert.doesNotMatch(res.text, /\n\s+at /, 'no stack trace');
    }
    // The same checks guard admin /explain.
    const explain = await postJson(s, JSON.stringify({ domain: 'b', descriptors: [null] }), 'admin', '/explain');
    assert.equal(explain.status, 400);
    assert.equal(calls(), before);
  });

  test('item 9: valid protobuf JSON forms are accepted: string integers, enum numbers, null as default', async () => {
    const res = await postJson(
      s,
      JSON.stringify({
        domain: 'b',
        hits_addend: '2',
        descriptors: [
          { entries: [{ key: 'tenant', value: 'forms' }], limit: { requests_per_unit: '10', unit: 2 }, hitsAddend: null },
          { entries: [{ key: 'tenant', value: 'forms2' }], limit: null, hitsAddend: '3' },
        ],
      }),
    );
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.statuses[0].currentLimit.requestsPerUnit, 10);
    assert.equal(res.json.statuses[0].currentLimit.unit, 'MINUTE');
    assert.equal(res.json.statuses[0].limitRemaining, 8);
    assert.equal(res.json.statuses[1].limitRemaining, 999_997);
  });
});

describe('request bounds are settings', () => {
  test('flags and environment variables set them; defaults are documented values', () => {
    const def = loadSettings([], {});
    assert.deepEqual([def.maxDescriptors, def.maxDescriptorEntries, def.maxValueBytes, def.maxRequestBytes], [256, 32, 65_536, 1_048_576]);
    const flags = loadSettings(['--max-descriptors', '5', '--max-descriptor-entries=3', '--max-value-bytes', '100', '--max-request-bytes', '2000'], {});
    assert.deepEqual([flags.maxDescriptors, flags.maxDescriptorEntries, flags.maxValueBytes, flags.maxRequestBytes], [5, 3, 100, 2000]);
    const env = loadSettings([], { MAX_DESCRIPTORS: '7', MAX_DESCRIPTOR_ENTRIES: '2', MAX_VALUE_BYTES: '9', MAX_REQUEST_BYTES: '999' });
    assert.deepEqual([env.maxDescriptors, env.maxDescriptorEntries, env.maxValueBytes, env.maxRequestBytes], [7, 2, 9, 999]);
    assert.throws(() => loadSettings(['--max-descriptors', '0'], {}), /max-descriptors/);
  });

  test('configured bounds apply to both transports; MAX_REQUEST_BYTES caps the gRPC message and the /json body', async () => {
    const counting = countingStore();
    const s = await startApp(
      { configPaths: [configDir()], maxDescriptors: 3, maxDescriptorEntries: 2, maxValueBytes: 10, maxRequestBytes: 2000 },
      { store: counting.store },
    );
    try {
      await assert.rejects(s.call({ domain: 'b', descriptors: manyDescriptors(4, 'c') }), /4 descriptors; at most 3 allowed/);
      await assert.rejects(s.call({ domain: 'b', descriptors: [d(['tenant', 'a'], ['x', 'y'], ['z', 'w'])] }), /3 entries; at most 2 allowed/);
      await assert.rejects(s.call({ domain: 'b', descriptors: [d(['tenant', '12345678901'])] }), /11 bytes; at most 10 allowed \(MAX_VALUE_BYTES/);
      const big = RateLimitRequest.encode({ domain: 'b', descriptors: [d(['tenant', 'x'.repeat(3000)])], hitsAddend: 0 }).finish();
      const out = await sendRaw(s.grpcPort, big);
      assert.equal(out.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(out.details, /larger than max/);
      const body = JSON.stringify({ domain: 'b', descriptors: [{ entries: [{ key: 'tenant', value: 'x'.repeat(3000) }] }] });
      const res = await postJson(s, body);
      assert.equal(res.status, 400);
      assert.match(res.json.error, /request body has \d+ bytes.*at most 2000 allowed \(MAX_REQUEST_BYTES, --max-request-bytes\)/);
      // Streamed without a Content-Length: refused once 2000 bytes have arrived.
      const chunked = await s.http('/json', {
        method: 'POST',
        body: new ReadableStream({
          start(c) {
            c.enqueue(utf8(body));
            c.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
      assert.equal(chunked.status, 400);
      assert.match(((await chunked.json()) as any).error, /MAX_REQUEST_BYTES/);
      assert.equal(counting.calls(), 0);
      const ok = await s.call({ domain: 'b', descriptors: [...manyDescriptors(2, 'ok'), d(['tenant', '1234567890'], ['x', 'y'])] });
      assert.equal(ok.overallCode, RateLimitResponse_Code.OK);
    } finally {
      await s.stop();
    }
  });
});

describe('item 1: huge requests against a real Redis', () => {
  let redis: RedisNode;
  let s: Running;
  before(async () => {
    redis = await startRedis();
    s = await startApp({ configPaths: [configDir()], store: 'redis', redisUrl: `127.0.0.1:${redis.port}`, fallbackPolicy: 'deny', storeDeadlineMs: 2000 });
    const deadline = Date.now() + 10_000;
    while (s.app.health.status !== 'SERVING' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(s.app.health.status, 'SERVING');
  });
  after(async () => {
    await s.stop();
    await stopAll();
  });

  test('12,000 and 40,000 descriptors over gRPC, /json and /explain are refused cleanly; nothing reaches Redis', async () => {
    for (const n of [12_000, 40_000]) {
      const descriptors = manyDescriptors(n, 'huge-');
      await assert.rejects(s.call({ domain: 'b', descriptors }), (err: grpc.ServiceError) => {
        assert.equal(err.code, grpc.status.INVALID_ARGUMENT);
        assert.match(err.details, /MAX_DESCRIPTORS/);
        return true;
      });
      const body = JSON.stringify({ domain: 'b', descriptors });
      for (const [where, p] of [
        ['http', '/json'],
        ['admin', '/explain'],
      ] as const) {
        const res = await postJson(s, body, where, p);
        assert.equal(res.status, 400, `${p} ${n}`);
        // 12,000 descriptors are 600 KB of JSON (over MAX_DESCRIPTORS), 40,000 are 2 MB (over MAX_REQUEST_BYTES).
        assert.match(res.json.error, /MAX_(DESCRIPTORS|REQUEST_BYTES)/);
      }
    }
    assert.equal(await redis.cli('--scan', '--pattern', '*huge-*'), '', 'no counter of a refused request');
    assert.equal(s.app.health.status, 'SERVING');
    assert.equal(s.app.health.degraded(), undefined, 'the breaker stays closed');
  });

  test('a request at the bound (256 descriptors, 256 counters in one script call) is decided by Redis', async () => {
    const descriptors = manyDescriptors(256, 'at-');
    for (let round = 1; round <= 2; round++) {
      const res = await s.call({ domain: 'b', descriptors });
      assert.equal(res.overallCode, RateLimitResponse_Code.OK);
      assert.equal(res.statuses.length, 256);
      for (const st of res.statuses) assert.equal(st.limitRemaining, 1_000_000 - round);
      const json = await postJson(s, JSON.stringify({ domain: 'b', descriptors }), 'admin', '/explain');
      assert.equal(json.status, 200, json.text);
    }
    assert.equal(s.app.health.degraded(), undefined);
    assert.equal((await counterNames(redis, '*at-*')).length, 256);
  });
});

describe('refusals are not silent', () => {
  test('refused requests log one warn line per 10 s naming the latest reason, and count in the metric', async () => {
    let logs = '';
    const sink = new Writable({ write: (c: Buffer, _e, done) => ((logs += c.toString()), done()) });
    const s = await startApp({ configPaths: [path.resolve(__dirname, '../../../examples/config')] }, { logger: createLogger('info', sink) });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await s.http('/json', { method: 'POST', body: JSON.stringify({ domain: 'edge', descriptors: [null] }) });
        assert.equal(r.status, 400);
      }
      const refused = logs
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((l) => l.event === 'requests_refused');
      assert.equal(refused.length, 1);
      assert.equal(refused[0].level, 'warn');
      assert.equal(refused[0].transport, 'http');
      assert.match(String(refused[0].error), /descriptors\[0\]/);
      const metrics = await (await s.http('/metrics')).text();
      assert.match(metrics, /^sluice_requests_total\{transport="http",code="INVALID_ARGUMENT"\} 3$/m);
    } finally {
      await s.stop();
    }
  });
});
