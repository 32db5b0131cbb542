import { UNIT_SECONDS } from '../model';
import type { CompiledConfig, DescriptorNode, RateLimitRule } from './types';

function collect(node: DescriptorNode, out: RateLimitRule[]): void {
  if (node.rule !== undefined) out.push(node.rule);
  for (const branch of node.children.values()) {
    if (branch.defaultNode !== undefined) collect(branch.defaultNode, out);
    for (const child of branch.values.values()) collect(child, out);
    for (const w of branch.wildcards) collect(w.node, out);
  }
}

function extensions(rule: RateLimitRule): string {
  const defaultPeriod = UNIT_SECONDS[rule.unit] * 1000;
  const hasBurst = rule.algorithm === 'token_bucket' || rule.algorithm === 'gcra';
  const isDefault =
    rule.algorithm === 'fixed_window' && rule.periodMs === defaultPeriod && rule.burst === rule.requestsPerUnit;
  if (rule.unlimited || isDefault) return '';
  const burst = hasBurst ? ` burst=${rule.burst}` : '';
  return `, algorithm=${rule.algorithm} period=${rule.periodMs / 1000}s${burst}`;
}

// Upstream's /rlconfig line, except that an unlimited rule says so (upstream prints
// `unit=UNKNOWN requests_per_unit=0`, which reads like a limit of 0).
function line(rule: RateLimitRule): string {
  const limit = rule.unlimited ? 'unlimited' : `unit=${rule.unit.toUpperCase()} requests_per_unit=${rule.requestsPerUnit}`;
  return `${rule.fullKey}: ${limit}, shadow_mode: ${rule.shadowMode}, quota_mode: ${rule.quotaMode}${extensions(rule)}\n`;
}

// Text for the HTTP /rlconfig endpoint: one line per rule, domains in load order, rules in the
// order they were declared (upstream prints Go map order, i.e. random).
export function dumpConfig(config: CompiledConfig): string {
  const fileIndex = new Map(config.files.map((f, i) => [f, i]));
  let out = '';
  for (const root of config.domains.values()) {
    const rules: RateLimitRule[] = [];
    collect(root, rules);
    rules.sort(
      (a, b) =>
        (fileIndex.get(a.source.file) ?? 0) - (fileIndex.get(b.source.file) ?? 0) ||
        (a.source.line ?? 0) - (b.source.line ?? 0),
    );
    for (const rule of rules) out += line(rule);
  }
  return out;
}
