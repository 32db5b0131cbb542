import * as fs from 'node:fs';
import * as path from 'node:path';
import { ConfigError } from '../errors';
import { compileConfig, type CompileOptions } from './compile';
import { parseConfigText, type RawConfigFile } from './parse';
import type { CompiledConfig } from './types';

export interface LoadResult {
  // Set only when there are no errors.
  config?: CompiledConfig;
  errors: ConfigError[];
}

export interface ConfigSource {
  file: string;
  text: string;
}

const YAML_FILE = /\.ya?ml$/i;

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

// Parses and compiles config already in memory (e.g. tests, or config not read from disk).
export function loadConfigSources(sources: ConfigSource[], opts: CompileOptions): LoadResult {
  const errors: ConfigError[] = [];
  const raws: RawConfigFile[] = [];
  for (const s of sources) {
    const parsed = parseConfigText(s.file, s.text);
    errors.push(...parsed.errors);
    if (parsed.raw !== undefined) raws.push(parsed.raw);
  }
  const compiled = compileConfig(raws, opts);
  errors.push(...compiled.errors);
  sortErrors(errors, sources);
  return errors.length === 0 ? { config: compiled.config, errors } : { errors };
}

export function loadConfig(paths: string[], opts: { mergeDomains: boolean }): LoadResult {
  const listed = listConfigFiles(paths);
  const errors = [...listed.errors];
  const sources: ConfigSource[] = [];
  for (const file of listed.files) {
    try {
      sources.push({ file, text: fs.readFileSync(file, 'utf8') });
    } catch (e) {
      errors.push(new ConfigError(file, `error loading config file: ${(e as Error).message}`));
    }
  }
  const loaded = loadConfigSources(sources, opts);
  errors.push(...loaded.errors);
  return errors.length === 0 ? { config: loaded.config, errors } : { errors };
}
