import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { Command } from 'ioredis';
import type { LimitCheck } from '../src/store/store';
import { decideArgs, decideSpec } from '../src/store/redis';
import { encodeCall, RespWriter } from '../src/store/resp';

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
    const first = [check('sluice:{edge|tenant=acme}|fixed_window:60000', 1), check('sluice:{edge|tenant=acme}|route=/ü|sliding_window:1000', 3, { algorithm: 'sliding_window', mode: 'shadow' })];
    const second = [check('k', 0, { algorithm: 'token_bucket', burst: 50, mode: 'quota' }), check('sluice:{edge|tenant=日本}|fixed_window:60000', 1_000_000_000, { layout: 'upstream' })];
    const requests = [
      { all: first, idx: [0, 1] },
      { all: second, idx: [1] },
      { all: second, idx: [0, 1] },
    ];
    for (const [countDenied, time, scope] of [[false, '', 'request'], [true, '1700000000123', 'group']] as const) {
      const [numKeys, args] = decideArgs(requests, countDenied, time, scope);
      // Each key once, in order of first use (second[1] is in two requests).
      assert.deepEqual(args.slice(0, numKeys), [first[0].key, first[1].key, second[1].key, second[0].key]);
      // Read back as decide.lua reads it: each limit's key, spec and hits, request by request.
      const argv = args.slice(numKeys).map(String);
      const specs = argv.slice(5, 5 + Number(argv[4]));
      const read: string[][] = [];
      for (let a = 5 + specs.length; a < argv.length; ) {
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
      assert.deepEqual(read, requests.map((r) => r.idx.map((i) => `${r.all[i].key} ${decideSpec(r.all[i])} ${r.all[i].hits}`)));
      assert.deepEqual(encodeCall('FCALL', 'sluice_abc_decide', numKeys, args), ioredisBytes('FCALL', ['sluice_abc_decide', numKeys, ...args]));
    }
  });
});
