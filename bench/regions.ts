import { barChart } from '../src/svg-chart';
import { REQUEST_DURATION_BUCKETS } from '../src/telemetry/metrics';
import { d } from '../test/support/app';
import { scriptCalls, stopAll } from '../test/support/redis';
import { type Deployment, type DriveResult, type Overrides, type Sample, drive, percentile, startRegions } from '../test/support/regions';
import type { RateLimitRequest } from '../src/gen/envoy/service/ratelimit/v3/rls';
import { H2LOAD_MISSING, h2loadAvailable, metricSum, runH2load } from './fleet';

// The multi-region scenario (docs/multi-region.md) at its real scale: one tenant limited to 1000
// requests a minute, offered twice that, 70% in region a and 30% in b; each region two replicas
// (each its own process) on its own Redis, 40 ms (one way) from the global Redis. Phases: steady;
// b's link to the global Redis cut (partition policy deny); restored (reconciliation); demand
// shifted to 10% a / 90% b. A second deployment repeats steady / cut / restored under the 50% share
// policy. Durations scale with REGIONS_BENCH_SCALE (default 1). Nothing asserts: this prints what
// happened.

const LIMIT = 1000;
const MINUTE_S = 60;
const LIMIT_PER_S = LIMIT / MINUTE_S;
const OFFERED_PER_S = (2 * LIMIT) / MINUTE_S;
const DELAY_MS = 40;
const WARM_UP_MS = 5000;
// Twice the limit offered spends a full bucket in burst / (offered − rate) = 60 s: the token
// bucket's steady state is an empty bucket, so its warm-up lasts that much longer.
const BURST_SPENT_MS = (LIMIT / (OFFERED_PER_S - LIMIT_PER_S)) * 1000;
// Answers slower than this waited on the global Redis (a regional decision takes a few ms).
const SLOW_MS = 100;
// The latency probe: h2load (C, a fraction of a Node client's CPU and no event loop of its own to
// wait on) asks one replica per region this often on one connection, through the steady phase, on
// a key of its own whose limit is never reached: the tenant's budget and figures are untouched,
// and every answer takes the request path a tenant's does (the regional allowance, leased).
const PROBE_PER_S = 20;
// Each replica one serving process (WORKERS=1), as a pod of one core: four replicas share this
// machine's two cores with three Redis servers, the proxy and the load generator, and at this
// scenario's rate (5 to 12 requests a second per replica, and the probe's 20) more processes only wait
// longer for a core to wake.
const REPLICA: Overrides = { workers: 1 };
export const REGION_ALGORITHMS = ['token_bucket', 'fixed_window'] as const;
type Algorithm = (typeof REGION_ALGORITHMS)[number];
type PhaseName = 'steady' | 'cut' | 'restored' | 'shift';
const SHARES: Record<'normal' | 'shift', Record<string, number>> = { normal: { a: 0.7, b: 0.3 }, shift: { a: 0.1, b: 0.9 } };
// b has adapted to the shift when it admits this much of its demand-proportional share of the limit.
const FAIR_TARGET_PER_S = 0.8 * SHARES.shift.b * LIMIT_PER_S;

export interface Phase {
  name: PhaseName;
  fromS: number;
  toS: number;
}

// What the global Redis and every replica's /metrics said at one moment of a run.
interface Mark {
  scriptCalls: number;
  metrics: string;
  byRegion: Map<string, string>;
}

// What h2load measured on one replica of a region, or why it did not run.
interface Probe {
  region: string;
  latenciesMs: number[];
  requests: number;
  status2xx: number;
}

interface Run {
  algorithm: Algorithm;
  result: DriveResult;
  probes: Probe[] | string;
  phases: Phase[];
  // At the start of each phase, then at the end of the run.
  marks: Mark[];
}

// Admitted in one window of the limit, in seconds of the run.
interface Window {
  fromS: number;
  toS: number;
  admitted: number;
}

export interface RegionsBench {
  scale: number;
  // A label, then one value per algorithm (REGION_ALGORITHMS order).
  rows: string[][];
  // The token-bucket run under deny, for the chart.
  chart: Run;
}

export function regionsScale(): number {
  const scale = Number(process.env.REGIONS_BENCH_SCALE ?? 1);
  if (!(scale > 0)) throw new Error(`REGIONS_BENCH_SCALE: expected a number above 0, got '${process.env.REGIONS_BENCH_SCALE}'`);
  return scale;
}

export async function regionsBench(scale: number): Promise<RegionsBench> {
  const columns: string[][][] = [];
  let chart: Run | undefined;
  try {
    for (const algorithm of REGION_ALGORITHMS) {
      // The shift comes 15 s into an epoch minute (3 min 15 s into the drive), while a fixed window
      // still holds half its budget: at twice the limit offered, a window is spent by its 30th second.
      const deny = await runScenario({
        algorithm,
        scale,
        settings: {},
        phases: [
          ['steady', 120],
          ['cut', 30],
          ['restored', 45],
          ['shift', 60],
        ],
      });
      const share = await runScenario({
        algorithm,
        scale,
        settings: { globalPartitionPolicy: '50%' },
        phases: [
          ['steady', 60],
          ['cut', 30],
          ['restored', 60],
        ],
      });
      const baseline = await baselineLatency(algorithm, scale);
      columns.push([
        ...steadyFigures(deny),
        ...baseline,
        ...cutFigures(deny, 'deny'),
        ...shiftFigures(deny),
        ...cutFigures(share, '50%'),
        ...health(deny, share),
      ]);
      if (algorithm === 'token_bucket') chart = deny;
    }
  } finally {
    await stopAll();
  }
  return { scale, rows: columns[0].map(([label], i) => [label, ...columns.map((c) => c[i][1])]), chart: chart! };
}

function configYaml(algorithm: Algorithm): string {
  const burst = algorithm === 'token_bucket' ? `, burst: ${LIMIT}` : '';
  return (
    [
      'domain: mr',
      'descriptors:',
      `  - key: tenant\n    rate_limit: { unit: minute, requests_per_unit: ${LIMIT}, algorithm: ${algorithm}${burst} }`,
      `  - key: probe\n    rate_limit: { unit: minute, requests_per_unit: 1000000000, algorithm: ${algorithm} }`,
    ].join('\n') + '\n'
  );
}

const request = () => ({ domain: 'mr', descriptors: [d(['tenant', 't1'])] });
const PROBE_REQUEST: RateLimitRequest = { domain: 'mr', descriptors: [d(['probe', 'p1'])], hitsAddend: 0 };

// PROBE_PER_S for `seconds` on the first replica of each region, all regions at once.
async function probe(deployment: Deployment, seconds: number): Promise<Probe[] | string> {
  if (!h2loadAvailable()) return `not measured: ${H2LOAD_MISSING}`;
  return Promise.all(
    deployment.regions.map(async (r) => {
      const run = await runH2load({
        port: r.apps[0].grpcPort,
        request: PROBE_REQUEST,
        requests: PROBE_PER_S * seconds,
        connections: 1,
        streams: 1,
        rpsPerConnection: PROBE_PER_S,
        latencies: true,
      });
      return { region: r.name, latenciesMs: run.latenciesMs ?? [], requests: run.requests, status2xx: run.status2xx };
    }),
  );
}
const rateOf = (phase: PhaseName, region: string) => OFFERED_PER_S * SHARES[phase === 'shift' ? 'shift' : 'normal'][region];

function phasesOf(spec: [PhaseName, number][], scale: number): Phase[] {
  let at = 0;
  return spec.map(([name, seconds]) => {
    const fromS = at;
    at += Math.max(1, Math.round(seconds * scale));
    return { name, fromS, toS: at };
  });
}

const phaseAt = (phases: readonly Phase[], t: number) => phases.find((p) => t < p.toS) ?? phases[phases.length - 1];

interface ScenarioOptions {
  algorithm: Algorithm;
  scale: number;
  settings: Overrides;
  phases: [PhaseName, number][];
}

// One deployment, warmed up, then every phase in one continuous open-loop drive; the cut and the
// restore are timers during it, so the load never pauses at a phase edge.
async function runScenario(o: ScenarioOptions): Promise<Run> {
  const phases = phasesOf(o.phases, o.scale);
  // Replicas as processes, as deployed: the latency measured is a replica's, not that of four
  // replicas and the load generator sharing one event loop.
  const deployment = await startRegions({
    regions: [
      { name: 'a', replicas: 2 },
      { name: 'b', replicas: 2 },
    ],
    configYaml: configYaml(o.algorithm),
    delayMs: DELAY_MS,
    settings: { ...REPLICA, ...o.settings },
    processes: true,
  });
  try {
    const warmUpMs = WARM_UP_MS + (o.algorithm === 'token_bucket' ? BURST_SPENT_MS : 0);
    // At full scale the measured drive starts on a minute of the epoch, so the fixed window's
    // windows (Redis' clock) line up with the phases; shorter runs have no whole window anyway.
    if (o.scale >= 1) await sleep(msUntilMinute(warmUpMs + 250));
    // The probe's key is leased before it is measured, as the tenant's is by the warm-up.
    await Promise.all([drive({ deployment, durationMs: warmUpMs, ratePerSecond: (region) => rateOf('steady', region), request }), probe(deployment, 1)]);
    const marks: Promise<Mark>[] = [Promise.resolve(await mark(deployment))];
    const timers = phases.slice(1).map((p) => setTimeout(() => marks.push(enterPhase(deployment, p.name)), p.fromS * 1000));
    const probes = probe(deployment, phases[0].toS - phases[0].fromS);
    const result = await drive({
      deployment,
      durationMs: phases[phases.length - 1].toS * 1000,
      ratePerSecond: (region, t) => rateOf(phaseAt(phases, t).name, region),
      request,
    });
    timers.forEach(clearTimeout);
    marks.push(mark(deployment));
    return { algorithm: o.algorithm, result, probes: await probes, phases, marks: await Promise.all(marks) };
  } finally {
    await deployment.stop();
  }
}

// The same replicas, load and machine with one region's setup: every replica on one local Redis,
// no global store. What a decision costs here without any multi-region work: the reference for
// the steady-state latency above.
async function baselineLatency(algorithm: Algorithm, scale: number): Promise<string[][]> {
  const deployment = await startRegions({
    regions: [
      { name: 'a', replicas: 2 },
      { name: 'b', replicas: 2 },
    ],
    configYaml: configYaml(algorithm),
    delayMs: 0,
    global: false,
    settings: REPLICA,
    processes: true,
  });
  try {
    await Promise.all([drive({ deployment, durationMs: WARM_UP_MS, ratePerSecond: (region) => rateOf('steady', region), request }), probe(deployment, 1)]);
    const durationMs = Math.max(1, Math.round(60 * scale)) * 1000;
    const m0 = await mark(deployment);
    const probes = probe(deployment, durationMs / 1000);
    const result = await drive({ deployment, durationMs, ratePerSecond: (region) => rateOf('steady', region), request });
    const m1 = await mark(deployment);
    const steady: Phase = { name: 'steady', fromS: 0, toS: durationMs / 1000 };
    return [
      [
        'single-region reference (all four replicas on one local Redis): latency p50 / p99 / max ms, a; b',
        `${latency(samplesIn(result, steady, 'a'))}; ${latency(samplesIn(result, steady, 'b'))}`,
      ],
      ['single-region reference: h2load probe p50 / p99 / max ms, a; b', probeLatency(await probes)],
      ['single-region reference: decision latency in sluice (server-side histogram)', `${decisionLatency(m0, m1, 'a')}; ${decisionLatency(m0, m1, 'b')}`],
    ];
  } finally {
    await deployment.stop();
  }
}

function enterPhase(deployment: Deployment, phase: PhaseName): Promise<Mark> {
  if (phase === 'cut') deployment.region('b').proxy!.cut();
  if (phase === 'restored') deployment.region('b').proxy!.restore();
  return mark(deployment);
}

// Ms to wait so that a minute of the epoch begins `leadMs` after the wait.
function msUntilMinute(leadMs: number): number {
  const next = Math.ceil((Date.now() + leadMs) / 60_000) * 60_000;
  return next - leadMs - Date.now();
}

async function mark(deployment: Deployment): Promise<Mark> {
  const [calls, ...texts] = await Promise.all([
    deployment.global ? scriptCalls(deployment.global) : 0,
    ...deployment.regions.map(async (r) => (await Promise.all(r.apps.map(async (app) => (await app.http('/metrics')).text()))).join('\n')),
  ]);
  return { scriptCalls: calls, metrics: texts.join('\n'), byRegion: new Map(deployment.regions.map((r, i) => [r.name, texts[i]])) };
}

// Decision latency as the replicas of one region measured it (sluice_request_duration_seconds,
// gRPC: from the decoded request to the decided answer, every call between the two marks, the
// probe's and the tenant's). Client-side figures add the load generator's and the kernel's share
// of two busy cores; this is the time a decision spends in sluice. The histogram keeps buckets,
// not samples: p99 is stated as the bucket bound it falls under.
function decisionLatency(from: Mark, to: Mark, region: string): string {
  const delta = (name: string, labels: Record<string, string>) =>
    metricSum(to.byRegion.get(region) ?? '', name, labels) - metricSum(from.byRegion.get(region) ?? '', name, labels);
  const count = delta('sluice_request_duration_seconds_count', { transport: 'grpc' });
  if (count <= 0) return `${region}: no calls`;
  const within = (le: number) => delta('sluice_request_duration_seconds_bucket', { transport: 'grpc', le: String(le) });
  const p99 = REQUEST_DURATION_BUCKETS.find((le) => within(le) >= 0.99 * count);
  const share2ms = (100 * within(0.002)) / count;
  return `${region}: p99 ≤ ${p99 === undefined ? '> 250' : fmt(p99 * 1000, 2)} ms, ${fmt(share2ms, 2)}% ≤ 2 ms, mean ${fmt((delta('sluice_request_duration_seconds_sum', { transport: 'grpc' }) / count) * 1000, 3)} ms (${fmt(count)} calls)`;
}

// A metric's growth between two marks, summed over every replica of both regions.
function metricDelta(from: Mark, to: Mark, name: string, labels: Record<string, string>): number {
  return metricSum(to.metrics, name, labels) - metricSum(from.metrics, name, labels);
}

function admittedPerSecond(r: DriveResult, region?: string): number[] {
  const out: number[] = [];
  for (const row of r.perSecond) if (region === undefined || row.region === region) out[row.second] = (out[row.second] ?? 0) + row.admitted;
  return Array.from(out, (v) => v ?? 0);
}

function sum(values: readonly number[], from: number, to: number): number {
  let s = 0;
  for (let i = Math.max(0, from); i < Math.min(values.length, to); i++) s += values[i];
  return s;
}

// The limit's own windows over the run. Fixed window: the minutes of the epoch (Redis' clock
// decides them; the run may cut the first and last short). Token bucket: every 60 s span, which
// an empty bucket holds to the limit (a full one could add its burst).
function limitWindows(run: Run): Window[] {
  const total = admittedPerSecond(run.result);
  if (run.algorithm === 'token_bucket')
    return Array.from({ length: Math.max(0, total.length - MINUTE_S + 1) }, (_, s) => ({ fromS: s, toS: s + MINUTE_S, admitted: sum(total, s, s + MINUTE_S) }));
  const counts = new Map<number, number>();
  for (const s of run.result.samples) {
    const w = Math.floor((run.result.startedAtMs + s.sentAtMs) / 60_000);
    counts.set(w, (counts.get(w) ?? 0) + (s.admitted ? 1 : 0));
  }
  const at = (w: number) => (w * 60_000 - run.result.startedAtMs) / 1000;
  return [...counts].sort(([x], [y]) => x - y).map(([w, admitted]) => ({ fromS: Math.max(0, at(w)), toS: Math.min(total.length, at(w + 1)), admitted }));
}

const overlapping = (windows: readonly Window[], p: Phase) => windows.filter((w) => w.fromS < p.toS && w.toS > p.fromS);
const whole = (w: Window) => w.toS - w.fromS > MINUTE_S - 1;
const maxOf = (windows: readonly Window[]) => (windows.length === 0 ? NaN : Math.max(...windows.map((w) => w.admitted)));

// Seconds after the phase start until the last window above the limit ends (0: none was),
// among the windows ending in the phase; undefined when one ending with the phase still is.
function secondsBackAtLimit(windows: readonly Window[], p: Phase): number | undefined {
  const ending = windows.filter((w) => w.toS > p.fromS && w.toS <= p.toS + 0.5);
  const above = ending.filter((w) => w.admitted > LIMIT).map((w) => w.toS);
  if (above.length === 0) return 0;
  const last = Math.max(...above);
  return last >= p.toS - 0.5 ? undefined : Math.round(last - p.fromS);
}

function samplesIn(r: DriveResult, p: Phase, region?: string): Sample[] {
  return r.samples.filter((s) => s.sentAtMs >= p.fromS * 1000 && s.sentAtMs < p.toS * 1000 && (region === undefined || s.region === region));
}

const phase = (run: Run, name: PhaseName) => run.phases.find((p) => p.name === name)!;
const markAt = (run: Run, name: PhaseName, after = 0) => run.marks[run.phases.findIndex((p) => p.name === name) + after];
const fmt = (n: number | undefined, digits = 0) =>
  n === undefined || Number.isNaN(n) ? 'n/a' : n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
const vsLimit = (n: number) => (Number.isNaN(n) ? 'n/a (no window of the limit fits in the run)' : `${fmt(n)} (${fmt(n / LIMIT, 2)}×)`);
const windowList = (windows: readonly Window[]) => windows.map((w) => `${fmt(w.admitted)}${whole(w) ? '' : ' (part)'}`).join(', ');
const windowKind = (run: Run) => (run.algorithm === 'fixed_window' ? 'epoch minute' : '60 s');

function latency(samples: readonly Sample[]): string {
  return latencyOf(samples.map((s) => s.latencyMs));
}

function latencyOf(ms: readonly number[]): string {
  return `${fmt(percentile(ms, 50), 1)} / ${fmt(percentile(ms, 99), 1)} / ${fmt(ms.length ? Math.max(...ms) : NaN, 1)}`;
}

// Per region; an answer that was not a 2xx, or a request never answered, is named.
function probeLatency(probes: Probe[] | string): string {
  if (typeof probes === 'string') return probes;
  return probes
    .map((p) => `${latencyOf(p.latenciesMs)}${p.status2xx === p.requests ? '' : ` (${p.requests - p.status2xx} of ${p.requests} not 2xx)`}`)
    .join('; ');
}

function steadyFigures(run: Run): string[][] {
  const steady = phase(run, 'steady');
  const total = admittedPerSecond(run.result);
  const windows = overlapping(limitWindows(run), steady).filter(whole);
  const perMinute =
    run.algorithm === 'fixed_window'
      ? `each whole window: ${windows.length ? windows.map((w) => vsLimit(w.admitted)).join(', ') : 'none'}`
      : vsLimit((sum(total, steady.fromS, steady.toS) * MINUTE_S) / (steady.toS - steady.fromS));
  const probed = typeof run.probes === 'string' ? 0 : run.probes.reduce((n, p) => n + p.requests, 0);
  const decisions = samplesIn(run.result, steady).length + probed;
  const [m0, m1] = [markAt(run, 'steady'), markAt(run, 'steady', 1)];
  const calls = m1.scriptCalls - m0.scriptCalls;
  const ops = ['lease', 'give_back', 'probe', 'absorb']
    .map((op) => `${op} ${fmt(metricDelta(m0, m1, 'sluice_region_global_call_duration_seconds_count', { operation: op }))}`)
    .join(', ');
  const runCalls = run.marks[run.marks.length - 1].scriptCalls - m0.scriptCalls;
  return [
    ['steady: admitted per minute, both regions (× limit)', perMinute],
    ['steady: latency p50 / p99 / max ms, region a', latency(samplesIn(run.result, steady, 'a'))],
    ['steady: latency p50 / p99 / max ms, region b', latency(samplesIn(run.result, steady, 'b'))],
    [`steady: h2load probe (${PROBE_PER_S}/s, one connection, a key of its own) p50 / p99 / max ms, a; b`, probeLatency(run.probes)],
    ['steady: decision latency in sluice (server-side histogram)', `${decisionLatency(m0, m1, 'a')}; ${decisionLatency(m0, m1, 'b')}`],
    [
      'steady: global-store calls per decision',
      `${fmt(calls / decisions, 4)} (${fmt(calls)} script calls / ${fmt(decisions)} decisions: ${ops}); whole run ${fmt(runCalls / (run.result.totals.sent + probed), 4)}`,
    ],
  ];
}

function cutFigures(run: Run, policy: 'deny' | '50%'): string[][] {
  const [cut, restored] = [phase(run, 'cut'), phase(run, 'restored')];
  const windows = limitWindows(run);
  const cutWindows = overlapping(windows, cut);
  const admitted = (region: string, p: Phase) => sum(admittedPerSecond(run.result, region), p.fromS, p.toS);
  const [m0, m1] = [markAt(run, 'cut'), markAt(run, 'restored', 1)];
  const units = (event: string) => fmt(metricDelta(m0, m1, 'sluice_region_units_total', { event }));
  const cutS = cut.toS - cut.fromS;
  const span: Phase = { name: 'cut', fromS: cut.fromS, toS: restored.toS };
  const beyond = admitted('a', span) + admitted('b', span) - LIMIT_PER_S * (span.toS - span.fromS);
  const back = secondsBackAtLimit(windows, restored);
  const p = `(${policy})`;
  return [
    [
      `cut b ${cutS} s ${p}: most admitted in a ${windowKind(run)} window overlapping the cut`,
      `${vsLimit(maxOf(cutWindows))}${run.algorithm === 'fixed_window' ? `; windows: ${windowList(cutWindows)}` : ''}`,
    ],
    [
      `cut b ${p}: admitted during the cut, a / b`,
      `${fmt(admitted('a', cut))} / ${fmt(admitted('b', cut))} (the limit's rate × ${cutS} s: ${fmt(LIMIT_PER_S * cutS)})`,
    ],
    [
      `cut b ${p}: admitted beyond the limit's rate from the cut to the end of restored`,
      run.algorithm === 'token_bucket' ? `${fmt(beyond)} over ${span.toS - span.fromS} s` : '– (windows above)',
    ],
    [
      `cut b ${p}: units overshoot / reconciled (sluice_region_units_total, cut to end of restored)`,
      `${units('overshoot')} / ${units('reconciled')} (policy allows ${policy === 'deny' ? 0 : fmt(0.5 * LIMIT_PER_S * cutS)})`,
    ],
    [`cut b ${p}: latency p50 / p99 / max ms in the cut, region b`, latency(samplesIn(run.result, cut, 'b'))],
    [
      `restored ${p}: s until the ${windowKind(run)} windows are back at ≤ limit`,
      `${back === undefined ? `still above after ${restored.toS - restored.fromS} s` : `${back} s`} (most in a window ending then: ${fmt(maxOf(windows.filter((w) => w.toS > restored.fromS && w.toS <= restored.toS + 0.5)))})`,
    ],
  ];
}

function shiftFigures(run: Run): string[][] {
  const shift = phase(run, 'shift');
  const total = admittedPerSecond(run.result);
  const b = admittedPerSecond(run.result, 'b');
  // Averaged over 3 s: one second swings by a few requests at these rates.
  let reached: number | undefined;
  for (let s = shift.fromS; reached === undefined && s + 3 <= shift.toS; s++) if (sum(b, s, s + 3) / 3 >= FAIR_TARGET_PER_S) reached = s - shift.fromS;
  const first = b.slice(shift.fromS, shift.fromS + 8).join(', ');
  const windows = overlapping(limitWindows(run), shift);
  return [
    [
      `shift to 10% a / 90% b: s until b admits ≥ ${fmt(FAIR_TARGET_PER_S, 1)}/s (3 s mean)`,
      `${reached === undefined ? `not within ${shift.toS - shift.fromS} s` : `${reached} s`} (b per second from the shift: ${first}, ...)`,
    ],
    ['shift: b share of admitted (fair: 90%)', `${fmt((100 * sum(b, shift.fromS, shift.toS)) / Math.max(1, sum(total, shift.fromS, shift.toS)), 1)}%`],
    [
      `shift: most admitted in a ${windowKind(run)} window overlapping the shift`,
      `${vsLimit(maxOf(windows))}${run.algorithm === 'fixed_window' ? `; windows: ${windowList(windows)}` : ''}`,
    ],
  ];
}

function health(deny: Run, share: Run): string[][] {
  const describe = (run: Run) =>
    run.phases
      .map((p) => {
        const s = samplesIn(run.result, p);
        return `${p.name} ${s.filter((x) => x.error).length}/${s.filter((x) => x.degraded).length}/${s.filter((x) => x.latencyMs > SLOW_MS).length}`;
      })
      .join(', ');
  const [m0, m1] = [deny.marks[0], deny.marks[deny.marks.length - 1]];
  const net = metricDelta(m0, m1, 'sluice_region_units_total', { event: 'leased' }) - metricDelta(m0, m1, 'sluice_region_units_total', { event: 'returned' });
  return [
    ['whole run (deny): admitted / units leased − returned', `${fmt(deny.result.totals.admitted)} / ${fmt(net)}`],
    [`errors / degraded / slower than ${SLOW_MS} ms, per phase (deny)`, describe(deny)],
    [`errors / degraded / slower than ${SLOW_MS} ms, per phase (50%)`, describe(share)],
  ];
}

// A Markdown table: one row per figure, one column per algorithm.
export function regionsTable(bench: RegionsBench): string {
  const lines = [`| figure | ${REGION_ALGORITHMS.join(' | ')} |`, `|---|${REGION_ALGORITHMS.map(() => '---').join('|')}|`];
  for (const row of bench.rows) lines.push(`| ${row.join(' | ')} |`);
  return lines.join('\n');
}

// Offered (behind) and admitted (in front) per second and region through the token-bucket run.
export function regionsChart(bench: RegionsBench, caption: string): string {
  const run = bench.chart;
  const cut = phase(run, 'cut');
  const offered = (region: string) => run.result.perSecond.filter((r) => r.region === region).map((r) => r.sent);
  const label: Record<PhaseName, string> = { steady: 'steady', cut: 'b cut', restored: 'restored', shift: 'shift to 10% a / 90% b' };
  return barChart({
    title: 'Admitted per second by region: token bucket 1000/min (burst 1000), offered 2× the limit, 70% a / 30% b',
    subtitle: caption,
    yLabel: 'requests per second, by second of the run',
    bins: admittedPerSecond(run.result).length,
    ticks: run.phases.map((p) => ({ bin: p.fromS, label: `${label[p.name]} ${p.fromS} s` })),
    guide: { value: LIMIT_PER_S, label: `the limit, ${LIMIT}/min = ${LIMIT_PER_S.toFixed(1)}/s` },
    panels: [
      {
        title: `2 regions x 2 replicas, global Redis ${DELAY_MS} ms away; b's link cut for ${cut.toS - cut.fromS} s (partition policy deny)`,
        back: [
          { label: 'offered a', colour: '#c9d7e8', values: offered('a') },
          { label: 'offered b', colour: '#f4c7c7', values: offered('b') },
        ],
        front: [
          { label: 'admitted a', colour: '#4c78a8', values: admittedPerSecond(run.result, 'a') },
          { label: 'admitted b', colour: '#e45756', values: admittedPerSecond(run.result, 'b') },
        ],
      },
    ],
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
