import type { Clock } from '../clock';

export type BreakerState = 'closed' | 'open' | 'half_open';

export interface BreakerOptions {
  clock: Clock;
  // Sliding window over which failures are counted, ms.
  windowMs: number;
  // Fewest calls in the window before the failure ratio can open the breaker.
  minCalls: number;
  // Share of failed (or timed-out) calls in the window that opens the breaker.
  failureRatio: number;
  // How long an open breaker waits before trying to recover, ms.
  cooldownMs: number;
  // The way back: resolves when Redis answers again and what was decided without it has been
  // written back; the breaker closes only then. Rejects to stay open another cool-down.
  recover: () => Promise<void>;
  onChange?: (from: BreakerState, to: BreakerState, reason: string) => void;
}

const BUCKETS = 10;

// Closed → open on a share of failures in a sliding window (or at once on connection loss or a
// stalled call); open → half-open ("recovering") after the cool-down or as soon as the connection
// is back; half-open → closed when recover() succeeds, → open when it fails.
//
// No request is ever the probe: while the breaker is not closed every request is answered by the
// fallback, and recover() (a real decision round-trip, then the write-back of the fallback's
// journal) runs in the background. So the first request Redis decides after an outage already
// sees every hit the fallback admitted.
export class CircuitBreaker {
  private state: BreakerState = 'closed';
  private openedAt = 0;
  private cooldownTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly calls = new Array<number>(BUCKETS).fill(0);
  private readonly failures = new Array<number>(BUCKETS).fill(0);
  private bucketStart = 0;

  constructor(private readonly o: BreakerOptions) {
    this.bucketStart = this.bucketOf(o.clock.now());
  }

  get current(): BreakerState {
    return this.state;
  }

  // May a request go to Redis now?
  allows(): boolean {
    if (this.state === 'closed') return true;
    if (this.state === 'open' && this.o.clock.now() - this.openedAt >= this.o.cooldownMs) this.startRecovery('cool-down elapsed');
    return false;
  }

  success(): void {
    if (this.state === 'closed') this.record(false);
  }

  failure(reason: string): void {
    if (this.state !== 'closed') return;
    this.record(true);
    const calls = this.calls.reduce((a, b) => a + b, 0);
    const failed = this.failures.reduce((a, b) => a + b, 0);
    if (calls >= this.o.minCalls && failed / calls >= this.o.failureRatio) {
      this.open(`${failed} of ${calls} calls failed: ${reason}`);
    }
  }

  // Connection (re-)established: try to recover at once instead of waiting out the cool-down.
  probeNow(reason: string): void {
    if (this.state === 'open') this.startRecovery(reason);
  }

  // Connection lost, or a call stalled: no point in waiting for the ratio.
  trip(reason: string): void {
    if (this.state === 'closed') this.open(reason);
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.cooldownTimer);
  }

  private open(reason: string): void {
    this.openedAt = this.o.clock.now();
    this.move('open', reason);
    clearTimeout(this.cooldownTimer);
    if (this.closed) return;
    // Recover even when no request arrives to notice that the cool-down is over.
    this.cooldownTimer = setTimeout(() => this.startRecovery('cool-down elapsed'), this.o.cooldownMs);
    this.cooldownTimer.unref();
  }

  private startRecovery(reason: string): void {
    if (this.state !== 'open' || this.closed) return;
    clearTimeout(this.cooldownTimer);
    this.move('half_open', reason);
    this.o.recover().then(
      () => {
        if (this.state !== 'half_open') return;
        this.reset();
        this.move('closed', 'recovered: Redis answers and the fallback journal is written back');
      },
      (err: unknown) => {
        if (this.state === 'half_open') this.open(`recovery failed: ${(err as Error).message}`);
      },
    );
  }

  private move(to: BreakerState, reason: string): void {
    const from = this.state;
    if (from === to) return;
    this.state = to;
    this.o.onChange?.(from, to, reason);
  }

  private bucketOf(now: number): number {
    return Math.floor(now / (this.o.windowMs / BUCKETS));
  }

  private record(failed: boolean): void {
    const bucket = this.bucketOf(this.o.clock.now());
    const stale = Math.min(BUCKETS, bucket - this.bucketStart);
    for (let i = 1; i <= stale; i++) {
      const slot = (this.bucketStart + i) % BUCKETS;
      this.calls[slot] = 0;
      this.failures[slot] = 0;
    }
    if (bucket > this.bucketStart) this.bucketStart = bucket;
    const slot = bucket % BUCKETS;
    this.calls[slot]++;
    if (failed) this.failures[slot]++;
  }

  private reset(): void {
    this.calls.fill(0);
    this.failures.fill(0);
  }
}
