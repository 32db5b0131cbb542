import { STEAL_STALL_MS } from './host-steal';

// The "Envoy in front" section's knobs and table (bench/envoy-in-front.ts measures): plain data
// and strings, so that a test can check them without starting anything.

// examples/config/edge.yaml's tenant_free: 10 a minute, fixed window.
export const FREE_LIMIT = 10;
export const BURST = 40;
export const BURNER_BURST = 60;
// Steady load: each tenant gets this many requests, under its limit in any window, so every
// decision Redis makes is OK.
export const PER_TENANT = 6;

export interface EnvoyScale {
  scale: number;
  // Requests per second of the paced rows.
  rate: number;
  steady: number;
  // Envoy starts of the first-decisions row, BURST requests after each.
  starts: number;
  // Requests of the paced row while a CPU burner runs; burner false leaves both burner rows out.
  burnerSteady: number;
  burner: boolean;
  // Each replica's serving processes: sluice's --workers, upstream's GOMAXPROCS ('auto': the cores).
  workers: string;
  // Seconds of steady traffic (new tenants, at `rate`) between the cold row and the rows after it.
  warmS: number;
  // Fresh starts (Redis, replicas, Envoy) the cold row is measured on: its figures are their sum.
  coldStarts: number;
  // sluice's --warm-up-calls; undefined: its default.
  warmUpCalls?: number;
}

// BENCH_ENVOY_SCALE (default 1: 4,800 steady requests, 5 Envoy starts, 7,000 requests beside the
// burner) scales the request counts; BENCH_ENVOY_RATE (default 800) is the paced rate;
// BENCH_ENVOY_BURNER=0 leaves the burner rows out; BENCH_ENVOY_WORKERS (default auto) sets each
// replica's processes (sluice) or threads (upstream); BENCH_ENVOY_WARM_S (default 20) is the steady
// traffic between the replicas' cold row and the other rows; BENCH_ENVOY_COLD_STARTS (default 1)
// measures the cold row on that many fresh starts of both services (a missed decision right after
// a start comes in clusters: one start can show 0 and the next 40); BENCH_ENVOY_WARM_UP_CALLS sets
// sluice's --warm-up-calls (default: sluice's own default).
export function envoyScale(env: NodeJS.ProcessEnv = process.env): EnvoyScale {
  const positive = (name: string, def: number) => {
    const raw = env[name];
    const n = raw === undefined ? def : Number(raw);
    if (!(Number.isFinite(n) && n > 0)) throw new Error(`${name}=${raw}: expected a number above 0`);
    return n;
  };
  const scale = positive('BENCH_ENVOY_SCALE', 1);
  const burner = env.BENCH_ENVOY_BURNER ?? '1';
  if (burner !== '0' && burner !== '1') throw new Error(`BENCH_ENVOY_BURNER=${burner}: expected 0 or 1`);
  const workers = env.BENCH_ENVOY_WORKERS ?? 'auto';
  if (!/^(auto|[1-9]\d*)$/.test(workers)) throw new Error(`BENCH_ENVOY_WORKERS=${workers}: expected auto or a whole number above 0`);
  const warmRaw = env.BENCH_ENVOY_WARM_S ?? '20';
  const warmS = Number(warmRaw);
  if (!(Number.isFinite(warmS) && warmS >= 0)) throw new Error(`BENCH_ENVOY_WARM_S=${warmRaw}: expected a number of seconds, 0 or more`);
  const warmUpRaw = env.BENCH_ENVOY_WARM_UP_CALLS;
  if (warmUpRaw !== undefined && !/^\d+$/.test(warmUpRaw)) throw new Error(`BENCH_ENVOY_WARM_UP_CALLS=${warmUpRaw}: expected a whole number, 0 or more`);
  const coldStarts = positive('BENCH_ENVOY_COLD_STARTS', 1);
  if (!Number.isInteger(coldStarts)) throw new Error(`BENCH_ENVOY_COLD_STARTS=${env.BENCH_ENVOY_COLD_STARTS}: expected a whole number above 0`);
  return {
    scale,
    rate: positive('BENCH_ENVOY_RATE', 800),
    steady: Math.max(BURST, Math.round(4_800 * scale)),
    starts: Math.max(1, Math.round(5 * scale)),
    burnerSteady: Math.max(BURST, Math.round(7_000 * scale)),
    burner: burner === '1',
    workers,
    warmS,
    coldStarts,
    ...(warmUpRaw === undefined ? {} : { warmUpCalls: Number(warmUpRaw) }),
  };
}

// Envoy's rate limit filter counters (cluster.<route cluster>.ratelimit.*), changes over one row.
export interface FilterCounts {
  ok: number;
  over_limit: number;
  error: number;
  failure_mode_allowed: number;
}

export interface Measured {
  n: number;
  s200: number;
  s429: number;
  s5xx: number;
  // Requests that got no HTTP answer at all.
  noAnswer: number;
  // Answers carrying Envoy's x-ratelimit-limit (a decision that arrived in time).
  withHeaders: number;
  envoy: FilterCounts;
  // sluice's decisions made without Redis during the row; undefined: the service counts none.
  degraded?: number;
  // CPU the service's processes used during the row (both replicas, every worker), ms.
  cpuMs?: number;
  // CPU time the hypervisor took from this machine during the row (all cores, ms), and the errors
  // that came right after STEAL_STALL_MS or more of it (bench/host-steal.ts); undefined where the
  // machine reports no steal.
  stealMs?: number;
  errorsInSteal?: number;
}

export interface Figures {
  burst: Measured;
  // The steady row right after the replicas started, before the warm-up traffic (summed over
  // EnvoyScale.coldStarts starts), and Envoy's errors in it at each start: the start of the full
  // run (the last) first, then the cold row's own starts in the order they ran.
  coldSteady: Measured;
  coldErrors?: number[];
  steady: Measured;
  firstDecisions: Measured;
  burnerBurst?: Measured;
  burnerSteady?: Measured;
  outage: Measured;
}

// One row's figures from several runs (the first-decisions row: one per Envoy start).
export function sumMeasured(parts: readonly Measured[]): Measured {
  const add = (a: Measured, b: Measured): Measured => ({
    n: a.n + b.n,
    s200: a.s200 + b.s200,
    s429: a.s429 + b.s429,
    s5xx: a.s5xx + b.s5xx,
    noAnswer: a.noAnswer + b.noAnswer,
    withHeaders: a.withHeaders + b.withHeaders,
    envoy: {
      ok: a.envoy.ok + b.envoy.ok,
      over_limit: a.envoy.over_limit + b.envoy.over_limit,
      error: a.envoy.error + b.envoy.error,
      failure_mode_allowed: a.envoy.failure_mode_allowed + b.envoy.failure_mode_allowed,
    },
    degraded: a.degraded === undefined || b.degraded === undefined ? undefined : a.degraded + b.degraded,
    cpuMs: a.cpuMs === undefined || b.cpuMs === undefined ? undefined : a.cpuMs + b.cpuMs,
    ...(a.stealMs === undefined || b.stealMs === undefined
      ? {}
      : { stealMs: a.stealMs + b.stealMs, errorsInSteal: (a.errorsInSteal ?? 0) + (b.errorsInSteal ?? 0) }),
  });
  return parts.reduce(add);
}

const CPU_MIN_REQUESTS = 500;
const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

// Envoy's own counters, then what else happened: requests the RLS filter never saw (Envoy's
// local_ratelimit answered first), answers missing, decisions made without Redis.
function counters(m: Measured): string {
  const e = m.envoy;
  const notes = [`ok ${fmt(e.ok)} / over_limit ${fmt(e.over_limit)} / error ${fmt(e.error)}`];
  const unasked = m.n - e.ok - e.over_limit - e.error;
  if (unasked > 0) notes.push(`${fmt(unasked)} not asked`);
  if (m.noAnswer > 0) notes.push(`${fmt(m.noAnswer)} unanswered`);
  if (m.degraded) notes.push(`${fmt(m.degraded)} decided without Redis`);
  // /proc counts CPU in 10 ms ticks: a burst of a few dozen requests would read as 0 or 500 µs each.
  if (m.cpuMs !== undefined && m.n >= CPU_MIN_REQUESTS) notes.push(`service CPU ${fmt((m.cpuMs * 1000) / m.n)} µs/request`);
  if (m.stealMs !== undefined && (m.stealMs > 0 || e.error > 0)) {
    const inSteal = e.error > 0 ? `, ${fmt(m.errorsInSteal ?? 0)} of the ${fmt(e.error)} errors right after ${STEAL_STALL_MS} ms or more of it` : '';
    notes.push(`host steal ${fmt(m.stealMs)} ms${inSteal}`);
  }
  return notes.join(', ');
}

const missed = (m: Measured) => `${fmt(m.envoy.error)} of ${fmt(m.n)} missed (${counters(m)})`;

interface Row {
  label: string;
  cell(f: Figures): string | undefined;
}

function rows(scale: EnvoyScale): Row[] {
  const all: Row[] = [
    {
      label: `free tier ${FREE_LIMIT}/min, ${BURST} concurrent requests (one new tenant)`,
      cell: ({ burst: m }) => `${m.s200} × 200, ${m.s429} × 429, x-ratelimit headers on ${m.withHeaders} (${counters(m)})`,
    },
    {
      label: `${fmt(scale.steady)} requests at ${fmt(scale.rate)}/s, healthy Redis, after ${fmt(scale.warmS)} s of such traffic: Envoy's ratelimit counters`,
      cell: ({ steady: m }) => counters(m),
    },
    {
      label: `the same ${fmt(scale.steady)} requests right after the replicas started (1 s of traffic before; JIT-compiled code not ready yet)${scale.coldStarts > 1 ? `, ${scale.coldStarts} starts` : ''}`,
      cell: ({ coldSteady: m, coldErrors }) =>
        `${counters(m)}${coldErrors !== undefined && coldErrors.length > 1 ? `; errors at each start: ${coldErrors.join(', ')}` : ''}`,
    },
    {
      label: `Redis killed: requests admitted for a new tenant (limit ${FREE_LIMIT}), ${BURST} concurrent`,
      cell: ({ outage: m }) => `${m.s200} of ${m.n}, ${m.s5xx} × 5xx (${counters(m)})`,
    },
    {
      label: `first decisions on Envoy's new connections (${scale.starts} Envoy starts × ${BURST} requests; 2 workers × 2 replicas): missed Envoy's 20 ms timeout`,
      cell: ({ firstDecisions: m }) => missed(m),
    },
  ];
  if (!scale.burner) return all;
  return all.concat([
    { label: `a CPU burner running: ${BURNER_BURST} concurrent requests (new tenants), missed decisions`, cell: (f) => f.burnerBurst && missed(f.burnerBurst) },
    {
      label: `a CPU burner running: ${fmt(scale.burnerSteady)} requests at ${fmt(scale.rate)}/s, missed decisions`,
      cell: (f) => f.burnerSteady && missed(f.burnerSteady),
    },
  ]);
}

// Row, sluice, upstream; a column that did not run (a string: why) has '–' in every cell.
export function envoyInFrontTable(scale: EnvoyScale, sluice: Figures | string, upstream: Figures | string): string {
  const cell = (r: Row, f: Figures | string) => (typeof f === 'string' ? '–' : (r.cell(f) ?? '–'));
  const lines = ['| what Envoy saw | sluice | envoyproxy/ratelimit, same Envoy, same rules |', '|---|---|---|'];
  for (const r of rows(scale)) lines.push(`| ${r.label} | ${cell(r, sluice)} | ${cell(r, upstream)} |`);
  return lines.join('\n');
}
