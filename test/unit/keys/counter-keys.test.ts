import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { aggregateIp } from '../../../src/ip';
import { counterKey, escapeKeyPart, type KeyOptions, type KeyParts } from '../../../src/keys';

const opts: KeyOptions = { prefix: 'sluice:', hashTag: 'descriptor' };
const parts = (entries: [string, string][], over: Partial<KeyParts> = {}): KeyParts => ({
  domain: 'edge',
  entries: entries.map(([key, value]) => ({ key, value })),
  algorithm: 'fixed_window',
  periodMs: 60_000,
  ...over,
});

describe('counter keys', () => {
  test('layout: prefix, hash tag of domain and first entry, other entries, algorithm and period', () => {
    assert.equal(
      counterKey(
        parts([
          ['tenant', 'acme'],
          ['route', '/v1/pay'],
        ]),
        opts,
      ),
      'sluice:{edge|tenant=acme}|route=/v1/pay|fixed_window:60000',
    );
    assert.equal(counterKey(parts([['tenant', 'acme']]), { ...opts, hashTag: 'domain' }), 'sluice:{edge}|tenant=acme|fixed_window:60000');
    assert.equal(counterKey(parts([['tenant', 'acme']]), { ...opts, hashTag: 'none' }), 'sluice:edge|tenant=acme|fixed_window:60000');
    const three = parts([
      ['tenant', 'acme'],
      ['route', '/v1/pay'],
      ['method', 'GET'],
    ]);
    assert.equal(counterKey(three, opts), 'sluice:{edge|tenant=acme}|route=/v1/pay|method=GET|fixed_window:60000');
    assert.equal(counterKey(three, { ...opts, hashTag: 'domain' }), 'sluice:{edge}|tenant=acme|route=/v1/pay|method=GET|fixed_window:60000');
    assert.equal(counterKey(three, { ...opts, hashTag: 'none' }), 'sluice:edge|tenant=acme|route=/v1/pay|method=GET|fixed_window:60000');
  });

  test("descriptors that collide upstream ('a_b'='c' vs 'a'='b_c') get different keys", () => {
    assert.notEqual(counterKey(parts([['a_b', 'c']]), opts), counterKey(parts([['a', 'b_c']]), opts));
  });

  test('no two different descriptors share a key, whatever characters they carry', () => {
    const alphabet = ['a', '|', '=', '{', '}', '%', '7C', '_', ''];
    let seed = 3;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed / 2 ** 31);
    const word = () => Array.from({ length: Math.floor(rnd() * 4) }, () => alphabet[Math.floor(rnd() * alphabet.length)]).join('');
    const seen = new Map<string, string>();
    for (let i = 0; i < 20_000; i++) {
      const entries: [string, string][] = Array.from({ length: 1 + Math.floor(rnd() * 3) }, () => [word() || 'k', word()]);
      const domain = word() || 'd';
      const identity = JSON.stringify([domain, entries]);
      for (const hashTag of ['descriptor', 'domain', 'none'] as const) {
        const key = `${hashTag}:${counterKey(parts(entries, { domain }), { ...opts, hashTag })}`;
        const before = seen.get(key);
        assert.ok(before === undefined || before === identity, `${identity} and ${before} share ${key}`);
        seen.set(key, identity);
      }
    }
  });

  test('escaping is percent-encoding of the separators only', () => {
    assert.equal(escapeKeyPart('a|b=c{d}%e'), 'a%7Cb%3Dc%7Bd%7D%25e');
    assert.equal(escapeKeyPart('/v1/payments/checkout'), '/v1/payments/checkout');
  });
});

describe('value hashing', () => {
  const hashing = { secret: 's3cret', maxLength: 16, keys: new Set(['remote_address']) };
  test('long values and listed keys are replaced by a truncated HMAC', () => {
    const key = counterKey(
      parts([
        ['token', 'x'.repeat(17)],
        ['remote_address', '198.51.100.7'],
        ['short', 'ok'],
      ]),
      { ...opts, hashing },
    );
    const m = /^sluice:\{edge\|token=%h([\w-]{22})\}\|remote_address=%h([\w-]{22})\|short=ok\|/.exec(key);
    assert.ok(m, key);
    assert.notEqual(m[1], m[2]);
  });

  test('deterministic under one secret, different under another; never equal to a plain value', () => {
    const k = (secret: string) => counterKey(parts([['remote_address', '198.51.100.7']]), { ...opts, hashing: { ...hashing, secret } });
    assert.equal(k('a'), k('a'));
    assert.notEqual(k('a'), k('b'));
    const hashed = k('a');
    const mac = /remote_address=(%h[\w-]{22})/.exec(hashed)![1];
    const plain = counterKey(parts([['remote_address', mac]]), opts);
    assert.notEqual(plain, hashed);
  });
});

describe('IP prefix aggregation', () => {
  const p = { v4: 24, v6: 64 };
  test('IPv4 to /24, whether plain or already masked', () => {
    assert.equal(aggregateIp('198.51.100.7', p), '198.51.100.0/24');
    assert.equal(aggregateIp('198.51.100.0/24', p), '198.51.100.0/24');
    assert.equal(aggregateIp('198.51.100.7/32', p), '198.51.100.0/24');
    assert.equal(aggregateIp('198.51.0.0/16', p), '198.51.0.0/16');
    assert.equal(aggregateIp('10.1.2.3', { v4: 20, v6: 64 }), '10.1.0.0/20');
  });

  test('IPv6 to /64, canonical text', () => {
    assert.equal(aggregateIp('2001:db8:1:2:3:4:5:6', p), '2001:db8:1:2::/64');
    assert.equal(aggregateIp('2001:DB8::1', p), '2001:db8::/64');
    assert.equal(aggregateIp('2001:db8:abcd:12::/64', p), '2001:db8:abcd:12::/64');
    assert.equal(aggregateIp('fe80::1:2:3:4', { v4: 24, v6: 128 }), 'fe80::1:2:3:4/128');
  });

  test('anything else is left alone', () => {
    for (const v of ['unknown', '198.51.100', '2001:db8::g', 'a/b', '']) assert.equal(aggregateIp(v, p), v);
  });

  test('an IPv4-mapped IPv6 address is its IPv4 client, aggregated with the IPv4 prefix', () => {
    assert.equal(aggregateIp('::ffff:198.51.100.7', p), '198.51.100.0/24');
    assert.equal(aggregateIp('::FFFF:198.51.100.200', { v4: 24, v6: 120 }), '198.51.100.0/24');
    assert.equal(aggregateIp('::ffff:c633:6407', p), '198.51.100.0/24');
    assert.equal(aggregateIp('::ffff:198.51.100.0/120', p), '198.51.100.0/24');
    assert.equal(aggregateIp('::ffff:198.51.0.0/112', p), '198.51.0.0/16');
    const k = (ip: string) => counterKey(parts([['remote_address', ip]], { ipPrefix: p }), opts);
    assert.equal(k('::ffff:1.2.3.4'), k('1.2.3.77'));
    assert.notEqual(k('::ffff:1.2.3.4'), k('::ffff:5.6.7.8'));
  });

  test('an empty or invalid prefix leaves the value alone instead of widening it', () => {
    for (const v of ['1.2.3.4/', '1.2.3.4/-1', '1.2.3.4/33', '1.2.3.4/ 8', '1.2.3.4/8.0', '1.2.3.4/1e1', '2001:db8::1/', '2001:db8::1/129']) {
      assert.equal(aggregateIp(v, p), v, v);
    }
    const k = (ip: string) => counterKey(parts([['remote_address', ip]], { ipPrefix: p }), opts);
    assert.notEqual(k('1.2.3.4/'), k('9.9.9.9/0'));
  });

  test('the rule option groups a network in one counter key', () => {
    const k = (ip: string) => counterKey(parts([['remote_address', ip]], { ipPrefix: p }), opts);
    assert.equal(k('198.51.100.7'), k('198.51.100.200'));
    assert.notEqual(k('198.51.100.7'), k('198.51.101.7'));
    const other = counterKey(parts([['tenant', '198.51.100.7']], { ipPrefix: p }), opts);
    assert.match(other, /tenant=198\.51\.100\.7\}/);
  });
});
