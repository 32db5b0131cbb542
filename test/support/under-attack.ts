import fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { RateLimitResponse_Code as Code, RateLimitServiceClient } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { type AttackResult, attackRequest } from './h2-attacks';

// What runs beside an attack (test/support/h2-attacks.ts): a legitimate client on its own
// connection, calling ShouldRateLimit one call after another, and a sampler of the server
// process' resident memory.

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

// One ShouldRateLimit call: undefined when answered OK, else why not.
function callOnce(client: RateLimitServiceClient, deadlineMs: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    client.shouldRateLimit(LEGIT_REQUEST, new grpc.Metadata(), { deadline: Date.now() + deadlineMs }, (err, response) =>
      resolve(err ? `${grpc.status[err.code]}: ${err.details}` : response.overallCode === Code.OK ? undefined : Code[response.overallCode]),
    );
  });
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

// Its own connection: no subchannel shared with other clients of this process.
const newClient = (port: number) => new RateLimitServiceClient(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });

export class LegitClient {
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

  // Envoy's default deadline is 20 ms; these machines are shared, so 1 s.
  constructor(port: number, private readonly o: { deadlineMs?: number; gapMs?: number } = {}) {
    this.client = newClient(port);
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
    return { answered: this.answered, failed: this.failed, share: total === 0 ? 0 : this.answered / total, latenciesMs: this.latencies.sort((a, b) => a - b), failures: this.failures };
  }
}

// Resident memory of a process, MiB: sampled every `everyMs`, the peak kept.
export class RssSampler {
  peakMb = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly pid: number, everyMs = 10) {
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
  }

  private sample(): void {
    this.peakMb = Math.max(this.peakMb, statusKiB(this.pid, 'VmRSS') / 1024);
  }

  stop(): number {
    clearInterval(this.timer);
    this.sample();
    return this.peakMb;
  }
}

// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM: the peak since the process started); 0 once it exited.
export function statusKiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    return Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

export interface Outcome {
  attack: AttackResult;
  legit: LegitStats;
  peakRssMb: number;
}

// Runs an attack while the legitimate client calls, and keeps it calling `afterMs` longer: what
// it saw during and after the attack, and the server's peak memory meanwhile.
export async function underAttack(target: { pid: number; grpcPort: number }, attack: () => Promise<AttackResult>, afterMs = 500): Promise<Outcome> {
  const rss = new RssSampler(target.pid);
  const legit = new LegitClient(target.grpcPort);
  try {
    // Connected and answered once before the attack: what it sees next is the attack's doing.
    await legit.ready;
    const result = await attack();
    await new Promise((r) => setTimeout(r, afterMs));
    return { attack: result, legit: await legit.stop(), peakRssMb: rss.stop() };
  } finally {
    await legit.stop();
    rss.stop();
  }
}
