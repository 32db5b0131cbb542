import { UNIT_SECONDS, type Descriptor, type Entry } from '../model';
import type { CompiledConfig, DescriptorNode, MatchedLimit, RateLimitRule, WildcardEntry } from './types';

// envoyproxy/ratelimit's wildcardMatch: `parts` is the pattern split on '*'; each '*' matches any
// run of characters, possibly empty. No allocation per call.
export function wildcardMatch(parts: readonly string[], value: string): boolean {
  if (parts.length === 1) return parts[0] === value;
  const first = parts[0];
  const last = parts[parts.length - 1];
  if (!value.startsWith(first) || !value.endsWith(last)) return false;
  let fixed = 0;
  for (const p of parts) fixed += p.length;
  if (value.length < fixed) return false;
  // Middle parts must appear in order between the matched prefix and suffix.
  const end = value.length - last.length;
  let pos = first.length;
  for (let i = 1; i < parts.length - 1; i++) {
    const idx = value.indexOf(parts[i], pos);
    if (idx < 0 || idx + parts[i].length > end) return false;
    pos = idx + parts[i].length;
  }
  return true;
}

function findWildcard(wildcards: readonly WildcardEntry[], value: string): WildcardEntry | undefined {
  for (const w of wildcards) if (wildcardMatch(w.parts, value)) return w;
  return undefined;
}

function entryKey(key: string, value: string): string {
  return value === '' ? key : `${key}_${value}`;
}

// match()'s per-entry shown values, reused from call to call (a match runs to completion, never
// interleaved with another) so that a match allocates no array of its own. It holds the longest
// descriptor's count of strings from earlier requests until they are overwritten.
const shownScratch: string[] = [];

// The value_to_metric stats key's parts: the domain, then "<key>_<shown value>" per entry.
function metricParts(domain: string, entries: readonly Entry[], shown: readonly string[]): string[] {
  const parts = [domain];
  for (let i = 0; i < entries.length; i++) parts.push(entryKey(entries[i].key, shown[i]));
  return parts;
}

// A request-side override replaces the configured limit entirely (upstream: no shadow mode, no
// name, stats under the full request key).
function overrideLimit(domain: string, d: Descriptor): MatchedLimit {
  const o = d.limitOverride!;
  const statParts = [domain, ...d.entries.map((e) => entryKey(e.key, e.value))];
  const key = statParts.join('.');
  const rule: RateLimitRule = {
    fullKey: key,
    name: '',
    unit: o.unit,
    requestsPerUnit: o.requestsPerUnit,
    unlimited: false,
    algorithm: 'fixed_window',
    periodMs: UNIT_SECONDS[o.unit] * 1000,
    burst: o.requestsPerUnit,
    shadowMode: false,
    quotaMode: false,
    detailedMetric: false,
    replaces: [],
    source: { file: '(request limit override)' },
  };
  return { rule, statKey: key, statParts, counterEntries: d.entries, fromOverride: true };
}

// detailed_metric: every request value, or the share_threshold pattern where one matched.
function detailedParts(domain: string, entries: readonly Entry[], patterns: (string | undefined)[] | undefined): string[] {
  const parts = [domain];
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    const pattern = patterns?.[i];
    // Upstream writes "<key>_<value>" here even for an empty value; kept so stats names agree.
    parts.push(patterns === undefined ? `${e.key}_${e.value}` : entryKey(e.key, pattern ?? e.value));
  }
  return parts;
}

function counterEntries(entries: Entry[], patterns: (string | undefined)[] | undefined): Entry[] {
  if (patterns === undefined) return entries;
  return entries.map((e, i) => (patterns[i] === undefined ? e : { key: e.key, value: patterns[i]! }));
}

// The limit for one descriptor, as envoyproxy/ratelimit's GetLimit: at each level try the exact
// value, then the key's wildcard patterns in declaration order, then its value-less default. The
// node matched by the last entry must carry the rule.
export function match(config: CompiledConfig, domain: string, descriptor: Descriptor): MatchedLimit | undefined {
  const root = config.domains.get(domain);
  if (root === undefined) return undefined;
  if (descriptor.limitOverride !== undefined) return overrideLimit(domain, descriptor);
  const entries = descriptor.entries;
  if (entries.length === 0) return undefined;

  let node: DescriptorNode = root;
  // What each entry shows in the value_to_metric stats key (their key equals rule.fullKey when no
  // flag is set). The key is built only for a flagged match: this runs for every descriptor of
  // every request, and most rules have no flag.
  const shownValues = shownScratch;
  let flagged = false;
  let patterns: (string | undefined)[] | undefined;
  for (let i = 0; i < entries.length; i++) {
    const { key, value } = entries[i];
    const branch = node.children.get(key);
    if (branch === undefined) return undefined;
    let next = branch.values.get(value);
    let shown = value;
    if (next === undefined) {
      const w = findWildcard(branch.wildcards, value);
      if (w !== undefined) {
        next = w.node;
        if (next.shareThreshold) (patterns ??= new Array(entries.length))[i] = w.pattern;
        shown = next.valueToMetric && !next.shareThreshold ? value : w.pattern;
      } else {
        next = branch.defaultNode;
        if (next === undefined) return undefined;
        shown = next.valueToMetric ? value : '';
      }
    }
    flagged ||= next.valueToMetric || next.shareThreshold;
    shownValues[i] = shown;
    node = next;
  }

  const rule = node.rule;
  if (rule === undefined) return undefined;
  const statParts = rule.detailedMetric ? detailedParts(domain, entries, patterns) : flagged ? metricParts(domain, entries, shownValues) : undefined;
  const matched: MatchedLimit = {
    rule,
    statKey: statParts === undefined ? rule.fullKey : statParts.join('.'),
    counterEntries: counterEntries(entries, patterns),
    fromOverride: false,
  };
  if (statParts !== undefined) matched.statParts = statParts;
  return matched;
}
