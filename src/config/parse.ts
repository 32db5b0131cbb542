import { LineCounter, isAlias, isMap, isScalar, isSeq, parseDocument } from 'yaml';
import { ConfigError } from '../errors';
import { MAX_UINT32 } from '../model';
import { type DocumentIndex, indexDocument, LimitError, LoadBudget, MAX_DESCRIPTOR_DEPTH, MAX_YAML_DEPTH } from './limits';
import { toPlain } from './plain';
import { didYouMean } from './suggest';
import { yamlSyntaxErrors } from './yaml-errors';

// One YAML config file, checked for keys and types but not yet for meaning (compile.ts does that).
// Missing or null fields take upstream's zero values ('' / 0 / false), as yaml.v2 leaves them.

export interface RawReplace {
  name: string;
  line?: number;
}

export interface RawRateLimit {
  line?: number;
  // A key or type error inside this block was already reported; compile skips its checks.
  broken: boolean;
  unit: string;
  requestsPerUnit: number;
  // False when `requests_per_unit` is absent or null (the limit is then 0, as upstream has it).
  requestsPerUnitGiven: boolean;
  unlimited: boolean;
  name: string;
  replaces: RawReplace[];
  algorithm?: string;
  burst?: number;
  unitMultiplier?: number;
  window?: string;
  // `ip_prefix: true` (IPv4 /24, IPv6 /64) or `{v4: N, v6: M}`; range-checked in compile.ts.
  ipPrefix?: { v4?: number; v6?: number };
  // `lease: {size: N}`: serve this limit from leased batches of N units (hot keys).
  leaseSize?: number;
  // The line of each key present, so errors about a key point at it.
  lines: Record<string, number | undefined>;
}

export interface RawDescriptor {
  line?: number;
  // undefined when `key` had the wrong type (already reported); '' when absent.
  key?: string;
  value: string;
  rateLimit?: RawRateLimit;
  descriptors: RawDescriptor[];
  shadowMode: boolean;
  quotaMode: boolean;
  detailedMetric: boolean;
  valueToMetric: boolean;
  shareThreshold: boolean;
  metadata?: Record<string, unknown>;
}

export interface RawConfigFile {
  file: string;
  // undefined when `domain` had the wrong type (already reported); '' when absent.
  domain?: string;
  domainLine?: number;
  descriptors: RawDescriptor[];
}

export interface ParseResult {
  raw?: RawConfigFile;
  errors: ConfigError[];
}

const ROOT_KEYS = new Set(['domain', 'descriptors']);
const DESCRIPTOR_KEYS = new Set([
  'key',
  'value',
  'rate_limit',
  'descriptors',
  'shadow_mode',
  'quota_mode',
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
  'metadata',
]);
const RATE_LIMIT_KEYS = new Set([
  'unit',
  'requests_per_unit',
  'unlimited',
  'name',
  'replaces',
  'algorithm',
  'burst',
  'unit_multiplier',
  'window',
  'ip_prefix',
  'lease',
]);
const IP_PREFIX_KEYS = new Set(['v4', 'v6']);
const LEASE_KEYS = new Set(['size']);
const REPLACES_KEYS = new Set(['name']);

const KEY_HOMES: [Set<string>, string][] = [
  [ROOT_KEYS, 'at the top level'],
  [DESCRIPTOR_KEYS, 'in a descriptor'],
  [RATE_LIMIT_KEYS, 'inside rate_limit'],
];

type Fields = Map<string, { node: unknown; line?: number }>;

class Reader {
  readonly errors: ConfigError[] = [];

  constructor(
    private readonly file: string,
    private readonly lc: LineCounter,
    private readonly index: DocumentIndex,
    readonly budget: LoadBudget,
  ) {}

  lineOf(node: unknown): number | undefined {
    const range = (node as { range?: [number, number, number] | null } | null)?.range;
    return range ? this.lc.linePos(range[0]).line : undefined;
  }

  error(detail: string, line?: number): void {
    this.errors.push(new ConfigError(this.file, detail, line));
  }

  // Every alias use is charged the size of what it points at, before that is walked.
  deref(node: unknown): unknown {
    if (!isAlias(node)) return node;
    const target = this.index.targets.get(node);
    this.budget.alias(this.index.sizes.get(target) ?? 1, this.lineOf(node));
    return target;
  }

  describe(node: unknown): string {
    if (node === null || node === undefined) return 'nothing';
    if (isMap(node)) return 'a map';
    if (isSeq(node)) return 'a list';
    if (isScalar(node) && node.type !== 'PLAIN' && typeof node.value === 'string') return `the string "${node.value}"`;
    if (isScalar(node)) return `'${scalarText(node)}'`;
    return 'an unsupported value';
  }

  // The key's name, or undefined (reported) when it is not a string or not allowed here.
  private keyName(key: unknown, allowed: ReadonlySet<string>): string | undefined {
    if (!isScalar(key) || typeof key.value !== 'string') {
      const shown = isScalar(key) ? scalarText(key) : shorten(JSON.stringify(this.toJS(key)));
      this.error(`config error, key is not of type string: ${shown}`, this.lineOf(key));
      return undefined;
    }
    const name = key.value;
    if (allowed.has(name)) return name;
    const home = KEY_HOMES.find(([set]) => set !== allowed && set.has(name));
    const hint = home ? ` (allowed only ${home[1]})` : didYouMean(name, allowed) || ` (valid here: ${[...allowed].join(', ')})`;
    this.error(`config error, unknown key '${name}'${hint}`, this.lineOf(key));
    return undefined;
  }

  // The map's entries by key, after YAML merge keys (`<<: *anchor`); explicit keys win.
  fields(mapNode: unknown, allowed: ReadonlySet<string>, depth = 0): Fields {
    if (depth > MAX_YAML_DEPTH) throw new LimitError(`config limit: merge keys (<<) nested deeper than ${MAX_YAML_DEPTH}`, this.lineOf(mapNode));
    const out: Fields = new Map();
    const merged: unknown[] = [];
    for (const pair of (this.deref(mapNode) as { items: { key: unknown; value: unknown }[] }).items) {
      if (isScalar(pair.key) && typeof pair.key.value === 'symbol') {
        const src = this.deref(pair.value);
        merged.push(...(isSeq(src) ? src.items.map((n) => this.deref(n)) : [src]));
        continue;
      }
      const name = this.keyName(pair.key, allowed);
      if (name === undefined) continue;
      const value = this.deref(pair.value);
      const isNull = value === null || value === undefined || (isScalar(value) && value.value === null);
      out.set(name, { node: isNull ? null : value, line: this.lineOf(pair.key) });
    }
    for (const m of merged) {
      if (!isMap(m)) continue;
      for (const [k, f] of this.fields(m, allowed, depth + 1)) if (!out.has(k)) out.set(k, f);
    }
    return out;
  }

  // Plain data (metadata, values quoted in errors), aliases charged to the budget.
  toJS(node: unknown): unknown {
    return toPlain(this, node);
  }

  str(fields: Fields, key: string): string | undefined {
    const f = fields.get(key);
    if (f === undefined || f.node === null) return '';
    if (isScalar(f.node)) return scalarText(f.node);
    this.error(`'${key}' must be a string, got ${this.describe(f.node)}`, f.line);
    return undefined;
  }

  bool(fields: Fields, key: string): boolean {
    const f = fields.get(key);
    if (f === undefined || f.node === null) return false;
    if (isScalar(f.node) && typeof f.node.value === 'boolean') return f.node.value;
    this.error(`'${key}' must be true or false, got ${this.describe(f.node)}`, f.line);
    return false;
  }

  int(fields: Fields, key: string, min: number, what: string): number | undefined {
    const f = fields.get(key);
    if (f === undefined || f.node === null) return undefined;
    if (isScalar(f.node)) {
      const v = f.node.value;
      if (typeof v === 'number' && Number.isInteger(v) && v >= min && v <= MAX_UINT32) return v;
    }
    this.error(`'${key}' must be ${what}, got ${this.describe(f.node)}`, f.line);
    return undefined;
  }

  // A list whose elements must all be maps, as upstream requires of every list in the file.
  mapList(fields: Fields, key: string, what: string): unknown[] {
    const f = fields.get(key);
    if (f === undefined || f.node === null) return [];
    if (!isSeq(f.node)) {
      this.error(`'${key}' must be a list of ${what}, got ${this.describe(f.node)}`, f.line);
      return [];
    }
    const maps: unknown[] = [];
    for (const item of f.node.items.map((n) => this.deref(n))) {
      if (isMap(item)) {
        maps.push(item);
        continue;
      }
      const shown = isScalar(item) ? scalarText(item) : shorten(JSON.stringify(this.toJS(item)));
      const detail = `config error, yaml file contains list of type other than map: ${shown}`;
      this.error(detail, this.lineOf(item) ?? f.line);
    }
    return maps;
  }
}

function shorten(text: string): string {
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

// Upstream (yaml.v2) decodes any scalar into a string field by its source text: `value: 500`
// is "500", `value: 0x1F` is "0x1F". Null is ''.
function scalarText(node: { value: unknown; source?: string }): string {
  if (node.value === null) return '';
  if (typeof node.value === 'string') return node.value;
  return node.source ?? String(node.value);
}

function readRateLimit(r: Reader, node: unknown, line: number | undefined): RawRateLimit | undefined {
  if (node === null) return undefined;
  if (!isMap(node)) {
    r.error(`'rate_limit' must be a map, got ${r.describe(node)}`, line);
    return undefined;
  }
  const before = r.errors.length;
  const f = r.fields(node, RATE_LIMIT_KEYS);
  const lines: Record<string, number | undefined> = {};
  for (const [k, v] of f) lines[k] = v.line;
  const rl: RawRateLimit = {
    line,
    broken: false,
    unit: r.str(f, 'unit') ?? '',
    requestsPerUnit: r.int(f, 'requests_per_unit', 0, `an integer from 0 to ${MAX_UINT32}`) ?? 0,
    requestsPerUnitGiven: (f.get('requests_per_unit')?.node ?? null) !== null,
    unlimited: r.bool(f, 'unlimited'),
    name: r.str(f, 'name') ?? '',
    replaces: readReplaces(r, f),
    burst: r.int(f, 'burst', 1, 'a positive integer'),
    unitMultiplier: r.int(f, 'unit_multiplier', 1, 'a positive integer'),
    lines,
  };
  // Unlike upstream keys, an empty extension key means "not set" rather than ''.
  if (f.get('algorithm')?.node) rl.algorithm = r.str(f, 'algorithm');
  if (f.get('window')?.node) rl.window = r.str(f, 'window');
  if (f.get('ip_prefix')?.node) rl.ipPrefix = readIpPrefix(r, f);
  if (f.get('lease')?.node) rl.leaseSize = readLease(r, f);
  rl.broken = r.errors.length > before;
  return rl;
}

function readIpPrefix(r: Reader, f: Fields): RawRateLimit['ipPrefix'] {
  const field = f.get('ip_prefix');
  if (field === undefined || field.node === null) return undefined;
  if (isScalar(field.node) && typeof field.node.value === 'boolean') return field.node.value ? {} : undefined;
  if (!isMap(field.node)) {
    r.error(`'ip_prefix' must be true or a map {v4: 0..32, v6: 0..128}, got ${r.describe(field.node)}`, field.line);
    return undefined;
  }
  const pf = r.fields(field.node, IP_PREFIX_KEYS);
  return { v4: r.int(pf, 'v4', 0, 'an integer from 0 to 32'), v6: r.int(pf, 'v6', 0, 'an integer from 0 to 128') };
}

function readLease(r: Reader, f: Fields): number | undefined {
  const field = f.get('lease');
  if (field === undefined || field.node === null) return undefined;
  if (!isMap(field.node)) {
    r.error(`'lease' must be a map {size: N}, got ${r.describe(field.node)}`, field.line);
    return undefined;
  }
  const size = r.int(r.fields(field.node, LEASE_KEYS), 'size', 1, 'a positive integer');
  if (size === undefined) r.error("'lease' needs a positive integer 'size'", field.line);
  return size;
}

function readReplaces(r: Reader, f: Fields): RawReplace[] {
  return r.mapList(f, 'replaces', '{name: ...} maps').map((m) => {
    const rf = r.fields(m, REPLACES_KEYS);
    return { name: r.str(rf, 'name') ?? '', line: r.lineOf(m) };
  });
}

function readMetadata(r: Reader, f: Fields): Record<string, unknown> | undefined {
  const field = f.get('metadata');
  if (field === undefined || field.node === null) return undefined;
  if (!isMap(field.node)) {
    r.error(`'metadata' must be a map, got ${r.describe(field.node)}`, field.line);
    return undefined;
  }
  return r.toJS(field.node) as Record<string, unknown>;
}

function readDescriptor(r: Reader, node: unknown, depth: number): RawDescriptor {
  const line = r.lineOf(node);
  r.budget.descriptor(line);
  if (depth > MAX_DESCRIPTOR_DEPTH) throw new LimitError(`config limit: descriptors nested deeper than ${MAX_DESCRIPTOR_DEPTH} levels`, line);
  const f = r.fields(node, DESCRIPTOR_KEYS);
  const rlField = f.get('rate_limit');
  return {
    line,
    key: r.str(f, 'key'),
    value: r.str(f, 'value') ?? '',
    rateLimit: rlField ? readRateLimit(r, rlField.node, rlField.line) : undefined,
    descriptors: readDescriptors(r, f, depth + 1),
    shadowMode: r.bool(f, 'shadow_mode'),
    quotaMode: r.bool(f, 'quota_mode'),
    detailedMetric: r.bool(f, 'detailed_metric'),
    valueToMetric: r.bool(f, 'value_to_metric'),
    shareThreshold: r.bool(f, 'share_threshold'),
    metadata: readMetadata(r, f),
  };
}

function readDescriptors(r: Reader, f: Fields, depth: number): RawDescriptor[] {
  return r.mapList(f, 'descriptors', 'descriptors (maps)').map((m) => readDescriptor(r, m, depth));
}

// Parses and checks one file. `raw` is returned whenever the YAML itself parsed, even if keys or
// types were wrong, so that compile can still report the file's other problems. Nothing here
// throws: a cap that is hit, or anything unforeseen, is one error naming the file.
export function parseConfigText(file: string, text: string, budget = new LoadBudget()): ParseResult {
  const lc = new LineCounter();
  try {
    return parseChecked(file, text, lc, budget);
  } catch (e) {
    if (e instanceof LimitError) return { errors: [new ConfigError(file, e.message, e.line)] };
    return { errors: [new ConfigError(file, `error loading config file: ${(e as Error)?.message ?? String(e)}`)] };
  }
}

// The yaml package catches its own stack overflow on deep nesting and reports it per node.
const STACK_OVERFLOW = /Maximum call stack size exceeded/;

function parseChecked(file: string, text: string, lc: LineCounter, budget: LoadBudget): ParseResult {
  // YAML 1.1, as upstream's yaml.v2: `yes`/`on` are booleans there, and so they are here.
  const doc = parseDocument(text, { lineCounter: lc, version: '1.1', prettyErrors: false });
  if (doc.errors.length > 0) {
    const overflow = doc.errors.find((e) => STACK_OVERFLOW.test(e.message));
    if (overflow !== undefined) {
      const detail = `config limit: YAML nested too deeply to parse (more than ${MAX_YAML_DEPTH} levels are refused)`;
      return { errors: [new ConfigError(file, detail, lc.linePos(overflow.pos[0]).line)] };
    }
    return { errors: yamlSyntaxErrors(file, doc, lc) };
  }
  const r = new Reader(file, lc, indexDocument(doc, lc), budget);
  const root = r.deref(doc.contents);
  if (root === null) return { raw: { file, domain: '', descriptors: [] }, errors: [] };
  if (!isMap(root)) {
    const got = r.describe(root);
    r.error(`error loading config file: the top level must be a map with 'domain' and 'descriptors', got ${got}`, r.lineOf(root));
    return { errors: r.errors };
  }
  const f = r.fields(root, ROOT_KEYS);
  const raw: RawConfigFile = {
    file,
    domain: r.str(f, 'domain'),
    domainLine: f.get('domain')?.line,
    descriptors: readDescriptors(r, f, 1),
  };
  return { raw, errors: r.errors };
}
