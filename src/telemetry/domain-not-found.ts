import { Counter, type Registry } from 'prom-client';

// Calls for a domain no config defines: upstream's DomainStats.NotFound, one per descriptor as
// upstream counts it (its GetLimit runs per descriptor). statsd: ratelimit.service.rate_limit.
// <domain>.domain_not_found as upstream writes it; Prometheus: the per-rule family's name with a
// domain label, ratelimit_service_rate_limit_domain_not_found{domain} (upstream's mapping has no rule
// for it, so its exporter would put the domain in the metric's name).
//
// The domain comes from the caller, so anyone can mint new ones: the first MAX_DOMAIN_LABELS
// distinct domains (of at most MAX_DOMAIN_LABEL_LENGTH characters) get a series of their own,
// every later or longer one is counted under OTHER_DOMAINS. Per process: under WORKERS > 1 each
// worker keeps its own first 100.
export const MAX_DOMAIN_LABELS = 100;
export const MAX_DOMAIN_LABEL_LENGTH = 128;
export const OTHER_DOMAINS = '_other_';

export class DomainNotFound {
  private readonly counts = new Map<string, number>();

  constructor(registers: Registry[]) {
    const counts = this.counts;
    new Counter({
      name: 'ratelimit_service_rate_limit_domain_not_found',
      help: `Descriptors of calls for a domain no config defines (answered OK, no limit); past ${MAX_DOMAIN_LABELS} domains, domain="${OTHER_DOMAINS}"`,
      labelNames: ['domain'],
      registers,
      collect() {
        this.reset();
        for (const [domain, n] of counts) this.inc({ domain }, n);
      },
    });
  }

  record(domain: string, descriptors: number): void {
    let label = domain.length <= MAX_DOMAIN_LABEL_LENGTH ? domain : OTHER_DOMAINS;
    if (!this.counts.has(label) && this.counts.size >= MAX_DOMAIN_LABELS) label = OTHER_DOMAINS;
    this.counts.set(label, (this.counts.get(label) ?? 0) + descriptors);
  }

  // Totals since start by domain label, for the statsd names.
  totals(): Iterable<[domain: string, count: number]> {
    return this.counts.entries();
  }
}
