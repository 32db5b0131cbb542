import type { Clock } from '../../clock';
import type { StoreEvents } from '../events';
import type { SharedOps } from '../shared';

export interface ReplicaOptions {
  id: string;
  // A replica that stops heartbeating stops counting after this, ms.
  ttlMs: number;
  events: StoreEvents;
  clock: Clock;
  // Each answer carries Redis time (for the store clock); sent/received local times.
  observe?: (nowMs: number, sentMs: number, receivedMs: number) => void;
  // The data epoch (see epoch.ts): what to propose, and what Redis said.
  epoch: { proposal: string; observe(epoch: string): void };
}

// Each replica registers itself in Redis with a short TTL, so every replica knows how many share
// the budget: the local fallback then admits 1/N of what remains (FALLBACK_SHARE=auto). During an
// outage the last count stands; replicas that die meanwhile keep being counted (conservative).
export class ReplicaRegistry {
  private live: number | undefined;
  private beating = false;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly shared: Pick<SharedOps, 'heartbeat' | 'leave'>,
    private readonly o: ReplicaOptions,
  ) {
    this.timer = setInterval(() => void this.beat(), Math.max(50, o.ttlMs / 5));
    this.timer.unref();
    void this.beat();
  }

  // Live replicas as last counted in Redis, this one included; undefined before the first count.
  get count(): number | undefined {
    return this.live;
  }

  async beat(): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    const sent = this.o.clock.now();
    try {
      const r = await this.shared.heartbeat(this.o.id, this.o.ttlMs, this.o.epoch.proposal);
      this.o.observe?.(r.nowMs, sent, this.o.clock.now());
      this.o.epoch.observe(r.epoch);
      const count = Math.max(1, r.replicas);
      if (count !== this.live) this.o.events.replicas(count);
      this.live = count;
    } catch {
      // Redis is away: the breaker and the fallback deal with that; the last count stands.
    } finally {
      this.beating = false;
    }
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.shared.leave(this.o.id).catch(() => undefined);
  }
}
