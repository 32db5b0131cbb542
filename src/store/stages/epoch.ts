import { randomUUID } from 'node:crypto';

// Redis' data epoch: a value kept in Redis that every replica reads with its heartbeat. It changes
// exactly when Redis lost its data (a restart without persistence, a flush): then the counters
// no longer hold the hits Redis admitted before, and each process puts back the hits it had put
// in itself (lua/restore_own.lua) before Redis decides for it again.
export class DataEpoch {
  // Proposed when Redis holds none (the first replica to ask after a loss sets it). Fresh every
  // time: a replica that proposed the lost value must not set that same value again.
  get proposal(): string {
    return randomUUID();
  }
  private known: string | undefined;
  private readonly lostListeners: ((reason: string) => void)[] = [];

  // Called when a heartbeat sees the epoch change (recovery trips the breaker).
  onLost(listener: (reason: string) => void): void {
    this.lostListeners.push(listener);
  }

  // A heartbeat's epoch. A change is not adopted here: recovery adopts it after restoring.
  observe(epoch: string): void {
    if (this.known === undefined) this.known = epoch;
    else if (epoch !== this.known) for (const listener of this.lostListeners) listener('Redis lost its data (epoch changed)');
  }

  // Recovery's epoch: true when it differs from the one known, i.e. the data must be restored.
  lost(epoch: string): boolean {
    return this.known !== undefined && epoch !== this.known;
  }

  // Adopted once restored: a restore that failed is tried again by the next recovery.
  adopt(epoch: string): void {
    this.known = epoch;
  }
}
