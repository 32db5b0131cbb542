import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, type TestContext, test } from 'node:test';
import YAML from 'yaml';
import { metricSum, waitReady } from '../../bench/fleet';
import { changedPaths, envoyBinary, type RunningEnvoy, startEnvoy } from '../support/envoy';
import { REPO, type ServerProcess, spawnServer, spawnServers } from '../support/process';
import { type RedisNode, startRedis, stopAll } from '../support/redis';
import { awayFromWindowEdge } from '../support/time';
import { closing } from '../support/app';

// The shipped envoy/envoy.yaml, its addresses and nothing else changed, in front of two sluice
// replicas (examples/config, the config it is written for, as docker-compose.yml runs them) on one
// real Redis and a real upstream: what Envoy answers and what it counts.

const ENVOY_YAML = path.join(REPO, 'envoy/envoy.yaml');
const REPLICAS = 2;
// examples/config/edge.yaml's tenant_free: 10 a minute, fixed window.
const FREE_LIMIT = 10;
const MINUTE_MS = 60_000;
const BURST = 40;
const STEADY_REQUESTS = 3_000;
const STEADY_PER_TICK = 6;
const STEADY_TICK_MS = 20;
const STEADY_TENANTS = 500;
// The README's fallback bound (When Redis is slow or gone): a key no replica has seen starts from
// each replica's share of the whole limit, 1 / the live replicas.
const OUTAGE_BOUND = REPLICAS * Math.floor(FREE_LIMIT / REPLICAS);

interface Answer {
  status: number;
  headers: Headers;
}

let redis: RedisNode;
let replicas: ServerProcess[] = [];
let upstream: http.Server;
let envoy: RunningEnvoy;
const run = Date.now().toString(36);

async function through(tenant: string | undefined, urlPath = '/'): Promise<Answer> {
  const res = await fetch(`http://127.0.0.1:${envoy.port}${urlPath}`, { headers: tenant === undefined ? {} : { 'x-tenant-id': tenant } });
  await res.arrayBuffer();
  return { status: res.status, headers: res.headers };
}

const burst = (tenant: string, n = BURST) => Promise.all(Array.from({ length: n }, () => through(tenant)));
const count = (answers: Answer[], status: number) => answers.filter((a) => a.status === status).length;
const degraded = (a: Answer) => a.headers.get('x-ratelimit-degraded') === 'true';

const FILTER_COUNTERS = ['ok', 'over_limit', 'error', 'failure_mode_allowed'] as const;
// Envoy's side of its calls to sluice: how many it sent, how many ran out of its timeout (504),
// how many sluice answered (200, with a decision or a gRPC status).
const RLS_COUNTERS = ['upstream_rq_total', 'upstream_rq_timeout', 'upstream_rq_200'] as const;
type Counts = Record<string, number>;
interface Counted {
  // Envoy's rate limit filter (cluster.upstream.ratelimit.*).
  filter: Counts;
  // Envoy's cluster of sluice replicas (cluster.sluice.*).
  rls: Counts;
  // sluice's answers, both replicas together (sluice_requests_total by code; other: any other code),
  // the gRPC connections it closed on Envoy for sending too much (GOAWAY ENHANCE_YOUR_CALM), and its
  // decisions made without Redis (a Redis budget missed, here on a loaded machine).
  sluice: Counts;
  // Every other counter of Envoy's sluice cluster, for failure messages (nonzero changes only).
  others: Counts;
}

async function counters(): Promise<Counted> {
  const stats = await envoy.stats('^cluster\\.(upstream\\.ratelimit|sluice)\\.');
  const pick = (prefix: string, names: readonly string[]) => Object.fromEntries(names.map((n) => [n, stats[`${prefix}.${n}`] ?? 0]));
  const pages = await Promise.all(replicas.map(async (r) => (await fetch(`http://127.0.0.1:${r.httpPort}/metrics`, closing())).text()));
  const sum = (labels: Record<string, string>) => pages.reduce((n, page) => n + metricSum(page, 'sluice_requests_total', labels), 0);
  const [ok, overLimit, all] = [sum({ code: 'OK' }), sum({ code: 'OVER_LIMIT' }), sum({})];
  const total = (name: string) => pages.reduce((n, page) => n + metricSum(page, name), 0);
  const [closed, degradedDecisions] = [total('sluice_grpc_connections_closed_total'), total('sluice_degraded_decisions_total')];
  return {
    filter: pick('cluster.upstream.ratelimit', FILTER_COUNTERS),
    rls: pick('cluster.sluice', RLS_COUNTERS),
    sluice: { OK: ok, OVER_LIMIT: overLimit, other: all - ok - overLimit, closedConnections: closed, degraded: degradedDecisions },
    others: Object.fromEntries(Object.entries(stats).filter(([name]) => /^cluster\.sluice\.(upstream_(rq|cx)_|grpc\.)/.test(name))),
  };
}

// What Envoy and sluice counted while `work` ran (nothing else goes through meanwhile).
async function countedDuring(work: () => Promise<void>): Promise<Counted> {
  const start = await counters();
  await work();
  // Calls Envoy gave up on may still be deciding: read until sluice's counts stand still.
  let end = await counters();
  for (let settled = false; !settled; ) {
    await new Promise((r) => setTimeout(r, 200));
    const next = await counters();
    settled = JSON.stringify(next.sluice) === JSON.stringify(end.sluice);
    end = next;
  }
  const minus = (a: Counts, b: Counts) => Object.fromEntries(Object.entries(a).map(([k, v]) => [k, v - (b[k] ?? 0)]));
  const others = Object.fromEntries(Object.entries(minus(end.others, start.others)).filter(([, v]) => v !== 0));
  return { filter: minus(end.filter, start.filter), rls: minus(end.rls, start.rls), sluice: minus(end.sluice, start.sluice), others };
}

// What holds for every answer, however loaded the machine: each call Envoy sent was decided by
// sluice, whose handler answered no error status (a call Envoy reset before sluice started it is
// not decided, and consumes nothing); Envoy answered 429 exactly for the OVER_LIMIT decisions it
// received in time; every error it counted is a call that missed the 20 ms deadline, by Envoy's
// timer (504) or by sluice's (DEADLINE_EXCEEDED, answered when the deadline passed first), and was
// let through (failure_mode_deny: false). Misses are reported, not asserted: meeting a 20 ms
// deadline on a loaded machine is a timing property (issue 36 measures it in the bench).
function assertAccounted(t: TestContext, answers: Answer[], c: Counted): void {
  const detail = `statuses ${statusCounts(answers)}; counted ${JSON.stringify(c)}`;
  assert.equal(c.rls.upstream_rq_total, answers.length, `one call to sluice per request; ${detail}`);
  assert.equal(c.sluice.other, 0, `sluice answered every call OK or OVER_LIMIT; ${detail}`);
  assert.equal(c.sluice.closedConnections, 0, `sluice closed none of Envoy's connections; ${detail}`);
  const decided = c.sluice.OK + c.sluice.OVER_LIMIT;
  assert.ok(decided <= answers.length && decided >= answers.length - c.rls.upstream_rq_timeout, detail);
  assert.equal(answers.filter((a) => a.status >= 500).length, 0, `no 5xx; ${detail}`);
  assert.equal(count(answers, 429), c.filter.over_limit, detail);
  assert.equal(count(answers, 200), c.filter.ok + c.filter.failure_mode_allowed, detail);
  assert.equal(c.filter.ok + c.filter.over_limit + c.filter.error, answers.length, detail);
  const deadlineAnswers = c.rls.upstream_rq_200 - c.filter.ok - c.filter.over_limit;
  assert.equal(c.filter.error, c.rls.upstream_rq_timeout + deadlineAnswers, `every Envoy error is a missed deadline; ${detail}`);
  assert.equal(c.filter.failure_mode_allowed, c.filter.error, detail);
  assert.ok(c.filter.ok <= c.sluice.OK && c.filter.over_limit <= c.sluice.OVER_LIMIT, detail);
  assert.ok(answers.filter(degraded).length <= c.sluice.degraded, detail);
  t.diagnostic(`decisions that missed Envoy's 20 ms timeout (let through): ${c.filter.error} of ${answers.length}; made without Redis: ${c.sluice.degraded}`);
}

function statusCounts(answers: Answer[]): string {
  const by = new Map<number, number>();
  for (const a of answers) by.set(a.status, (by.get(a.status) ?? 0) + 1);
  return [...by].map(([status, n]) => `${n} × ${status}`).join(', ');
}

// Until `predicate` holds for `streak` answers in a row, each to a fresh tenant.
async function untilAnswers(what: string, predicate: (a: Answer) => boolean, streak = 4, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let inRow = 0;
  for (let i = 0; inRow < streak; i++) {
    if (Date.now() > deadline) throw new Error(`no ${streak} answers in a row ${what} within ${timeoutMs} ms`);
    inRow = predicate(await through(`probe-${run}-${what.replace(/\W+/g, '-')}-${i}`)) ? inRow + 1 : 0;
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('envoy/envoy.yaml in front of two sluice replicas on one Redis', () => {
  before(async () => {
    envoyBinary();
    redis = await startRedis();
    replicas = await spawnServers(
      Array.from(
        { length: REPLICAS },
        () => () =>
          spawnServer(['--config', path.join(REPO, 'examples/config'), '--store', 'redis', '--redis-url', `127.0.0.1:${redis.port}`], {
            LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
          }),
      ),
    );
    await Promise.all(replicas.map((r) => waitReady(r)));
    upstream = http.createServer((_req, res) => res.end('hello'));
    // Envoy keeps idle upstream connections for an hour; node closes them after 5 s by default,
    // and a request Envoy sends on one as it closes is a 503 that is nobody's decision.
    upstream.keepAliveTimeout = 0;
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    envoy = await startEnvoy(ENVOY_YAML, {
      upstream: [{ host: '127.0.0.1', port: (upstream.address() as AddressInfo).port }],
      sluice: replicas.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    });
    // Envoy's connections to both replicas from both workers exist, and each replica has decided on
    // Redis, before the counts below: first decisions are the bench's subject (issue 36), and would
    // leave the first burst's headers mostly unchecked (Envoy lets a late decision through bare).
    await burst('internal');
    await burst(`warm-${run}`);
  });

  after(async () => {
    await envoy?.stop();
    await Promise.all(replicas.map((r) => r.stop()));
    upstream?.close();
    await stopAll();
  });

  test('Envoy runs the shipped file with only its addresses changed', () => {
    const original = YAML.parse(fs.readFileSync(ENVOY_YAML, 'utf8'));
    const ran = YAML.parse(fs.readFileSync(envoy.configFile, 'utf8'));
    const changed = changedPaths(original, ran);
    assert.ok(changed.length > 0);
    for (const p of changed) assert.match(p, /\.socket_address\.(address|port_value)$/, `changed: ${p}`);
  });

  test(`free tier, ${BURST} concurrent requests: exactly ${FREE_LIMIT} admitted by the two replicas, 429 for the rest, with the limit headers`, async (t) => {
    await awayFromWindowEdge(MINUTE_MS, 5_000);
    let answers: Answer[] = [];
    const c = await countedDuring(async () => {
      answers = await burst(`free-${run}`);
    });
    assertAccounted(t, answers, c);
    // Exact while Redis decides; a decision that missed its Redis budget (our own slowness on a
    // loaded machine) is the fallback's, with the README's bound instead.
    if (c.sluice.degraded === 0) assert.equal(c.sluice.OK, FREE_LIMIT, `sluice admitted exactly the limit; ${JSON.stringify(c)}`);
    // With every decision in time (an idle machine) this is exactly 10 × 200 and 30 × 429.
    if (c.filter.error === 0 && c.sluice.degraded === 0) assert.deepEqual([count(answers, 200), count(answers, 429)], [FREE_LIMIT, BURST - FREE_LIMIT]);

    const decided = answers.filter((a) => a.headers.has('x-ratelimit-limit'));
    assert.equal(decided.length, c.filter.ok + c.filter.over_limit, 'every answer sluice gave in time carries the headers');
    const remaining = decided.filter((a) => a.status === 200).map((a) => Number(a.headers.get('x-ratelimit-remaining')));
    assert.equal(new Set(remaining).size, remaining.length, `each admitted request saw its own remainder: ${remaining}`);
    assert.ok(
      remaining.every((r) => Number.isInteger(r) && r >= 0 && r < FREE_LIMIT),
      `${remaining}`,
    );
    for (const a of decided) {
      assert.equal(a.headers.get('x-ratelimit-limit'), `${FREE_LIMIT}, ${FREE_LIMIT};w=60;name="tenant_free"`);
      const reset = Number(a.headers.get('x-ratelimit-reset'));
      assert.ok(Number.isInteger(reset) && reset >= 0 && reset <= 60, `x-ratelimit-reset ${a.headers.get('x-ratelimit-reset')}`);
      if (a.status !== 429) continue;
      assert.equal(a.headers.get('x-envoy-ratelimited'), 'true');
      assert.equal(a.headers.get('x-ratelimit-remaining'), '0');
      assert.equal(a.headers.get('ratelimit-limit'), String(FREE_LIMIT));
      assert.ok(Number(a.headers.get('retry-after')) >= 0, 'retry-after from sluice');
    }
  });

  test(`steady load, ${STEADY_REQUESTS} requests at about ${(STEADY_PER_TICK * 1000) / STEADY_TICK_MS}/s on a healthy Redis: every ratelimit.error a missed deadline`, async (t) => {
    const pending: Promise<Answer>[] = [];
    const c = await countedDuring(async () => {
      for (let i = 0; i < STEADY_REQUESTS; i += STEADY_PER_TICK) {
        for (let j = i; j < Math.min(STEADY_REQUESTS, i + STEADY_PER_TICK); j++) pending.push(through(`steady-${run}-${j % STEADY_TENANTS}`));
        await new Promise((r) => setTimeout(r, STEADY_TICK_MS));
      }
      await Promise.all(pending);
    });
    const answers = await Promise.all(pending);
    assertAccounted(t, answers, c);
    // 6 requests per tenant, under its 10 a minute in any window: Redis admits every one; only the
    // fallback, with its share of a key's remainder, may deny.
    assert.ok(c.sluice.OVER_LIMIT <= c.sluice.degraded, JSON.stringify(c));
  });

  let outageTenant = '';
  let outageAdmitted = 0;

  test(`Redis killed: sluice admits a new tenant at most ${OUTAGE_BOUND} times (the fallback bound), no 5xx`, async (t) => {
    await awayFromWindowEdge(MINUTE_MS, 30_000);
    await redis.stop('SIGKILL');
    await untilAnswers('degraded', degraded);
    outageTenant = `outage-${run}`;
    let answers: Answer[] = [];
    const c = await countedDuring(async () => {
      answers = await burst(outageTenant);
    });
    assertAccounted(t, answers, c);
    outageAdmitted = c.sluice.OK;
    assert.ok(outageAdmitted >= 1 && outageAdmitted <= OUTAGE_BOUND, `sluice admitted ${outageAdmitted}; ${JSON.stringify(c)}`);
    for (const a of answers.filter((x) => x.status === 429)) assert.ok(degraded(a), 'a denial during the outage is marked degraded');
  });

  test('Redis back (empty, same port): exact again, and what the fallback admitted was counted', async (t) => {
    redis = await startRedis({ port: redis.port });
    await untilAnswers('decided-by-redis', (a) => a.status === 200 && a.headers.has('x-ratelimit-limit') && !degraded(a));
    let fresh: Answer[] = [];
    const c = await countedDuring(async () => {
      fresh = await burst(`after-${run}`);
    });
    assertAccounted(t, fresh, c);
    if (c.sluice.degraded === 0) assert.equal(c.sluice.OK, FREE_LIMIT, `sluice admitted exactly the limit; ${JSON.stringify(c)}`);
    // Same window as the outage (the test before waited for one with room): the tenant gets what
    // the fallback left of its 10, no more.
    let again: Answer[] = [];
    const d = await countedDuring(async () => {
      again = await burst(outageTenant, FREE_LIMIT);
    });
    assertAccounted(t, again, d);
    if (c.sluice.degraded + d.sluice.degraded === 0)
      assert.equal(d.sluice.OK, Math.min(FREE_LIMIT - outageAdmitted, d.sluice.OK + d.sluice.OVER_LIMIT), JSON.stringify(d));
  });
});
