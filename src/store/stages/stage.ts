import type { DecideOptions, Decision, LimitCheck, Store } from '../store';

// A resilience stage: a Store that wraps the next one and adds one concern. By default every
// call passes through; a stage overrides what it is about.
export abstract class Stage implements Store {
  constructor(protected readonly inner: Store) {}

  get kind(): string {
    return this.inner.kind;
  }

  decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.inner.decide(checks, options);
  }

  peek(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    return this.inner.peek(checks, options);
  }

  ready(): boolean {
    return this.inner.ready();
  }

  degraded(): string | undefined {
    return this.inner.degraded?.();
  }

  onReadyChange(listener: () => void): void {
    this.inner.onReadyChange?.(listener);
  }

  configChanged(): void {
    this.inner.configChanged?.();
  }

  giveBackUnused(check: LimitCheck, units: number, takenAtMs: number): void {
    this.inner.giveBackUnused?.(check, units, takenAtMs);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
