import * as fs from 'node:fs';
import * as path from 'node:path';
import { ConfigError } from '../errors';
import { compileConfig, type CompileOptions } from './compile';
import { type ConfigLimits, DEFAULT_CONFIG_LIMITS, LoadBudget } from './limits';
import { parseConfigText, type RawConfigFile } from './parse';
import type { CompiledConfig } from './types';

export interface LoadResult {
  // Set only when there are no errors.
  config?: CompiledConfig;
  errors: ConfigError[];
  // Accepted but suspicious (e.g. a rule without requests_per_unit); reported with or without errors.
  warnings: ConfigError[];
}

export interface LoadOptions extends CompileOptions {
  limits?: ConfigLimits;
}

export interface ConfigSource {
  file: string;
  text: string;
}

const YAML_FILE = /\.ya?ml$/i;

// `file:line: warning: ...`, as compilers print them (an error is `file:line: ...`).
export function warningMessage(w: ConfigError): string {
  const where = w.line === undefined ? w.file : `${w.file}:${w.line}`;
  return `${where}: warning: ${w.detail}`;
}

// Names starting with '.' are skipped: editor swap files, and Kubernetes ConfigMap mounts, whose
// `..data` / `..2024_…` directories hold the real files that the top-level symlinks point at (so
// each file is loaded once, through its symlink).
function walk(dir: string, out: string[], seen: Set<string>): void {
  const real = fs.realpathSync(dir);
  if (seen.has(real)) return;
  seen.add(real);
  for (const name of fs.readdirSync(dir)) {
    if (name.startsWith('.')) continue;
    const full = path.join(dir, name);
    let stat: fs.Stats;
    try {
      stat = fs.statSync(full);
    } catch {
      continue; // a dangling symlink is not a config file
    }
    if (stat.isDirectory()) walk(full, out, seen);
    else if (stat.isFile() && YAML_FILE.test(name)) out.push(full);
  }
}

// The YAML files to load, in load order: each path as given (a file is taken whatever its name),
// a directory as all *.yaml / *.yml under it, sorted by path.
export function listConfigFiles(paths: string[]): { files: string[]; errors: ConfigError[] } {
  const files: string[] = [];
  const errors: ConfigError[] = [];
  for (const p of paths) {
    let stat: fs.Stats;
    try {
      stat = fs.statSync(p);
    } catch (e) {
      errors.push(new ConfigError(p, `cannot read config path: ${(e as Error).message}`));
      continue;
    }
    if (!stat.isDirectory()) {
      files.push(p);
      continue;
    }
    const found: string[] = [];
    try {
      walk(p, found, new Set());
    } catch (e) {
      errors.push(new ConfigError(p, `cannot read config directory: ${(e as Error).message}`));
      continue;
    }
    if (found.length === 0) errors.push(new ConfigError(p, 'no config files (*.yaml, *.yml) in directory'));
    files.push(...found.sort());
  }
  return { files, errors };
}

// Parse and compile errors of a file come out in file order, then line order (stable).
function sortErrors(errors: ConfigError[], sources: ConfigSource[]): void {
  const order = new Map(sources.map((s, i) => [s.file, i]));
  errors.sort((a, b) => (order.get(a.file) ?? 0) - (order.get(b.file) ?? 0) || (a.line ?? 0) - (b.line ?? 0));
}

function tooLarge(file: string, bytes: number, max: number): ConfigError {
  return new ConfigError(file, `config limit: file is ${bytes} bytes, more than ${max} (CONFIG_MAX_FILE_BYTES)`);
}

// Parses and compiles config already in memory (e.g. tests, or config not read from disk).
export function loadConfigSources(sources: ConfigSource[], opts: LoadOptions): LoadResult {
  const limits = opts.limits ?? DEFAULT_CONFIG_LIMITS;
  const budget = new LoadBudget(limits);
  const errors: ConfigError[] = [];
  const raws: RawConfigFile[] = [];
  for (const s of sources) {
    const bytes = Buffer.byteLength(s.text);
    if (bytes > limits.maxFileBytes) {
      errors.push(tooLarge(s.file, bytes, limits.maxFileBytes));
      continue;
    }
    const parsed = parseConfigText(s.file, s.text, budget);
    errors.push(...parsed.errors);
    if (parsed.raw !== undefined) raws.push(parsed.raw);
  }
  const compiled = compileConfig(raws, opts);
  errors.push(...compiled.errors);
  sortErrors(errors, sources);
  const warnings = compiled.warnings;
  sortErrors(warnings, sources);
  return errors.length === 0 ? { config: compiled.config, errors, warnings } : { errors, warnings };
}

// Documents already in the parser's shape (e.g. converted from an xDS push) through the compiler.
export function compileDocuments(documents: RawConfigFile[], opts: CompileOptions): LoadResult {
  const compiled = compileConfig(documents, opts);
  const order = documents.map((d) => ({ file: d.file, text: '' }));
  sortErrors(compiled.errors, order);
  sortErrors(compiled.warnings, order);
  const { errors, warnings } = compiled;
  return errors.length === 0 ? { config: compiled.config, errors, warnings } : { errors, warnings };
}

// Reads at most `max` bytes: a file over the cap is refused without reading it, even one that
// grows while it is read.
export function readConfigFile(file: string, max: number): { text?: string; error?: ConfigError } {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'r');
    const size = fs.fstatSync(fd).size;
    if (size > max) return { error: tooLarge(file, size, max) };
    let buf = Buffer.alloc(size + 1);
    let len = 0;
    for (;;) {
      if (len === buf.length) {
        if (len > max) return { error: tooLarge(file, len, max) };
        buf = Buffer.concat([buf, Buffer.alloc(Math.min(buf.length, max + 1 - buf.length))]);
      }
      const n = fs.readSync(fd, buf, len, buf.length - len, null);
      if (n === 0) break;
      len += n;
    }
    return { text: buf.toString('utf8', 0, len) };
  } catch (e) {
    return { error: new ConfigError(file, `error loading config file: ${(e as Error).message}`) };
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

export function loadConfig(paths: string[], opts: LoadOptions): LoadResult {
  const max = (opts.limits ?? DEFAULT_CONFIG_LIMITS).maxFileBytes;
  const listed = listConfigFiles(paths);
  const errors = [...listed.errors];
  const sources: ConfigSource[] = [];
  for (const file of listed.files) {
    const { text, error } = readConfigFile(file, max);
    if (error !== undefined) errors.push(error);
    else sources.push({ file, text: text! });
  }
  const loaded = loadConfigSources(sources, opts);
  errors.push(...loaded.errors);
  const { warnings } = loaded;
  return errors.length === 0 ? { config: loaded.config, errors, warnings } : { errors, warnings };
}
