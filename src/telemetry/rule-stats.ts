import type { MatchedLimit } from '../config/types';

// Upstream's utils.SanitizeStatName: ':' and '|' would end the name in a statsd line, and the dots
// of an IPv4 address would split it into path segments.
export function sanitizeStatName(name: string): string {
  return name.replace(/[:|]/g, '_').replace(/\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}/g, (ip) => ip.replaceAll('.', '_'));
}

export interface RuleLabels {
  domain: string;
  key1: string;
  key2: string;
}

// The Prometheus labels of a rule's series (ratelimit_service_rate_limit_<stat>). A rule's own key
// gets what upstream's statsd-exporter mapping makes of its statsd name: the sanitized name split on
// dots, key1 and key2 its first two parts after the domain (later parts are dropped, as upstream).
// A key that holds request values (detailed_metric, value_to_metric, a request override) has its
// parts whole from match(): splitting the joined key would cut a value such as 1.2.3.4 or
// api.example.com apart, and put different values in one series.
export function ruleLabels(m: MatchedLimit): RuleLabels {
  const [domain = '', key1 = '', key2 = ''] = m.statParts ?? sanitizeStatName(m.statKey).split('.');
  return { domain, key1, key2 };
}
