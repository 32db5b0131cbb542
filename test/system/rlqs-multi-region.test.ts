import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { RateLimitQuotaServiceClient } from '../../src/gen/envoy/service/rate_limit_quota/v3/rlqs';
import type { RateLimitResponse } from '../../src/gen/envoy/service/ratelimit/v3/rls';
import { d } from '../support/app';
import { QuotaStream, summary } from '../support/quota-stream';
import { type Deployment, startRegions } from '../support/regions';

// RLQS in a multi-region deployment (docs/rlqs.md, docs/multi-region.md): two regions of one
// replica each, each on its own redis-server, one global redis-server 20 ms away (each way). RLQS
// Envoys (streams driven by the test) and RLS callers in both regions, one tenant's budget.
// Day-long windows: no test here runs into a window edge.
const LIMIT = 120;
const CONFIG = `domain: rq\ndescriptors:\n  - key: tenant\n    rate_limit: { unit: day, requests_per_unit: ${LIMIT} }\n`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('RLQS across regions', { timeout: 60_000 }, () => {
  let deployment: Deployment;
  const clients: RateLimitQuotaServiceClient[] = [];
  const streams: QuotaStream[] = [];

  // An Envoy streaming to the replica of `region`.
  const envoy = (region: string) => {
    const client = new RateLimitQuotaServiceClient(`127.0.0.1:${deployment.region(region).apps[0].grpcPort}`, grpc.credentials.createInsecure());
    clients.push(client);
    const stream = new QuotaStream(client);
    streams.push(stream);
    return stream;
  };

  // An Envoy that sees `perS` requests a second and spends every assignment before its next
  // report: each report says it admitted all it was assigned (and denied the rest of 5 s of
  // requests). `spent`: the units it was assigned, all spent; `held`: those of its last assignment.
  const spender = (region: string, bucket: Record<string, string>, perS = 10) => {
    const stream = envoy(region);
    let held = 0;
    let spent = 0;
    return {
      get spent() {
        return spent + held;
      },
      get held() {
        return held;
      },
      async report() {
        const [action] = await stream.report('rq', [{ bucket, allowed: held, denied: Math.max(0, 5 * perS - held), elapsedS: 5 }]);
        spent += held;
        held = summary(action).tokens ?? 0;
      },
    };
  };

  // One RLS call of `hits` for `tenant` in `region`, with a caller deadline of 1 s (time for a
  // region to lease units from the global Redis): admitted?
  const rlsCall = async (region: string, tenant: string, hits = 1) => {
    const client = deployment.region(region).apps[0].client;
    const request = { domain: 'rq', descriptors: [{ ...d(['tenant', tenant]), hitsAddend: hits }], hitsAddend: 0 };
    const r = await new Promise<RateLimitResponse>((resolve, reject) =>
      client.shouldRateLimit(request, new grpc.Metadata(), { deadline: Date.now() + 1000 }, (err, res) => (err ? reject(err) : resolve(res!))),
    );
    return r.overallCode === 1;
  };

  // Admitted RLS calls of one hit for `tenant` in `region`, out of `calls`.
  const rls = async (region: string, tenant: string, calls: number) => {
    let admitted = 0;
    for (let i = 0; i < calls; i++) if (await rlsCall(region, tenant)) admitted++;
    return admitted;
  };

  before(async () => {
    deployment = await startRegions({
      regions: ['a', 'b'].map((name) => ({ name, replicas: 1 })),
      configYaml: CONFIG,
      delayMs: 20,
      // Assignments of 1 s: an Envoy asks for a second of its demand; a lapse comes soon.
      settings: { rlqsAssignmentTtlMs: 1000 },
    });
  });
  after(async () => {
    for (const s of streams) s.call.cancel();
    for (const c of clients) c.close();
    await deployment?.stop();
  });

  test('Envoys in two regions are assigned units of the one global budget: each region gets some, together no more than the limit', async (t) => {
    const bucket = { tenant: 'shared' };
    // 40 requests a second each, the limit's day in a few seconds: until neither is assigned
    // anything three rounds in a row.
    const [a, b] = [spender('a', bucket, 40), spender('b', bucket, 40)];
    for (let round = 0, idle = 0; round < 20 && idle < 3; round++) {
      await Promise.all([a.report(), b.report()]);
      idle = a.held + b.held === 0 ? idle + 1 : 0;
      await sleep(150);
    }
    const spent = { a: a.spent, b: b.spent };
    t.diagnostic(`assigned and spent: ${JSON.stringify(spent)} of ${LIMIT}`);
    assert.ok(spent.a > 0 && spent.b > 0, `each region's Envoy is assigned units: ${JSON.stringify(spent)}`);
    assert.ok(spent.a + spent.b <= LIMIT, `together within the limit: ${JSON.stringify(spent)}`);
    // ... and most of it reached them (the rest trickles out of the global budget in crumbs).
    assert.ok(spent.a + spent.b >= LIMIT / 2, `the budget reaches the Envoys: ${JSON.stringify(spent)}`);
    // Nothing is left for anybody else: the regions' Envoys drew the budget down, and RLS callers
    // in both regions find it spent as well.
    const after = (await rls('a', 'shared', 5)) + (await rls('b', 'shared', 5));
    t.diagnostic(`RLS after them: ${after} of 10`);
    assert.ok(spent.a + spent.b + after <= LIMIT, `RLS after the Envoys: ${after}, ${JSON.stringify(spent)}`);
  });

  test('RLS callers in one region and an RLQS Envoy in the other, same tenant: each gets units, together no more than the limit', async (t) => {
    const bucket = { tenant: 'mixed' };
    const envoyA = spender('a', bucket);
    let admitted = 0;
    for (let round = 0; round < 8 && envoyA.spent + admitted < LIMIT; round++) {
      const [, inB] = await Promise.all([envoyA.report(), rls('b', 'mixed', 20)]);
      admitted += inB;
      await sleep(150);
    }
    t.diagnostic(`Envoy in a ${envoyA.spent}, RLS in b ${admitted}, of ${LIMIT}`);
    assert.ok(envoyA.spent > 0, `the Envoy is assigned units: ${envoyA.spent} (RLS admitted ${admitted})`);
    assert.ok(admitted > 0, `RLS admits some: ${admitted} (the Envoy spent ${envoyA.spent})`);
    assert.ok(envoyA.spent + admitted <= LIMIT, `together within the limit: Envoy ${envoyA.spent} + RLS ${admitted}`);
  });

  test("units an Envoy was assigned and did not use go back to its region's allowance, where RLS admits them: exactly the limit in all", async () => {
    const bucket = { tenant: 'unused' };
    const e = envoy('b');
    // 10 requests a second, assignments of 1 s: 10 units, from a region that held none of the tenant.
    const first = summary((await e.report('rq', [{ bucket, denied: 50, elapsedS: 5 }]))[0]).tokens;
    assert.equal(first, 10);
    // It used 3 in a second: renewed to 3, the 4 left go back now, the other 3 when the assignment
    // lapses after its stream ended.
    const renewed = summary((await e.report('rq', [{ bucket, allowed: 3, elapsedS: 1 }]))[0]).tokens;
    assert.equal(renewed, 3);
    e.call.end();
    await e.ended;
    await sleep(1500);
    // RLS in the same region admits everything the Envoy did not use, and not one more.
    assert.equal(await rlsCall('b', 'unused', LIMIT - 3), true, `RLS admits the ${LIMIT - 3} the Envoy did not use`);
    assert.equal((await rls('b', 'unused', 3)) + (await rls('a', 'unused', 3)), 0, 'and nothing more, in either region');
  });
});
