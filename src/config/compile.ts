import { ConfigError } from '../errors';
import { ALGORITHMS, UNITS, UNIT_SECONDS, type Algorithm, type Unit } from '../model';
import { parseDuration } from './duration';
import type { RawConfigFile, RawDescriptor, RawRateLimit } from './parse';
import { validChoices } from './suggest';
import type { CompiledConfig, DescriptorNode, KeyBranch, RateLimitRule } from './types';

export interface CompileOptions {
  // Files naming the same domain join one descriptor tree instead of being an error.
  mergeDomains: boolean;
}

export interface CompileResult {
  // Always built; only meaningful when `errors` is empty.
  config: CompiledConfig;
  errors: ConfigError[];
  // Accepted (upstream accepts them too) but almost certainly not what was meant.
  warnings: ConfigError[];
}

// Where each domain was first declared, for the error about a second declaration.
type DomainOrigins = Map<string, { file: string; line?: number }>;

interface Timing {
  unit: Unit;
  periodMs: number;
}

const BURST_ALGORITHMS: readonly Algorithm[] = ['token_bucket', 'gcra'];
const EXTENSION_KEYS = ['algorithm', 'burst', 'unit_multiplier', 'window', 'ip_prefix', 'lease'] as const;
const DEFAULT_IP_PREFIX = { v4: 24, v6: 64 };

function newNode(valueToMetric = false, shareThreshold = false): DescriptorNode {
  return { children: new Map(), valueToMetric, shareThreshold };
}

function parseUnit(text: string): Unit | undefined {
  const lower = text.toLowerCase();
  return UNITS.find((u) => u === lower);
}

// The unit reported to Envoy for a `window` without `unit`: the largest that fits in the window.
function unitForWindow(windowMs: number): Unit {
  let best: Unit = 'second';
  for (const u of UNITS) if (UNIT_SECONDS[u] * 1000 <= windowMs) best = u;
  return best;
}

// Adds `node` under (key, value) at `level`; false when that composite key is already taken.
function attach(level: DescriptorNode, key: string, value: string, node: DescriptorNode): boolean {
  let branch: KeyBranch | undefined = level.children.get(key);
  if (branch === undefined) {
    branch = { values: new Map(), wildcards: [] };
    level.children.set(key, branch);
  }
  if (value === '') {
    if (branch.defaultNode !== undefined) return false;
    branch.defaultNode = node;
  } else if (value.includes('*')) {
    if (branch.wildcards.some((w) => w.pattern === value)) return false;
    branch.wildcards.push({ pattern: value, parts: value.split('*'), node });
  } else {
    if (branch.values.has(value)) return false;
    branch.values.set(value, node);
  }
  return true;
}

const VALID_UNITS = UNITS.join(', ');
// One unit as a `window` (a month is 30 days and a year 365, as upstream counts them).
const ONE_UNIT_WINDOW: Record<Unit, string> = { second: '1s', minute: '1m', hour: '1h', day: '1d', week: '1w', month: '30d', year: '365d' };

class FileCompiler {
  constructor(
    readonly file: string,
    private readonly errors: ConfigError[],
    private readonly warnings: ConfigError[],
  ) {}

  error(detail: string, line?: number): void {
    this.errors.push(new ConfigError(this.file, detail, line));
  }

  warn(detail: string, line?: number): void {
    this.warnings.push(new ConfigError(this.file, detail, line));
  }

  loadLevel(level: DescriptorNode, parentKey: string, descriptors: RawDescriptor[]): void {
    for (const d of descriptors) this.loadDescriptor(level, parentKey, d);
  }

  // Keeps going after an error (into a detached node when needed) so that every problem of the
  // file is reported in one pass.
  private loadDescriptor(level: DescriptorNode, parentKey: string, d: RawDescriptor): void {
    const node = newNode(d.valueToMetric, d.shareThreshold);
    const key = d.key ?? '';
    const finalKey = d.value === '' ? key : `${key}_${d.value}`;
    const fullKey = parentKey + finalKey;
    if (d.key === '') {
      this.error('descriptor has empty key', d.line);
    } else if (d.key !== undefined && !attach(level, d.key, d.value, node)) {
      this.error(`duplicate descriptor composite key '${fullKey}'`, d.line);
    }
    if (d.shareThreshold && !finalKey.includes('*')) {
      const detail = `share_threshold can only be used with wildcard values (containing '*'), but found key '${finalKey}'`;
      this.error(detail, d.line);
    }
    if (d.rateLimit !== undefined) node.rule = this.rule(d, d.rateLimit, fullKey);
    this.loadLevel(node, `${fullKey}.`, d.descriptors);
  }

  private rule(d: RawDescriptor, rl: RawRateLimit, fullKey: string): RateLimitRule | undefined {
    if (rl.broken) return undefined;
    const before = this.errors.length;
    this.checkReplaces(rl);
    const timing = rl.unlimited ? this.unlimitedTiming(rl) : this.timing(rl);
    const algorithm = this.algorithm(rl);
    const ipPrefix = this.ipPrefix(rl);
    if (timing === undefined || algorithm === undefined || this.errors.length > before) return undefined;
    if (!rl.unlimited && !rl.requestsPerUnitGiven) this.warnNoRequests(rl, timing.unit, fullKey);
    return {
      fullKey,
      name: rl.name,
      unit: timing.unit,
      requestsPerUnit: rl.requestsPerUnit,
      unlimited: rl.unlimited,
      algorithm,
      periodMs: timing.periodMs,
      burst: rl.burst ?? rl.requestsPerUnit,
      ipPrefix,
      leaseSize: rl.leaseSize,
      shadowMode: d.shadowMode,
      quotaMode: d.quotaMode,
      detailedMetric: d.detailedMetric,
      replaces: rl.replaces.map((r) => r.name),
      metadata: d.metadata,
      source: { file: this.file, line: d.line },
    };
  }

  // envoyproxy/ratelimit accepts a rate_limit without requests_per_unit (the limit is then 0, so
  // every request is denied), and so does sluice, loudly: `sluice check` prints this and every load
  // logs it. `requests_per_unit: 0` written out is taken as meant and not warned about.
  private warnNoRequests(rl: RawRateLimit, unit: Unit, fullKey: string): void {
    const detail =
      `rate_limit of '${fullKey}' has no 'requests_per_unit': its limit is 0 per ${unit}, so it denies every request ` +
      `(accepted, as envoyproxy/ratelimit does); set requests_per_unit, or 'unlimited: true' to never limit, ` +
      `or 'requests_per_unit: 0' to say that denying everything is meant`;
    this.warn(detail, rl.line);
  }

  private ipPrefix(rl: RawRateLimit): { v4: number; v6: number } | undefined {
    if (rl.ipPrefix === undefined) return undefined;
    const out = { v4: rl.ipPrefix.v4 ?? DEFAULT_IP_PREFIX.v4, v6: rl.ipPrefix.v6 ?? DEFAULT_IP_PREFIX.v6 };
    if (out.v4 > 32) this.error(`'ip_prefix' v4 must be 0..32, got ${out.v4}`, rl.lines.ip_prefix);
    if (out.v6 > 128) this.error(`'ip_prefix' v6 must be 0..128, got ${out.v6}`, rl.lines.ip_prefix);
    return out;
  }

  private checkReplaces(rl: RawRateLimit): void {
    for (const r of rl.replaces) {
      if (r.name === '') this.error('should not have an empty replaces entry', r.line);
      else if (r.name === rl.name) this.error('replaces should not contain name of same descriptor', r.line);
    }
  }

  // As upstream, only a *valid* unit is refused next to `unlimited: true`.
  private unlimitedTiming(rl: RawRateLimit): Timing {
    if (parseUnit(rl.unit) !== undefined) {
      this.error('should not specify rate limit unit when unlimited', rl.lines.unit);
    }
    for (const k of EXTENSION_KEYS) {
      if (k in rl.lines) this.error(`should not specify '${k}' when unlimited`, rl.lines[k]);
    }
    return { unit: 'second', periodMs: 1000 };
  }

  private timing(rl: RawRateLimit): Timing | undefined {
    const unit = parseUnit(rl.unit);
    if (rl.unit !== '' && unit === undefined) {
      this.error(`invalid rate limit unit '${rl.unit}'${validChoices(rl.unit, UNITS)}`, rl.lines.unit);
      return undefined;
    }
    if (rl.window === undefined) {
      if (unit === undefined) {
        const detail = `invalid rate limit unit '': a rate_limit needs 'unit' (${VALID_UNITS}) or 'window' (or 'unlimited: true')`;
        this.error(detail, rl.line);
        return undefined;
      }
      return { unit, periodMs: UNIT_SECONDS[unit] * 1000 * (rl.unitMultiplier ?? 1) };
    }
    if (rl.unitMultiplier !== undefined) {
      this.error(`'window' and 'unit_multiplier' are mutually exclusive`, rl.lines.unit_multiplier);
      return undefined;
    }
    const windowMs = this.windowMs(rl.window, rl.lines.window);
    if (windowMs === undefined) return undefined;
    if (unit !== undefined && windowMs !== UNIT_SECONDS[unit] * 1000) {
      this.windowUnitDisagree(rl, unit, windowMs);
      return undefined;
    }
    return { unit: unit ?? unitForWindow(windowMs), periodMs: windowMs };
  }

  // Envoy's current_limit carries `unit`, so a window next to it must be exactly one unit:
  // `window: 90s` with `unit: hour` would enforce 90 s while telling Envoy "per HOUR".
  private windowUnitDisagree(rl: RawRateLimit, unit: Unit, windowMs: number): void {
    const detail =
      `'window: ${rl.window}' disagrees with 'unit: ${rl.unit}': given together, the window must be exactly one ${unit}. ` +
      `Drop 'unit' (Envoy is then told ${rl.requestsPerUnit} per ${unitForWindow(windowMs).toUpperCase()}) or write 'window: ${ONE_UNIT_WINDOW[unit]}'`;
    this.error(detail, rl.lines.unit);
  }

  private windowMs(text: string, line: number | undefined): number | undefined {
    try {
      const ms = parseDuration(text);
      if (ms > 0) return ms;
      this.error(`invalid window: "${text}" must be longer than zero`, line);
    } catch (e) {
      this.error(`invalid window: ${(e as Error).message}`, line);
    }
    return undefined;
  }

  private algorithm(rl: RawRateLimit): Algorithm | undefined {
    if (rl.algorithm === undefined) {
      this.checkBurst(rl, 'fixed_window');
      return 'fixed_window';
    }
    const lower = rl.algorithm.toLowerCase();
    const algorithm = ALGORITHMS.find((a) => a === lower);
    if (algorithm === undefined) {
      this.error(`invalid rate limit algorithm '${rl.algorithm}'${validChoices(rl.algorithm, ALGORITHMS)}`, rl.lines.algorithm);
      return undefined;
    }
    this.checkBurst(rl, algorithm);
    return algorithm;
  }

  private checkBurst(rl: RawRateLimit, algorithm: Algorithm): void {
    if (rl.burst !== undefined && !BURST_ALGORITHMS.includes(algorithm) && !rl.unlimited) {
      const detail = `'burst' only applies to algorithm token_bucket or gcra, not ${algorithm}`;
      this.error(detail, rl.lines.burst);
    }
  }
}

// The root node the file's descriptors go under: a new or (when merging) existing domain, or a
// detached node when the domain is unusable, so the descriptors are still checked.
function domainRoot(config: CompiledConfig, origins: DomainOrigins, raw: RawConfigFile, opts: CompileOptions, c: FileCompiler): DescriptorNode {
  if (raw.domain === undefined) return newNode();
  if (raw.domain === '') {
    c.error('config file cannot have empty domain', raw.domainLine);
    return newNode();
  }
  const existing = config.domains.get(raw.domain);
  if (existing !== undefined) {
    if (opts.mergeDomains) return existing;
    const first = origins.get(raw.domain);
    const where = first === undefined ? '' : ` (already declared in ${first.file}${first.line === undefined ? '' : `:${first.line}`})`;
    const detail =
      `duplicate domain '${raw.domain}' in config file${where}: ` +
      'one file per domain, or pass --merge-domain-config (MERGE_DOMAIN_CONFIG=true) to merge their descriptors';
    c.error(detail, raw.domainLine);
    return newNode();
  }
  const root = newNode();
  config.domains.set(raw.domain, root);
  origins.set(raw.domain, { file: c.file, line: raw.domainLine });
  return root;
}

export function compileConfig(files: RawConfigFile[], opts: CompileOptions): CompileResult {
  const config: CompiledConfig = { domains: new Map(), files: [] };
  const origins: DomainOrigins = new Map();
  const errors: ConfigError[] = [];
  const warnings: ConfigError[] = [];
  for (const raw of files) {
    config.files.push(raw.file);
    const c = new FileCompiler(raw.file, errors, warnings);
    // A bug here must reject this config, never take the process down.
    try {
      const root = domainRoot(config, origins, raw, opts, c);
      c.loadLevel(root, `${raw.domain ?? ''}.`, raw.descriptors);
    } catch (e) {
      c.error(`error compiling config file: ${(e as Error)?.message ?? String(e)}`);
    }
  }
  return { config, errors, warnings };
}
