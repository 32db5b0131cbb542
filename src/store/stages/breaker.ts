import type { Clock } from '../../clock';
import type { BreakerOptions } from '../breaker';
import { CancelledError } from '../../errors';
import { CircuitBreaker } from '../breaker';
import type { StoreEvents } from '../events';
import type { DecideOptions, Decision, LimitCheck, Store } from '../store';
import { DeadlineExceeded } from './deadline';
import { Stage } from './stage';

// The breaker is not closed: the fallback answers without asking Redis.
export class BreakerOpen extends Error {
  constructor(state: string) {
    super(`circuit breaker ${state}`);
    this.name = 'BreakerOpen';
  }
}

export interface BreakerStageOptions {
  clock: Clock;
  breaker: Omit<BreakerOptions, 'clock' | 'onChange' | 'recover'>;
  // A call unanswered this long opens the breaker at once (REDIS_TIMEOUT), ms.
  stalledMs: number;
  recover: () => Promise<void>;
  // Whether some Redis connection is up (to tell "unreachable" from "breaker open").
  connected: () => boolean;
  events: StoreEvents;
}

// Counts Redis' failures and only Redis' failures: error replies, lost connections, calls that
// miss their budget while this process is responsive, and calls stalled beyond REDIS_TIMEOUT.
// A deadline missed because of our own event-loop lag is reported (ownOverload) but not counted.
export class BreakerStage extends Stage {
  readonly breaker: CircuitBreaker;
  // Calls in flight by start time (insertion order = oldest first), for the stall watchdog.
  private readonly inflight = new Map<number, number>();
  private seq = 0;
  private readonly watchdog: NodeJS.Timeout;
  private readonly readyListeners: (() => void)[] = [];

  constructor(
    inner: Store,
    private readonly o: BreakerStageOptions,
  ) {
    super(inner);
    this.breaker = new CircuitBreaker({
      ...o.breaker,
      clock: o.clock,
      recover: o.recover,
      onChange: (from, to, reason) => {
        // Calls from before an outage are no news once it is known; only new calls are watched.
        if (to === 'open') this.inflight.clear();
        o.events.breaker(from, to, reason);
        for (const listener of this.readyListeners) listener();
      },
    });
    this.watchdog = setInterval(() => this.checkStalled(), Math.max(10, Math.min(250, o.stalledMs / 4)));
    this.watchdog.unref();
    inner.onReadyChange?.(() => {
      if (o.connected()) this.breaker.probeNow('connection established');
      else this.breaker.trip('connection lost');
    });
  }

  get closedNow(): boolean {
    return this.breaker.current === 'closed';
  }

  // Redis decides only while the breaker is closed (after an outage: once recovery is done).
  override ready(): boolean {
    return this.closedNow && this.inner.ready();
  }

  override onReadyChange(listener: () => void): void {
    this.readyListeners.push(listener);
    this.inner.onReadyChange?.(listener);
  }

  override degraded(): string | undefined {
    if (!this.o.connected()) return 'Redis unreachable';
    const state = this.breaker.current;
    if (state === 'open') return 'circuit breaker open';
    if (state === 'half_open') return 'circuit breaker recovering (writing back what the fallback admitted)';
    return undefined;
  }

  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.guarded(checks, options, false);
  }

  override peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.guarded(checks, options, true);
  }

  override async close(): Promise<void> {
    clearInterval(this.watchdog);
    this.breaker.close();
    await this.inner.close();
  }

  // Not an async function: one promise per call fewer on every request's path.
  private guarded(checks: readonly LimitCheck[], options: DecideOptions, peek: boolean): Promise<Decision> {
    if (!this.breaker.allows()) return Promise.reject(new BreakerOpen(this.breaker.current === 'open' ? 'open' : 'recovering'));
    const id = ++this.seq;
    this.inflight.set(id, this.o.clock.now());
    let call: Promise<Decision>;
    try {
      call = peek ? this.inner.peek(checks, options) : this.inner.decide(checks, options);
    } catch (err) {
      call = Promise.reject(err);
    }
    return call.then(
      (decision) => {
        this.inflight.delete(id);
        this.breaker.success();
        return decision;
      },
      (err: unknown) => {
        this.failed(id, err);
        throw err;
      },
    );
  }

  private failed(id: number, err: unknown): void {
    const message = (err as Error).message;
    if (err instanceof CancelledError) {
      // Never sent: says nothing about Redis.
      this.inflight.delete(id);
      return;
    }
    if (!(err instanceof DeadlineExceeded)) {
      this.inflight.delete(id);
      this.o.events.storeFailure('error', message);
      this.breaker.failure(message);
      return;
    }
    if (err.redisFault) {
      this.o.events.storeFailure('timeout', message);
      this.breaker.failure(message);
    } else {
      this.o.events.ownOverload(err.lagMs, message);
    }
    if (err.late === undefined) {
      this.inflight.delete(id);
      return;
    }
    // The call goes on; the watchdog still sees it until it settles.
    err.late.then(
      () => this.inflight.delete(id),
      (late: unknown) => {
        this.inflight.delete(id);
        if (err.redisFault) return;
        this.o.events.storeFailure('error', (late as Error).message);
        this.breaker.failure((late as Error).message);
      },
    );
  }

  private checkStalled(): void {
    const oldest = this.inflight.values().next();
    if (oldest.done) return;
    const waited = this.o.clock.now() - oldest.value;
    if (waited < this.o.stalledMs || this.breaker.current !== 'closed') return;
    const message = `a Redis call has been unanswered for ${Math.round(waited)} ms (REDIS_TIMEOUT ${this.o.stalledMs} ms)`;
    this.o.events.storeFailure('stalled', message);
    this.breaker.trip(message);
  }
}
