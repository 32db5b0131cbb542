import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ManualClock } from '../../../src/clock';
import { MemoryStore } from '../../../src/store/memory';
import type { LimitCheck } from '../../../src/store/store';
import { storeBehaviour } from '../../support/store-behaviour';

storeBehaviour('memory', (clock) => new MemoryStore({ clock }));

const c = (key: string): LimitCheck => ({
  key,
  algorithm: 'fixed_window',
  limit: 10,
  periodMs: 1000,
  burst: 10,
  hits: 1,
  mode: 'enforce',
});

test('memory store reclaims expired counters', async () => {
  const clock = new ManualClock(0);
  const store = new MemoryStore({ clock });
  for (let i = 0; i < 100; i++) await store.decide([c(`k${i}`)], { countDeniedHits: false });
  assert.equal(store.size, 100);
  clock.advance(999);
  assert.equal(store.sweep(), 0);
  clock.advance(1);
  assert.equal(store.sweep(), 100);
  assert.equal(store.size, 0);
  await store.close();
});

test('memory store at its key cap keeps every live counter and decides new keys approximately', async () => {
  const store = new MemoryStore({ clock: new ManualClock(0), maxKeys: 3 });
  for (const k of ['a', 'b', 'c']) await store.decide([c(k)], { countDeniedHits: false });
  await store.decide([c('a')], { countDeniedHits: false });
  const d = await store.decide([c('d')], { countDeniedHits: false });
  assert.equal(d.admitted, true);
  assert.equal(store.stats.overflowDecisions, 1);
  assert.equal(store.size, 3);
  assert.equal(store.has('b'), true);
  const a = await store.decide([c('a')], { countDeniedHits: false });
  assert.equal(a.outcomes[0].remaining, 7);
  await store.close();
});
