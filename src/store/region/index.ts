import type { Clock } from '../../clock';
import type { PartitionPolicy } from './partition';
import type { RedisStore } from '../redis';
import type { DecideOptions } from '../store';
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

export interface RegionContext {
  clock: Clock;
  replicas: () => number;
  budgetMs: (options: DecideOptions) => number;
}

// The multi-region layer over the region's own Redis: its allowances, their refills from the
// global Redis, and what happens when that is out of reach (docs/multi-region.md).
export function createRegion(regional: RedisStore, o: RegionOptions, ctx: RegionContext): RegionalStore {
  const keys = regionKeys(o.region);
  let store: RegionalStore | undefined;
  const link = new GlobalLink(o.global, { clock: ctx.clock, timeoutMs: o.timeoutMs, events: o.events, onRecover: () => store?.reconcile() ?? Promise.resolve() });
  const refiller = new Refiller(regional, link, keys, {
    region: o.region,
    clock: ctx.clock,
    horizonMs: o.horizonMs,
    leaseTtlMs: o.leaseTtlMs,
    timeoutMs: o.timeoutMs,
    replicas: ctx.replicas,
    events: o.events,
  });
  store = new RegionalStore(regional, link, refiller, keys, {
    region: o.region,
    clock: ctx.clock,
    policy: o.policy,
    domainPolicies: o.domainPolicies,
    budgetMs: ctx.budgetMs,
    replicaHorizonMs: o.replicaHorizonMs,
    events: o.events,
  });
  const s = store;
  o.report?.({ reachable: () => link.reachable, held: () => s.heldUnits(), leaseSize: () => refiller.meanSize() });
  return store;
}

export { RegionalStore } from './regional-store';
export { silentRegionEvents, type RegionEvents } from './events';
