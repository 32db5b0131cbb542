import type { LeaseGrant } from '../shared';
import { AutoLeases, type AutoLeaseOptions, type LeasePolicy } from '../stages/lease-policy';
import type { LimitCheck } from '../store';
import type { RegionalStore } from './regional-store';

// The lease stage's policy in a region whose replicas lease from the region's allowances
// (REPLICA_LEASE_HORIZON > 0): every enforced key is leased, sized by this replica's own demand,
// and a request never waits for a take (its lease cannot serve it: the regional Redis does, one
// regional round trip, as without replica leases).
export class ReplicaLeases implements LeasePolicy {
  constructor(
    private readonly region: RegionalStore,
    // GLOBAL_LEASE_TTL: the allowance says when its next units can land, and what other replicas
    // hold of it are a lease's crumbs; units come back within it.
    readonly unitsBackWithinMs: number,
  ) {}

  size(check: LimitCheck): number {
    return this.region.replicaLeaseSize(check);
  }

  leased(): boolean {
    return true;
  }

  waitMs(): number {
    return 0;
  }

  // Not while cut off from the global Redis: the partition policy answers then.
  mayDenyLocally(): boolean {
    return this.region.globalReachable();
  }

  // An empty allowance gets units a global round trip after its refill starts, at the soonest.
  exhaustedFor(grant: LeaseGrant): { forMs: number; retryAfterMs: number } {
    const retryAfterMs = Math.max(grant.retryAfterMs, this.region.globalRoundTripMs());
    return { forMs: Math.min(retryAfterMs, this.unitsBackWithinMs), retryAfterMs };
  }

  // Taken again as soon as units may be back, while the key is asked for: its next request finds a
  // lease instead of going to the regional Redis.
  retake(check: LimitCheck, requested: boolean): boolean {
    return requested || this.region.asked(check);
  }
}

// Without replica leases: the single-Redis policy (rule leases, hot keys), except that a key is
// not denied here while the region is cut off from the global Redis (the partition policy answers).
export class RegionAutoLeases extends AutoLeases {
  constructor(
    private readonly region: RegionalStore,
    o: AutoLeaseOptions,
  ) {
    super(o);
  }

  override mayDenyLocally(): boolean {
    return this.region.globalReachable();
  }
}
