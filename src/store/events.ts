import type { BreakerState } from './breaker';

// What the store layers report, handed inward as one typed sink: inner layers emit events and
// never import server/ (server/store-events.ts turns them into metrics and log lines).
export interface StoreEvents {
  // A Redis script call finished (operation: decide, peek, refund, absorb, lease, heartbeat).
  storeCall(operation: string, seconds: number, ok: boolean): void;
  // A Redis call failed: an error reply or lost connection ('error'), no answer within the
  // caller's budget while this process was responsive ('timeout'), or unanswered for longer than
  // REDIS_TIMEOUT ('stalled'). These open the breaker.
  storeFailure(kind: 'error' | 'timeout' | 'stalled', message: string): void;
  // A deadline missed because this process was busy (event-loop lag), not because of Redis; it is
  // answered by the fallback but never counted against Redis.
  ownOverload(lagMs: number, message: string): void;
  breaker(from: BreakerState, to: BreakerState, reason: string): void;
  // An answer made without Redis (policy local, allow) or refused for lack of it (deny).
  degraded(policy: 'local' | 'allow' | 'deny', reason: string): void;
  overLimitCacheHit(): void;
  // Hits the local fallback admitted, written back to Redis (error: the batch stays journaled).
  writeBack(entries: number, hits: number, error?: string): void;
  // Hits Redis consumed for a request that was denied after all, given back (error: retried).
  refund(entries: number, error?: string): void;
  leaseTaken(units: number): void;
  leaseReturned(units: number): void;
  leaseServed(hits: number): void;
  // Live replicas sharing the budget, as last counted in Redis.
  replicas(count: number): void;
  // Redis had lost its data: this many counters were put back as this replica last saw them.
  restored(counters: number): void;
}

export const silentEvents: StoreEvents = {
  storeCall() {},
  storeFailure() {},
  ownOverload() {},
  breaker() {},
  degraded() {},
  overLimitCacheHit() {},
  writeBack() {},
  refund() {},
  leaseTaken() {},
  leaseReturned() {},
  leaseServed() {},
  replicas() {},
  restored() {},
};
