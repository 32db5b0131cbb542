import net from 'node:net';
import { performance } from 'node:perf_hooks';

// A TCP proxy that stands in for a WAN link between sluice and a remote Redis, on loopback.
//
//   const proxy = await startDelayProxy({ targetPort: redis.port, delayMs: 40 });
//   // connect to 127.0.0.1:proxy.port; every byte now takes 40 ms each way
//   proxy.cut();      // partition: a black hole, not a reset
//   proxy.restore();  // link back; sessions that lived through the cut are gone
//   await proxy.close();

export interface DelayProxyOptions {
  targetHost?: string;
  targetPort: number;
  // One way; a request/response round trip costs twice this.
  delayMs: number;
}

export interface DelayProxyCounters {
  // Accepted since start, including those accepted while cut.
  connections: number;
  open: number;
  // Bytes delivered client → target and target → client; dropped bytes are not counted.
  bytesUp: number;
  bytesDown: number;
}

export interface DelayProxy {
  port: number;
  readonly counters: DelayProxyCounters;
  readonly isCut: boolean;
  setDelay(ms: number): void;
  cut(): void;
  restore(): void;
  close(): Promise<void>;
}

const END = Symbol('end');

interface Queued {
  dueAt: number;
  item: Buffer | typeof END;
}

// One direction of one connection. Each chunk is due at its own arrival + delay, so a chunk that
// arrives 1 ms after another leaves ~1 ms after it, as on a real link; a sleep per chunk in series
// would instead add up the delays and make pipelining look as slow as ping-pong.
class Lane {
  private readonly queue: Queued[] = [];
  private timer: NodeJS.Timeout | undefined;
  private lastDue = 0;
  private ended = false;

  constructor(
    private readonly to: net.Socket,
    private readonly onDeliver: (bytes: number) => void,
  ) {}

  push(item: Buffer | typeof END, delayMs: number): void {
    if (this.ended) return;
    if (item === END) this.ended = true;
    // Never earlier than the chunk before it: after setDelay() lowers the delay, byte order still holds.
    const dueAt = Math.max(performance.now() + delayMs, this.lastDue);
    this.lastDue = dueAt;
    if (delayMs <= 0 && this.queue.length === 0) return this.deliver(item);
    this.queue.push({ dueAt, item });
    if (!this.timer) this.arm();
  }

  // Bytes in flight on a partitioned link never arrive.
  drop(): void {
    this.queue.length = 0;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    const head = this.queue[0];
    if (!head) return;
    this.timer = setTimeout(() => this.flush(), Math.max(0, Math.ceil(head.dueAt - performance.now())));
  }

  private flush(): void {
    this.timer = undefined;
    // Timers run off libuv's cached loop time and can fire a little early; re-arm rather than
    // deliver before the due time.
    const now = performance.now();
    while (this.queue.length > 0 && this.queue[0].dueAt <= now) this.deliver(this.queue.shift()!.item);
    this.arm();
  }

  private deliver(item: Buffer | typeof END): void {
    if (this.to.destroyed) return;
    if (item === END) {
      this.to.end();
      return;
    }
    this.to.write(item);
    this.onDeliver(item.length);
  }
}

interface Pair {
  client: net.Socket;
  upstream?: net.Socket;
  lanes: Lane[];
}

export function startDelayProxy(opts: DelayProxyOptions): Promise<DelayProxy> {
  const target = { host: opts.targetHost ?? '127.0.0.1', port: opts.targetPort };
  const state = { delayMs: opts.delayMs, cut: false };
  const counters: DelayProxyCounters = { connections: 0, open: 0, bytesUp: 0, bytesDown: 0 };
  const pairs = new Set<Pair>();

  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    counters.connections++;
    const pair = state.cut ? acceptDark(client) : connectPair(client, target, state, counters);
    pairs.add(pair);
    counters.open = pairs.size;
    client.once('close', () => {
      pairs.delete(pair);
      counters.open = pairs.size;
    });
  });

  const destroyAll = () => {
    for (const pair of pairs) destroyPair(pair);
  };

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port: 0 }, () => {
      server.off('error', reject);
      resolve({
        port: (server.address() as net.AddressInfo).port,
        get counters() {
          return { ...counters };
        },
        get isCut() {
          return state.cut;
        },
        setDelay(ms: number) {
          state.delayMs = ms;
        },
        cut() {
          state.cut = true;
          for (const pair of pairs) for (const lane of pair.lanes) lane.drop();
        },
        // A real partition outlasting TCP's retransmission timeout kills the sessions on both
        // ends; destroying them makes clients reconnect as they would then.
        restore() {
          state.cut = false;
          destroyAll();
        },
        close() {
          destroyAll();
          return new Promise<void>((done) => server.close(() => done()));
        },
      });
    });
  });
}

// Accepted while cut: the SYN got an answer from something (a load balancer, say) but nothing
// behind it ever will. Reading and discarding keeps the client's writes from erroring.
function acceptDark(client: net.Socket): Pair {
  client.on('data', () => undefined);
  client.on('error', () => undefined);
  return { client, lanes: [] };
}

function connectPair(client: net.Socket, target: { host: string; port: number }, state: { delayMs: number; cut: boolean }, counters: DelayProxyCounters): Pair {
  const upstream = net.connect({ ...target, allowHalfOpen: true });
  upstream.setNoDelay(true);
  client.setNoDelay(true);
  const up = new Lane(upstream, (n) => (counters.bytesUp += n));
  const down = new Lane(client, (n) => (counters.bytesDown += n));
  const pair: Pair = { client, upstream, lanes: [up, down] };
  wire({ from: client, lane: up, state, pair });
  wire({ from: upstream, lane: down, state, pair });
  return pair;
}

function wire(opts: { from: net.Socket; lane: Lane; state: { delayMs: number; cut: boolean }; pair: Pair }): void {
  const { from, lane, state, pair } = opts;
  from.on('data', (chunk: Buffer) => {
    if (!state.cut) lane.push(chunk, state.delayMs);
  });
  // A FIN travels the link like data, behind the bytes sent before it. A side that closes without
  // one (destroy() without error) is passed on as a FIN too, so the other side is not left open.
  const finish = () => {
    if (!state.cut) lane.push(END, state.delayMs);
  };
  from.on('end', finish);
  from.on('close', finish);
  // Neither a FIN nor an RST crosses a partition; while cut, the other side learns nothing until
  // restore() tears the session down.
  from.on('error', () => {
    if (!state.cut) destroyPair(pair);
  });
}

function destroyPair(pair: Pair): void {
  for (const lane of pair.lanes) lane.drop();
  pair.client.destroy();
  pair.upstream?.destroy();
}
