import { EventEmitter } from 'node:events';

export type ServingStatus = 'SERVING' | 'NOT_SERVING';

// The names the gRPC health service answers for: "" (the whole server) and "ratelimit"
// (upstream's service name).
export const HEALTH_SERVICES = ['', 'ratelimit'] as const;

// Serving only when a config is loaded, the store is ready and the process is not shutting down.
export class HealthState extends EventEmitter {
  private configLoaded = false;
  private shuttingDown = false;

  constructor(
    private readonly storeReady: () => boolean,
    private readonly storeDegraded: () => string | undefined = () => undefined,
  ) {
    super();
  }

  // Serving, but not as intended (e.g. Redis unreachable, a fallback answers).
  degraded(): string | undefined {
    return this.status === 'SERVING' ? this.storeDegraded() : undefined;
  }

  setConfigLoaded(loaded: boolean): void {
    this.update(() => (this.configLoaded = loaded));
  }

  setShuttingDown(): void {
    this.update(() => (this.shuttingDown = true));
  }

  // Re-evaluates after the store's readiness may have changed.
  refresh(): void {
    this.update(() => undefined);
  }

  get status(): ServingStatus {
    return this.configLoaded && !this.shuttingDown && this.storeReady() ? 'SERVING' : 'NOT_SERVING';
  }

  // Reasons for NOT_SERVING, for /healthcheck's body.
  reasons(): string[] {
    const out: string[] = [];
    if (!this.configLoaded) out.push('no config loaded');
    if (!this.storeReady()) out.push('store not ready');
    if (this.shuttingDown) out.push('shutting down');
    return out;
  }

  private lastStatus: ServingStatus = 'NOT_SERVING';

  private update(change: () => void): void {
    change();
    const now = this.status;
    if (now !== this.lastStatus) {
      this.lastStatus = now;
      this.emit('change', now);
    }
  }
}
