// Event-loop lag, sampled by a short timer: how late it fires is how long this process was too
// busy to run callbacks (a burst of requests, JIT, a big request, GC). The deadline stage asks it
// whether a missed deadline was Redis' doing or ours.

const TICK_MS = 5;
// Samples kept: enough to cover the longest store budget we judge (a few seconds).
const RING = 1024;

export class LagMonitor {
  private readonly at = new Float64Array(RING);
  private readonly lag = new Float64Array(RING);
  private next = 0;
  private last: number;
  private readonly timer: NodeJS.Timeout;

  constructor(private readonly now: () => number = () => performance.now()) {
    this.last = now();
    this.timer = setInterval(() => this.sample(), TICK_MS);
    this.timer.unref();
  }

  private sample(): void {
    const t = this.now();
    this.at[this.next] = t;
    this.lag[this.next] = Math.max(0, t - this.last - TICK_MS);
    this.next = (this.next + 1) % RING;
    this.last = t;
  }

  // The longest stall between `since` and now (performance.now() ms), including the one in
  // progress: if the sampler has not run for a while, this very moment is a stall.
  maxLagSince(since: number): number {
    const t = this.now();
    let max = Math.max(0, t - this.last - TICK_MS);
    for (let i = 0; i < RING; i++) {
      const j = (this.next - 1 - i + RING) % RING;
      const sampledAt = this.at[j];
      if (sampledAt === 0 || sampledAt < since) break;
      if (this.lag[j] > max) max = this.lag[j];
    }
    return max;
  }

  close(): void {
    clearInterval(this.timer);
  }
}
