// What the multi-region layer reports (server/store-events.ts turns it into metrics and log lines).
export interface RegionEvents {
  // A call to the global Redis finished (operation: lease, give_back, absorb, probe).
  globalCall(operation: string, result: 'ok' | 'error', seconds: number): void;
  // The global Redis became reachable or unreachable (a partition).
  globalReachable(reachable: boolean, reason: string): void;
  // Units leased from the global budget into the region's allowance; `size` is the lease asked for.
  leased(units: number, size: number): void;
  // Unused units given back to the global budget.
  returned(units: number): void;
  // A request waited for units from the global Redis (its key had no allowance in the region yet,
  // or a spent one with units on their way).
  waited(): void;
  // Hits admitted while partitioned beyond what the region held (policy allow or a share).
  overshoot(hits: number): void;
  // Hits admitted while partitioned, written into the global budget after it came back.
  reconciled(hits: number): void;
}

export const silentRegionEvents: RegionEvents = {
  globalCall() {},
  globalReachable() {},
  leased() {},
  returned() {},
  waited() {},
  overshoot() {},
  reconciled() {},
};
