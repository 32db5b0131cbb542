import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BoundedMap } from '../../../src/store/bounded-map';

test('BoundedMap keeps at most its bound, the most recently written first, each key once', () => {
  const m = new BoundedMap<string, number>(1000);
  for (let i = 0; i < 10_000; i++) {
    m.set(`k${i}`, i);
    assert.ok(m.size <= 1000, `size ${m.size} past the bound at ${i}`);
  }
  // The latest half of the bound is always there; what is older than the bound never is.
  for (let i = 9_500; i < 10_000; i++) assert.equal(m.get(`k${i}`), i);
  for (let i = 0; i < 9_000; i++) assert.equal(m.get(`k${i}`), undefined);
  // A key written again is young again, with its latest value, and listed once.
  m.set('k9000', -1);
  for (let i = 0; i < 499; i++) m.set(`x${i}`, i);
  assert.equal(m.get('k9000'), -1);
  const values = [...m.values()];
  assert.equal(values.length, m.size);
  assert.equal(values.filter((v) => v === -1).length, 1);
  assert.ok(!values.includes(9000));
  m.delete('k9000');
  assert.equal(m.get('k9000'), undefined);
  m.clear();
  assert.equal(m.size, 0);
});

test('BoundedMap with a bound of 0 holds nothing', () => {
  const m = new BoundedMap<string, number>(0);
  m.set('a', 1);
  assert.equal(m.get('a'), undefined);
  assert.equal(m.size, 0);
});
