import fs from 'node:fs';
import path from 'node:path';

// The container's memory limit (cgroup v2 memory.max, else v1 memory.limit_in_bytes), when there
// is one. `root` is where the cgroup files are (tests point it at a directory of fake ones). v1
// says "no limit" with a huge number (a page-rounded 2^63), v2 with "max".
export function cgroupMemoryLimit(root = '/sys/fs/cgroup'): number | undefined {
  const read = (file: string) => {
    try {
      return fs.readFileSync(path.join(root, file), 'utf8').trim();
    } catch {
      return undefined;
    }
  };
  const value = read('memory.max') ?? read('memory/memory.limit_in_bytes');
  if (value === undefined || value === 'max') return undefined;
  const bytes = Number(value);
  return Number.isFinite(bytes) && bytes > 0 && bytes < 2 ** 60 ? bytes : undefined;
}

// Idle anonymous memory of one sluice process with a one-rule config, and what a config adds, from
// `BENCH_SECTIONS=process-memory npm run bench` (docs/kubernetes.md has the run): [config bytes,
// MB added], interpolated between, the last slope beyond. The primary of WORKERS > 1 loads the
// config too.
export const PROCESS_BASE_MB = 36;
const CONFIG_COST: [number, number][] = [
  [0, 0],
  [83_915, 25.3],
  [848_915, 106.7],
  [8_588_915, 381.7],
];

export function configCostMb(configBytes: number): number {
  for (let i = 1; i < CONFIG_COST.length; i++) {
    const [x1, y1] = CONFIG_COST[i];
    const [x0, y0] = CONFIG_COST[i - 1];
    if (configBytes <= x1 || i === CONFIG_COST.length - 1) return y0 + ((configBytes - x0) * (y1 - y0)) / (x1 - x0);
  }
  return 0;
}

// MB the set needs at rest: each worker, and the primary when there are several.
export function estimateMb(workers: number, configBytes: number): number {
  const perProcess = PROCESS_BASE_MB + configCostMb(configBytes);
  return Math.ceil((workers > 1 ? workers + 1 : 1) * perProcess);
}

// The bytes of config files to be loaded (a directory: its YAML files, as the loader reads them).
export function configBytes(paths: string[]): number {
  let total = 0;
  for (const p of paths) {
    try {
      const stat = fs.statSync(p);
      if (stat.isFile()) total += stat.size;
      else if (stat.isDirectory())
        total += configBytes(
          fs
            .readdirSync(p)
            .filter((f) => /\.ya?ml$/i.test(f))
            .map((f) => path.join(p, f)),
        );
    } catch {
      // unreadable: the config loader says so
    }
  }
  return total;
}

// One line when the memory limit cannot hold the processes chosen, undefined when it can (or
// there is no limit).
export function memoryFitWarning(o: { workers: number; why: string; configBytes: number; limitBytes: number | undefined }): string | undefined {
  if (o.limitBytes === undefined) return undefined;
  const need = estimateMb(o.workers, o.configBytes);
  const limitMb = Math.floor(o.limitBytes / 1e6);
  if (need <= limitMb) return undefined;
  const processes = o.workers > 1 ? `${o.workers} workers and their primary` : 'one process';
  return `WORKERS=${o.workers} (${o.why}) needs about ${need} MB at rest (${processes}, ${Math.round(o.configBytes / 1000)} kB of config; docs/kubernetes.md) but the container memory limit is ${limitMb} MB: set WORKERS lower or raise the limit`;
}
