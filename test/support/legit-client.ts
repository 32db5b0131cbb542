import path from 'node:path';
import { Worker } from 'node:worker_threads';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { attackRequest } from './h2-attacks';

// A legitimate client beside an attack: ShouldRateLimit one call after another on its own
// connection, counting what was answered. It runs in a worker thread (legit-worker.ts), so that
// the attacker's loop in the main thread neither delays its calls nor inflates its latencies: what
// it sees is the server's doing.

export interface LegitOptions {
  port: number;
  // Envoy's default deadline is 20 ms; these machines are shared, so 1 s by default.
  deadlineMs?: number;
  // Between one answer and the next call.
  gapMs?: number;
}

export interface LegitStats {
  // Calls answered OK, and calls that failed (an error, or any other overall code).
  answered: number;
  failed: number;
  share: number;
  // Latency of every call, sorted, ms.
  latenciesMs: number[];
  // Why calls failed: message -> count.
  failures: Record<string, number>;
}

const LEGIT_REQUEST = attackRequest('legit');

// Its own connection: no subchannel shared with other clients of this process.
const newClient = (port: number) => new RateLimitServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });

// One ShouldRateLimit call: undefined when answered OK, else why not.
function callOnce(client: RateLimitServiceClient, deadlineMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    client.shouldRateLimit(LEGIT_REQUEST, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (err, response) =>
      resolve(err ? failure(err) : response.overallCode === Code.OK ? undefined : Code[response.overallCode]),
    );
  });
}

// An error as a key to count failures by: grpc-js' details without its timings and addresses.
function failure(err: grpc.ServiceError): string {
  return `${grpc.status[err.code]}: ${err.details.split(',')[0].replace(/ after [\d.]+s$/, '')}`;
}

// Whether a new client on a new connection is answered OK now: undefined if so, else why not.
export async function answersNow(port: number): Promise<string | undefined> {
  const client = newClient(port);
  try {
    return await callOnce(client, 2_000);
  } finally {
    client.close();
  }
}

// The calls, in the thread that runs them.
export class LegitLoop {
  private readonly client: RateLimitServiceClient;
  private running = true;
  private readonly done: Promise<void>;
  private answered = 0;
  private failed = 0;
  private readonly latencies: number[] = [];
  private readonly failures: Record<string, number> = {};
  // Resolves after the first call (answered or not).
  readonly ready: Promise<void>;
  private readied!: () => void;

  constructor(private readonly o: LegitOptions) {
    this.client = newClient(o.port);
    this.ready = new Promise((r) => (this.readied = r));
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      const start = performance.now();
      const outcome = await callOnce(this.client, this.o.deadlineMs ?? 1_000);
      this.latencies.push(performance.now() - start);
      if (outcome === undefined) this.answered++;
      else {
        this.failed++;
        this.failures[outcome] = (this.failures[outcome] ?? 0) + 1;
      }
      this.readied();
      await new Promise((r) => setTimeout(r, this.o.gapMs ?? 2));
    }
  }

  async stop(): Promise<LegitStats> {
    this.running = false;
    await this.done;
    this.client.close();
    const total = this.answered + this.failed;
    return {
      answered: this.answered,
      failed: this.failed,
      share: total === 0 ? 0 : this.answered / total,
      latenciesMs: this.latencies.sort((a, b) => a - b),
      failures: this.failures,
    };
  }
}

// The loop in a worker thread: `ready` once its first call is done, `stop()` ends it.
export class LegitClient {
  readonly ready: Promise<void>;
  private readonly worker: Worker;
  private stats: Promise<LegitStats> | undefined;

  constructor(o: LegitOptions) {
    this.worker = new Worker(path.join(__dirname, 'legit-worker.js'), { workerData: o });
    this.ready = new Promise((resolve, reject) => {
      this.worker.once('message', () => resolve());
      this.worker.once('error', reject);
    });
  }

  stop(): Promise<LegitStats> {
    this.stats ??= new Promise((resolve, reject) => {
      this.worker.on('message', (m: LegitStats | 'ready') => m !== 'ready' && resolve(m));
      this.worker.once('error', reject);
      this.worker.postMessage('stop');
    });
    return this.stats;
  }
}
