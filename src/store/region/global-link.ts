import type { Clock } from '../../clock';
import type { LimitSpec } from '../../algorithms';
import type { LeaseGrant } from '../shared';
import type { RedisStore } from '../redis';
import type { DebtEntry, RegionDemand } from './types';
import { answeredWithin } from '../timeout';
import type { RegionEvents } from './events';

export interface GlobalLinkOptions {
  clock: Clock;
  // A call unanswered this long failed.
  timeoutMs: number;
  events: RegionEvents;
}

// Failures in a row that make a partition: one lost call is no partition.
const FAILURES_FOR_PARTITION = 2;
const PROBE_FIRST_MS = 250;
const PROBE_MAX_MS = 2000;
const CONNECT_POLL_MS = 10;
// The global clock's estimate is kept from the shortest round trip seen for this long, ms.
const OFFSET_KEEP_MS = 10_000;

type GlobalOps = Pick<RedisStore, 'lease' | 'giveBack' | 'absorb' | 'probe' | 'connected' | 'close'>;

// The region's link to the global Redis: every call bounded by GLOBAL_TIMEOUT, the round trip
// measured (how far ahead a window's next window is leased, how long a request may wait), the
// global clock estimated from this process' clock (a region's window edges, and the window a hit
// fell in for reconciliation), and a partition declared after failures in a
// row. While partitioned, a probe with jittered, growing backoff looks for the way back; no lease
// is attempted meanwhile.
export class GlobalLink {
  private failures = 0;
  private partitioned = false;
  private rttMs = 0;
  // Global Redis time minus local time, ms, from the answer of the shortest recent round trip.
  private offsetMs: number | undefined;
  private bestRttMs = Infinity;
  private bestAt = 0;
  private probeTimer: NodeJS.Timeout | undefined;
  private probeDelayMs = PROBE_FIRST_MS;
  private closed = false;
  private recovering: Promise<void> | undefined;
  // Called once the global Redis answers again after a partition (reconciliation): the regional
  // store's, handed over once that store (built on this link) exists.
  private reconcile: () => Promise<void> = () => Promise.resolve();

  constructor(
    private readonly ops: GlobalOps,
    private readonly o: GlobalLinkOptions,
  ) {}

  onRecover(reconcile: () => Promise<void>): void {
    this.reconcile = reconcile;
  }

  get reachable(): boolean {
    return !this.partitioned;
  }

  // Round trip to the global Redis, ms (smoothed).
  get roundTripMs(): number {
    return this.rttMs;
  }

  // The global Redis' clock now, as estimated here (undefined before its first answer).
  globalNow(): number | undefined {
    return this.offsetMs === undefined ? undefined : this.o.clock.now() + this.offsetMs;
  }

  async lease(spec: LimitSpec & { key: string }, units: number, demand: RegionDemand): Promise<LeaseGrant> {
    if (this.partitioned) throw new Error('global Redis unreachable');
    const sent = this.o.clock.now();
    const grant = await this.call('lease', () => this.ops.lease(spec, units, demand));
    this.observe(sent, grant.takenAtMs);
    return grant;
  }

  giveBack(spec: LimitSpec & { key: string }, units: number, takenAtMs: number): Promise<void> {
    return this.call('give_back', () => this.ops.giveBack(spec, units, takenAtMs));
  }

  absorb(entries: readonly DebtEntry[]): Promise<void> {
    return this.call('absorb', () => this.ops.absorb(entries));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.probeTimer);
    await this.ops.close();
  }

  private observe(sentAt: number, globalMs: number): void {
    const now = this.o.clock.now();
    const rtt = now - sentAt;
    this.rttMs = this.rttMs === 0 ? rtt : this.rttMs * 0.8 + rtt * 0.2;
    // The global Redis read its clock about half a round trip after the send: off by at most
    // half the round trip, and by less the shorter it was. The shortest round trip of the last
    // OFFSET_KEEP_MS gives the estimate (a delay on either way, or in this process, stretches a
    // round trip; none shortens it); clocks drift far less than that in the meantime.
    if (this.offsetMs === undefined || rtt <= this.bestRttMs || now - this.bestAt > OFFSET_KEEP_MS) {
      this.offsetMs = globalMs - (sentAt + rtt / 2);
      this.bestRttMs = rtt;
      this.bestAt = now;
    }
  }

  private async call<T>(operation: string, fn: () => Promise<T>): Promise<T> {
    const started = this.o.clock.now();
    try {
      // A connection still opening (at start, after a reconnect) is waited for, within the timeout.
      const result = await answeredWithin(this.whenConnected().then(fn), this.o.timeoutMs, 'global Redis');
      this.o.events.globalCall(operation, 'ok', (this.o.clock.now() - started) / 1000);
      this.failures = 0;
      return result;
    } catch (err) {
      this.o.events.globalCall(operation, 'error', (this.o.clock.now() - started) / 1000);
      if (++this.failures >= FAILURES_FOR_PARTITION) this.partition((err as Error).message);
      throw err;
    }
  }

  private async whenConnected(): Promise<void> {
    const until = this.o.clock.now() + this.o.timeoutMs;
    while (!this.ops.connected() && !this.closed && this.o.clock.now() < until) await new Promise((resolve) => setTimeout(resolve, CONNECT_POLL_MS));
  }

  private partition(reason: string): void {
    if (this.partitioned || this.closed) return;
    this.partitioned = true;
    this.probeDelayMs = PROBE_FIRST_MS;
    this.o.events.globalReachable(false, reason);
    this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.closed) return;
    const jittered = this.probeDelayMs * (0.75 + Math.random() * 0.5);
    this.probeTimer = setTimeout(() => void this.probe(), jittered);
    this.probeTimer.unref();
    this.probeDelayMs = Math.min(PROBE_MAX_MS, this.probeDelayMs * 2);
  }

  private async probe(): Promise<void> {
    const sent = this.o.clock.now();
    try {
      const { nowMs } = await this.call('probe', () => this.ops.probe());
      this.observe(sent, nowMs);
    } catch {
      this.scheduleProbe();
      return;
    }
    this.recovering ??= this.recover();
    await this.recovering;
  }

  // Reconciles first, then lets leases through again: what the region admitted on its own must
  // be in the global budget before the region takes more of it.
  private async recover(): Promise<void> {
    try {
      await this.reconcile();
      this.partitioned = false;
      this.failures = 0;
      this.o.events.globalReachable(true, 'the global Redis answered');
    } catch {
      this.scheduleProbe();
    } finally {
      this.recovering = undefined;
    }
  }
}
