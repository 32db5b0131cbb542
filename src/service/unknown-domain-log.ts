import type { Clock } from '../clock';
import { didYouMean } from '../config/suggest';
import type { Logger } from '../logger';
import { BoundedMap } from '../store/bounded-map';

// A warn line for a call whose domain no config defines (a typo in Envoy's `domain:` is otherwise
// invisible: the answer is OK with no limit, as upstream's). Once per domain per minute, and at most
// LINES_PER_MINUTE such lines a minute in all, so that a caller sending a million distinct domains
// costs neither unbounded memory nor a flooded log: past the cap, calls are only counted, and the
// next unknown-domain call after the minute logs how many went unlogged. The metric
// (telemetry/domain-not-found.ts) counts every call.
export const LINES_PER_MINUTE = 100;
const MINUTE_MS = 60_000;
// Longer domains are logged cut to this many characters (with their length), and remembered so.
const SHOWN_CHARS = 128;

export class UnknownDomainLog {
  // Domain → when it was last logged. At most 2 × LINES_PER_MINUTE lines fall in any 60 s, and the
  // map keeps at least the last half of its bound: every domain logged within the last minute is
  // still in it.
  private readonly lastLogged = new BoundedMap<string, number>(4 * LINES_PER_MINUTE);
  private windowStart = -Infinity;
  private linesInWindow = 0;
  private unlogged = 0;

  constructor(
    private readonly logger: Logger,
    private readonly clock: Clock,
  ) {}

  note(domain: string, descriptors: number, knownDomains: () => Iterable<string>): void {
    const now = this.clock.now();
    const shown = domain.length > SHOWN_CHARS ? domain.slice(0, SHOWN_CHARS) : domain;
    const last = this.lastLogged.get(shown);
    if (last !== undefined && now - last < MINUTE_MS) return;
    if (now - this.windowStart >= MINUTE_MS) this.newWindow(now);
    if (this.linesInWindow >= LINES_PER_MINUTE) {
      this.unlogged++;
      return;
    }
    this.linesInWindow++;
    this.lastLogged.set(shown, now);
    const cut = shown.length < domain.length;
    // A suggestion only for a domain short enough to be a typo (edit distance is quadratic).
    const hint = cut ? '' : didYouMean(domain, knownDomains());
    this.logger.warn(
      { event: 'unknown_domain', domain: shown, ...(cut ? { domain_length: domain.length } : {}), descriptors },
      `unknown domain '${shown}${cut ? '…' : ''}': no config defines it; answered OK with no limit${hint}. Check the domain in Envoy's rate limit config (logged once a minute per domain)`,
    );
  }

  private newWindow(now: number): void {
    if (this.unlogged > 0) {
      this.logger.warn(
        { event: 'unknown_domain_unlogged', calls: this.unlogged, since: new Date(this.windowStart).toISOString() },
        `${this.unlogged} calls for unknown domains went unlogged in the minute from ${new Date(this.windowStart).toISOString()} (more than ${LINES_PER_MINUTE} unknown-domain lines that minute); ratelimit_service_rate_limit_domain_not_found counts them all`,
      );
    }
    this.windowStart = now;
    this.linesInWindow = 0;
    this.unlogged = 0;
  }
}
