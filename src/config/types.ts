import type { Algorithm, Unit } from '../model';

// Where a piece of config came from, for error messages and /rlconfig.
export interface SourceRef {
  file: string;
  line?: number;
}

// A compiled `rate_limit` block (plus the descriptor-level flags that belong to it).
export interface RateLimitRule {
  // Stats key as envoyproxy/ratelimit builds it: "<domain>.<key>_<value>.<key>" (value omitted for
  // value-less default keys, the wildcard pattern kept as written).
  fullKey: string;
  // rate_limit.name, '' when not given. Reported in current_limit.name and used by `replaces`.
  name: string;
  // The unit reported to Envoy in current_limit (Envoy's message cannot express "30 seconds").
  unit: Unit;
  requestsPerUnit: number;
  unlimited: boolean;
  algorithm: Algorithm;
  // Window length (fixed/sliding window) or refill period (token bucket, GCRA), in ms:
  // unit × unit_multiplier, or `window`.
  periodMs: number;
  // Token bucket capacity / GCRA burst tolerance in requests. Defaults to requestsPerUnit.
  burst: number;
  // Aggregate remote_address / masked_remote_address values to these prefix lengths in the
  // counter key, so one counter covers a client network (`ip_prefix` in rate_limit).
  ipPrefix?: { v4: number; v6: number };
  // Units per leased batch (`lease: {size: N}`), served locally by each replica.
  leaseSize?: number;
  shadowMode: boolean;
  quotaMode: boolean;
  detailedMetric: boolean;
  replaces: string[];
  // Rule `metadata`, returned in dynamic metadata when RESPONSE_DYNAMIC_METADATA is on.
  metadata?: Record<string, unknown>;
  source: SourceRef;
}

export interface WildcardEntry {
  // The value pattern as written, e.g. "/v1/*" or "foo*bar*"; '*' matches any run of characters.
  pattern: string;
  parts: string[];
  node: DescriptorNode;
}

// One level of the descriptor tree. Matching an entry (key, value) at this level tries, in order:
// byKey.get(key).values.get(value), then byKey.get(key).wildcards in declaration order, then
// byKey.get(key).defaultNode (the value-less rule).
export interface KeyBranch {
  values: Map<string, DescriptorNode>;
  wildcards: WildcardEntry[];
  defaultNode?: DescriptorNode;
}

export interface DescriptorNode {
  children: Map<string, KeyBranch>;
  rule?: RateLimitRule;
  valueToMetric: boolean;
  shareThreshold: boolean;
}

export interface CompiledConfig {
  domains: Map<string, DescriptorNode>;
  // The files that were loaded, in load order.
  files: string[];
}

// The limit that applies to one request descriptor, as found by match().
export interface MatchedLimit {
  rule: RateLimitRule;
  // Stats key for this descriptor after detailed_metric / value_to_metric / share_threshold.
  statKey: string;
  // Where statKey holds request values (detailed_metric, value_to_metric, a request override): its
  // parts, the domain then one "<key>_<value>" per entry, kept whole because a value may itself
  // contain dots (1.2.3.4, api.example.com); statKey is them joined with '.'. Absent for a rule's
  // own key (rule.fullKey).
  statParts?: string[];
  // The entries that identify the counter: equal to the request's entries, except that an entry
  // matched by a share_threshold wildcard carries the pattern instead of its value, so all values
  // matching the pattern share one counter.
  counterEntries: { key: string; value: string }[];
  // True when the limit came from the request's own override, not from config.
  fromOverride: boolean;
}
