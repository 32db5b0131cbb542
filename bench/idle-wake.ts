import Redis from 'ioredis';
import { startRedis } from '../test/support/redis';
import { percentile } from './fleet';

// What this machine charges a round trip for having been idle: one small script call from Node to
// a local redis-server (ioredis, as sluice's store), back to back and after idle gaps. At a few
// requests a second per process, as in the multi-region scenario, every decision finds the cores
// idle, and both processes of the round trip wait to be woken; the figures are the floor under any
// decision that reads Redis on such a machine.
export const IDLE_GAPS_MS = [0, 1, 10, 50] as const;
const CALLS = 300;

export interface IdleRow {
  gapMs: number;
  p50Ms: number;
  p99Ms: number;
}

export async function idleRoundTrips(): Promise<IdleRow[]> {
  const node = await startRedis();
  const client = new Redis({ port: node.port, lazyConnect: true });
  try {
    await client.connect();
    const script = "redis.call('TIME') return redis.call('GET', KEYS[1])";
    const rows: IdleRow[] = [];
    for (const gapMs of IDLE_GAPS_MS) {
      const ms: number[] = [];
      for (let i = 0; i < CALLS; i++) {
        if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
        const t0 = process.hrtime.bigint();
        await client.eval(script, 1, 'k');
        ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
      }
      ms.sort((a, b) => a - b);
      rows.push({ gapMs, p50Ms: percentile(ms, 50), p99Ms: percentile(ms, 99) });
    }
    return rows;
  } finally {
    client.disconnect();
    await node.stop();
  }
}

export function idleLine(rows: readonly IdleRow[]): string {
  return rows.map((r) => `${r.gapMs === 0 ? 'back to back' : `after ${r.gapMs} ms idle`} p50 ${r.p50Ms.toFixed(2)} / p99 ${r.p99Ms.toFixed(2)} ms`).join('; ');
}
