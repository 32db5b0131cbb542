import type { StoreEvents } from './events';
import type { RefundEntry } from './shared';

// `E`: an entry as the store takes it (the Redis store's may say more: store/redis/spec.ts).
export interface RefundQueueOptions<E = RefundEntry> {
  // Splits entries into batches one script call can take (at most MAX_BATCH, one hash slot each).
  split: (entries: readonly E[]) => E[][];
  // Gives one batch back (one script call). Must dispatch synchronously, so that a refund added
  // before a decision is sent reaches Redis ahead of it on the same connection.
  send: (batch: readonly E[]) => Promise<void>;
  events: Pick<StoreEvents, 'refund'>;
  // Entries kept at most; beyond that the oldest are dropped (and reported).
  maxEntries?: number;
  // Backoff of a failed batch: first retry after this, doubling up to maxRetryMs.
  firstRetryMs?: number;
  maxRetryMs?: number;
}

interface Batch<E> {
  entries: E[];
  failures: number;
  // performance.now() before which the batch is not tried again.
  dueAt: number;
  lastError?: string;
  sending?: Promise<boolean>;
}

// Hits Redis consumed for requests that were denied after all (one slot group of a cluster
// request said no), to be given back in the background. The denial never waits for them and never
// fails because of them: a batch that fails is retried with backoff until it goes through.
//
// A batch is only retried after its call failed. A call is never abandoned while in flight (no
// command timeout), so a refund cannot run twice because of a retry; the exception is a
// connection lost after Redis ran the script but before its reply arrived, which gives those
// hits back twice (bounded by the hits of that one batch).
export class RefundQueue<E = RefundEntry> {
  private readonly batches: Batch<E>[] = [];
  private entries = 0;
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private closed = false;
  private readonly maxEntries: number;
  private readonly firstRetryMs: number;
  private readonly maxRetryMs: number;

  constructor(private readonly o: RefundQueueOptions<E>) {
    this.maxEntries = o.maxEntries ?? 100_000;
    this.firstRetryMs = o.firstRetryMs ?? 100;
    this.maxRetryMs = o.maxRetryMs ?? 2_000;
  }

  // Entries not yet given back (waiting, retrying or in flight).
  get size(): number {
    return this.entries;
  }

  add(entries: readonly E[]): void {
    if (entries.length === 0) return;
    if (this.closed) {
      this.o.events.refund(entries.length, 'dropped: store closed');
      return;
    }
    for (const batch of this.o.split(entries)) {
      this.batches.push({ entries: batch, failures: 0, dueAt: 0 });
      this.entries += batch.length;
    }
    this.trim();
    this.pump();
  }

  // Tries every batch now (those in flight are awaited); rejects if any fails, keeping it queued.
  async drain(): Promise<void> {
    const batches = [...this.batches];
    const results = await Promise.all(batches.map((b) => b.sending ?? this.attempt(b)));
    const failed = batches.filter((_, i) => !results[i]);
    if (failed.length === 0) return;
    const entries = failed.reduce((n, b) => n + b.entries.length, 0);
    throw new Error(`${entries} refund entries not given back: ${failed[0].lastError ?? 'unknown error'}`);
  }

  // Stops retrying; what is still queued is reported as dropped.
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.clearTimer();
    const waiting = this.batches.filter((b) => b.sending === undefined).reduce((n, b) => n + b.entries.length, 0);
    if (waiting > 0) this.o.events.refund(waiting, 'dropped: store closed');
  }

  private pump(): void {
    if (this.closed) return;
    const now = performance.now();
    for (const b of this.batches) if (b.sending === undefined && b.dueAt <= now) void this.attempt(b);
    this.schedule();
  }

  private attempt(b: Batch<E>): Promise<boolean> {
    let sent: Promise<void>;
    try {
      sent = this.o.send(b.entries);
    } catch (err) {
      sent = Promise.reject(err);
    }
    const sending = sent.then(
      () => {
        this.remove(b);
        this.o.events.refund(b.entries.length);
        return true;
      },
      (err: unknown) => {
        b.failures++;
        b.lastError = err instanceof Error ? err.message : String(err);
        b.dueAt = performance.now() + Math.min(this.maxRetryMs, this.firstRetryMs * 2 ** (b.failures - 1));
        this.o.events.refund(b.entries.length, b.lastError);
        return false;
      },
    );
    b.sending = sending.finally(() => {
      b.sending = undefined;
      this.schedule();
    });
    return b.sending;
  }

  private remove(b: Batch<E>): void {
    const i = this.batches.indexOf(b);
    if (i < 0) return;
    this.batches.splice(i, 1);
    this.entries -= b.entries.length;
  }

  // Drops the oldest entries beyond maxEntries; batches in flight are left alone (their outcome
  // is not known yet).
  private trim(): void {
    let dropped = 0;
    for (let i = 0; this.entries > this.maxEntries && i < this.batches.length; ) {
      const b = this.batches[i];
      if (b.sending !== undefined) {
        i++;
        continue;
      }
      const excess = this.entries - this.maxEntries;
      if (b.entries.length <= excess) {
        this.batches.splice(i, 1);
        this.entries -= b.entries.length;
        dropped += b.entries.length;
      } else {
        b.entries.splice(0, excess);
        this.entries -= excess;
        dropped += excess;
      }
    }
    if (dropped > 0) this.o.events.refund(dropped, 'dropped: queue full');
  }

  // One timer, for the earliest batch waiting out its backoff.
  private schedule(): void {
    if (this.closed) return;
    let next = Infinity;
    for (const b of this.batches) if (b.sending === undefined) next = Math.min(next, b.dueAt);
    if (next === this.timerAt) return;
    this.clearTimer();
    if (next === Infinity) return;
    this.timerAt = next;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.timerAt = Infinity;
        this.pump();
      },
      Math.max(0, next - performance.now()),
    );
    this.timer.unref();
  }

  private clearTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.timerAt = Infinity;
  }
}
