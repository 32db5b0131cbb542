import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, test } from 'node:test';
import { Cluster } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { silentEvents } from '../../src/store/events';
import { RedisStore } from '../../src/store/redis';
import { requireRedisBinaries, startCluster, stopAll } from '../support/redis';

// Slots moving between primaries while requests flow: keys migrate (ASK/TRYAGAIN), then the slot
// map changes (MOVED). The client follows every redirection; no decision may fail or be lost.

after(() => stopAll());

test('resharding during traffic: no failed decision, no lost count', async () => {
  const cluster = await startCluster();
  const primaries = await cluster.primaries();
  const id = async (port: number) => (await primaries.find((p) => p.port === port)!.cli('CLUSTER', 'MYID')).trim();
  const from = await id(primaries[0].port);
  const to = await id(primaries[1].port);
  const client = new Cluster([{ host: '127.0.0.1', port: primaries[0].port }], {
    retryDelayOnTryAgain: 20,
    retryDelayOnMoved: 0,
    maxRedirections: 32,
  });
  await new Promise((r) => client.once('ready', r));
  const store = new RedisStore({ clients: [client], cluster: true, events: silentEvents, keyPrefix: 'test:' });
  const keys = Array.from({ length: 50 }, (_, i) => `reshard:{k${i}}`);
  // Port of the primary serving each key's slot, from CLUSTER SLOTS.
  const owners = async () => {
    const slots = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
    return keys.map((k) => slots.find(([lo, hi]) => calculateSlot(k) >= lo && calculateSlot(k) <= hi)?.[2][1]);
  };
  const ownersBefore = await owners();
  let failures = 0;
  let admitted = 0;
  let running = true;
  const traffic = (async () => {
    while (running) {
      const batch = Array.from({ length: 50 }, (_, i) =>
        store
          .decide([{ key: keys[i], algorithm: 'fixed_window', limit: 1e9, periodMs: 3_600_000, burst: 1e9, hits: 1, mode: 'enforce' }], {
            countDeniedHits: false,
          })
          .then(
            (d) => (admitted += d.admitted ? 1 : 0),
            () => failures++,
          ),
      );
      await Promise.all(batch);
    }
  })();
  try {
    await promisify(execFile)(requireRedisBinaries().cli, [
      '--cluster',
      'reshard',
      `127.0.0.1:${primaries[0].port}`,
      '--cluster-from',
      from,
      '--cluster-to',
      to,
      '--cluster-slots',
      '3000',
      '--cluster-yes',
      '--cluster-pipeline',
      '10',
    ]);
  } finally {
    running = false;
    await traffic;
  }
  assert.equal(failures, 0);
  const ownersAfter = await owners();
  const moved = keys.filter((_, i) => ownersBefore[i] !== ownersAfter[i]).length;
  assert.ok(moved >= 5, `only ${moved} of the keys changed primary`);
  // Every admitted hit is in Redis: the counters add up to the admitted total.
  let counted = 0;
  for (let i = 0; i < 50; i++) {
    const raw = await client.get(keys[i]);
    counted += raw === null ? 0 : Number(raw.split(':')[1]);
  }
  assert.equal(counted, admitted);
  assert.ok(admitted > 500, `only ${admitted} decisions during the reshard`);
  await store.close();
});
