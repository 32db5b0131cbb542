import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { encodeHeaders, HpackDecoder, HpackError } from '../../../src/server/h2grpc/hpack';
import { contentLength } from '../../../src/server/h2grpc/request-headers';
import { WireStream } from '../../../src/server/h2grpc/wire';
import { PING as PING_TYPE, WINDOW_UPDATE } from '../../../src/server/h2grpc/frames';
import {
  echoServer,
  frame,
  GOAWAY,
  goawayCode,
  GOOD,
  headersFrame,
  hex,
  PREFACE,
  raw,
  RST_STREAM,
  rstStream,
  SETTINGS_FRAME,
  settingsFrame,
  windowUpdate,
} from '../../support/h2-raw';

// sluice's own HTTP/2 (src/server/h2grpc/wire.ts, GRPC_SERVER_IMPL=sluice) below gRPC: HPACK
// against RFC 7541's examples and against node:http2's encoder (Huffman, dynamic table, eviction,
// never-indexed fields), header blocks over CONTINUATION both ways, flow control both ways, and
// the protocol errors a client can provoke, sent as raw frames. The gRPC behaviour on top runs in
// test/system/h2grpc.test.ts and, as the default server, through the whole suite.

function pairs(fields: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i < fields.length; i += 2) out.push([fields[i], fields[i + 1]]);
  return out;
}

describe('HPACK decoder: RFC 7541 Appendix C', () => {
  // C.3 and C.4 encode the same three requests, without and with Huffman coding; each block
  // leans on the dynamic table the ones before it left.
  const requests = [
    [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
    ],
    [
      [':method', 'GET'],
      [':scheme', 'http'],
      [':path', '/'],
      [':authority', 'www.example.com'],
      ['cache-control', 'no-cache'],
    ],
    [
      [':method', 'GET'],
      [':scheme', 'https'],
      [':path', '/index.html'],
      [':authority', 'www.example.com'],
      ['custom-key', 'custom-value'],
    ],
  ];
  const cases: [string, string[]][] = [
    [
      'C.3: requests without Huffman coding, the dynamic table carried from one to the next',
      ['828684410f7777772e6578616d706c652e636f6d', '828684be58086e6f2d6361636865', '828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565'],
    ],
    [
      'C.4: the same requests with Huffman coding',
      ['828684418cf1e3c2e5f23a6ba0ab90f4ff', '828684be5886a8eb10649cbf', '828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf'],
    ],
  ];
  for (const [name, blocks] of cases) {
    test(name, () => {
      const d = new HpackDecoder();
      blocks.forEach((block, i) => assert.deepEqual(pairs(d.decode(hex(block), 65536).fields), requests[i]));
    });
  }

  test('C.6: responses with Huffman coding and eviction from a 256-byte table', () => {
    const d = new HpackDecoder(256);
    // The table is shrunk by a size update first (the encoder's table is 256 bytes in the RFC).
    const first = d.decode(
      hex('3fe101 48826402 5885aec3771a4b 6196d07abe941054d444a8200595040b8166e082a62d1bff 6e919d29ad171863c78f0b97c8e9ae82ae43d3'),
      65536,
    );
    assert.deepEqual(pairs(first.fields), [
      [':status', '302'],
      ['cache-control', 'private'],
      ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
      ['location', 'https://www.example.com'],
    ]);
    const second = d.decode(hex('4883640effc1c0bf'), 65536);
    assert.deepEqual(pairs(second.fields), [
      [':status', '307'],
      ['cache-control', 'private'],
      ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
      ['location', 'https://www.example.com'],
    ]);
  });

  test('errors: an index past both tables, a size update above the limit or after a field, bad Huffman padding, a truncated string', () => {
    assert.throws(() => new HpackDecoder().decode(hex('be'), 65536), HpackError);
    assert.throws(() => new HpackDecoder().decode(hex('3fe21f'), 65536), HpackError);
    assert.throws(() => new HpackDecoder().decode(hex('8220'), 65536), HpackError);
    // 'a' is 00011 in Huffman: padded with zeros instead of ones.
    assert.throws(() => new HpackDecoder().decode(hex('0001618118'), 65536), HpackError);
    assert.throws(() => new HpackDecoder().decode(hex('00016105616263'), 65536), HpackError);
  });

  test('a list above the limit is decoded (the table stays in step) and flagged', () => {
    const d = new HpackDecoder();
    const big = d.decode(hex('400a637573746f6d2d6b65790c637573746f6d2d76616c7565'), 40);
    assert.equal(big.tooLarge, true);
    // The field was still added to the dynamic table.
    assert.deepEqual(pairs(d.decode(hex('be'), 65536).fields), [['custom-key', 'custom-value']]);
  });

  test('a literal sent again is read from what the decoder kept only when its octets, its coding and its place are the same', () => {
    const d = new HpackDecoder();
    const read = (block: string) => {
      const r = d.decode(hex(block), 65536);
      return { fields: pairs(r.fields), unsafe: r.unsafe };
    };
    // RFC 7541 C.6.1 and C.6.2's dates, Huffman-coded and not indexed (0000 + name index 33 = date).
    const date1 = '96d07abe941054d444a8200595040b8166e082a62d1bff';
    const date2 = '96d07abe941054d444a8200595040b8166e084a62d1bff';
    const on = (v: string) => ({ fields: [['date', v]], unsafe: false });
    assert.deepEqual(read(`0f12${date1}`), on('Mon, 21 Oct 2013 20:13:21 GMT'));
    assert.deepEqual(read(`0f12${date1}`), on('Mon, 21 Oct 2013 20:13:21 GMT'));
    // One octet differs.
    assert.deepEqual(read(`0f12${date2}`), on('Mon, 21 Oct 2013 20:13:22 GMT'));
    // The same octets, not Huffman-coded: they are the value.
    const octets = date2.slice(2);
    assert.deepEqual(read(`0f1216${octets}`), on(Buffer.from(octets, 'hex').toString('latin1')));
    // Second place in the block: the first place's value is not taken for it.
    assert.deepEqual(read(`0f12${date1}0f12${date2}`).fields, [
      ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'],
      ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'],
    ]);
    // A value with a CR in it is unsafe each time it comes.
    const cr = Buffer.from('abcd\refgh').toString('hex');
    assert.deepEqual(read(`0f1209${cr}`), { fields: [['date', 'abcd\refgh']], unsafe: true });
    assert.deepEqual(read(`0f1209${cr}`), { fields: [['date', 'abcd\refgh']], unsafe: true });
    // A bad Huffman code is an error each time, never kept.
    assert.throws(() => d.decode(hex(`0f12${date1.slice(0, -2)}00`), 65536), HpackError);
    assert.throws(() => d.decode(hex(`0f12${date1.slice(0, -2)}00`), 65536), HpackError);
  });

  test('our encoder: what the decoder reads back, :status first', () => {
    const block = encodeHeaders({ 'grpc-status': '0', ':status': 200, 'x-long': 'v'.repeat(300), 'x-many': ['a', 'b'] });
    assert.deepEqual(pairs(new HpackDecoder().decode(block, 65536).fields), [
      [':status', '200'],
      ['grpc-status', '0'],
      ['x-long', 'v'.repeat(300)],
      ['x-many', 'a'],
      ['x-many', 'b'],
    ]);
    assert.deepEqual(pairs(new HpackDecoder().decode(encodeHeaders({ ':status': 415 }), 65536).fields), [[':status', '415']]);
  });
});

describe('request headers: content-length', () => {
  test('1 to 15 digits, the same in every repeat; anything else is malformed (undefined); absent is -1', () => {
    assert.equal(contentLength({}), -1);
    for (const [value, want] of [
      ['0', 0],
      ['17', 17],
      ['007', 7],
      ['999999999999999', 999999999999999],
      [['12', '12'], 12],
    ] as const)
      assert.equal(contentLength({ 'content-length': value as string | string[] }), want, String(value));
    for (const value of ['', ' 1', '1 ', '+1', '-1', '1a', '0x10', '1e3', '1.0', '٣', '1000000000000000', ['1', '2'], ['1', '']])
      assert.equal(contentLength({ 'content-length': value }), undefined, JSON.stringify(value));
  });
});

function request(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body?: Buffer,
): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': '/echo', ...headers });
    let response: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on('response', (h) => (response = h));
    req.on('trailers', (t) => (trailers = t));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve({ headers: response, trailers, body: Buffer.concat(chunks) }));
    req.on('error', reject);
    req.end(body);
  });
}

describe("sluice's HTTP/2 with node:http2 as the client", () => {
  let echo: Awaited<ReturnType<typeof echoServer>>;
  before(async () => (echo = await echoServer()));
  after(() => echo.stop());

  test("request headers as node:http2's encoder sends them: Huffman, the dynamic table through eviction, never-indexed fields, repeated names", async () => {
    const session = http2.connect(`http://127.0.0.1:${echo.port}`);
    try {
      // 300 requests with random metadata: values repeat (indexed), change (new entries evict
      // old ones from the 4 KiB table), and some are sensitive (never indexed).
      for (let i = 0; i < 300; i++) {
        const headers: http2.OutgoingHttpHeaders = { 'x-fixed': 'the same on every request', 'x-seq': String(i) };
        headers[`x-key-${i % 7}`] = randomBytes(1 + (i % 90)).toString('base64');
        if (i % 5 === 0) headers['x-list'] = ['one', `two-${i}`];
        if (i % 3 === 0) {
          headers.authorization = `Bearer ${randomBytes(20).toString('hex')}`;
          (headers as Record<symbol, unknown>)[http2.sensitiveHeaders] = ['authorization'];
        }
        const { body } = await request(session, headers);
        const got = JSON.parse(body.toString()).headers as Record<string, unknown>;
        for (const [name, value] of Object.entries(headers)) assert.deepEqual(got[name], value, `request ${i}: ${name}`);
        assert.equal(got[':path'], '/echo');
        assert.equal(got[':method'], 'POST');
      }
    } finally {
      session.close();
    }
  });

  test('header blocks over CONTINUATION both ways: a 40 KB request field, a 40 KB response field', async () => {
    const big = 'x'.repeat(40_000);
    const server = await echoServer({}, (stream, headers) => {
      stream.on('end', () => {
        stream.respond({ ':status': 200, 'x-back': headers['x-big'] as string }, { endStream: true });
      });
    });
    const session = http2.connect(`http://127.0.0.1:${server.port}`, { maxSessionMemory: 100, settings: { maxHeaderListSize: 1 << 20 } });
    try {
      const { headers } = await request(session, { 'x-big': big });
      assert.equal(headers['x-back'], big);
    } finally {
      session.close();
      await server.stop();
    }
  });

  test('a client that shrinks its HPACK table to 0 is told so before our next header block (node:http2 refuses the block otherwise)', async () => {
    const session = http2.connect(`http://127.0.0.1:${echo.port}`, { settings: { headerTableSize: 0 } });
    try {
      await new Promise((r) => session.once('remoteSettings', r));
      for (let i = 0; i < 3; i++) {
        const { headers, trailers } = await request(session, { 'x-i': String(i) });
        assert.equal(headers[':status'], 200);
        assert.equal(trailers['x-bytes'], '0');
      }
    } finally {
      session.close();
    }
  });

  test('flow control, client to server: a 3 MB body through our window updates', async () => {
    const session = http2.connect(`http://127.0.0.1:${echo.port}`);
    try {
      const body = randomBytes(3 * 1024 * 1024);
      const answer = await request(session, {}, body);
      assert.equal(JSON.parse(answer.body.toString()).bytes, body.length);
      assert.equal(answer.trailers['x-bytes'], String(body.length));
    } finally {
      session.close();
    }
  });

  test('flow control with credit held until a body is whole: 300 KB, then a body of nearly the whole window on the same connection', async () => {
    // As call.ts does: credit only for whole messages (here: whole bodies). The 300 KB released by
    // the first is under half the window; it must still come back while the second needs room.
    const held = await echoServer({}, (stream) => {
      let bytes = 0;
      stream.holdCredit();
      stream.on('data', (chunk) => (bytes += chunk.length));
      stream.on('end', () => {
        stream.consumed(bytes);
        stream.respond({ ':status': 200 });
        stream.end(Buffer.from(JSON.stringify({ bytes })));
      });
    });
    const session = http2.connect(`http://127.0.0.1:${held.port}`);
    try {
      for (const size of [300 * 1024, 1024 * 1024 - 10]) {
        const answer = await request(session, {}, randomBytes(size));
        assert.equal(JSON.parse(answer.body.toString()).bytes, size);
      }
    } finally {
      session.close();
      await held.stop();
    }
  });

  test('flow control, server to client: 300 KB answers to a client with a 1,000-byte stream window, 10 at once, trailers after the last byte', async () => {
    const payload = randomBytes(300_000);
    const server = await echoServer({}, (stream) => {
      stream.on('end', () => {
        stream.respond({ ':status': 200 }, { waitForTrailers: true });
        stream.once('wantTrailers', function (this: WireStream) {
          this.sendTrailers({ 'x-done': 'yes' });
        });
        // In pieces, as a streaming call writes.
        for (let at = 0; at < payload.length; at += 70_000) stream.write(payload.subarray(at, at + 70_000));
        stream.end();
      });
    });
    const session = http2.connect(`http://127.0.0.1:${server.port}`, { settings: { initialWindowSize: 1000 } });
    try {
      const answers = await Promise.all(Array.from({ length: 10 }, () => request(session, {})));
      for (const a of answers) {
        assert.equal(Buffer.compare(a.body, payload), 0);
        assert.equal(a.trailers['x-done'], 'yes');
      }
    } finally {
      session.close();
      await server.stop();
    }
  });

  test('PING is answered; GOAWAY from the client closes the connection once its streams are done', async () => {
    const session = http2.connect(`http://127.0.0.1:${echo.port}`);
    await new Promise((r) => session.once('connect', r));
    const payload = Buffer.from('8 bytes!');
    const echoed = await new Promise<Buffer>((resolve, reject) => session.ping(payload, (err, _ms, p) => (err ? reject(err) : resolve(p))));
    assert.deepEqual(echoed, payload);
    const closed = new Promise((r) => session.once('close', r));
    session.close();
    await closed;
  });
});

// --- raw frames

describe("sluice's HTTP/2: protocol errors from raw frames", () => {
  let echo: Awaited<ReturnType<typeof echoServer>>;
  before(
    async () =>
      (echo = await echoServer({ maxConcurrentStreams: 2 }, (stream) =>
        stream.on('end', () => setTimeout(() => stream.respond({ ':status': 200 }, { endStream: true }), 50)),
      )),
  );
  after(() => echo.stop());

  const connectionError = async (name: string, bytes: Buffer[], code: number) => {
    const c = await raw(echo.port);
    c.send(...bytes);
    const goaway = await c.next(GOAWAY);
    assert.equal(goawayCode(goaway), code, name);
    await c.until('close', c.isClosed);
  };

  test('connection errors: GOAWAY with the code, then the connection closes', async () => {
    await connectionError('not the preface', [Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')], 0x1);
    await connectionError('first frame not SETTINGS', [PREFACE, frame(6, 0, 0, Buffer.alloc(8))], 0x1);
    await connectionError('a frame over 16,384 bytes', [PREFACE, SETTINGS_FRAME, frame(0, 0, 1, Buffer.alloc(20_000))], 0x6);
    await connectionError('a header block the decoder cannot read', [PREFACE, SETTINGS_FRAME, frame(1, 0x5, 1, hex('ff'))], 0x9);
    await connectionError('a stream id going backwards', [PREFACE, SETTINGS_FRAME, headersFrame(5, GOOD), headersFrame(3, GOOD)], 0x5);
    await connectionError('HEADERS on an even stream', [PREFACE, SETTINGS_FRAME, headersFrame(2, GOOD)], 0x1);
    await connectionError(
      'a frame between HEADERS and its CONTINUATION',
      [PREFACE, SETTINGS_FRAME, frame(1, 0, 1, encodeHeaders(GOOD)), frame(6, 0, 0, Buffer.alloc(8))],
      0x1,
    );
    await connectionError('a WINDOW_UPDATE that overflows the window', [PREFACE, SETTINGS_FRAME, frame(8, 0, 0, hex('7fffffff'))], 0x3);
    await connectionError('PUSH_PROMISE from a client', [PREFACE, SETTINGS_FRAME, frame(5, 0x4, 1, Buffer.alloc(4))], 0x1);
  });

  test('stream errors: RST_STREAM for that stream, the connection serves on', async () => {
    const c = await raw(echo.port);
    c.send(PREFACE, SETTINGS_FRAME);
    c.send(headersFrame(1, { ...GOOD, 'X-Upper': 'v' }));
    assert.equal((await c.next(RST_STREAM, 1)).payload.readUInt32BE(0), 0x1);
    c.send(headersFrame(3, { ':method': 'POST', ':path': '/echo' }));
    assert.equal((await c.next(RST_STREAM, 3)).payload.readUInt32BE(0), 0x1, 'no :scheme');
    c.send(headersFrame(5, { ...GOOD, connection: 'keep-alive' }));
    assert.equal((await c.next(RST_STREAM, 5)).payload.readUInt32BE(0), 0x1, 'connection-specific field');
    c.send(headersFrame(7, GOOD));
    const answer = await c.next(1, 7);
    assert.equal(answer.flags & 1, 1);
    assert.equal(c.isClosed(), false);
    c.close();
  });

  test('SETTINGS_MAX_CONCURRENT_STREAMS: a third stream at once is refused (REFUSED_STREAM), later ones served', async () => {
    const c = await raw(echo.port);
    c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD), headersFrame(3, GOOD), headersFrame(5, GOOD));
    assert.equal((await c.next(RST_STREAM, 5)).payload.readUInt32BE(0), 0x7);
    await c.next(1, 1);
    await c.next(1, 3);
    c.send(headersFrame(7, GOOD));
    await c.next(1, 7);
    c.close();
  });

  test('a handler that throws: that connection ends with INTERNAL_ERROR and a warning, the server serves on', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const server = await echoServer({}, (stream, headers) => {
      if (headers[':path'] === '/boom') throw new Error('boom');
      stream.respond({ ':status': 200 }, { endStream: true });
    });
    try {
      const bad = await raw(server.port);
      bad.send(PREFACE, SETTINGS_FRAME, headersFrame(1, { ...GOOD, ':path': '/boom' }));
      assert.equal(goawayCode(await bad.next(GOAWAY)), 0x2);
      await bad.until('close', bad.isClosed);
      const good = await raw(server.port);
      good.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD));
      assert.equal((await good.next(1, 1)).flags & 1, 1);
      good.close();
      await good.until('the warning', () => warnings.some((w) => w.message === 'boom'));
    } finally {
      process.off('warning', onWarning);
      await server.stop();
    }
  });

  test('our SETTINGS and connection window come first; the client SETTINGS and PING are acknowledged', async () => {
    const c = await raw(echo.port);
    c.send(PREFACE, frame(4, 0, 0, hex('000400010000')), frame(6, 0, 0, Buffer.from('abcdefgh')));
    await c.until('4 frames', () => c.frames.length >= 4);
    const [settings, window] = c.frames;
    assert.equal(settings.type, 4);
    assert.equal(settings.flags, 0);
    const values = new Map<number, number>();
    for (let at = 0; at < settings.payload.length; at += 6) values.set(settings.payload.readUInt16BE(at), settings.payload.readUInt32BE(at + 2));
    assert.equal(values.get(3), 2, 'SETTINGS_MAX_CONCURRENT_STREAMS');
    assert.equal(values.get(2), 0, 'SETTINGS_ENABLE_PUSH');
    assert.equal(window.type, 8);
    assert.ok(
      c.frames.some((f) => f.type === 4 && f.flags === 1),
      'SETTINGS ACK',
    );
    const pong = await c.next(6);
    assert.equal(pong.flags, 1);
    assert.equal(pong.payload.toString(), 'abcdefgh');
    c.close();
  });
});

const streamIds = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + 2 * i);

// Every visit of a blocked answer (WireStream.sendPending), counted while `body` runs.
async function countingVisits(body: (visits: () => number) => Promise<void>): Promise<void> {
  const proto = WireStream.prototype;
  const original = proto.sendPending;
  let visits = 0;
  proto.sendPending = function (this: WireStream) {
    visits++;
    return original.call(this);
  };
  try {
    await body(() => visits);
  } finally {
    proto.sendPending = original;
  }
}

describe("sluice's HTTP/2: what a peer can make a connection cost", () => {
  // Each stream is answered with 1,000 bytes once its request ends.
  const answer1000 = (stream: WireStream) =>
    stream.on('end', () => {
      stream.respond({ ':status': 200 });
      stream.end(Buffer.alloc(1000, 1));
    });

  test('answers blocked by their own zero window are not visited when the connection window opens, and each moves on its own WINDOW_UPDATE', async () => {
    const server = await echoServer({}, answer1000);
    try {
      await countingVisits(async (visits) => {
        const c = await raw(server.port);
        c.send(PREFACE, settingsFrame([[4, 0]]), ...streamIds(200).map((id) => headersFrame(id, GOOD)));
        await c.until('200 answers headers', () => c.frames.filter((f) => f.type === 1).length === 200);
        c.send(...Array.from({ length: 400 }, () => windowUpdate(0, 1)));
        c.send(frame(6, 0, 0, Buffer.alloc(8)));
        await c.next(6);
        assert.equal(visits(), 0, 'no blocked answer visited for a connection WINDOW_UPDATE');
        c.send(windowUpdate(1, 5000), windowUpdate(3, 5000));
        await c.until('two answers', () => c.frames.filter((f) => f.type === 0 && (f.flags & 1) === 1).length === 2);
        assert.equal(visits(), 2);
        assert.equal(c.isClosed(), false);
        c.close();
      });
    } finally {
      await server.stop();
    }
  });

  test('answers waiting for connection window move oldest first, a WINDOW_UPDATE visiting only what it lets through', async () => {
    const server = await echoServer({}, answer1000);
    try {
      await countingVisits(async (visits) => {
        const c = await raw(server.port);
        // 100 answers of 1,000 bytes against the 65,535-byte connection window: 65 go, 35 wait.
        c.send(PREFACE, SETTINGS_FRAME, ...streamIds(100).map((id) => headersFrame(id, GOOD)));
        await c.until('65 answers', () => c.frames.filter((f) => f.type === 0 && (f.flags & 1) === 1).length === 65);
        const before = visits();
        c.send(windowUpdate(0, 1000));
        await c.until('66 answers', () => c.frames.filter((f) => f.type === 0 && (f.flags & 1) === 1).length === 66);
        assert.ok(visits() - before <= 2, `${visits() - before} visits for 1,000 bytes of window`);
        const done = c.frames.filter((f) => f.type === 0 && (f.flags & 1) === 1).map((f) => f.id);
        assert.ok(done.includes(131), 'the oldest waiting answer (stream 131) moved first');
        c.close();
      });
    } finally {
      await server.stop();
    }
  });

  test('window credit comes back only as the reader takes bytes: unfinished bodies hold at most one window per connection', async () => {
    const server = await echoServer({}, (stream) => (stream.holdCredit(), stream.on('data', () => undefined)));
    try {
      const c = await raw(server.port);
      c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD, false));
      // 64 frames of 16 KiB: the whole 1 MiB window of stream 1 and of the connection.
      for (let i = 0; i < 64; i++) c.send(frame(0, 0, 1, Buffer.alloc(16_384)));
      c.send(headersFrame(3, GOOD, false), frame(0, 0, 3, Buffer.alloc(1)));
      assert.equal(goawayCode(await c.next(GOAWAY)), 0x3, 'FLOW_CONTROL_ERROR past the connection window');
      // Only our opening WINDOW_UPDATE: no credit came back for bytes nobody took.
      assert.equal(c.frames.filter((f) => f.type === WINDOW_UPDATE).length, 1);
      c.close();
    } finally {
      await server.stop();
    }
  });

  test('a call reset in the same read as its request never starts; one reset later in its own read does', async () => {
    let ends = 0;
    const server = await echoServer({}, (stream) => stream.on('end', () => (ends++, stream.respond({ ':status': 200 }, { endStream: true }))));
    try {
      const c = await raw(server.port);
      c.send(PREFACE, SETTINGS_FRAME, ...streamIds(50).flatMap((id) => [headersFrame(id, GOOD), rstStream(id)]));
      c.send(headersFrame(101, GOOD));
      await c.next(1, 101);
      assert.equal(ends, 1, 'only the call that was not reset ran');
      c.close();
    } finally {
      await server.stop();
    }
  });

  const budgetCases: [string, (ids: number[]) => Buffer[]][] = [
    ['calls reset (Rapid Reset)', (ids) => ids.flatMap((id) => [headersFrame(id, GOOD, false), rstStream(id)])],
    ['frames drawing RST_STREAM (MadeYouReset)', (ids) => ids.flatMap((id) => [headersFrame(id, GOOD, false), windowUpdate(id, 0)])],
    ['empty DATA frames', () => [headersFrame(1, GOOD, false), ...Array.from({ length: 30 }, () => frame(0, 0, 1))]],
    ['PING frames', () => Array.from({ length: 30 }, () => frame(6, 0, 0, Buffer.alloc(8)))],
    ['SETTINGS frames', () => Array.from({ length: 30 }, () => SETTINGS_FRAME)],
    ['empty CONTINUATION frames', () => [frame(1, 0, 1, encodeHeaders(GOOD)), ...Array.from({ length: 30 }, () => frame(9, 0, 1))]],
  ];
  for (const [name, frames] of budgetCases) {
    test(`past its budget of ${name}: GOAWAY ENHANCE_YOUR_CALM and the connection closes`, async () => {
      const abused: string[] = [];
      const server = await echoServer({ limits: { burst: 20, perSecond: 0 }, onAbuse: (_c, what) => abused.push(what) });
      try {
        const c = await raw(server.port);
        c.send(PREFACE, SETTINGS_FRAME, ...frames(streamIds(30)));
        assert.equal(goawayCode(await c.next(GOAWAY)), 0xb);
        await c.until('close', c.isClosed);
        c.close();
        assert.deepEqual(abused, [name.replace(/ \(.*\)$/, '')]);
      } finally {
        await server.stop();
      }
    });
  }

  test('resets of calls that waited 10 ms or more are not counted (a client at its timeout); resets at once are', async () => {
    // Requests that never end: each call waits until the client resets it.
    const server = await echoServer({ limits: { burst: 20, perSecond: 0 } });
    try {
      const late = await raw(server.port);
      // The PING's answer shows the HEADERS before it were read before the wait.
      late.send(PREFACE, SETTINGS_FRAME, ...streamIds(40).map((id) => headersFrame(id, GOOD, false)), frame(6, 0, 0, Buffer.alloc(8)));
      await late.next(6);
      await sleep(30);
      late.send(...streamIds(40).map((id) => rstStream(id)));
      late.send(headersFrame(81, GOOD));
      await late.next(1, 81);
      assert.equal(
        late.frames.some((f) => f.type === GOAWAY),
        false,
        '40 late resets, twice the budget: no GOAWAY',
      );
      late.close();
      const rapid = await raw(server.port);
      rapid.send(PREFACE, SETTINGS_FRAME, ...streamIds(40).flatMap((id) => [headersFrame(id, GOOD, false), rstStream(id)]));
      assert.equal(goawayCode(await rapid.next(GOAWAY)), 0xb);
      rapid.close();
    } finally {
      await server.stop();
    }
  });

  test('within its budget, the same frames are served: 19 resets, then a call answered', async () => {
    const server = await echoServer({ limits: { burst: 20, perSecond: 0 } });
    try {
      const c = await raw(server.port);
      c.send(PREFACE, SETTINGS_FRAME, ...streamIds(19).flatMap((id) => [headersFrame(id, GOOD, false), rstStream(id)]), headersFrame(39, GOOD));
      await c.next(1, 39);
      assert.equal(
        c.frames.some((f) => f.type === GOAWAY),
        false,
      );
      c.close();
    } finally {
      await server.stop();
    }
  });

  test('a peer that never reads: its PING answers pile up only to the bound, then it is closed', async () => {
    const server = await echoServer({ limits: { queuedControlFrames: 100 } });
    try {
      const socket = net.connect(server.port, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      socket.pause();
      let closed = false;
      socket.on('close', () => (closed = true));
      socket.on('error', () => undefined);
      socket.write(Buffer.concat([PREFACE, SETTINGS_FRAME]));
      const ping = frame(6, 0, 0, Buffer.alloc(8));
      const burst = Buffer.concat(Array.from({ length: 4096 }, () => ping));
      const deadline = Date.now() + 10_000;
      while (!closed && Date.now() < deadline) {
        socket.write(burst);
        await new Promise((r) => setTimeout(r, 1));
      }
      assert.ok(closed, 'the server closed a connection that never reads its PING answers');
      socket.destroy();
    } finally {
      await server.stop();
    }
  });

  test('the handshake must finish within handshakeTimeoutMs; an idle connection is told GOAWAY, then a PING, then closed', async () => {
    const server = await echoServer({ handshakeTimeoutMs: 100, idleTimeoutMs: 100 });
    try {
      const silent = await raw(server.port);
      const opened = Date.now();
      await silent.until('close', silent.isClosed);
      assert.ok(Date.now() - opened < 1000);
      const idle = await raw(server.port);
      idle.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD));
      await idle.next(1, 1);
      const headsUp = await idle.next(GOAWAY);
      assert.equal(headsUp.payload.readUInt32BE(0), 2 ** 31 - 1, 'the first GOAWAY names no last stream');
      const ping = await idle.next(6);
      idle.send(frame(6, 1, 0, ping.payload));
      await idle.until('the final GOAWAY', () => idle.frames.filter((f) => f.type === GOAWAY).length === 2);
      const last = idle.frames.filter((f) => f.type === GOAWAY)[1];
      assert.equal(last.payload.readUInt32BE(0), 1);
      assert.equal(goawayCode(last), 0);
      await idle.until('close', idle.isClosed);
    } finally {
      await server.stop();
    }
  });

  test('RFC 9113 5.4.2 and 5.1: what was in flight when we reset a stream is ignored; DATA after the client closed it is STREAM_CLOSED', async () => {
    // Answered at once, before the request ends: we reset the rest of it (RST_STREAM NO_ERROR).
    const server = await echoServer({}, (stream) => stream.respond({ ':status': 200 }, { endStream: true }));
    try {
      const c = await raw(server.port);
      c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD, false));
      assert.equal((await c.next(RST_STREAM, 1)).payload.readUInt32BE(0), 0x0);
      c.send(
        frame(0, 0, 1, Buffer.from('late')),
        headersFrame(1, { 'x-trailer': 'late' }),
        headersFrame(3, GOOD, false),
        rstStream(3),
        frame(0, 0, 3, Buffer.from('x')),
      );
      assert.equal((await c.next(RST_STREAM, 3)).payload.readUInt32BE(0), 0x0, 'our answer to stream 3 came first');
      c.send(headersFrame(5, GOOD, false), rstStream(5));
      await new Promise((r) => setTimeout(r, 50));
      c.send(frame(0, 0, 5, Buffer.from('x')), headersFrame(7, GOOD));
      await c.next(1, 7);
      assert.equal(c.frames.filter((f) => f.type === RST_STREAM && f.id === 1).length, 1, 'nothing more for stream 1');
      assert.equal(
        c.frames.some((f) => f.type === GOAWAY),
        false,
      );
      c.close();
    } finally {
      await server.stop();
    }
    const closed = await echoServer();
    try {
      const c = await raw(closed.port);
      c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD, false), rstStream(1), frame(0, 0, 1, Buffer.from('x')));
      assert.equal((await c.next(RST_STREAM, 1)).payload.readUInt32BE(0), 0x5, 'DATA after the client reset it: STREAM_CLOSED');
      c.close();
    } finally {
      await closed.stop();
    }
  });

  test('RFC 9113 8.2 and 8.3: empty :path, field values with CR, LF or NUL or edge white space, names that are not tokens, content-length against the body', async () => {
    const server = await echoServer();
    try {
      const c = await raw(server.port);
      c.send(PREFACE, SETTINGS_FRAME);
      const malformed: Record<string, string>[] = [
        { ...GOOD, ':path': '' },
        { ...GOOD, 'x-a': 'a\r\nb' },
        { ...GOOD, 'x-a': 'a\u0000b' },
        { ...GOOD, 'x-a': ' a' },
        { ...GOOD, 'x a': 'b' },
        { ...GOOD, 'content-length': 'ten' },
      ];
      malformed.forEach((h, i) => c.send(headersFrame(1 + 2 * i, h)));
      for (let i = 0; i < malformed.length; i++) assert.equal((await c.next(RST_STREAM, 1 + 2 * i)).payload.readUInt32BE(0), 0x1, JSON.stringify(malformed[i]));
      c.send(headersFrame(21, { ...GOOD, 'content-length': '5' }, false), frame(0, 1, 21, Buffer.from('abc')));
      assert.equal((await c.next(RST_STREAM, 21)).payload.readUInt32BE(0), 0x1, 'shorter than content-length');
      c.send(headersFrame(23, { ...GOOD, 'content-length': '2' }, false), frame(0, 1, 23, Buffer.from('abc')));
      assert.equal((await c.next(RST_STREAM, 23)).payload.readUInt32BE(0), 0x1, 'longer than content-length');
      c.send(headersFrame(25, { ...GOOD, 'content-length': '3' }, false), frame(0, 1, 25, Buffer.from('abc')));
      assert.equal(JSON.parse((await c.next(0, 25)).payload.toString()).bytes, 3);
      c.close();
    } finally {
      await server.stop();
    }
  });
});

describe("sluice's HTTP/2: the server stopping", () => {
  test('a call the client sent before it saw the GOAWAY is answered, not refused; the last GOAWAY names it', async () => {
    // A refused call is retried once by grpc-js; with several workers stopping at once, the retry
    // can be refused too and fail. So the stop is grpc-go's graceful close: GOAWAY naming no limit
    // and a PING, and the GOAWAY that names the last stream only once the PING is answered.
    const echo = await echoServer();
    const c = await raw(echo.port);
    c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD));
    await c.next(1, 1);
    const stopped = echo.stop();
    // Sent right after the stop began, before this client read anything of it.
    c.send(headersFrame(3, GOOD));
    await c.next(1, 3);
    assert.ok(!c.frames.some((f) => f.type === RST_STREAM), 'no stream refused');
    const first = await c.next(GOAWAY);
    assert.equal(first.payload.readUInt32BE(0) & 0x7fffffff, 0x7fffffff, 'the first GOAWAY names no limit');
    const ping = await c.next(PING_TYPE);
    c.send(frame(PING_TYPE, 0x1, 0, ping.payload));
    await c.until('the last GOAWAY', () => c.frames.filter((f) => f.type === GOAWAY).length === 2);
    const last = c.frames.filter((f) => f.type === GOAWAY)[1];
    assert.deepEqual([last.payload.readUInt32BE(0) & 0x7fffffff, goawayCode(last)], [3, 0]);
    await c.until('close', c.isClosed);
    await stopped;
  });

  test('a client that ignores the stop (never answers the PING, opens more streams) is cut off within about a second', async () => {
    // The graceful close leaves a window in which new streams are still taken: a peer that never
    // answers the PING and keeps opening streams gets the GOAWAY naming the last stream after 1 s
    // anyway; streams it opens after that are refused, and the stop completes once it is closed.
    const echo = await echoServer();
    const c = await raw(echo.port);
    c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD));
    await c.next(1, 1);
    const began = Date.now();
    const stopped = echo.stop();
    await c.next(GOAWAY);
    let id = 3;
    while (c.frames.filter((f) => f.type === GOAWAY).length < 2) {
      assert.ok(Date.now() - began < 3000, 'no GOAWAY naming the last stream within 3 s');
      c.send(headersFrame(id, GOOD));
      id += 2;
      await sleep(50);
    }
    const elapsed = Date.now() - began;
    assert.ok(elapsed >= 900, `the last GOAWAY came after ${elapsed} ms: before the client's second to answer`);
    const last = c.frames.filter((f) => f.type === GOAWAY)[1].payload.readUInt32BE(0) & 0x7fffffff;
    // One more stream past the named one: refused, not answered.
    c.send(headersFrame(id, GOOD));
    await c.until('close', c.isClosed);
    await stopped;
    const answered = new Set(c.frames.filter((f) => f.type === 1).map((f) => f.id));
    for (let s = 1; s <= last; s += 2) assert.ok(answered.has(s), `stream ${s}, at or below the last GOAWAY's ${last}, was answered`);
    assert.ok(!answered.has(id), `stream ${id}, past the last GOAWAY, was not answered`);
  });
});
