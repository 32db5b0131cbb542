import { buildRedisStack, type RedisStackOptions, type StackBase, type StackContext } from '../compose';
import type { StoreEvents } from '../events';
import type { RedisStore } from '../redis';
import type { Store } from '../store';
import { DemandStage } from './demand';
import { createRegion, type RegionOptions } from './index';
import { RegionAutoLeases, ReplicaLeases } from './lease-policy';
import type { RegionalStore } from './regional-store';

// Multi-region (GLOBAL_REDIS_URL): the ordinary Redis stack (store/compose.ts), on the region's
// allowances instead of the regional Redis itself, with the region's lease policy, under one stage
// that counts every request as the region's demand:
//
//   regional Redis ← region (allowances, refills from the global Redis) ← the stack's stages
//     ← demand
//
// The stages see the region as their shared store: their decisions, leases and refunds go to its
// allowances, the fallback's write-backs to the global budget.
export function createRegionalStack(regional: RedisStore, events: StoreEvents, o: RedisStackOptions, region: RegionOptions): Store {
  const { store, base } = buildRedisStack(regional, events, o, (redis, ctx) => regionBase(redis, region, ctx));
  return new DemandStage(store, base.region);
}

function regionBase(regional: RedisStore, o: RegionOptions, ctx: StackContext): StackBase & { region: RegionalStore } {
  const region = createRegion(regional, o, ctx);
  // A replica's lease of the allowance answers without the regional Redis; a request it cannot
  // serve goes the ordinary way at once (one regional round trip, as without leases).
  const leasePolicy: StackBase['leasePolicy'] = (defaults) =>
    region.replicaLeases ? new ReplicaLeases(region, o.leaseTtlMs) : new RegionAutoLeases(region, defaults);
  return { store: region, region, leasePolicy };
}
