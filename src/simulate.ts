import fs from 'node:fs';
import path from 'node:path';
import { formatDuration, parseDuration } from './config/duration';
import { ALGORITHM_IMPLS, type LimitSpec, type State } from './algorithms';
import { ALGORITHMS, type Algorithm, UNIT_SECONDS, UNITS, type Unit } from './model';
import { barChart, type Bars } from './svg-chart';

// `sluice simulate`: replays a traffic pattern through the real algorithms (ALGORITHM_IMPLS, the
// code the memory store runs; the Redis scripts give the same answers) on a virtual clock starting
// at the epoch, so windows are aligned as in production. State is written only when a request is
// admitted (sluice's all-or-nothing default). No wall clock, no randomness: the same arguments give
// the same bytes.

export const PATTERNS = ['steady', 'edge-burst', 'ramp', 'two-tenants'] as const;
export type Pattern = (typeof PATTERNS)[number];

export interface SimulateOptions {
  pattern: Pattern;
  algorithms: Algorithm[];
  limit: number;
  periodMs: number;
  burst: number;
  durationMs: number;
  out?: string;
}

export interface Arrival {
  atMs: number;
  key: string;
}

export interface Run {
  algorithm: Algorithm;
  offered: Arrival[];
  admitted: Arrival[];
}

export const SIMULATE_USAGE = [
  'usage: sluice simulate [--pattern P] [--algorithm A] [--limit N] [--unit U | --period D] [--burst N] [--duration D] [--out FILE.svg]',
  '',
  'Replays a traffic pattern through the algorithms on a virtual clock; prints admitted/offered and the',
  'most requests one key had admitted in any period-long interval; with --out, writes an SVG chart of',
  'offered vs admitted requests over time. The same arguments always give the same output.',
  '',
  `  --pattern P     ${PATTERNS.join(' | ')} (default steady)`,
  '                  steady: 2 × the limit, evenly spaced; edge-burst: 2 × the limit within a tenth of a period',
  '                  either side of every other window edge; ramp: from 0 to 3 × the limit over the duration;',
  '                  two-tenants: keys "noisy" (3 × the limit) and "quiet" (half the limit), each its own counter',
  `  --algorithm A   ${ALGORITHMS.join(' | ')} | all (default all)`,
  '  --limit N       requests per period (default 10)',
  `  --unit U        ${UNITS.join(' | ')}: the period (default second)`,
  '  --period D      the period as a duration instead (500ms, 30s, 5m, 1h30m), like `window` in config',
  '  --burst N       token_bucket / gcra capacity (default the limit)',
  '  --duration D    simulated time (default 10 periods)',
  '  --out FILE      write the SVG chart there',
  '',
].join('\n');

const MAX_REQUESTS = 1_000_000;

function evenly(intervalMs: number, durationMs: number, key: string): Arrival[] {
  const out: Arrival[] = [];
  for (let k = 0; k * intervalMs < durationMs; k++) out.push({ atMs: k * intervalMs, key });
  return out;
}

export function arrivals(o: SimulateOptions): Arrival[] {
  const { limit: l, periodMs: p, durationMs: d } = o;
  switch (o.pattern) {
    case 'steady':
      return evenly(p / (2 * l), d, 'client');
    case 'edge-burst': {
      // 2 × limit spread over [edge − p/10, edge + p/10): exactly `limit` on each side of the edge.
      const out: Arrival[] = [];
      for (let edge = p; edge + p / 10 <= d; edge += 2 * p) {
        for (let i = 0; i < 2 * l; i++) out.push({ atMs: edge - p / 10 + ((i + 0.5) * p) / (10 * l), key: 'client' });
      }
      return out;
    }
    case 'ramp': {
      // Rate grows linearly from 0 to 3 × limit per period; arrival k is where the expected count
      // 3·l·t²/(2·p·d) reaches k + ½.
      const out: Arrival[] = [];
      for (let k = 0; ; k++) {
        const t = Math.sqrt((2 * p * d * (k + 0.5)) / (3 * l));
        if (t >= d) return out;
        out.push({ atMs: t, key: 'client' });
      }
    }
    case 'two-tenants': {
      const all = [...evenly(p / (3 * l), d, 'noisy'), ...evenly((2 * p) / l, d, 'quiet')];
      return all.sort((a, b) => a.atMs - b.atMs || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    }
  }
}

export function keysOf(pattern: Pattern): string[] {
  return pattern === 'two-tenants' ? ['quiet', 'noisy'] : ['client'];
}

export function specFor(o: SimulateOptions, algorithm: Algorithm): LimitSpec {
  const bursty = algorithm === 'token_bucket' || algorithm === 'gcra';
  return { algorithm, limit: o.limit, periodMs: o.periodMs, burst: bursty ? o.burst : o.limit };
}

export function simulate(o: SimulateOptions, algorithm: Algorithm, offered = arrivals(o)): Run {
  const impl = ALGORITHM_IMPLS[algorithm];
  const spec = specFor(o, algorithm);
  const states = new Map<string, State>();
  const admitted: Arrival[] = [];
  for (const a of offered) {
    const verdict = impl.decide(states.get(a.key), spec, 1, a.atMs);
    if (!verdict.allowed || verdict.next === undefined) continue;
    states.set(a.key, verdict.next);
    admitted.push(a);
  }
  return { algorithm, offered, admitted };
}

// The most of `times` (sorted) inside any half-open interval [t, t + periodMs).
export function maxInAnyPeriod(times: readonly number[], periodMs: number): number {
  let best = 0;
  for (let i = 0, j = 0; i < times.length; i++) {
    while (j < times.length && times[j] < times[i] + periodMs) j++;
    best = Math.max(best, j - i);
  }
  return best;
}

// Per key, as each key has its own counter.
export function maxAdmittedInAnyPeriod(run: Run, periodMs: number): number {
  const keys = new Set(run.offered.map((a) => a.key));
  const times = (key: string) => run.admitted.filter((a) => a.key === key).map((a) => a.atMs);
  return Math.max(0, ...[...keys].map((k) => maxInAnyPeriod(times(k), periodMs)));
}

function counts(run: Run, key?: string): string {
  const of = (xs: Arrival[]) => xs.filter((a) => key === undefined || a.key === key).length;
  return `${of(run.admitted)}/${of(run.offered)}`;
}

function runLine(o: SimulateOptions, run: Run): string {
  const keys = keysOf(o.pattern);
  const perKey = keys.length > 1 ? ` (${keys.map((k) => `${k} ${counts(run, k)}`).join(', ')})` : '';
  const who = keys.length > 1 ? 'by one key ' : '';
  const max = maxAdmittedInAnyPeriod(run, o.periodMs);
  return `${run.algorithm}: admitted ${counts(run)}${perKey}; max admitted ${who}in any ${formatDuration(o.periodMs)}: ${max}`;
}

function describe(o: SimulateOptions): string {
  const bursty = o.algorithms.filter((a) => a === 'token_bucket' || a === 'gcra');
  const burst = bursty.length > 0 ? `, burst ${o.burst} (${bursty.join(', ')})` : '';
  return `pattern ${o.pattern}: limit ${o.limit} per ${formatDuration(o.periodMs)}${burst}, duration ${formatDuration(o.durationMs)}`;
}

export function summary(o: SimulateOptions, runs: readonly Run[]): string {
  return [describe(o), ...runs.map((r) => runLine(o, r))].join('\n') + '\n';
}

const OFFERED_COLOURS = ['#d9d9d9', '#bdbdbd'];
const ADMITTED_COLOURS = ['#f58518', '#4c78a8'];

export function chart(o: SimulateOptions, runs: readonly Run[]): string {
  const binMs = Math.max(o.periodMs / 10, o.durationMs / 200);
  const bins = Math.ceil(o.durationMs / binMs);
  const keys = keysOf(o.pattern);
  const histogram = (xs: Arrival[], key: string) => {
    const v = new Array<number>(bins).fill(0);
    for (const a of xs) if (a.key === key) v[Math.min(bins - 1, Math.floor(a.atMs / binMs))]++;
    return v;
  };
  const named = (what: string, key: string) => (keys.length > 1 ? `${what} (${key})` : what);
  const stacks = (xs: Arrival[], what: string, colours: string[]): Bars[] =>
    keys.map((k, i) => ({ label: named(what, k), colour: colours[keys.length > 1 ? i : 1], values: histogram(xs, k) }));
  const periods = Math.floor(o.durationMs / o.periodMs);
  const every = Math.max(1, Math.ceil(periods / 20));
  const ticks = [];
  for (let k = 0; k <= periods; k += every) ticks.push({ bin: (k * o.periodMs) / binMs, label: formatDuration(k * o.periodMs) });
  const perBin = (o.limit * binMs) / o.periodMs;
  return barChart({
    title: `sluice simulate: ${o.pattern}, offered vs admitted requests over time`,
    subtitle: describe(o),
    yLabel: `requests per ${formatDuration(Math.round(binMs))} bin; grid: period edges`,
    bins,
    ticks,
    guide: { value: perBin, label: `the limit's rate (${Math.round(perBin * 100) / 100} per bin)` },
    panels: runs.map((r) => ({
      title: runLine(o, r),
      back: stacks(r.offered, 'offered', OFFERED_COLOURS),
      front: stacks(r.admitted, 'admitted', ADMITTED_COLOURS),
    })),
  });
}

const FLAGS = ['pattern', 'algorithm', 'limit', 'unit', 'period', 'burst', 'duration', 'out'];

function positiveInt(name: string, text: string): number {
  const v = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(v) || v < 1) throw new Error(`--${name} must be a positive integer, not '${text}'`);
  return v;
}

function durationMs(name: string, text: string): number {
  const ms = parseDuration(text);
  if (ms <= 0) throw new Error(`--${name} must be longer than zero`);
  return ms;
}

function oneOf<T extends string>(name: string, text: string, valid: readonly T[]): T {
  if (!(valid as readonly string[]).includes(text)) throw new Error(`--${name} must be one of ${valid.join(', ')}, not '${text}'`);
  return text as T;
}

export function parseSimulateArgs(args: readonly string[]): SimulateOptions {
  const given = new Map<string, string>();
  for (let i = 0; i < args.length; i++) {
    const m = /^--([a-z]+)(?:=(.*))?$/.exec(args[i]);
    if (m === null || !FLAGS.includes(m[1])) throw new Error(`unknown argument ${args[i]}`);
    const value = m[2] ?? args[++i];
    if (value === undefined) throw new Error(`--${m[1]} needs a value`);
    given.set(m[1], value);
  }
  const get = (name: string) => given.get(name);
  const algorithm = oneOf('algorithm', get('algorithm') ?? 'all', [...ALGORITHMS, 'all'] as const);
  const algorithms = algorithm === 'all' ? [...ALGORITHMS] : [algorithm];
  if (get('burst') !== undefined && !algorithms.some((a) => a === 'token_bucket' || a === 'gcra')) {
    throw new Error(`--burst only applies to algorithm token_bucket or gcra, not ${algorithm}`);
  }
  if (get('unit') !== undefined && get('period') !== undefined) throw new Error('give --unit or --period, not both');
  const unit = oneOf<Unit>('unit', get('unit') ?? 'second', UNITS);
  const periodMs = get('period') === undefined ? UNIT_SECONDS[unit] * 1000 : durationMs('period', get('period') as string);
  const limit = positiveInt('limit', get('limit') ?? '10');
  const o: SimulateOptions = {
    pattern: oneOf('pattern', get('pattern') ?? 'steady', PATTERNS),
    algorithms,
    limit,
    periodMs,
    burst: get('burst') === undefined ? limit : positiveInt('burst', get('burst') as string),
    durationMs: get('duration') === undefined ? 10 * periodMs : durationMs('duration', get('duration') as string),
    out: get('out'),
  };
  if ((4 * o.limit * o.durationMs) / o.periodMs > MAX_REQUESTS) {
    throw new Error(`that would offer over ${MAX_REQUESTS} requests: lower --limit or --duration`);
  }
  return o;
}

// Exit codes as `sluice check`: 0 done, 2 usage error.
export function runSimulate(args: readonly string[], out: NodeJS.WritableStream, err: NodeJS.WritableStream): number {
  if (args.includes('--help') || args.includes('-h')) {
    out.write(SIMULATE_USAGE);
    return 0;
  }
  let o: SimulateOptions;
  try {
    o = parseSimulateArgs(args);
  } catch (e) {
    err.write(`sluice simulate: ${(e as Error).message}\n`);
    return 2;
  }
  const offered = arrivals(o);
  const runs = o.algorithms.map((a) => simulate(o, a, offered));
  out.write(summary(o, runs));
  if (o.out !== undefined) {
    fs.mkdirSync(path.dirname(path.resolve(o.out)), { recursive: true });
    fs.writeFileSync(o.out, chart(o, runs));
    out.write(`wrote ${o.out}\n`);
  }
  return 0;
}
