import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import Redis from 'ioredis';
import { type DelayProxy, startDelayProxy } from '../support/delay-proxy';
import { type RedisNode, startRedis, stopAll } from '../support/redis';

const DELAY_MS = 40;
const COMMAND_TIMEOUT_MS = 500;

function elapsedMs(since: bigint): number {
  return Number(process.hrtime.bigint() - since) / 1e6;
}

async function timed<T>(work: () => Promise<T>): Promise<number> {
  const t0 = process.hrtime.bigint();
  await work();
  return elapsedMs(t0);
}

function client(port: number): Redis {
  // A short fixed backoff so the reconnect after restore() is prompt. No ready check: its INFO would
  // time out on a cut link and turn the expected command timeout into a reconnect loop.
  return new Redis({
    host: '127.0.0.1',
    port,
    commandTimeout: COMMAND_TIMEOUT_MS,
    lazyConnect: true,
    enableReadyCheck: false,
    retryStrategy: () => 20,
    maxRetriesPerRequest: null,
  });
}

async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe(`delay proxy in front of redis-server, ${DELAY_MS} ms each way`, () => {
  let redis: RedisNode;
  let proxy: DelayProxy;
  let conn: Redis;

  before(async () => {
    redis = await startRedis();
    proxy = await startDelayProxy({ targetPort: redis.port, delayMs: DELAY_MS });
    conn = client(proxy.port);
    await conn.connect();
  });
  after(async () => {
    conn?.disconnect();
    await proxy?.close();
    await stopAll();
  });

  test('a PING round trip costs two one-way delays', async (t) => {
    const ms = await timed(() => conn.ping());
    t.diagnostic(`PING ${ms.toFixed(1)} ms`);
    assert.ok(ms >= 2 * DELAY_MS && ms < 400, `PING took ${ms.toFixed(1)} ms`);
  });

  test('20 pipelined PINGs share one delay instead of queueing behind each other', async (t) => {
    const ms = await timed(() => Promise.all(Array.from({ length: 20 }, () => conn.ping())));
    t.diagnostic(`20 PINGs ${ms.toFixed(1)} ms`);
    assert.ok(ms >= 2 * DELAY_MS && ms < 5 * DELAY_MS, `20 PINGs took ${ms.toFixed(1)} ms, serialised would be ${20 * 2 * DELAY_MS} ms`);
  });

  test('cut(): commands time out and no byte crosses the link', async () => {
    proxy.cut();
    const before = proxy.counters;
    const t0 = process.hrtime.bigint();
    await assert.rejects(conn.ping(), /timed out/i);
    assert.ok(elapsedMs(t0) >= COMMAND_TIMEOUT_MS - 5, 'a black hole, not a reset: the client waited for its timeout');
    const fresh = client(proxy.port);
    try {
      await assert.rejects(
        fresh.connect().then(() => fresh.ping()),
        /timed out/i,
      );
    } finally {
      fresh.disconnect();
    }
    const now = proxy.counters;
    assert.equal(now.bytesUp, before.bytesUp, 'bytes forwarded upstream while cut');
    assert.equal(now.bytesDown, before.bytesDown, 'bytes forwarded downstream while cut');
    assert.ok(now.connections > before.connections, 'the new connection was accepted');
  });

  test('restore(): the client reconnects and commands succeed', async () => {
    const connectionsBefore = proxy.counters.connections;
    proxy.restore();
    await waitUntil('a PING through the restored link', async () => (await conn.ping()) === 'PONG', 5000);
    assert.ok(proxy.counters.connections > connectionsBefore, 'the session that lived through the cut was replaced');
    assert.equal(await conn.set('k', 'v'), 'OK');
    assert.equal(await redis.cli('GET', 'k'), 'v');
  });

  test('setDelay(0) makes the link fast again', async () => {
    proxy.setDelay(0);
    await conn.ping();
    const ms = await timed(() => conn.ping());
    assert.ok(ms < DELAY_MS, `PING took ${ms.toFixed(1)} ms`);
    proxy.setDelay(DELAY_MS);
  });
});

describe('delay proxy scheduling', () => {
  test('each chunk is due at its own arrival + delay, in order', async () => {
    const echo = net.createServer((s) => s.pipe(s));
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    const proxy = await startDelayProxy({ targetPort: (echo.address() as net.AddressInfo).port, delayMs: DELAY_MS });
    const socket = net.connect(proxy.port, '127.0.0.1');
    socket.setNoDelay(true);
    try {
      await new Promise((r) => socket.once('connect', r));
      const arrivals: { at: number; text: string }[] = [];
      const t0 = process.hrtime.bigint();
      socket.on('data', (b: Buffer) => arrivals.push({ at: elapsedMs(t0), text: b.toString() }));
      for (const text of ['a', 'b', 'c', 'd']) {
        socket.write(text);
        await new Promise((r) => setTimeout(r, 10));
      }
      await waitUntil('4 echoed chunks', async () => arrivals.map((a) => a.text).join('').length === 4, 2000);
      assert.equal(arrivals.map((a) => a.text).join(''), 'abcd');
      const first = arrivals[0].at;
      const last = arrivals[arrivals.length - 1].at;
      assert.ok(first >= 2 * DELAY_MS, `first echo after ${first.toFixed(1)} ms`);
      // Sent ~30 ms apart; a per-chunk sleep in series would spread them over 4 round trips.
      assert.ok(last - first < 2 * DELAY_MS, `echoes spread over ${(last - first).toFixed(1)} ms`);
    } finally {
      socket.destroy();
      await proxy.close();
      await new Promise((r) => echo.close(r));
    }
  });
});
