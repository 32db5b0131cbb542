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
// parts whole from match() (StatKey): splitting the joined key would cut a value such as 1.2.3.4 or
// api.example.com apart, and put different values in one series.
export function ruleLabels(key: StatKey): RuleLabels {
  const [domain = '', key1 = '', key2 = ''] = key.own ? statName(key).split('.') : key.parts;
  return { domain, key1, key2 };
}

// A rule's stats key as a tuple: `parts` (the domain, then one "<key>_<value>" per entry, request
// values whole) where the key holds request values, else the rule's own key alone. Tallies are kept
// by this tuple, never by the parts joined with '.': values may hold dots, and two different tuples
// would join to one string.
export interface StatKey {
  own: boolean;
  parts: readonly string[];
}

// A rule's own key, made once per compiled rule: statKeyOf runs for every limited descriptor of
// every request.
const ownKeys = new WeakMap<MatchedLimit['rule'], StatKey>();

export function statKeyOf(m: MatchedLimit): StatKey {
  if (m.statParts !== undefined) return { own: false, parts: m.statParts };
  let key = ownKeys.get(m.rule);
  if (key === undefined) ownKeys.set(m.rule, (key = { own: true, parts: [m.rule.fullKey] }));
  return key;
}

// The name statsd writes for a stats key (upstream's: the key's parts joined with '.', sanitized).
export function statName(key: StatKey): string {
  return sanitizeStatName(key.parts.join('.'));
}

interface TupleNode<V> {
  value?: V;
  next?: Map<string, TupleNode<V>>;
}

// Values by stats key, looked up part by part (no joined string is built per request).
export class StatKeyMap<V> {
  private readonly own: TupleNode<V> = {};
  private readonly detailed: TupleNode<V> = {};
  private readonly all: V[] = [];

  get(key: StatKey): V | undefined {
    let node: TupleNode<V> | undefined = key.own ? this.own : this.detailed;
    for (const part of key.parts) {
      node = node.next?.get(part);
      if (node === undefined) return undefined;
    }
    return node.value;
  }

  // Adds a value for a key that has none (get() returned undefined).
  add(key: StatKey, value: V): void {
    let node: TupleNode<V> = key.own ? this.own : this.detailed;
    for (const part of key.parts) {
      node.next ??= new Map();
      let child = node.next.get(part);
      if (child === undefined) node.next.set(part, (child = {}));
      node = child;
    }
    node.value = value;
    this.all.push(value);
  }

  values(): readonly V[] {
    return this.all;
  }
}
