import type { Clock } from '../../clock';

// Redis' clock as seen from here: each answer that carries Redis TIME gives the offset between it
// and the local clock. Windows and journal entries follow Redis time (estimated this way while
// Redis is away); the local clock only measures durations.
export class StoreClock implements Clock {
  private offset = 0;
  private bestRtt = Infinity;
  private observedAt = -Infinity;

  constructor(private readonly local: Clock) {}

  // Redis said `storeMs` somewhere between local `sentMs` and `receivedMs`.
  observe(storeMs: number | undefined, sentMs: number, receivedMs: number): void {
    if (storeMs === undefined || !Number.isFinite(storeMs)) return;
    const rtt = Math.max(0, receivedMs - sentMs);
    // Prefer quick round trips (the midpoint is then close to the truth), but let a fresher one
    // in after a while so that drift is followed.
    if (rtt > this.bestRtt * 2 && receivedMs - this.observedAt < 10_000) return;
    this.bestRtt = Math.min(rtt, this.bestRtt * 2);
    this.observedAt = receivedMs;
    this.offset = storeMs - (sentMs + receivedMs) / 2;
  }

  now(): number {
    return this.local.now() + this.offset;
  }
}
