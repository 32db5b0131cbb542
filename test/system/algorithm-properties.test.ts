import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { ManualClock } from '../../src/clock';
import { ALGORITHM_IMPLS, type State } from '../../src/algorithms';
import type { Algorithm, LimitMode } from '../../src/model';
import { silentEvents } from '../../src/store/events';
import { MemoryStore } from '../../src/store/memory';
import { RedisStore } from '../../src/store/redis';
import { WireCommand } from '../../src/store/resp';
import type { Decision, LimitCheck } from '../../src/store/store';
import { startRedis, stopAll } from '../support/redis';
import { referenceModel, TICKS_PER_MS, type ModelSpec } from '../support/reference-models';

// Property-based tests (fast-check), seeded so that CI runs the same cases every time. A failure
// prints the shrunk counterexample and the seed/path to replay it; SLUICE_FC_SEED and
// SLUICE_FC_RUNS override the defaults to explore further.
//
// (a) each algorithm, as the memory store drives it (state written only when admitted, dropped
//     after its TTL), against an exact reference model of its definition;
// (b) the memory and Redis stores give identical answers to random multi-limit traces;
// (c) all-or-nothing: a denied request changes no counter, in either store.

const SEED = Number(process.env.SLUICE_FC_SEED ?? 20_261_201);
const RUNS = Number(process.env.SLUICE_FC_RUNS ?? 0);
const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];

// ---- times: ticks of 1/4096 ms (see support/reference-models.ts) ----

type Gap =
  | { k: 'zero' }
  | { k: 'ms'; n: number }
  | { k: 'ticks'; n: number }
  | { k: 'edge'; d: number; ms: boolean }
  | { k: 'part'; n: number }
  | { k: 'periods'; n: number };

const gapArb: fc.Arbitrary<Gap> = fc.oneof(
  { arbitrary: fc.constant({ k: 'zero' as const }), weight: 3 },
  { arbitrary: fc.record({ k: fc.constant('ms' as const), n: fc.integer({ min: 1, max: 2_000 }) }), weight: 3 },
  { arbitrary: fc.record({ k: fc.constant('ticks' as const), n: fc.integer({ min: 1, max: 2 * TICKS_PER_MS }) }), weight: 1 },
  // To the next window edge of the period, give or take a few ticks or ms.
  { arbitrary: fc.record({ k: fc.constant('edge' as const), d: fc.integer({ min: -3, max: 3 }), ms: fc.boolean() }), weight: 3 },
  // A random share of the period, in ms.
  { arbitrary: fc.record({ k: fc.constant('part' as const), n: fc.integer({ min: 1, max: 1_000 }) }), weight: 2 },
  { arbitrary: fc.record({ k: fc.constant('periods' as const), n: fc.integer({ min: 1, max: 3 }) }), weight: 1 },
);

function gapTicks(gap: Gap, nowTicks: number, periodMs: number): number {
  const p = periodMs * TICKS_PER_MS;
  switch (gap.k) {
    case 'zero':
      return 0;
    case 'ms':
      return gap.n * TICKS_PER_MS;
    case 'ticks':
      return gap.n;
    case 'edge': {
      const toEdge = (Math.floor(nowTicks / p) + 1) * p - nowTicks;
      return Math.max(0, toEdge + gap.d * (gap.ms ? TICKS_PER_MS : 1));
    }
    case 'part':
      return Math.floor((periodMs * gap.n) / 1_000) * TICKS_PER_MS;
    case 'periods':
      return gap.n * p;
  }
}

// Near zero, or epoch-scale (2020-2036) with a sub-ms part; always a whole number of ticks below
// 2^53, so ticks / TICKS_PER_MS is an exact double.
const startTicksArb = fc.oneof(
  fc.integer({ min: 0, max: 10_000_000 }).map((ms) => ms * TICKS_PER_MS),
  fc
    .tuple(fc.integer({ min: 1_600_000_000_000, max: 2_100_000_000_000 }), fc.oneof(fc.constant(0), fc.integer({ min: 0, max: TICKS_PER_MS - 1 })))
    .map(([ms, frac]) => ms * TICKS_PER_MS + frac),
);

const periodArb = fc.oneof(fc.constantFrom(1_000, 60_000, 300_000, 3_600_000, 86_400_000, 31_536_000_000), fc.integer({ min: 1, max: 5_000 }));
const limitArb = fc.oneof({ arbitrary: fc.integer({ min: 0, max: 6 }), weight: 3 }, { arbitrary: fc.integer({ min: 1, max: 1_000 }), weight: 1 });
const hitsArb = fc.oneof(
  { arbitrary: fc.constant(0), weight: 1 },
  { arbitrary: fc.integer({ min: 1, max: 3 }), weight: 4 },
  { arbitrary: fc.integer({ min: 0, max: 1_100 }), weight: 1 },
);

function specArb(algorithm: Algorithm): fc.Arbitrary<ModelSpec> {
  const bursty = algorithm === 'token_bucket' || algorithm === 'gcra';
  return fc
    .record({ limit: limitArb, periodMs: periodArb, burst: fc.oneof(fc.integer({ min: 0, max: 8 }), fc.integer({ min: 0, max: 1_500 })) })
    .map(({ limit, periodMs, burst }) => ({ algorithm, limit, periodMs, burst: bursty ? burst : limit }));
}

function runs(fallback: number): number {
  return RUNS > 0 ? RUNS : fallback;
}

// ---- (a) algorithms against their reference models ----

describe('(a) every algorithm admits exactly what its definition admits', () => {
  for (const algorithm of ALGORITHMS) {
    test(algorithm, (t) => {
      const numRuns = runs(400);
      let steps = 0;
      const property = fc.property(
        specArb(algorithm),
        startTicksArb,
        fc.array(fc.record({ gap: gapArb, hits: hitsArb }), { minLength: 1, maxLength: 60, size: 'medium' }),
        (spec, startTicks, trace) => {
          const impl = ALGORITHM_IMPLS[algorithm];
          const model = referenceModel(spec);
          let ticks = startTicks;
          // As MemoryStore keeps it: written only when admitted, gone once its TTL has passed.
          let state: State | undefined;
          let expiresAt = 0;
          trace.forEach(({ gap, hits }, i) => {
            steps++;
            ticks += gapTicks(gap, ticks, spec.periodMs);
            const now = ticks / TICKS_PER_MS;
            if (state !== undefined && expiresAt <= now) state = undefined;
            const verdict = impl.decide(state, spec, hits, now);
            const admissible = model.take(BigInt(ticks), hits);
            if (verdict.allowed !== admissible) {
              const what = admissible ? 'denied an admissible request' : 'admitted a request its definition denies';
              throw new Error(`${algorithm} ${what} at step ${i}: now=${now} hits=${hits} state=${JSON.stringify(state)}`);
            }
            if (verdict.allowed && verdict.next !== undefined) {
              state = verdict.next;
              expiresAt = now + impl.ttlMs(state, spec, now);
            }
          });
        },
      );
      try {
        fc.assert(property, { seed: SEED, numRuns, includeErrorInReport: true });
      } finally {
        t.diagnostic(`seed ${SEED}, ${numRuns} runs, ${steps} decisions (incl. shrinking)`);
      }
    });
  }
});

// ---- (b) + (c) memory and Redis stores on random traces ----

interface Rule {
  algorithm: Algorithm;
  limit: number;
  periodMs: number;
  burst: number;
}

type Step =
  | { k: 'decide'; gap: Gap; countDeniedHits: boolean; checks: { rule: number; hits: number; mode: LimitMode }[] }
  | { k: 'reload'; rule: number; limit: number; burst: number };

const ruleArb: fc.Arbitrary<Rule> = fc.record({
  algorithm: fc.constantFrom(...ALGORITHMS),
  limit: fc.integer({ min: 0, max: 6 }),
  periodMs: fc.constantFrom(7, 1_000, 2_000, 60_000, 86_400_000, 31_536_000_000),
  burst: fc.integer({ min: 0, max: 8 }),
});

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 12,
    arbitrary: fc.record({
      k: fc.constant('decide' as const),
      gap: gapArb,
      countDeniedHits: fc.oneof({ arbitrary: fc.constant(false), weight: 3 }, { arbitrary: fc.constant(true), weight: 1 }),
      // rule indexes are taken modulo the run's rule count; the same rule twice in one request is
      // the "same key twice" case.
      checks: fc.array(
        fc.record({
          rule: fc.nat({ max: 5 }),
          hits: fc.integer({ min: 0, max: 4 }),
          mode: fc.constantFrom<LimitMode>('enforce', 'enforce', 'shadow', 'quota'),
        }),
        { minLength: 1, maxLength: 4 },
      ),
    }),
  },
  // A config reload: the rule's limit (and burst) change; its counter key stays.
  {
    weight: 1,
    arbitrary: fc.record({
      k: fc.constant('reload' as const),
      rule: fc.nat({ max: 5 }),
      limit: fc.integer({ min: 0, max: 6 }),
      burst: fc.integer({ min: 0, max: 8 }),
    }),
  },
);

// Redis expires keys in its own (real) time while these tests drive an explicit clock: a key written
// 1 ms before its window ends would vanish before the next request at the same explicit instant,
// and the stores would differ for a reason production never has. So the store's connection runs
// each decide script in one MULTI with GET, PTTL and PERSIST of its keys (no other command runs in
// between, and the transaction takes far less than the 1 ms shortest TTL); the test then expires
// keys in explicit time, at the TTL the script set, as Redis would have in its own time.
class ExpiryBridge {
  readonly target: Redis;
  readonly client: Redis;
  // The keys of the last (non-peek) decision: value and PTTL right after the script.
  lastWrite = new Map<string, { raw: string | null; pttl: number }>();
  // Real time the last decision's transaction took, ms (an upper bound of the time inside Redis).
  lastWriteMs = 0;

  constructor(conn: Redis) {
    this.target = conn;
    // The store calls its decide function as fcall(name, numKeys, args) (peek), or sends it as a
    // command it wrote itself (decide, on one Redis: store/resp.ts); everything else passes.
    const fcall = (name: string, numKeys: number, args: unknown[]) =>
      /_decide$/.test(name) ? this.decide(name, numKeys, args) : conn.fcall(name, numKeys, ...(args as string[]));
    const sendCommand = (command: WireCommand, stream?: never) => {
      if (!(command instanceof WireCommand)) return conn.sendCommand(command, stream);
      const [, name, numKeys, ...args] = respArray(command.toWritable());
      if (!/_decide$/.test(name)) return conn.sendCommand(command, stream);
      this.decide(name, Number(numKeys), args).then(command.resolve, command.reject);
      return command.promise;
    };
    this.client = new Proxy(conn, {
      get(target, prop) {
        if (prop === 'fcall') return fcall;
        if (prop === 'sendCommand') return sendCommand;
        const v = Reflect.get(target, prop, target) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
  }

  private async decide(name: string, numKeys: number, args: unknown[]): Promise<unknown> {
    const keys = [...new Set(args.slice(0, numKeys).map(String))];
    const m = this.target.multi() as unknown as Record<string, (...a: unknown[]) => unknown> & { exec(): Promise<[Error | null, unknown][] | null> };
    m.fcall(name, numKeys, args);
    for (const k of keys) m.get(k), m.pttl(k), m.persist(k);
    const started = performance.now();
    const replies = (await m.exec()) ?? [];
    const tookMs = performance.now() - started;
    for (const [err] of replies) if (err) throw err;
    if (args[numKeys + 2] !== 'peek') {
      this.lastWriteMs = tookMs;
      this.lastWrite = new Map(keys.map((k, j) => [k, { raw: replies[1 + 3 * j][1] as string | null, pttl: replies[2 + 3 * j][1] as number }]));
    }
    return replies[0][1];
  }
}

// The texts of a RESP array of bulk strings (a command as written to Redis).
function respArray(bytes: Buffer): string[] {
  const line = (from: number): [string, number] => {
    const end = bytes.indexOf('\r\n', from);
    return [bytes.toString('latin1', from, end), end + 2];
  };
  let [head, at] = line(0);
  assert.equal(head[0], '*');
  const out: string[] = [];
  const count = Number(head.slice(1));
  for (let i = 0; i < count; i++) {
    [head, at] = line(at);
    assert.equal(head[0], '$');
    const n = Number(head.slice(1));
    out.push(bytes.toString('utf8', at, at + n));
    at += n + 2;
  }
  assert.equal(at, bytes.length);
  return out;
}

function withoutTime(d: Decision): Omit<Decision, 'storeTimeMs'> {
  const { storeTimeMs: _, ...rest } = d;
  return rest;
}

describe('(b) memory and Redis stores agree on random traces; (c) a denied request changes no counter', () => {
  let port = 0;
  before(async () => {
    port = (await startRedis()).port;
  });
  after(() => stopAll());

  test('random traces', async (t) => {
    const clock = new ManualClock(0);
    const bridge = new ExpiryBridge(new Redis({ port, host: '127.0.0.1' }));
    const conn = bridge.target;
    const redis = new RedisStore({ clients: [bridge.client], cluster: false, explicitClock: clock, events: silentEvents, keyPrefix: 'p:' });
    await new Promise<void>((resolve) => (conn.status === 'ready' ? resolve() : conn.once('ready', () => resolve())));
    // Loads the function library (outside the MULTI the bridge wraps decisions in).
    await redis.peek([{ key: 'p:warm', algorithm: 'fixed_window', limit: 1, periodMs: 1000, burst: 1, hits: 0, mode: 'enforce' }], { countDeniedHits: false });
    const numRuns = runs(100);
    const counts = { runs: 0, decisions: 0, denied: 0, deniedChecked: 0, reloads: 0, multiKey: 0, sameKeyTwice: 0, keptExpiry: 0 };
    let run = 0;
    const property = fc.asyncProperty(
      fc.array(ruleArb, { minLength: 1, maxLength: 4 }),
      startTicksArb,
      fc.array(stepArb, { minLength: 1, maxLength: 40, size: 'medium' }),
      async (rulesIn, startTicks, steps) => {
        counts.runs++;
        const rules = rulesIn.map((r) => ({ ...r }));
        const keyOf = (i: number) => `p:{r${run}}k${i}`;
        run++;
        let ticks = startTicks;
        clock.set(ticks / TICKS_PER_MS);
        const memory = new MemoryStore({ clock });
        // Explicit-time expiry of the Redis keys (see ExpiryBridge).
        const expiry = new Map<string, number>();
        try {
          for (const [n, step] of steps.entries()) {
            if (step.k === 'reload') {
              counts.reloads++;
              Object.assign(rules[step.rule % rules.length], { limit: step.limit, burst: step.burst });
              continue;
            }
            ticks += gapTicks(step.gap, ticks, rules[n % rules.length].periodMs);
            const now = ticks / TICKS_PER_MS;
            clock.set(now);
            for (const [key, at] of expiry) {
              if (at <= now) {
                await conn.del(key);
                expiry.delete(key);
              }
            }
            const checks: LimitCheck[] = step.checks.map((c) => ({
              ...rules[c.rule % rules.length],
              key: keyOf(c.rule % rules.length),
              hits: c.hits,
              mode: c.mode,
            }));
            const keys = [...new Set(checks.map((c) => c.key))];
            if (keys.length > 1) counts.multiKey++;
            if (keys.length < checks.length) counts.sameKeyTwice++;
            const opts = { countDeniedHits: step.countDeniedHits };
            const rawBefore = await conn.mget(...keys);
            const peekMemory = withoutTime(await memory.peek(checks, opts));
            const peekRedis = withoutTime(await redis.peek(checks, opts));
            const where = `step ${n} at ${now}: ${JSON.stringify(checks)} ${JSON.stringify(opts)}`;
            assert.deepEqual(peekRedis, peekMemory, `peek differs, ${where}`);

            const fromRedis = await redis.decide(checks, opts);
            const after = bridge.lastWrite;
            const fromMemory = await memory.decide(checks, opts);
            counts.decisions++;
            assert.equal(fromRedis.storeTimeMs, now);
            assert.deepEqual(withoutTime(fromRedis), withoutTime(fromMemory), `decide differs, ${where}`);
            // The explain endpoint's promise: peek says what decide then does.
            assert.equal(peekMemory.admitted, fromMemory.admitted, `peek mispredicts, ${where}`);
            assert.deepEqual(
              peekMemory.outcomes.map((o) => o.allowed),
              fromMemory.outcomes.map((o) => o.allowed),
              `peek mispredicts, ${where}`,
            );

            // The TTL the script set is the TS algorithm's (PTTL read in the same transaction).
            const rawAfter = keys.map((key) => after.get(key)?.raw ?? null);
            keys.forEach((key) => {
              const last = [...checks.keys()].filter((i) => checks[i].key === key && fromRedis.outcomes[i].consumed).pop();
              if (last === undefined) return;
              const seen = after.get(key);
              assert.ok(seen?.raw != null, `consumed ${key} but it is gone, ${where}`);
              const state = seen.raw.split(':').map(Number);
              const ttl = Math.ceil(ALGORITHM_IMPLS[checks[last].algorithm].ttlMs(state, checks[last], now));
              // Redis 7.0 samples its clock per command even inside MULTI, so PTTL may have lost
              // up to the transaction's real duration (+1 for ms rounding) since the script's SET.
              const slack = Math.ceil(bridge.lastWriteMs) + 1;
              if (seen.pttl === -1) {
                // The write kept the key's expiry (SET KEEPTTL: a window written again within the
                // window), which the bridge had persisted: the one set before must be the instant
                // the algorithm gives now, but for the whole ms each write rounds its TTL up to (a
                // kept expiry of another window would be at least a TTL early).
                const kept = expiry.get(key);
                counts.keptExpiry++;
                assert.ok(kept !== undefined && Math.abs(kept - (now + ttl)) < 1, `${key}: kept its expiry at ${kept}, algorithm says ${now + ttl}, ${where}`);
              } else {
                assert.ok(seen.pttl <= ttl && seen.pttl >= ttl - slack, `${key}: Redis TTL ${seen.pttl}, algorithm TTL ${ttl} (slack ${slack} ms), ${where}`);
                expiry.set(key, now + ttl);
              }
            });

            if (fromMemory.admitted || opts.countDeniedHits) continue;
            // (c) all-or-nothing, in both stores.
            counts.denied++;
            for (const d of [fromMemory, fromRedis])
              assert.ok(
                d.outcomes.every((o) => !o.consumed),
                `denied but consumed, ${where}`,
              );
            assert.deepEqual(rawAfter, rawBefore, `denied request changed Redis counters, ${where}`);
            assert.deepEqual(withoutTime(await memory.peek(checks, opts)), peekMemory, `denied request changed memory counters, ${where}`);
            assert.deepEqual(withoutTime(await redis.peek(checks, opts)), peekRedis, `denied request changed Redis counters (peek), ${where}`);
            counts.deniedChecked++;
          }
        } finally {
          await memory.close();
        }
      },
    );
    try {
      await fc.assert(property, { seed: SEED, numRuns, includeErrorInReport: true });
    } finally {
      t.diagnostic(`seed ${SEED}, ${numRuns} runs; executed (incl. shrinking): ${JSON.stringify(counts)}`);
      await redis.close();
    }
    assert.ok(counts.deniedChecked > 50, `only ${counts.deniedChecked} denied requests checked for all-or-nothing`);
    assert.ok(counts.keptExpiry > 50, `only ${counts.keptExpiry} writes kept their key's expiry`);
  });
});
