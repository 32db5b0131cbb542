import { Redis } from 'ioredis';
import { counterKey } from '../src/keys';
import type { Algorithm } from '../src/model';
import { silentEvents } from '../src/store/events';
import { RedisStore } from '../src/store/redis';
import { startRedis } from '../test/support/redis';

// Bytes per counter in Redis, two ways: MEMORY USAGE of sample keys (what the key itself costs)
// and the growth of used_memory over many keys (including the keyspace's own overhead).
// Each counter takes half its budget so that bucket keys (which expire once refilled) stay put.
// Keys are sluice's own (counterKey), padded to KEY_BYTES so that rows compare across algorithms.
export const KEY_BYTES = 40;

function keyOfLength(algorithm: Algorithm, i: number, bytes: number): string {
  const make = (value: string) =>
    counterKey({ domain: 'edge', entries: [{ key: 'user', value }], algorithm, periodMs: 60_000 }, { prefix: 'sluice:', hashTag: 'descriptor' });
  const id = String(i);
  const pad = Math.max(0, bytes - make(id).length);
  return make(id.padStart(id.length + pad, '0'));
}
const ALGORITHMS: Algorithm[] = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];

async function usedMemory(client: Redis): Promise<number> {
  const info = await client.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1]);
}

// Per algorithm (fixed windows with a key each, WINDOW_COUNTERS=keys), then fixed windows as
// fields of their window's hash (WINDOW_COUNTERS=hash, the default): MEMORY USAGE of the key, or
// of the whole hash divided among its fields, and used_memory's growth per counter.
export async function redisMemory(count = 20_000): Promise<{ layout: string; memoryUsage: number; usedMemoryPerKey: number; sampleKey: string }[] | string> {
  let node: Awaited<ReturnType<typeof startRedis>>;
  try {
    node = await startRedis();
  } catch (err) {
    return `skipped: ${(err as Error).message}`;
  }
  const client = new Redis({ port: node.port, host: '127.0.0.1' });
  const stores = [false, true].map(
    (windowHashes) => new RedisStore({ clients: [client], cluster: false, events: silentEvents, keyPrefix: 'sluice:', windowHashes }),
  );
  const rows = [];
  try {
    for (const [algorithm, windowHashes] of [...ALGORITHMS.map((a) => [a, false] as const), ['fixed_window', true] as const]) {
      const store = stores[windowHashes ? 1 : 0];
      await client.flushall();
      const before = await usedMemory(client);
      const keys: string[] = [];
      for (let i = 0; i < count; i += 500) {
        const batch = Array.from({ length: 500 }, (_, j) => {
          const key = keyOfLength(algorithm, i + j, KEY_BYTES);
          keys.push(key);
          return store.decide([{ key, algorithm, limit: 1000, periodMs: 60_000, burst: 1000, hits: 500, mode: 'enforce' }], { countDeniedHits: false });
        });
        await Promise.all(batch);
      }
      const after = await usedMemory(client);
      let memoryUsage = 0;
      if (windowHashes) {
        const hashes = await client.keys('sluice:{}windows|*');
        for (const h of hashes) memoryUsage += Number(await client.memory('USAGE', h, 'SAMPLES', 0));
        memoryUsage /= count;
      } else {
        for (const key of keys.slice(0, 100)) memoryUsage += Number(await client.memory('USAGE', key));
        memoryUsage /= 100;
      }
      rows.push({ layout: windowHashes ? `${algorithm} (hash)` : algorithm, memoryUsage, usedMemoryPerKey: (after - before) / count, sampleKey: keys[0] });
    }
    return rows;
  } finally {
    for (const store of stores) await store.close();
    await node.stop();
  }
}
