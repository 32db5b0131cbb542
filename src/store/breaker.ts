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
  // How long an open breaker waits before letting one probe through, ms.
  cooldownMs: number;
  onChange?: (from: BreakerState, to: BreakerState, reason: string) => void;
}

const BUCKETS = 10;

// Closed → open on a share of failures in a sliding window (or at once on connection loss);
// open → half-open after the cool-down, letting exactly one probe through; the probe's success
// closes it, its failure opens it again. While open nothing waits on the store.
export class CircuitBreaker {
  private state: BreakerState = 'closed';
  private openedAt = 0;
  private probing = false;
  private readonly calls = new Array<number>(BUCKETS).fill(0);
  private readonly failures = new Array<number>(BUCKETS).fill(0);
  private bucketStart = 0;

  constructor(private readonly o: BreakerOptions) {
    this.bucketStart = this.bucketOf(o.clock.now());
  }

  get current(): BreakerState {
    return this.state;
  }

  // May a call go to the store now? In half-open only the single probe may.
  tryAcquire(): boolean {
    if (this.state === 'closed') return true;
    if (this.state === 'open') {
      if (this.o.clock.now() - this.openedAt < this.o.cooldownMs) return false;
      this.move('half_open', 'cool-down elapsed');
    }
    if (this.probing) return false;
    this.probing = true;
    return true;
  }

  success(): void {
    if (this.state === 'half_open') {
      this.probing = false;
      this.reset();
      this.move('closed', 'probe succeeded');
      return;
    }
    this.record(false);
  }

  failure(reason: string): void {
    if (this.state === 'half_open') {
      this.probing = false;
      this.open(`probe failed: ${reason}`);
      return;
    }
    if (this.state === 'open') return;
    this.record(true);
    const calls = this.calls.reduce((a, b) => a + b, 0);
    const failed = this.failures.reduce((a, b) => a + b, 0);
    if (calls >= this.o.minCalls && failed / calls >= this.o.failureRatio) {
      this.open(`${failed} of ${calls} calls failed: ${reason}`);
    }
  }

  // Connection (re-)established: probe at once instead of waiting out the cool-down.
  probeNow(reason: string): void {
    if (this.state === 'open') this.move('half_open', reason);
  }

  // Connection lost: no point in waiting for the ratio.
  trip(reason: string): void {
    if (this.state === 'closed') this.open(reason);
  }

  private open(reason: string): void {
    this.openedAt = this.o.clock.now();
    this.move('open', reason);
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
