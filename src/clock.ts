// Time source in milliseconds since the epoch. Injected everywhere so that window-edge and refill
// tests need no sleeps.
export interface Clock {
  now(): number;
}

// Wall-clock aligned (windows start at multiples of their length since the epoch, as upstream) but
// monotonic: it advances with the process's monotonic timer and never jumps when the system clock
// is stepped.
export const monotonicClock: Clock = {
  now: () => performance.timeOrigin + performance.now(),
};

// A clock that only moves when told to; for tests.
export class ManualClock implements Clock {
  constructor(private ms: number) {}

  now(): number {
    return this.ms;
  }

  set(ms: number): void {
    this.ms = ms;
  }

  advance(ms: number): void {
    this.ms += ms;
  }
}
