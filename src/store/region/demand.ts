import type { DecideOptions, Decision, LimitCheck, Store } from '../store';
import { Stage } from '../stages/stage';
import type { RegionalStore } from './regional-store';

// The top of a multi-region stack: every request's hits are the region's demand, whichever stage
// answers it (a replica's lease, a remembered denial, the regional Redis), so lease sizes and the
// region's share of the global budget follow what is asked, not what got through. A caller that
// decides for others (RLQS) declares their demand instead of its hits.
export class DemandStage extends Stage {
  constructor(
    inner: Store,
    private readonly region: RegionalStore,
  ) {
    super(inner);
  }

  override decide(checks: readonly LimitCheck[], options: DecideOptions): Promise<Decision> {
    if (options.demand === undefined) this.region.note(checks);
    else this.region.declare(checks, options.demand);
    return this.inner.decide(checks, options);
  }

  // A region cut off from the global Redis answers (from its allowances, then by its policy) with
  // its own Redis healthy: that is said beside what the stages say about the regional Redis.
  override degraded(): string | undefined {
    return this.inner.degraded?.() ?? this.region.degraded();
  }
}
