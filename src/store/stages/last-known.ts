import type { LimitSpec } from '../../algorithms';
import { BoundedMap } from '../bounded-map';
import type { Decision, LimitCheck } from '../store';

export interface Known {
  key: string;
  spec: LimitSpec;
  // Whole requests Redis said remain after its decision.
  remaining: number;
  // Redis time of that decision.
  atMs: number;
}

const MAX_KEYS = 100_000;

// What Redis last said remains, per counter: where a fallback starts from when Redis goes away.
// Bounded; the least recently updated keys go first.
export class LastKnown {
  private readonly known = new BoundedMap<string, Known>(MAX_KEYS);

  record(checks: readonly LimitCheck[], decision: Decision): void {
    const at = decision.storeTimeMs;
    if (at === undefined || decision.degraded !== undefined) return;
    decision.outcomes.forEach((o, i) => {
      if (o.remaining !== undefined) this.recordOne(checks[i], o.remaining, at);
    });
  }

  // The check itself is kept as the spec (it is one, and is not changed after it is made): no
  // copy per limit and decision.
  recordOne(check: LimitCheck, remaining: number, atMs: number): void {
    this.known.set(check.key, { key: check.key, spec: check, remaining, atMs });
  }

  get(key: string): Known | undefined {
    return this.known.get(key);
  }

  all(): IterableIterator<Known> {
    return this.known.values();
  }
}
