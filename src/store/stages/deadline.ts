import { DeadlineList, type Expiring } from '../../deadline-list';
import type { DecideOptions, Decision, LimitCheck, Store } from '../store';
import type { LagMonitor } from './lag';
import { Stage } from './stage';

// What a call may wait for Redis, from what the caller said (options.deadlineAt). Stateless: one
// value read by every part of the stack that waits (this stage, leases, the multi-region layer).
export type CallerBudget = (options: DecideOptions) => number;

// The caller's remaining time minus what the answer needs to reach it: DEADLINE_MARGIN, or a
// tenth of the remaining time when that is more (a loaded process needs longer than 2 ms to send
// an answer; a 20 ms Envoy deadline keeps its 18 ms, a 1 s one keeps 900 ms). `storeDeadlineMs`
// for callers that give no deadline of their own.
export function callerBudget(o: { storeDeadlineMs: number; marginMs: number }): CallerBudget {
  return (options) => {
    if (options.deadlineAt === undefined) return o.storeDeadlineMs;
    const left = options.deadlineAt - Date.now();
    return left - Math.max(o.marginMs, left / 10);
  };
}

export interface DeadlineOptions {
  budgetMs: CallerBudget;
  lag: LagMonitor;
}

// Redis did not answer within the caller's budget. `late` is the call itself, which goes on: its
// outcome (consumed or not) still matters to the fallback's journal. `redisFault` is false when
// this process was too busy to notice an answer in time (event-loop lag of at least half the
// budget): then the miss says nothing about Redis.
export class DeadlineExceeded extends Error {
  constructor(
    message: string,
    readonly redisFault: boolean,
    readonly lagMs: number,
    readonly late?: Promise<Decision>,
  ) {
    super(message);
    this.name = 'DeadlineExceeded';
  }
}

// Time belongs to the caller: a call waits for Redis until the caller's deadline minus the margin
// (STORE_DEADLINE only when the caller gave none), never a fixed shorter time.
export class DeadlineStage extends Stage {
  // Calls waiting for Redis, behind one timer (not a timer per call).
  private readonly waiting = new DeadlineList();

  constructor(
    inner: Store,
    private readonly o: DeadlineOptions,
  ) {
    super(inner);
  }

  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.bounded(options, () => this.inner.decide(checks, options));
  }

  override peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.bounded(options, () => this.inner.peek(checks, options));
  }

  override close(): Promise<void> {
    this.waiting.close();
    return super.close();
  }

  private bounded(options: DecideOptions, start: () => Promise<Decision>): Promise<Decision> {
    const budget = this.o.budgetMs(options);
    if (budget <= 0) return Promise.reject(new DeadlineExceeded('no time left before the caller deadline', false, 0));
    const lag = this.o.lag;
    const call = start();
    lag.begin();
    const waiter = new Waiter(budget, lag, call);
    this.waiting.add(waiter);
    return new Promise<Decision>((resolve, reject) => {
      waiter.reject = reject;
      waiter.call.then(
        (value) => {
          waiter.answered = true;
          this.waiting.remove(waiter);
          lag.end();
          resolve(value);
        },
        (error: unknown) => {
          waiter.answered = true;
          this.waiting.remove(waiter);
          lag.end();
          reject(error);
        },
      );
    });
  }
}

// One call waiting for Redis within its budget.
class Waiter implements Expiring {
  readonly deadlineAt: number;
  readonly startedAt = performance.now();
  prev: Expiring | undefined = undefined;
  next: Expiring | undefined = undefined;
  listed = false;
  answered = false;
  reject: (err: unknown) => void = () => undefined;

  constructor(
    private readonly budget: number,
    private readonly lag: LagMonitor,
    readonly call: Promise<Decision>,
  ) {
    this.deadlineAt = Date.now() + budget;
  }

  expire(): void {
    // Let I/O that is already waiting be read first: an answer sitting in the socket while this
    // process was busy is an answer in time, not a Redis failure.
    setImmediate(() => {
      if (this.answered) return;
      const lag = this.lag.maxLagSince(this.startedAt);
      const redisFault = lag < this.budget / 2;
      const why = redisFault ? '' : ` (this process was busy: event-loop lag ${Math.round(lag)} ms)`;
      this.reject(new DeadlineExceeded(`no answer from Redis within ${Math.round(this.budget)} ms${why}`, redisFault, lag, this.call));
    });
  }
}
