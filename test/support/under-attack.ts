import fs from 'node:fs';
import type { AttackResult } from './h2-attacks';
import { LegitClient, type LegitStats } from './legit-client';
import { closing } from './app';

// What runs beside an attack (test/support/h2-attacks.ts): a legitimate client on its own
// connection (test/support/legit-client.ts), a sampler of the server process' resident memory,
// and the server's count of decisions.

// Resident memory of a process, MiB: sampled every `everyMs`, the peak kept.
export class RssSampler {
  peakMb = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pid: number,
    everyMs = 10,
  ) {
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
  // ShouldRateLimit calls the server decided during the run beyond the legitimate client's: the
  // attacker's.
  attackerDecisions: number;
}

export interface Target {
  pid: number;
  grpcPort: number;
  httpPort: number;
}

// The sum of a counter's series in /metrics whose labels include `labels`.
async function counterSum(httpPort: number, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${httpPort}/metrics`, closing())).text();
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`, 'gm'))) if (m[1].includes(labels)) sum += Number(m[2]);
  return sum;
}

// ShouldRateLimit calls decided over gRPC so far (sluice_requests_total, any result).
export function grpcDecisions(httpPort: number): Promise<number> {
  return counterSum(httpPort, 'sluice_requests_total', 'transport="grpc"');
}

// Connections closed for abuse so far (sluice_grpc_connections_closed_total, any reason).
export function abusiveCloses(httpPort: number): Promise<number> {
  return counterSum(httpPort, 'sluice_grpc_connections_closed_total');
}

// Runs an attack while the legitimate client calls, and keeps it calling `afterMs` longer: what
// it saw during and after the attack, and the server's peak memory meanwhile.
export async function underAttack(target: Target, attack: () => Promise<AttackResult>, afterMs = 500): Promise<Outcome> {
  const before = await grpcDecisions(target.httpPort);
  const rss = new RssSampler(target.pid);
  const legit = new LegitClient({ port: target.grpcPort });
  try {
    // Connected and answered once before the attack: what it sees next is the attack's doing.
    await legit.ready;
    const result = await attack();
    await new Promise((r) => setTimeout(r, afterMs));
    const stats = await legit.stop();
    const peakRssMb = rss.stop();
    // Every legitimate call was decided (or failed) between the two readings.
    const attackerDecisions = (await grpcDecisions(target.httpPort)) - before - (stats.answered + stats.failed);
    return { attack: result, legit: stats, peakRssMb, attackerDecisions };
  } finally {
    await legit.stop();
    rss.stop();
  }
}
