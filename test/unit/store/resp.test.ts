import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Command } from 'ioredis';
import type { LimitCheck } from '../../../src/store/store';
import { decideArgs, decideSpec, windowBase } from '../../../src/store/redis';
import { encodeCall, RespWriter } from '../../../src/store/resp';

// What ioredis itself writes for a command of these arguments: the reference.
function ioredisBytes(name: string, args: (string | number)[]): Buffer {
  const written = new Command(name, args).toWritable({});
  return Buffer.isBuffer(written) ? written : Buffer.from(written, 'utf8');
}

function written(name: string, args: (string | number)[], sizeHint = 16): Buffer {
  const w = new RespWriter(args.length + 1, sizeHint).text(name);
  for (const a of args) {
    if (typeof a === 'number') w.uint(a);
    else w.text(a);
  }
  return w.done();
}

describe('RESP written by sluice (decide calls)', () => {
  test('texts and numbers as ioredis writes them: ASCII, multi-byte, surrogate pairs, empty, long', () => {
    const cases: (string | number)[][] = [
      [],
      ['', 'a', 0, 7, 10, 99, 100, 4_294_967_295, Number.MAX_SAFE_INTEGER],
      ['sluice:{edge|tenant=acme}|route=/v1/pay|fixed_window:60000', 'fixed_window:10:60000:10:enforce', 1],
      ['é', 'tenant=zürich', '日本語のテナント', '😀', `a${'é'.repeat(4)}`, 'é'.repeat(5), 'é'.repeat(50), '日'.repeat(40)],
      ['x'.repeat(9), 'x'.repeat(10), 'é'.repeat(9) + 'x', 'x'.repeat(5000), '日'.repeat(3000)],
      [-1, 1.5, 1e21],
    ];
    for (const args of cases) {
      assert.deepEqual(written('fcall', args), ioredisBytes('fcall', args), JSON.stringify(args).slice(0, 80));
      // However small the first buffer, the bytes are the same.
      assert.deepEqual(written('fcall', args, 1), ioredisBytes('fcall', args));
    }
  });

  test('random texts of every kind of character', () => {
    let seed = 7;
    const rand = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed % n;
    };
    const pieces = ['a', 'Z', '|', '{', ' ', '\n', 'é', 'ß', '€', '日', '😀', '\u0000', '\u007f', '\u0080', '\u07ff', '\u0800', '\uffff'];
    for (let round = 0; round < 300; round++) {
      const args = Array.from({ length: 1 + rand(6) }, () => Array.from({ length: rand(40) }, () => pieces[rand(pieces.length)]).join(''));
      assert.deepEqual(written('fcall', args, 1 + rand(200)), ioredisBytes('fcall', args), JSON.stringify(args));
    }
  });

  test("a batch's decide call, written as bytes, is ioredis' FCALL of its argument list", () => {
    const check = (key: string, hits: number, over: Partial<LimitCheck> = {}): LimitCheck => ({
      key,
      algorithm: 'fixed_window',
      limit: 10,
      periodMs: 60_000,
      burst: 10,
      hits,
      mode: 'enforce',
      ...over,
    });
    const first = [
      check('sluice:{edge|tenant=acme}|fixed_window:60000', 1),
      check('sluice:{edge|tenant=acme}|route=/ü|sliding_window:1000', 3, { algorithm: 'sliding_window', mode: 'shadow' }),
    ];
    const second = [
      check('k', 0, { algorithm: 'token_bucket', burst: 50, mode: 'quota' }),
      check('sluice:{edge|tenant=日本}|fixed_window:60000', 1_000_000_000, { layout: 'upstream' }),
      check('sluice:{edge|ip=1}|fixed_window:1000', 2, { periodMs: 1000 }),
    ];
    const requests = [
      { all: first, idx: [0, 1] },
      { all: second, idx: [1] },
      { all: second, idx: [2, 0, 1] },
    ];
    const cases = [
      [false, '', 'request', undefined],
      [true, '1700000000123', 'group', undefined],
      [false, '', 'request', windowBase('sluice:')],
    ] as const;
    for (const [countDenied, time, scope, windows] of cases) {
      const [numKeys, args] = decideArgs(requests, countDenied, time, scope, windows);
      // Each key once, in order of first use (second[1] is in two requests); with window hashes,
      // fixed windows in sluice's layout first, period by period.
      const keys = windows === undefined ? [first[0], first[1], second[1], second[2], second[0]] : [first[0], second[2], first[1], second[1], second[0]];
      assert.deepEqual(
        args.slice(0, numKeys),
        keys.map((c) => c.key),
      );
      // Read back as decide.lua reads it: the window-hash groups (a spec and a number of keys
      // each), then each limit's key, spec and hits, request by request.
      const argv = args.slice(numKeys).map(String);
      const specs = argv.slice(5, 5 + Number(argv[4]));
      let a = 5 + specs.length;
      const groups: string[] = [];
      for (let g = Number(argv[a++]), from = 0; g > 0; g--, a += 2) {
        const count = Number(argv[a + 1]);
        groups.push(`${specs[Number(argv[a]) - 1]} ${args.slice(from, from + count).join(',')}`);
        from += count;
      }
      const spec = (c: LimitCheck) => decideSpec(c, windows);
      assert.deepEqual(groups, windows === undefined ? [] : [`${spec(first[0])} ${first[0].key}`, `${spec(second[2])} ${second[2].key}`]);
      if (windows !== undefined) assert.equal(spec(first[0]), `fixed_window_hash:10:60000:10:enforce:sluice:{}windows|fixed_window:60000|`);
      const read: string[][] = [];
      while (a < argv.length) {
        const n = Number(argv[a++]);
        const limits: string[] = [];
        for (let i = 0; i < n; i++, a += 2) {
          const ref = Number(argv[a]);
          const k = ((ref - 1) % numKeys) + 1;
          limits.push(`${String(args[k - 1])} ${specs[(ref - k) / numKeys]} ${argv[a + 1]}`);
        }
        read.push(limits);
      }
      assert.deepEqual(argv.slice(0, 4), [countDenied ? '1' : '0', time, scope, '3']);
      assert.deepEqual(
        read,
        requests.map((r) => r.idx.map((i) => `${r.all[i].key} ${spec(r.all[i])} ${r.all[i].hits}`)),
      );
      assert.deepEqual(encodeCall('FCALL', 'sluice_abc_decide', numKeys, args), ioredisBytes('FCALL', ['sluice_abc_decide', numKeys, ...args]));
    }
  });
});
