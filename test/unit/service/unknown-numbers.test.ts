import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { loadConfigSources } from '../../../src/config/load';
import type { CompiledConfig, RateLimitRule } from '../../../src/config/types';
import { RateLimitResponse, RateLimitResponse_Code as PbCode } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { decideRequest, type DescriptorResult, type LimitDecision, type LimiterSettings } from '../../../src/limiter/limiter';
import type { RateLimitRequest } from '../../../src/model';
import { ruleCounts } from '../../../src/telemetry/metrics';
import { explainRequest } from '../../../src/service/explain';
import { responseToProto, type ResponseOptions } from '../../../src/service/response';
import type { Decision, LimitOutcome, Store } from '../../../src/store/store';

// "Every number in an answer is known or marked unknown": a remaining the store did not learn (the
// other limits of a request denied from the over-limit cache, every limit under the `allow`
// fallback) reaches the wire as limit_remaining 0 with duration_until_reset unset, no RateLimit-*
// header describes it, and dynamic metadata lists it in `unknownRemaining`.

function rule(name: string, requestsPerUnit: number): RateLimitRule {
  return {
    fullKey: `d.${name}`,
    name,
    unit: 'minute',
    requestsPerUnit,
    unlimited: false,
    algorithm: 'fixed_window',
    periodMs: 60_000,
    burst: requestsPerUnit,
    shadowMode: false,
    quotaMode: false,
    detailedMetric: false,
    replaces: [],
    source: { file: 'test.yaml' },
  };
}

function limited(name: string, requestsPerUnit: number, r: Partial<DescriptorResult>): DescriptorResult {
  const ru = rule(name, requestsPerUnit);
  return {
    kind: 'limited',
    code: 'OK',
    rule: ru,
    matched: { rule: ru, statKey: ru.fullKey, counterEntries: [{ key: name, value: 'v' }], fromOverride: false },
    mode: 'enforce',
    hits: 1,
    remaining: undefined,
    wouldDeny: false,
    consumed: false,
    usedBefore: 0,
    ...r,
  };
}

function request(n: number): RateLimitRequest {
  return { domain: 'd', descriptors: Array.from({ length: n }, (_, i) => ({ entries: [{ key: `k${i}`, value: 'v' }] })), hitsAddend: 0 };
}

const OPTIONS: ResponseOptions = {
  headers: { limit: 'ratelimit-limit', remaining: 'ratelimit-remaining', reset: 'ratelimit-reset' },
  retryAfter: 'retry-after',
  dynamicMetadata: false,
  degradedHeader: 'x-ratelimit-degraded',
};

function headers(pb: RateLimitResponse): Record<string, string> {
  return Object.fromEntries(pb.responseHeadersToAdd.map((h) => [h.key, h.value]));
}

// What Envoy receives: the response through the protobuf encoding and back.
function onWire(pb: RateLimitResponse): RateLimitResponse {
  return RateLimitResponse.decode(RateLimitResponse.encode(pb).finish());
}

describe('unknown numbers in responses', () => {
  test('a cached denial: the denied limit is known, the others are marked unknown', () => {
    const decision: LimitDecision = {
      overall: 'OVER_LIMIT',
      results: [
        limited('a', 5, { remaining: undefined }),
        limited('b', 10, { code: 'OVER_LIMIT', remaining: 0, resetMs: 29_500, retryAfterMs: 29_500, wouldDeny: true, usedBefore: 10 }),
        limited('c', 20, { remaining: undefined }),
      ],
    };
    const pb = onWire(responseToProto(request(3), decision, OPTIONS));
    assert.equal(pb.overallCode, PbCode.OVER_LIMIT);
    assert.deepEqual(
      pb.statuses.map((s) => ({ code: s.code, remaining: s.limitRemaining, limit: s.currentLimit?.requestsPerUnit, reset: s.durationUntilReset?.seconds })),
      [
        { code: PbCode.OK, remaining: 0, limit: 5, reset: undefined },
        { code: PbCode.OVER_LIMIT, remaining: 0, limit: 10, reset: 30 },
        { code: PbCode.OK, remaining: 0, limit: 20, reset: undefined },
      ],
    );
    assert.deepEqual(headers(pb), { 'ratelimit-limit': '10', 'ratelimit-remaining': '0', 'ratelimit-reset': '30', 'retry-after': '30' });
    // Not degraded, metadata option off: still listed, the status alone cannot tell 0 from unknown.
    assert.deepEqual(pb.dynamicMetadata, { unknownRemaining: [0, 2] });
  });

  test('the allow policy: every limit unknown, no RateLimit-* headers', () => {
    const decision: LimitDecision = {
      overall: 'OK',
      results: [limited('a', 5, {}), limited('b', 10, {})],
      degraded: { policy: 'allow', reason: 'breaker open' },
    };
    const pb = onWire(responseToProto(request(2), decision, OPTIONS));
    assert.equal(pb.overallCode, PbCode.OK);
    for (const s of pb.statuses) {
      assert.equal(s.limitRemaining, 0);
      assert.equal(s.durationUntilReset, undefined);
      assert.ok(s.currentLimit, 'the limit itself is known from the config');
    }
    assert.deepEqual(headers(pb), { 'x-ratelimit-degraded': 'true' });
    assert.deepEqual(pb.dynamicMetadata, { degraded: true, degradedPolicy: 'allow', degradedReason: 'breaker open', unknownRemaining: [0, 1] });

    const withMetadata = onWire(responseToProto(request(2), decision, { ...OPTIONS, dynamicMetadata: true }));
    assert.equal(withMetadata.dynamicMetadata?.domain, 'd');
    assert.deepEqual(withMetadata.dynamicMetadata?.unknownRemaining, [0, 1]);
    assert.equal(withMetadata.dynamicMetadata?.degraded, true);
  });

  test('all known: unchanged (least remaining in the headers, no unknownRemaining)', () => {
    const decision: LimitDecision = {
      overall: 'OK',
      results: [
        limited('a', 5, { remaining: 4, resetMs: 60_000 }),
        limited('b', 10, { remaining: 2, resetMs: 1_200 }),
        { kind: 'no_limit', code: 'OK', hits: 1, remaining: 0, wouldDeny: false, consumed: false, usedBefore: 0 },
      ],
    };
    const pb = onWire(responseToProto(request(3), decision, OPTIONS));
    assert.deepEqual(
      pb.statuses.map((s) => ({ remaining: s.limitRemaining, limit: s.currentLimit?.requestsPerUnit, reset: s.durationUntilReset?.seconds })),
      [
        { remaining: 4, limit: 5, reset: 60 },
        { remaining: 2, limit: 10, reset: 2 },
        { remaining: 0, limit: undefined, reset: undefined },
      ],
    );
    assert.deepEqual(headers(pb), { 'ratelimit-limit': '10', 'ratelimit-remaining': '2', 'ratelimit-reset': '2' });
    assert.equal(pb.dynamicMetadata, undefined);
  });

  test('a reset of 0 is known and sent as 0s; an unknown reset is left out', () => {
    const zero = onWire(responseToProto(request(1), { overall: 'OK', results: [limited('a', 5, { remaining: 5, resetMs: 0 })] }, OPTIONS));
    assert.deepEqual(zero.statuses[0].durationUntilReset, { seconds: 0, nanos: 0 });
    assert.equal(headers(zero)['ratelimit-reset'], '0');

    const noReset = onWire(responseToProto(request(1), { overall: 'OK', results: [limited('a', 5, { remaining: 3, resetMs: undefined })] }, OPTIONS));
    assert.equal(noReset.statuses[0].limitRemaining, 3);
    assert.equal(noReset.statuses[0].durationUntilReset, undefined);
    assert.deepEqual(headers(noReset), { 'ratelimit-limit': '5', 'ratelimit-remaining': '3' });
    assert.equal(noReset.dynamicMetadata, undefined);
  });

  test('headers describe the known descriptor even when an unknown one might have less', () => {
    const decision: LimitDecision = { overall: 'OK', results: [limited('a', 100, { remaining: 90, resetMs: 5_000 }), limited('b', 2, {})] };
    const pb = responseToProto(request(2), decision, OPTIONS);
    assert.deepEqual(headers(pb), { 'ratelimit-limit': '100', 'ratelimit-remaining': '90', 'ratelimit-reset': '5' });
    assert.deepEqual(pb.dynamicMetadata, { unknownRemaining: [1] });
  });
});

describe('unknown numbers from the store to the answer', () => {
  const config = (): CompiledConfig => {
    const text =
      'domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n  - key: b\n    rate_limit: { unit: minute, requests_per_unit: 10 }\n';
    const loaded = loadConfigSources([{ file: 'd.yaml', text }], { mergeDomains: false });
    assert.deepEqual(loaded.errors, []);
    assert.ok(loaded.config);
    return loaded.config;
  };
  const settings: LimiterSettings = { keys: { prefix: '', hashTag: 'none' }, countDeniedHits: false, globalShadowMode: false, globalQuotaMode: false };
  const req: RateLimitRequest = { domain: 'd', descriptors: [{ entries: [{ key: 'a', value: '1' }] }, { entries: [{ key: 'b', value: '1' }] }], hitsAddend: 0 };

  function storeAnswering(decision: Decision): Store {
    return {
      kind: 'fake',
      decide: async () => decision,
      peek: async () => decision,
      ready: () => true,
      close: async () => undefined,
    };
  }
  const unknown: LimitOutcome = { allowed: true, consumed: false, remaining: undefined, resetMs: undefined, retryAfterMs: 0, usedBefore: 0 };

  test('the limiter keeps unknown as undefined; a denial stays a known 0', async () => {
    const denied: LimitOutcome = { allowed: false, consumed: false, remaining: undefined, resetMs: 20_000, retryAfterMs: 20_000, usedBefore: 10 };
    const d = await decideRequest(config(), req, storeAnswering({ admitted: false, outcomes: [unknown, denied] }), settings);
    assert.equal(d.overall, 'OVER_LIMIT');
    assert.equal(d.results[0].remaining, undefined);
    assert.equal(d.results[0].resetMs, undefined);
    assert.equal(d.results[1].remaining, 0);
    assert.equal(d.results[1].resetMs, 20_000);
  });

  test('explain shows unknowns as null with remainingKnown: false', async () => {
    const known: LimitOutcome = { allowed: true, consumed: false, remaining: 7, resetMs: 1_000.2, retryAfterMs: 0, usedBefore: 3 };
    const store = storeAnswering({ admitted: true, outcomes: [unknown, known], degraded: { policy: 'allow', reason: 'redis down' } });
    const out = (await explainRequest(config(), req, store, settings)) as { descriptors: Record<string, unknown>[] };
    const [a, b] = out.descriptors;
    assert.equal(a.remainingKnown, false);
    assert.equal(a.remaining, null);
    assert.equal(a.resetMs, null);
    assert.equal(a.usedNow, null);
    assert.equal(b.remainingKnown, true);
    assert.equal(b.remaining, 7);
    assert.equal(b.resetMs, 1_001);
    assert.equal(b.usedNow, 3);
    // JSON keeps the nulls (undefined would drop the field silently).
    assert.match(JSON.stringify(a), /"remaining":null/);
  });

  test('near-limit accounting counts no near_limit for an unknown remaining', () => {
    const r = limited('a', 5, { hits: 5, remaining: undefined, usedBefore: 0 });
    assert.deepEqual(ruleCounts(r, 0.8), { total_hits: 5, over_limit: 0, near_limit: 0, within_limit: 5, shadow_mode: 0 });
    const known = limited('a', 5, { hits: 5, remaining: 0, usedBefore: 0 });
    assert.equal(ruleCounts(known, 0.8).near_limit, 1);
  });
});
