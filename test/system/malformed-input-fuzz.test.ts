import assert from 'node:assert/strict';
import http2 from 'node:http2';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { RateLimitRequest, RateLimitResponse } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { spawnServer, type ServerProcess } from '../support/process';
import { grpcMessages, type RawGrpcAnswer, rawGet, rawGrpcCall, rawPost } from '../support/raw-grpc';
import { startRedis, stopAll } from '../support/redis';

// A bounded, seeded fuzz of the real server (`sluice serve` on the example config; memory store
// and Redis store): random and mutated RateLimitRequest bytes as raw gRPC frames, random JSON to
// POST /json. Every answer must be a valid RLS response or a deliberate status (INVALID_ARGUMENT,
// RESOURCE_EXHAUSTED for oversized messages, HTTP 400) — never INTERNAL/UNKNOWN or HTTP 500 — the
// process must stay up with bounded memory, and a normal request must still work at the end.
// SLUICE_FC_SEED / SLUICE_FUZZ_INPUTS override the seed and the input count.

const SEED = Number(process.env.SLUICE_FC_SEED ?? 20_261_201);
const INPUTS = Number(process.env.SLUICE_FUZZ_INPUTS ?? 1_500);
const IN_FLIGHT = 16;
const RSS_GROWTH_BOUND = 200 * 1024 * 1024;

const GRPC = { OK: 0, UNKNOWN: 2, INVALID_ARGUMENT: 3, RESOURCE_EXHAUSTED: 8, INTERNAL: 13, UNAVAILABLE: 14 };

// ---- inputs ----

const KEYS = ['tenant', 'route', 'auth', 'masked_remote_address', 'remote_address'];
const VALUES = ['cust_ent_9942', 'acme', 'internal', '/v1/payments/checkout', 'anonymous', '198.51.100.7'];
const anyString = fc.oneof(fc.string({ maxLength: 20 }), fc.string({ unit: 'binary', maxLength: 20 }));

const requestArb: fc.Arbitrary<RateLimitRequest> = fc.record({
  domain: fc.oneof({ arbitrary: fc.constant('edge'), weight: 4 }, { arbitrary: anyString, weight: 1 }),
  descriptors: fc.array(
    fc.record({
      entries: fc.array(
        fc.record({
          key: fc.oneof({ arbitrary: fc.constantFrom(...KEYS), weight: 4 }, { arbitrary: anyString, weight: 1 }),
          value: fc.oneof({ arbitrary: fc.constantFrom(...VALUES), weight: 4 }, { arbitrary: anyString, weight: 1 }),
        }),
        { minLength: 1, maxLength: 4 },
      ),
      limit: fc.option(
        fc.record({
          requestsPerUnit: fc.oneof(fc.nat(100), fc.constant(0xffff_ffff)),
          unit: fc.oneof({ weight: 6, arbitrary: fc.integer({ min: 1, max: 7 }) }, { weight: 1, arbitrary: fc.integer({ min: 0, max: 9 }) }),
        }),
        { nil: undefined, freq: 4 },
      ),
      hitsAddend: fc.option(fc.oneof({ weight: 8, arbitrary: fc.nat(5) }, { weight: 1, arbitrary: fc.constantFrom(2 ** 32, Number.MAX_SAFE_INTEGER) }), {
        nil: undefined,
        freq: 3,
      }),
    }),
    { minLength: 1, maxLength: 5 },
  ),
  hitsAddend: fc.oneof({ weight: 8, arbitrary: fc.nat(10) }, { weight: 1, arbitrary: fc.constant(0xffff_ffff) }),
});

const encode = (r: RateLimitRequest) => Buffer.from(RateLimitRequest.encode(r).finish());

function varint(n: bigint): number[] {
  const out: number[] = [];
  do {
    let byte = Number(n & 0x7fn);
    n >>= 7n;
    if (n > 0n) byte |= 0x80;
    out.push(byte);
  } while (n > 0n);
  return out;
}

// length-delimited field
function ld(field: number, payload: Buffer | number[]): Buffer {
  const p = Buffer.from(payload);
  return Buffer.concat([Buffer.from([...varint(BigInt((field << 3) | 2)), ...varint(BigInt(p.length))]), p]);
}

const INVALID_UTF8 = [[0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf4, 0x90, 0x80, 0x80]];
const entry = (k: number[] | string, v: number[] | string) => ld(1, Buffer.concat([ld(1, Buffer.from(k as string)), ld(2, Buffer.from(v as string))]));

// Hand-made hostile encodings: each a function of a random valid encoding.
const hostile: ((base: Buffer, n: number) => Buffer)[] = [
  // huge varints: a 10-byte length of 2^64−1, an 11-byte overlong varint, hits_addend 2^64−1
  (base) => Buffer.concat([base, Buffer.from([0x0a, ...varint(2n ** 64n - 1n)])]),
  (base) => Buffer.concat([Buffer.from([0x18, ...Array(10).fill(0x80), 0x01]), base]),
  (base) => Buffer.concat([base, Buffer.from([0x18, ...varint(2n ** 64n - 1n)])]),
  // a length that runs past the end
  (base) => Buffer.concat([base, Buffer.from([0x12, ...varint(0x7fff_ffffn)]), Buffer.from('abc')]),
  // invalid UTF-8 in the domain, an entry key, an entry value
  (base, n) => Buffer.concat([ld(1, INVALID_UTF8[n % INVALID_UTF8.length]), base]),
  (base, n) => Buffer.concat([base, ld(2, entry(INVALID_UTF8[n % INVALID_UTF8.length], 'x'))]),
  (base, n) => Buffer.concat([base, ld(2, entry('tenant', [0x61, ...INVALID_UTF8[n % INVALID_UTF8.length]]))]),
  // deep nesting: unknown start-groups, unknown nested messages inside a descriptor
  (base, n) => Buffer.concat([base, Buffer.alloc(1_000 + (n % 50_000), 0x7b)]),
  (base, n) => {
    let inner: Buffer = Buffer.alloc(0);
    for (let i = 0; i < 200 + (n % 2_000); i++) inner = ld(15, inner);
    return Buffer.concat([base, ld(2, inner)]);
  },
  // huge fields: many descriptors, many entries, a long value, a big message near and over 4 MiB
  (_base, n) =>
    Buffer.concat([Buffer.from([0x0a, 4, ...Buffer.from('edge')]), ...Array.from({ length: 900 + (n % 400) }, (_, i) => ld(2, entry('tenant', `t${i}`)))]),
  (_base, n) =>
    Buffer.concat([
      Buffer.from([0x0a, 4, ...Buffer.from('edge')]),
      ld(2, Buffer.concat(Array.from({ length: 40 + (n % 60) }, (_, i) => entry('tenant', `t${i}`)))),
    ]),
  (_base, n) => Buffer.concat([Buffer.from([0x0a, 4, ...Buffer.from('edge')]), ld(2, entry('tenant', 'v'.repeat(60_000 + (n % 10_000))))]),
  (base, n) => Buffer.concat([base, ld(1, Buffer.alloc(n % 2 === 0 ? 3_500_000 : 4_300_000, 0x61))]),
  // wrong wire types for known fields
  (base) => Buffer.concat([Buffer.from([0x08, 0x05, 0x15, 1, 2, 3, 4, 0x19, 1, 2, 3, 4, 5, 6, 7, 8]), base]),
];

type Mutation =
  | { k: 'none' }
  | { k: 'flip'; bits: { pos: number; bit: number }[] }
  | { k: 'truncate'; at: number }
  | { k: 'splice'; other: RateLimitRequest; a: number; b: number }
  | { k: 'insert'; at: number; bytes: Uint8Array }
  | { k: 'hostile'; which: number; n: number }
  | { k: 'random'; bytes: Uint8Array };

const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 6, arbitrary: fc.constant({ k: 'none' as const }) },
  {
    weight: 4,
    arbitrary: fc.record({
      k: fc.constant('flip' as const),
      bits: fc.array(fc.record({ pos: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }), { minLength: 1, maxLength: 8 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('truncate' as const), at: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('splice' as const), other: requestArb, a: fc.nat(), b: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 12 }) }) },
  { weight: 3, arbitrary: fc.record({ k: fc.constant('hostile' as const), which: fc.nat(hostile.length - 1), n: fc.nat(1_000_000) }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('random' as const), bytes: fc.uint8Array({ maxLength: 300 }) }) },
);

function mutate(base: Buffer, m: Mutation): Buffer {
  switch (m.k) {
    case 'none':
      return base;
    case 'flip': {
      const out = Buffer.from(base);
      if (out.length > 0) for (const { pos, bit } of m.bits) out[pos % out.length] ^= 1 << bit;
      return out;
    }
    case 'truncate':
      return base.subarray(0, m.at % (base.length + 1));
    case 'splice': {
      const other = encode(m.other);
      return Buffer.concat([base.subarray(0, m.a % (base.length + 1)), other.subarray(m.b % (other.length + 1))]);
    }
    case 'insert': {
      const at = m.at % (base.length + 1);
      return Buffer.concat([base.subarray(0, at), m.bytes, base.subarray(at)]);
    }
    case 'hostile':
      return hostile[m.which](base, m.n);
    case 'random':
      return Buffer.from(m.bytes);
  }
}

// JSON: random structures, and valid-looking requests with wrong types, nulls, huge numbers.
const weird = fc.oneof(
  fc.constant(null),
  fc.constantFrom(1e308, -1, 2 ** 53 + 2, 2 ** 64, 1.5, -0, '1', '', true, [], {}, 'NaN', '18446744073709551616', 'SECOND', 'x'.repeat(70_000)),
  fc.jsonValue({ maxDepth: 3 }),
);
const maybe = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ weight: 12, arbitrary: valid }, { weight: 1, arbitrary: weird });
const jsonRequestArb = fc.record(
  {
    domain: maybe(fc.constantFrom('edge', 'other')),
    descriptors: maybe(
      fc.array(
        fc.record(
          {
            entries: maybe(
              fc.array(fc.record({ key: maybe(fc.constantFrom(...KEYS)), value: maybe(fc.constantFrom(...VALUES)) }), { minLength: 1, maxLength: 3 }),
            ),
            limit: maybe(fc.record({ requests_per_unit: maybe(fc.nat(100)), unit: maybe(fc.constantFrom('SECOND', 'MINUTE', 'HOUR', 'DAY', 'UNKNOWN', 3)) })),
            hits_addend: maybe(fc.nat(5)),
          },
          { requiredKeys: ['entries'] },
        ),
        { minLength: 1, maxLength: 4 },
      ),
    ),
    hitsAddend: maybe(fc.nat(5)),
  },
  { requiredKeys: ['domain', 'descriptors'] },
);
const jsonBodyArb: fc.Arbitrary<Buffer> = fc.oneof(
  { weight: 12, arbitrary: jsonRequestArb.map((o) => Buffer.from(JSON.stringify(o))) },
  { weight: 2, arbitrary: fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? 'null')) },
  { weight: 1, arbitrary: fc.string({ maxLength: 50 }).map((s) => Buffer.from(s)) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 100 }).map((b) => Buffer.from(b)) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      Buffer.from(`${'['.repeat(100_000)}${']'.repeat(100_000)}`),
      Buffer.from(`{"domain":"edge","descriptors":${'['.repeat(20_000)}${']'.repeat(20_000)}}`),
      Buffer.from('{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits_addend":1e999}'),
      Buffer.from('{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"}]}],"hits_addend":123456789012345678901234567890}'),
      Buffer.concat([Buffer.from('{"domain":"ed'), Buffer.from([0xff, 0xfe]), Buffer.from('ge","descriptors":[{"entries":[{"key":"tenant","value":"a"}]}]}')]),
      Buffer.from('{"__proto__":{"domain":"edge"},"constructor":{"prototype":{"x":1}},"descriptors":[]}'),
    ),
  },
);

// ---- judging answers ----

function judgeGrpc(a: RawGrpcAnswer, sent: Buffer, allowed: number[]): string | undefined {
  if (a.httpStatus !== 200) return `HTTP status ${a.httpStatus}`;
  if (a.grpcStatus === undefined) return 'no grpc-status';
  if (a.grpcStatus !== GRPC.OK) return allowed.includes(a.grpcStatus) ? undefined : `grpc-status ${a.grpcStatus} ${a.grpcMessage}`;
  let response: RateLimitResponse;
  try {
    const messages = grpcMessages(a.body);
    if (messages.length !== 1) return `${messages.length} messages in an OK answer`;
    response = RateLimitResponse.decode(messages[0]);
  } catch (err) {
    return `OK answer that does not decode: ${(err as Error).message}`;
  }
  // Envoy reads UNKNOWN as allow: never a decision (see DESIGN.md).
  if (response.overallCode !== 1 && response.overallCode !== 2) return `overall_code ${response.overallCode}`;
  if (response.statuses.some((s) => s.code !== 1 && s.code !== 2)) return `status codes ${response.statuses.map((s) => s.code)}`;
  let request: RateLimitRequest | undefined;
  try {
    request = RateLimitRequest.decode(sent);
  } catch {
    // the server read what our decoder could not: nothing more to compare
  }
  if (request !== undefined && response.statuses.length !== request.descriptors.length) {
    return `${response.statuses.length} statuses for ${request.descriptors.length} descriptors`;
  }
  return undefined;
}

function judgeJson(r: { status: number; body: string }, allowed: number[]): string | undefined {
  if (r.status === 200 || r.status === 429) {
    let parsed: { overallCode?: unknown };
    try {
      parsed = JSON.parse(r.body) as { overallCode?: unknown };
    } catch {
      return `HTTP ${r.status} with a body that is not JSON`;
    }
    const want = r.status === 200 ? 'OK' : 'OVER_LIMIT';
    return parsed.overallCode === want ? undefined : `HTTP ${r.status} with overallCode ${String(parsed.overallCode)}`;
  }
  return allowed.includes(r.status) ? undefined : `HTTP ${r.status}: ${r.body.slice(0, 200)}`;
}

function show(b: Buffer): string {
  return `${b.length} bytes: ${b.subarray(0, 160).toString('hex')}${b.length > 160 ? '…' : ''}`;
}

async function rss(server: ServerProcess): Promise<number> {
  const { body } = await rawGet(server.httpPort, '/metrics');
  const line = body.split('\n').find((l) => l.startsWith('process_resident_memory_bytes '));
  assert.ok(line, 'no process_resident_memory_bytes in /metrics');
  return Number(line.split(' ')[1]);
}

function tally(m: Map<string, number>, reason: string): void {
  // numbers vary per input; the kind of answer does not
  const kind = reason.replace(/\d+/g, 'N');
  m.set(kind, (m.get(kind) ?? 0) + 1);
}

async function pool<T>(items: T[], fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

const BIG = 256 * 1024;

function connect(server: ServerProcess): http2.ClientHttp2Session {
  const session = http2.connect(`http://127.0.0.1:${server.grpcPort}`);
  session.on('error', () => undefined);
  return session;
}

const NORMAL: RateLimitRequest = {
  domain: 'edge',
  descriptors: [{ entries: [{ key: 'tenant', value: 'fuzz-end' }], limit: undefined, hitsAddend: undefined }],
  hitsAddend: 0,
};

interface Target {
  name: string;
  start: () => Promise<ServerProcess>;
  grpcErrors: number[];
  httpErrors: number[];
  share: number;
}

describe('fuzz: the server answers every malformed input deliberately and stays up', () => {
  let redisPort = 0;
  before(async () => {
    redisPort = (await startRedis()).port;
  });
  after(() => stopAll());

  const targets: Target[] = [
    {
      name: 'memory store',
      start: () => spawnServer(['--config', 'examples/config']),
      grpcErrors: [GRPC.INVALID_ARGUMENT, GRPC.RESOURCE_EXHAUSTED],
      httpErrors: [400],
      share: 1,
    },
    {
      name: 'redis store',
      start: () => spawnServer(['--config', 'examples/config', '--store', 'redis', '--redis-url', `127.0.0.1:${redisPort}`]),
      // UNAVAILABLE / 503 only mean "could not decide", which a healthy Redis should not cause;
      // they are counted and reported, and allowed here only because this run checks input
      // handling.
      grpcErrors: [GRPC.INVALID_ARGUMENT, GRPC.RESOURCE_EXHAUSTED, GRPC.UNAVAILABLE],
      httpErrors: [400, 503],
      share: 3,
    },
  ];

  for (const target of targets) {
    test(target.name, async (t) => {
      const server = await target.start();
      let session = connect(server);
      const problems: string[] = [];
      const grpcCodes: Record<string, number> = {};
      const httpCodes: Record<string, number> = {};
      const reasons = new Map<string, number>();
      try {
        // Wait until a normal decision works (the Redis store is ready once one round-tripped).
        const deadline = Date.now() + 15_000;
        while ((await rawGrpcCall(session, encode(NORMAL))).grpcStatus !== GRPC.OK) {
          assert.ok(Date.now() < deadline, 'the server never answered a normal request');
          await new Promise((r) => setTimeout(r, 100));
        }
        const rssBefore = await rss(server);
        const count = Math.ceil(INPUTS / target.share);
        const grpcInputs = fc.sample(fc.tuple(requestArb, mutationArb), { seed: SEED, numRuns: count }).map(([r, m]) => mutate(encode(r), m));
        const jsonInputs = fc.sample(jsonBodyArb, { seed: SEED + 1, numRuns: Math.ceil(count / 2) });

        // Big inputs go one at a time on a connection of their own: several multi-MiB messages
        // in flight at once exceed node:http2's per-session memory bound (maxSessionMemory,
        // 10 MB), which refuses new streams with ENHANCE_YOUR_CALM before the server sees them.
        const big = grpcInputs.filter((b) => b.length > BIG);
        const send = async (input: Buffer, via: http2.ClientHttp2Session) => {
          let answer: RawGrpcAnswer;
          try {
            answer = await rawGrpcCall(via, input);
          } catch (err) {
            problems.push(`gRPC ${show(input)} → ${(err as Error).message}`);
            return;
          }
          grpcCodes[String(answer.grpcStatus)] = (grpcCodes[String(answer.grpcStatus)] ?? 0) + 1;
          tally(reasons, `gRPC ${answer.grpcStatus}: ${answer.grpcMessage ?? ''}`);
          const problem = judgeGrpc(answer, input, target.grpcErrors);
          if (problem !== undefined) problems.push(`gRPC ${show(input)} → ${problem}`);
        };
        await pool(
          grpcInputs.filter((b) => b.length <= BIG),
          async (input) => {
            if (session.closed || session.destroyed) {
              problems.push(`the server closed the HTTP/2 connection (before ${show(input)})`);
              session = connect(server);
            }
            await send(input, session);
          },
        );
        for (const input of big) {
          const own = connect(server);
          await send(input, own);
          own.destroy();
        }
        await pool(jsonInputs, async (body) => {
          let r: { status: number; body: string };
          try {
            r = await rawPost(server.httpPort, '/json', body);
          } catch (err) {
            problems.push(`POST /json ${JSON.stringify(body.subarray(0, 200).toString('latin1'))} → ${(err as Error).message}`);
            return;
          }
          httpCodes[r.status] = (httpCodes[r.status] ?? 0) + 1;
          tally(reasons, `HTTP ${r.status}: ${r.status === 400 ? r.body : ''}`);
          const problem = judgeJson(r, target.httpErrors);
          if (problem !== undefined) problems.push(`POST /json ${body.length} bytes ${JSON.stringify(body.subarray(0, 200).toString('latin1'))} → ${problem}`);
        });

        assert.equal(server.child.exitCode, null, 'the server exited');
        const rssAfter = await rss(server);
        t.diagnostic(
          `seed ${SEED}: ${grpcInputs.length} gRPC inputs (${big.length} over ${BIG} bytes; grpc-status counts ${JSON.stringify(grpcCodes)}), ${jsonInputs.length} JSON inputs (HTTP status counts ${JSON.stringify(httpCodes)}); RSS ${(rssBefore / 2 ** 20).toFixed(0)} → ${(rssAfter / 2 ** 20).toFixed(0)} MiB`,
        );
        const top = [...reasons].sort((a, b) => b[1] - a[1]).slice(0, 12);
        t.diagnostic(`most frequent answers: ${top.map(([r, n]) => `${n}× ${r.slice(0, 100)}`).join(' | ')}`);
        assert.ok(rssAfter - rssBefore < RSS_GROWTH_BOUND, `RSS grew by ${rssAfter - rssBefore} bytes`);

        // Still serves normal requests, over both transports.
        const end = await rawGrpcCall(session, encode(NORMAL));
        assert.equal(judgeGrpc(end, encode(NORMAL), []), undefined);
        const json = await rawPost(
          server.httpPort,
          '/json',
          JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'tenant', value: 'fuzz-end' }] }] }),
        );
        assert.equal(judgeJson(json, []), undefined);
        assert.equal(problems.length, 0, `${problems.length} bad answers, first ones:\n${problems.slice(0, 8).join('\n')}`);
      } finally {
        session.destroy();
        await server.stop();
      }
    });
  }
});
