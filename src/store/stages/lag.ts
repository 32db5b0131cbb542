// Event-loop lag, sampled by a short timer while calls wait for Redis: how late it fires is how
// long this process was too busy to run callbacks (a burst of requests, JIT, a big request, GC).
// The deadline stage asks it whether a missed deadline was Redis' doing or ours. With no call
// waiting the timer stops, so an idle process does not wake 200 times a second for it.

const TICK_MS = 5;
// Samples kept: enough to cover the longest store budget we judge (a few seconds).
const RING = 1024;

export class LagMonitor {
  private readonly at = new Float64Array(RING);
  private readonly lag = new Float64Array(RING);
  private next = 0;
  private last = 0;
  private timer: NodeJS.Timeout | undefined;
  // Calls between begin() and end().
  private waiting = 0;

  constructor(private readonly now: () => number = () => performance.now()) {}

  // A call starts waiting: sampling runs until no call waits.
  begin(): void {
    this.waiting++;
    if (this.timer !== undefined) return;
    this.last = this.now();
    this.timer = setInterval(() => this.sample(), TICK_MS);
    this.timer.unref();
  }

  end(): void {
    this.waiting--;
  }

  private sample(): void {
    const t = this.now();
    this.at[this.next] = t;
    this.lag[this.next] = Math.max(0, t - this.last - TICK_MS);
    this.next = (this.next + 1) % RING;
    this.last = t;
    if (this.waiting === 0) this.stop();
  }

  // The longest stall between `since` and now (performance.now() ms), including the one in
  // progress: if the sampler has not run for a while, this very moment is a stall. Meant for a
  // call between begin() and end(), while the sampler runs.
  maxLagSince(since: number): number {
    const t = this.now();
    let max = this.timer === undefined ? 0 : Math.max(0, t - this.last - TICK_MS);
    for (let i = 0; i < RING; i++) {
      const j = (this.next - 1 - i + RING) % RING;
      const sampledAt = this.at[j];
      if (sampledAt === 0 || sampledAt < since) break;
      if (this.lag[j] > max) max = this.lag[j];
    }
    return max;
  }

  // Whether the sampler runs (for tests).
  get sampling(): boolean {
    return this.timer !== undefined;
  }

  close(): void {
    this.stop();
  }

  private stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
