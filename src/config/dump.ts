import { UNIT_SECONDS } from '../model';
import { formatDuration } from './duration';
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
  const isDefault = rule.algorithm === 'fixed_window' && rule.periodMs === defaultPeriod && rule.burst === rule.requestsPerUnit;
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

// Every rule of the config: domains in load order, rules in the order they were declared.
export function rulesInOrder(config: CompiledConfig): RateLimitRule[] {
  const fileIndex = new Map(config.files.map((f, i) => [f, i]));
  const out: RateLimitRule[] = [];
  for (const root of config.domains.values()) {
    const rules: RateLimitRule[] = [];
    collect(root, rules);
    rules.sort((a, b) => (fileIndex.get(a.source.file) ?? 0) - (fileIndex.get(b.source.file) ?? 0) || (a.source.line ?? 0) - (b.source.line ?? 0));
    out.push(...rules);
  }
  return out;
}

// Text for the HTTP /rlconfig endpoint: one line per rule, in rulesInOrder's order (upstream
// prints Go map order, i.e. random).
export function dumpConfig(config: CompiledConfig): string {
  return rulesInOrder(config).map(line).join('');
}

// What Envoy is told for each rule whose window is not exactly one unit: current_limit can only
// say "N per unit", so a 90 s window is reported as N per MINUTE (`sluice check` prints these).
export function windowNotes(config: CompiledConfig): string[] {
  const notes: string[] = [];
  for (const rule of rulesInOrder(config)) {
    if (rule.unlimited || rule.periodMs === UNIT_SECONDS[rule.unit] * 1000) continue;
    const where = rule.source.line === undefined ? rule.source.file : `${rule.source.file}:${rule.source.line}`;
    const told = `${rule.requestsPerUnit} per ${rule.unit.toUpperCase()}`;
    notes.push(
      `${where}: note: '${rule.fullKey}' has a ${formatDuration(rule.periodMs)} window, which Envoy's current_limit cannot express: Envoy is told ${told}`,
    );
  }
  return notes;
}
