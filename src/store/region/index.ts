import type { PartitionPolicy } from './partition';
import type { RedisStore } from '../redis';
import type { StackContext } from '../compose';
import type { RegionEvents } from './events';
import { GlobalLink } from './global-link';
import { regionKeys } from './keys';
import { Refiller } from './refiller';
import { RegionalStore } from './regional-store';

export interface RegionOptions {
  region: string;
  // The Redis shared by all regions (the global budget).
  global: RedisStore;
  policy: PartitionPolicy;
  domainPolicies: ReadonlyMap<string, PartitionPolicy>;
  horizonMs: number;
  // A replica's lease of the region's allowance covers this much of its own demand (0: none).
  replicaHorizonMs: number;
  leaseTtlMs: number;
  timeoutMs: number;
  events: RegionEvents;
  // Hands out what metrics read at scrape time.
  report?: (state: RegionState) => void;
}

export interface RegionState {
  reachable(): boolean;
  held(): number;
  leaseSize(): number;
}

// The multi-region layer over the region's own Redis: its allowances, their refills from the
// global Redis, and what happens when that is out of reach (docs/multi-region.md). `ctx`: what the
// stack above it knows (store/compose.ts); stack.ts puts it under the stack.
export function createRegion(regional: RedisStore, o: RegionOptions, ctx: StackContext): RegionalStore {
  const keys = regionKeys(o.region);
  const link = new GlobalLink(o.global, { clock: ctx.clock, timeoutMs: o.timeoutMs, events: o.events });
  const refiller = new Refiller(regional, link, keys, {
    region: o.region,
    clock: ctx.clock,
    horizonMs: o.horizonMs,
    leaseTtlMs: o.leaseTtlMs,
    timeoutMs: o.timeoutMs,
    replicas: ctx.replicas,
    events: o.events,
  });
  const store = new RegionalStore(regional, link, refiller, keys, {
    region: o.region,
    clock: ctx.clock,
    policy: o.policy,
    domainPolicies: o.domainPolicies,
    budgetMs: ctx.budgetMs,
    replicaHorizonMs: o.replicaHorizonMs,
    events: o.events,
  });
  // Once the global Redis answers again, the region's own admissions go into its budget first.
  link.onRecover(() => store.reconcile());
  o.report?.({ reachable: () => link.reachable, held: () => store.heldUnits(), leaseSize: () => refiller.meanSize() });
  return store;
}

export { RegionalStore } from './regional-store';
export { silentRegionEvents, type RegionEvents } from './events';
