import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import protobuf from 'protobufjs';
import { RateLimitRequest, RateLimitResponse } from '../../../src/gen/envoy/service/ratelimit/v3/rls';
import { RateLimitQuotaResponse, RateLimitQuotaUsageReports } from '../../../src/gen/envoy/service/rate_limit_quota/v3/rlqs';

// Envoy's published protos, shipped by @grpc/grpc-js-xds, are the oracle for our own proto/.
const XDS_DEPS = path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')) + '/deps';
const OURS = path.resolve(__dirname, '../../../../proto');

function loadRoot(roots: string[], files: string[]): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    for (const dir of roots) {
      const candidate = path.join(dir, target);
      if (require('node:fs').existsSync(candidate)) return candidate;
    }
    return target;
  };
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return root;
}

const official = loadRoot(
  ['envoy-api', 'googleapis', 'protoc-gen-validate', 'xds', 'cncf-xds']
    .map((d) => path.join(XDS_DEPS, d))
    .concat([path.join(path.dirname(require.resolve('protobufjs/package.json')))]),
  ['envoy/service/ratelimit/v3/rls.proto', 'envoy/service/rate_limit_quota/v3/rlqs.proto'],
);
const ours = loadRoot([OURS], ['envoy/service/ratelimit/v3/rls.proto', 'envoy/service/rate_limit_quota/v3/rlqs.proto']);

// Fields and enum values Envoy added after the copy in @grpc/grpc-js-xds was cut.
const NEWER_THAN_ORACLE = new Set([
  'envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.hits_addend',
  'envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit.WEEK',
  'envoy.type.v3.RateLimitUnit.WEEK',
]);

function allTypes(ns: protobuf.NamespaceBase, out: (protobuf.Type | protobuf.Enum)[] = []): (protobuf.Type | protobuf.Enum)[] {
  for (const nested of ns.nestedArray) {
    if (nested instanceof protobuf.Type || nested instanceof protobuf.Enum) out.push(nested);
    if (nested instanceof protobuf.Namespace || nested instanceof protobuf.Type) allTypes(nested, out);
  }
  return out;
}

const ourTypes = allTypes(ours).filter((t) => t.fullName.startsWith('.envoy.'));

describe('proto/ matches Envoy official protos', () => {
  test('we define the RLS messages, service and enums', () => {
    const names = ourTypes.map((t) => t.fullName.slice(1));
    for (const expected of [
      'envoy.service.ratelimit.v3.RateLimitRequest',
      'envoy.service.ratelimit.v3.RateLimitResponse',
      'envoy.service.ratelimit.v3.RateLimitResponse.Code',
      'envoy.service.ratelimit.v3.RateLimitResponse.RateLimit',
      'envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit',
      'envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus',
      'envoy.service.ratelimit.v3.RateLimitResponse.Quota',
      'envoy.config.core.v3.HeaderValue',
      'envoy.extensions.common.ratelimit.v3.RateLimitDescriptor',
      'envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry',
      'envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride',
    ]) {
      assert.ok(names.includes(expected), `missing ${expected}`);
    }
    const method = ours.lookupService('envoy.service.ratelimit.v3.RateLimitService').methods.ShouldRateLimit;
    const theirs = official.lookupService('envoy.service.ratelimit.v3.RateLimitService').methods.ShouldRateLimit;
    assert.equal(method.resolvedRequestType?.fullName, theirs.resolvedRequestType?.fullName);
    assert.equal(method.resolvedResponseType?.fullName, theirs.resolvedResponseType?.fullName);
  });

  test('we define the RLQS messages, service and enums, a stream both ways', () => {
    const names = ourTypes.map((t) => t.fullName.slice(1));
    for (const expected of [
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports',
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports.BucketQuotaUsage',
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse',
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction',
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction.QuotaAssignmentAction',
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction.AbandonAction',
      'envoy.service.rate_limit_quota.v3.BucketId',
      'envoy.type.v3.RateLimitStrategy',
      'envoy.type.v3.RateLimitStrategy.BlanketRule',
      'envoy.type.v3.RateLimitStrategy.RequestsPerTimeUnit',
      'envoy.type.v3.TokenBucket',
    ]) {
      assert.ok(names.includes(expected), `missing ${expected}`);
    }
    const method = ours.lookupService('envoy.service.rate_limit_quota.v3.RateLimitQuotaService').methods.StreamRateLimitQuotas;
    const theirs = official.lookupService('envoy.service.rate_limit_quota.v3.RateLimitQuotaService').methods.StreamRateLimitQuotas;
    assert.equal(method.resolvedRequestType?.fullName, theirs.resolvedRequestType?.fullName);
    assert.equal(method.resolvedResponseType?.fullName, theirs.resolvedResponseType?.fullName);
    assert.equal(method.requestStream, theirs.requestStream);
    assert.equal(method.responseStream, theirs.responseStream);
  });

  for (const type of ourTypes) {
    const name = type.fullName.slice(1);
    test(name, () => {
      const theirs = official.lookup(name);
      assert.ok(theirs, `${name} is not in Envoy's protos`);
      if (type instanceof protobuf.Enum) {
        assert.ok(theirs instanceof protobuf.Enum, `${name} is an enum in ours only`);
        for (const [value, number] of Object.entries(type.values)) {
          if (NEWER_THAN_ORACLE.has(`${name}.${value}`)) continue;
          assert.equal((theirs as protobuf.Enum).values[value], number, `${name}.${value}`);
        }
        return;
      }
      assert.ok(theirs instanceof protobuf.Type);
      let compared = 0;
      for (const field of type.fieldsArray) {
        const key = `${name}.${field.name}`;
        const other: protobuf.Field | undefined = (theirs as protobuf.Type).fields[field.name];
        if (NEWER_THAN_ORACLE.has(key)) {
          assert.equal(other, undefined, `${key} is in the oracle now: remove it from NEWER_THAN_ORACLE`);
          continue;
        }
        assert.ok(other, `${key} is not in Envoy's ${name}`);
        assert.equal(field.id, other.id, `${key} number`);
        assert.equal(field.resolvedType?.fullName ?? field.type, other.resolvedType?.fullName ?? other.type, `${key} type`);
        assert.equal(field.repeated, other.repeated, `${key} repeated`);
        assert.equal(field.partOf?.name, other.partOf?.name, `${key} oneof`);
        compared++;
      }
      assert.equal(compared + type.fieldsArray.filter((f) => NEWER_THAN_ORACLE.has(`${name}.${f.name}`)).length, type.fieldsArray.length);
    });
  }
});

describe('bytes encoded with the official schema decode to the same values', () => {
  test('RateLimitRequest', () => {
    const Official = official.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
    const message = {
      domain: 'edge',
      descriptors: [
        {
          entries: [
            { key: 'tenant', value: 'cust_ent_9942' },
            { key: 'route', value: '/v1/payments/checkout' },
          ],
        },
        { entries: [{ key: 'remote_address', value: '198.51.100.0/24' }], limit: { requests_per_unit: 7, unit: 2 } },
      ],
      hits_addend: 3,
    };
    const bytes = Official.encode(Official.fromObject(message)).finish();
    const decoded = RateLimitRequest.decode(bytes);
    assert.equal(decoded.domain, 'edge');
    assert.equal(decoded.hitsAddend, 3);
    assert.deepEqual(decoded.descriptors[0].entries, message.descriptors[0].entries);
    assert.deepEqual(decoded.descriptors[1].limit, { requestsPerUnit: 7, unit: 2 });
    assert.equal(decoded.descriptors[1].hitsAddend, undefined);
  });

  test('RateLimitResponse round trip', () => {
    const Official = official.lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
    const ourBytes = RateLimitResponse.encode({
      overallCode: 2,
      statuses: [
        { code: 1, currentLimit: { name: 'tenant', requestsPerUnit: 1000, unit: 2 }, limitRemaining: 999, durationUntilReset: { seconds: 42, nanos: 0 } },
        { code: 2, currentLimit: { name: '', requestsPerUnit: 10, unit: 2 }, limitRemaining: 0, durationUntilReset: { seconds: 3, nanos: 0 } },
      ],
      responseHeadersToAdd: [{ key: 'Retry-After', value: '3', rawValue: Buffer.alloc(0) }],
      requestHeadersToAdd: [],
      rawBody: Buffer.alloc(0),
      dynamicMetadata: { domain: 'edge', n: 2 },
    }).finish();
    const decoded = Official.toObject(Official.decode(ourBytes), { enums: String, longs: Number, defaults: false }) as Record<string, any>;
    assert.equal(decoded.overall_code, 'OVER_LIMIT');
    assert.equal(decoded.statuses[0].current_limit.name, 'tenant');
    assert.equal(decoded.statuses[0].limit_remaining, 999);
    assert.equal(decoded.statuses[0].duration_until_reset.seconds, 42);
    assert.equal(decoded.statuses[1].code, 'OVER_LIMIT');
    assert.deepEqual(decoded.response_headers_to_add, [{ key: 'Retry-After', value: '3' }]);
    assert.equal(
      decoded.dynamic_metadata.fields.domain.stringValue ?? decoded.dynamic_metadata.fields.domain.string_value,
      'edge',
      JSON.stringify(decoded.dynamic_metadata),
    );
  });
});

describe('RLQS bytes: official and ours agree both ways', () => {
  test('RateLimitQuotaUsageReports from the official schema', () => {
    const Official = official.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');
    const message = {
      domain: 'edge',
      bucket_quota_usages: [
        { bucket_id: { bucket: { tenant: 'acme', route: '/v1' } }, time_elapsed: { seconds: 5 }, num_requests_allowed: 7, num_requests_denied: 2 },
      ],
    };
    const decoded = RateLimitQuotaUsageReports.decode(Official.encode(Official.fromObject(message)).finish());
    assert.equal(decoded.domain, 'edge');
    assert.deepEqual(decoded.bucketQuotaUsages[0].bucketId?.bucket, { tenant: 'acme', route: '/v1' });
    assert.equal(decoded.bucketQuotaUsages[0].timeElapsed?.seconds, 5);
    assert.equal(decoded.bucketQuotaUsages[0].numRequestsAllowed, 7);
    assert.equal(decoded.bucketQuotaUsages[0].numRequestsDenied, 2);
  });

  test('RateLimitQuotaResponse decoded by the official schema', () => {
    const Official = official.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse');
    const ourBytes = RateLimitQuotaResponse.encode({
      bucketAction: [
        {
          bucketId: { bucket: { tenant: 'acme' } },
          bucketAction: {
            $case: 'quotaAssignmentAction',
            value: {
              assignmentTimeToLive: { seconds: 10, nanos: 0 },
              rateLimitStrategy: { strategy: { $case: 'tokenBucket', value: { maxTokens: 12, tokensPerFill: 1, fillInterval: { seconds: 86400, nanos: 3 } } } },
            },
          },
        },
        { bucketId: { bucket: { tenant: 'gone' } }, bucketAction: { $case: 'abandonAction', value: {} } },
        {
          bucketId: { bucket: { plan: 'gold' } },
          bucketAction: { $case: 'quotaAssignmentAction', value: { rateLimitStrategy: { strategy: { $case: 'blanketRule', value: 1 } } } },
        },
      ],
    }).finish();
    const decoded = Official.toObject(Official.decode(ourBytes), { enums: String, longs: Number, defaults: false }) as Record<string, any>;
    const [tokens, gone, blanket] = decoded.bucket_action;
    assert.deepEqual(tokens.bucket_id.bucket, { tenant: 'acme' });
    assert.equal(tokens.quota_assignment_action.assignment_time_to_live.seconds, 10);
    assert.deepEqual(tokens.quota_assignment_action.rate_limit_strategy.token_bucket, {
      max_tokens: 12,
      tokens_per_fill: { value: 1 },
      fill_interval: { seconds: 86400, nanos: 3 },
    });
    assert.deepEqual(gone.abandon_action, {});
    assert.equal(blanket.quota_assignment_action.rate_limit_strategy.blanket_rule, 'DENY_ALL');
  });
});

export { official };
