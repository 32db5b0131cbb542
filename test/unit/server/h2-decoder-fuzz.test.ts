import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import fc from 'fast-check';
import { encodeHeaders, HpackDecoder, HpackError } from '../../../src/server/h2grpc/hpack';
import { u32 } from '../../../src/server/h2grpc/wire';
import { echoServer, frame, GOAWAY, goawayCode, GOOD, headersFrame, PREFACE, raw, type RawClient, SETTINGS_FRAME } from '../../support/h2-raw';

// Property-based fuzz of sluice's own HTTP/2 decoders (src/server/h2grpc): the HPACK decoder on
// arbitrary bytes and on what our encoder writes, and a connection's frame parser on arbitrary
// frame sequences over a real socket. Seeded and bounded (SLUICE_FC_SEED overrides the seed).
// A failure prints fast-check's shrunk counterexample: the bytes that break it.

const SEED = Number(process.env.SLUICE_FC_SEED ?? 20_261_233);

// --- HPACK

const bytes = (maxLength: number) => fc.uint8Array({ maxLength }).map((a) => Buffer.from(a));
// Arbitrary blocks, and blocks that start with valid representations so that the decoder gets
// past the first byte and into its tables, Huffman strings and integers.
const blockArb = fc.oneof(
  bytes(64),
  fc
    .tuple(fc.constantFrom(...[0x82, 0x86, 0x44, 0x40, 0x3f, 0x20, 0x10, 0x00, 0xbe, 0xff, 0x7f].map((b) => Buffer.from([b]))), bytes(40))
    .map(([a, b]) => Buffer.concat([a, b])),
  fc.tuple(fc.constantFrom(encodeHeaders(GOOD), encodeHeaders({ 'x-a': 'b' })), bytes(16)).map(([a, b]) => Buffer.concat([a, b])),
);

const listBytes = (fields: string[]) => {
  let n = 0;
  for (let i = 0; i < fields.length; i += 2) n += fields[i].length + fields[i + 1].length + 32;
  return n;
};

// One decoder (its dynamic table carried from block to block, as on a connection) against a twin
// with no list limit: the same blocks decode or fail alike, and the limited one returns the
// longest prefix of the list that fits, flagged when something did not.
function checkArbitraryBlocks(blocks: Buffer[], maxListBytes: number): void {
  const limited = new HpackDecoder();
  const unlimited = new HpackDecoder();
  for (const block of blocks) {
    let all: string[];
    try {
      all = unlimited.decode(block, Number.MAX_SAFE_INTEGER).fields;
    } catch (err) {
      assert.ok(err instanceof HpackError, `not an HpackError: ${String(err)} on ${block.toString('hex')}`);
      assert.throws(() => limited.decode(block, maxListBytes), HpackError);
      return; // the decoder's state is undefined after an error: the connection is gone
    }
    const { fields, tooLarge } = limited.decode(block, maxListBytes);
    assert.ok(listBytes(fields) <= maxListBytes, 'the returned list is within the limit');
    assert.equal(tooLarge, listBytes(all) > maxListBytes, 'flagged exactly when the whole list is over the limit');
    assert.deepEqual(fields, all.slice(0, fields.length), 'the returned list is a prefix of the whole');
    if (tooLarge) assert.ok(listBytes(all.slice(0, fields.length + 2)) > maxListBytes, 'the prefix stops at the first field that does not fit');
  }
}

const HPACK_RUNS = 10_000;

// In a worker thread, so that a decoder that never returns fails the test instead of hanging it.
if (!isMainThread) {
  let error: string | undefined;
  try {
    fc.assert(fc.property(fc.array(blockArb, { minLength: 1, maxLength: 4 }), fc.integer({ min: 0, max: 300 }), checkArbitraryBlocks), {
      seed: SEED,
      numRuns: HPACK_RUNS,
    });
  } catch (err) {
    error = err instanceof Error ? err.message : String(err);
  }
  parentPort!.postMessage(error ?? null);
}

const nameArb = fc.stringMatching(/^[a-z][a-z0-9-]{0,15}$/);
// Any octet the encoder writes as a plain latin1 string; values are not validated on this path.
const valueArb = fc.uint8Array({ maxLength: 200 }).map((a) => Buffer.from(a).toString('latin1'));
const headerMapArb = fc.record({
  status: fc.option(fc.integer({ min: 100, max: 599 }), { nil: undefined }),
  fields: fc.dictionary(nameArb, fc.oneof(valueArb, fc.array(valueArb, { minLength: 1, maxLength: 3 })), { maxKeys: 12 }),
});

if (isMainThread) {
  describe('HPACK decoder', () => {
    test('arbitrary bytes: fields within the list limit or an HpackError, never another exception, never stuck', async () => {
      const worker = new Worker(__filename);
      const outcome = await Promise.race([
        new Promise<string | null>((resolve, reject) => worker.once('message', resolve).once('error', reject)),
        new Promise<string>((resolve) =>
          setTimeout(() => resolve(`no answer within 15 s from ${HPACK_RUNS} decodes: a decoder loop that does not end`), 15_000).unref(),
        ),
      ]);
      await worker.terminate();
      assert.equal(outcome, null);
    });

    test('our encoder round-trips: decode(encodeHeaders(map)) is the map, :status first, a field per array value', () => {
      fc.assert(
        fc.property(headerMapArb, ({ status, fields }) => {
          const map: Record<string, string | number | string[]> = { ...fields };
          if (status !== undefined) map[':status'] = status;
          const expected: string[] = status === undefined ? [] : [':status', String(status)];
          for (const [name, value] of Object.entries(fields)) for (const v of [value].flat()) expected.push(name, v);
          const decoder = new HpackDecoder();
          // Twice on one decoder: the encoder never indexes, so the second block needs no table.
          assert.deepEqual(decoder.decode(encodeHeaders(map), Number.MAX_SAFE_INTEGER).fields, expected);
          assert.deepEqual(decoder.decode(encodeHeaders(map), Number.MAX_SAFE_INTEGER).fields, expected);
        }),
        { seed: SEED, numRuns: 500 },
      );
    });
  });

  describe('frame parser: arbitrary frame sequences on a real connection', () => {
    let echo: Awaited<ReturnType<typeof echoServer>>;
    const warnings: Error[] = [];
    // wire.ts emits this warning exactly when a connection ends with INTERNAL_ERROR: a fault of ours.
    const onWarning = (w: Error) => {
      if (w.name === 'SluiceHttp2Warning') warnings.push(w);
    };
    before(async () => {
      process.on('warning', onWarning);
      echo = await echoServer({ maxConcurrentStreams: 8 });
    });
    after(async () => {
      process.off('warning', onWarning);
      await echo.stop();
    });

    test('never an internal error; open, or GOAWAY with a defined code; a fresh connection is served after each case', async (t) => {
      const id = fc.oneof(fc.constantFrom(0, 1, 3, 5, 2, 0x7fffffff), fc.integer({ min: 0, max: 12 }));
      const payload = fc.uint8Array({ maxLength: 100 }).map((a) => Buffer.from(a));
      const frameArb = fc.oneof(
        // Anything: every type (10..15 unknown), every flag, any length up to 100.
        fc.tuple(fc.integer({ min: 0, max: 15 }), fc.integer({ min: 0, max: 255 }), id, payload).map(([t, f, i, p]) => frame(t, f, i, p)),
        // Well-formed frames, which take the parser into stream states the random ones rarely reach.
        fc
          .tuple(fc.constantFrom(1, 3, 5), fc.boolean(), fc.dictionary(nameArb, fc.string({ maxLength: 20 }), { maxKeys: 3 }))
          .map(([i, end, extra]) => headersFrame(i, { ...GOOD, ...extra }, end)),
        fc.tuple(fc.constantFrom(1, 3, 5), fc.boolean(), fc.integer({ min: 1, max: 40 })).map(([i, end, cut]) => {
          // A header block split over HEADERS and CONTINUATION.
          const block = encodeHeaders(GOOD);
          const at = Math.min(cut, block.length - 1);
          return Buffer.concat([frame(1, end ? 1 : 0, i, block.subarray(0, at)), frame(9, 4, i, block.subarray(at))]);
        }),
        fc.tuple(fc.constantFrom(1, 3, 5), fc.integer({ min: 0, max: 9 }), payload).map(([i, f, p]) => frame(0, f & 1, i, p)),
        fc.tuple(id, fc.integer({ min: 0, max: 0xf })).map(([i, code]) => frame(3, 0, i, u32(code))),
        fc.tuple(id, fc.constantFrom(0, 1, 65_535, 0x7fffffff)).map(([i, inc]) => frame(8, 0, i, u32(inc))),
        fc
          .array(fc.tuple(fc.integer({ min: 0, max: 8 }), fc.constantFrom(0, 1, 16_383, 16_384, 65_535, 2 ** 24, 0x7fffffff, 0x80000000, 0xffffffff)), {
            maxLength: 4,
          })
          .map((settings) => {
            const p = Buffer.alloc(6 * settings.length);
            settings.forEach(([k, v], n) => (p.writeUInt16BE(k, 6 * n), p.writeUInt32BE(v, 6 * n + 2)));
            return frame(4, 0, 0, p);
          }),
        fc.constant(frame(4, 1, 0)),
        fc.constantFrom(0, 1).map((f) => frame(6, f, 0, Buffer.from('fuzzping'))),
      );

      const served = async () => {
        const c = await raw(echo.port);
        try {
          c.send(PREFACE, SETTINGS_FRAME, headersFrame(1, GOOD));
          assert.equal((await c.next(1, 1)).id, 1);
        } finally {
          c.close();
        }
      };

      // The case's frames, then a PING of our own: its ACK comes once every frame before it was
      // handled, unless the connection ended first.
      const MARK = Buffer.from('endofcas');
      const settle = (c: RawClient) =>
        c.until('the PING ACK or the end', () => c.isClosed() || c.frames.some((f) => f.type === 6 && f.flags === 1 && f.payload.equals(MARK)));

      let cases = 0;
      let goaways = 0;
      await fc.assert(
        fc.asyncProperty(fc.array(frameArb, { minLength: 1, maxLength: 10 }), async (frames) => {
          cases++;
          const c = await raw(echo.port);
          try {
            c.send(PREFACE, SETTINGS_FRAME, ...frames, frame(6, 0, 0, MARK));
            await settle(c);
            const goaway = c.frames.find((f) => f.type === GOAWAY);
            // After the client's own GOAWAY an idle connection may just close (RFC 9113 6.8).
            const saidGoaway = frames.some((f) => f[3] === GOAWAY);
            if (c.isClosed() && !saidGoaway)
              assert.ok(goaway, `closed without GOAWAY; frames back: ${JSON.stringify(c.frames.map((f) => [f.type, f.flags, f.id]))}`);
            if (goaway) {
              goaways++;
              assert.ok(goawayCode(goaway) <= 0xd, `GOAWAY code ${goawayCode(goaway)}`);
            }
            assert.deepEqual(
              warnings.map((w) => w.message),
              [],
              'no internal error (SluiceHttp2Warning)',
            );
          } finally {
            c.close();
          }
          await served();
        }),
        { seed: SEED, numRuns: 800 },
      );
      t.diagnostic(`seed ${SEED}: ${cases} cases, ${goaways} ended in GOAWAY`);
      // The generator reaches both outcomes, or the property proves less than it says.
      assert.ok(goaways > 0 && goaways < cases, `${goaways} of ${cases} cases ended in GOAWAY`);
    });
  });
}
