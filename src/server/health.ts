import { EventEmitter } from 'node:events';
import type { Rejection } from '../config/holder';
import { PER_SECOND_LABEL } from '../store/persecond';

export type ServingStatus = 'SERVING' | 'NOT_SERVING';

// The names the gRPC health service answers for: "" (the whole server) and "ratelimit"
// (upstream's service name).
export const HEALTH_SERVICES = ['', 'ratelimit'] as const;

// Serving only when a config is loaded, the store is ready and the process is not shutting down.
export class HealthState extends EventEmitter {
  private configLoaded = false;
  private configRejection?: Rejection;
  private shuttingDown = false;
  // WORKERS > 1 (server/workers.ts): why other workers of the set are not serving. The set answers
  // as one, so this process is not ready either until they all are.
  private peers: readonly string[] = [];

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

  // What the store says about itself now, serving or not (e.g. 'Redis unreachable').
  storeNow(): string | undefined {
    return this.storeDegraded();
  }

  setConfigLoaded(loaded: boolean): void {
    this.update(() => (this.configLoaded = loaded));
  }

  // The latest reload was rejected (undefined: it was not). Reported, never a reason to stop
  // serving: the last good config still answers.
  setConfigRejected(rejection: Rejection | undefined): void {
    this.configRejection = rejection;
  }

  // What a person should know about a SERVING process: degraded answers, a rejected reload.
  notes(): string[] {
    if (this.status !== 'SERVING') return [];
    const out: string[] = [];
    const degraded = this.degraded();
    if (degraded !== undefined) out.push(`degraded: ${plainDegradedReason(degraded)}`);
    const rejected = this.rejectionText('config reload rejected');
    if (rejected !== undefined) out.push(`${rejected}; still serving the last good config`);
    return out;
  }

  private rejectionText(what: string): string | undefined {
    const r = this.configRejection;
    if (r === undefined) return undefined;
    const first = r.errors[0]?.message ?? 'unknown error';
    const more = r.errors.length > 1 ? ` (and ${r.errors.length - 1} more error(s))` : '';
    return `${what} since ${r.since.toISOString()}: ${first}${more}`;
  }

  setPeers(reasons: readonly string[]): void {
    this.update(() => (this.peers = reasons));
  }

  setShuttingDown(): void {
    this.update(() => (this.shuttingDown = true));
  }

  // Re-evaluates after the store's readiness may have changed.
  refresh(): void {
    this.update(() => undefined);
  }

  get status(): ServingStatus {
    return this.ownStatus === 'SERVING' && this.peers.length === 0 ? 'SERVING' : 'NOT_SERVING';
  }

  // This process alone, whatever the other workers say: what a worker reports to the primary.
  get ownStatus(): ServingStatus {
    return this.configLoaded && !this.shuttingDown && this.storeReady() ? 'SERVING' : 'NOT_SERVING';
  }

  // Reasons for NOT_SERVING, for /healthcheck's body.
  reasons(): string[] {
    return [...this.ownReasons(), ...this.peers];
  }

  ownReasons(): string[] {
    const out: string[] = [];
    if (!this.configLoaded) {
      const rejected = this.rejectionText('config rejected');
      out.push(rejected === undefined ? 'no config loaded' : `no config loaded (${rejected})`);
    }
    if (!this.storeReady()) out.push('store not ready');
    if (this.shuttingDown) out.push('shutting down');
    return out;
  }

  private lastStatus: ServingStatus = 'NOT_SERVING';
  private lastOwn: ServingStatus = 'NOT_SERVING';

  // 'change': the status served; 'own-change': this process' own (see ownStatus).
  private update(change: () => void): void {
    change();
    const now = this.status;
    if (now !== this.lastStatus) {
      this.lastStatus = now;
      this.emit('change', now);
    }
    const own = this.ownStatus;
    if (own !== this.lastOwn) {
      this.lastOwn = own;
      this.emit('own-change', own);
    }
  }
}

// Why answers are degraded, in sluice's words: what the store stages report, with the Redis
// client's own error texts (logged in full as store_failure events) turned into what happened.
// ioredis' texts for "not connected"; a Redis error reply starts with its code (OOM, READONLY, ...).
const CONNECTION =
  /Stream isn't writeable|enableOfflineQueue|Connection is closed|connection (lost|closed)|Socket closed|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN|max retries|MaxRetriesPerRequest|None of the pools|not connected|Failed to refresh slots cache|ClusterAllFailedError/i;

function plainPart(part: string, storeNow?: string): string {
  const storeError = /^store error: (.*)$/s.exec(part);
  if (storeError !== null) {
    const text = storeError[1];
    if (CONNECTION.test(text)) return 'Redis connection down';
    const reply = /^([A-Z][A-Z_]+)\b/.exec(text);
    return reply !== null ? `Redis answered with an error (${reply[1]})` : 'the Redis call failed';
  }
  const deadline = /^no answer from Redis within (\d+) ms( \(this process was busy: event-loop lag (\d+) ms\))?$/.exec(part);
  if (deadline !== null) {
    const busy = deadline[2] === undefined ? '' : ` (sluice itself was busy: event-loop lag ${deadline[3]} ms)`;
    return `Redis did not answer within the deadline (${deadline[1]} ms)${busy}`;
  }
  if (part === 'no time left before the caller deadline') return "the caller's deadline left no time to ask Redis";
  const breaker = /^circuit breaker (open|half_open)$/.exec(part);
  if (breaker !== null) {
    const state = breaker[1] === 'open' ? 'circuit breaker open' : 'circuit breaker half open';
    // The breaker opens for any failure; when the connection is what is down, say that.
    if (storeNow?.startsWith('Redis unreachable')) return `Redis connection down (${state})`;
    return `Redis calls suspended after repeated failures (${state})`;
  }
  return part;
}

// Parts the stages append to a reason; what comes before them may itself contain '; '.
const SUFFIXES: [RegExp, (m: RegExpExecArray) => string][] = [
  [/; write-back journal full$/, () => "the fallback's write-back journal is full"],
  [/; fallback policy (\w+)$/, (m) => `fallback policy ${m[1]}`],
];

// `storeNow`: what the store says about itself now (HealthState.degraded()), when known.
export function plainDegradedReason(reason: string, storeNow?: string): string {
  const [main, second] = perSecondSides(reason);
  if (second === undefined) return plainSide(reason, storeNow);
  const [mainNow, secondNow] = perSecondSides(storeNow);
  const words = `${PER_SECOND_LABEL}${plainSide(second, secondNow)}`;
  return main === undefined ? words : `${plainSide(main, mainNow)}; ${words}`;
}

// With REDIS_PERSECOND, what the per-second Redis' stack says comes last, labelled
// (store/persecond.ts): each side is put in words with what its own Redis says now.
function perSecondSides(text: string | undefined): [string | undefined, string | undefined] {
  const at = text?.indexOf(PER_SECOND_LABEL) ?? -1;
  if (text === undefined || at < 0) return [text, undefined];
  const main = text.slice(0, at).replace(/; $/, '');
  return [main === '' ? undefined : main, text.slice(at + PER_SECOND_LABEL.length)];
}

function plainSide(reason: string, storeNow?: string): string {
  for (const [re, text] of SUFFIXES) {
    const m = re.exec(reason);
    if (m !== null) return `${plainSide(reason.slice(0, m.index), storeNow)}; ${text(m)}`;
  }
  return plainPart(reason, storeNow);
}
