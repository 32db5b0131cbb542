import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import protobuf from 'protobufjs';
import { DiscoveryRequest, DiscoveryResponse } from '../../../src/gen/envoy/service/discovery/v3/discovery';
import { RateLimitConfig, RateLimitUnit } from '../../../src/gen/ratelimit/config/ratelimit/v3/rls_conf';

// Our xDS protos (proto/envoy/service/discovery, proto/envoy/config/core/v3/node.proto,
// proto/google/rpc) against Envoy's published ones in @grpc/grpc-js-xds; our RateLimitConfig
// against the field numbers of envoyproxy/ratelimit's rls_conf.proto, which no npm package ships.

const XDS_DEPS = path.dirname(require.resolve('@grpc/grpc-js-xds/package.json')) + '/deps';
const OURS = path.resolve(__dirname, '../../../../proto');

function loadRoot(roots: string[], files: string[]): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => roots.map((d) => path.join(d, target)).find((c) => fs.existsSync(c)) ?? target;
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return root;
}

const official = loadRoot(
  ['envoy-api', 'googleapis', 'protoc-gen-validate', 'xds', 'cncf-xds']
    .map((d) => path.join(XDS_DEPS, d))
    .concat([path.dirname(require.resolve('protobufjs/package.json'))]),
  ['envoy/service/discovery/v3/ads.proto', 'google/rpc/status.proto'],
);
const ours = loadRoot(
  [OURS, path.dirname(require.resolve('protobufjs/package.json'))],
  ['envoy/service/discovery/v3/discovery.proto', 'ratelimit/config/ratelimit/v3/rls_conf.proto'],
);

function fieldsOf(root: protobuf.Root, name: string): Map<string, { id: number; type: string; repeated: boolean; oneof?: string }> {
  const type = root.lookupType(name);
  return new Map(type.fieldsArray.map((f) => [f.name, { id: f.id, type: f.resolvedType?.fullName ?? f.type, repeated: f.repeated, oneof: f.partOf?.name }]));
}

describe('xDS protos match Envoy official protos', () => {
  for (const name of [
    'envoy.service.discovery.v3.DiscoveryRequest',
    'envoy.service.discovery.v3.DiscoveryResponse',
    'envoy.config.core.v3.Node',
    'envoy.config.core.v3.ControlPlane',
    'google.rpc.Status',
  ]) {
    test(name, () => {
      const theirs = fieldsOf(official, name);
      const mine = fieldsOf(ours, name);
      assert.ok(mine.size > 0);
      for (const [field, f] of mine) assert.deepEqual(f, theirs.get(field), `${name}.${field}`);
    });
  }

  test('the ADS method', () => {
    const mine = ours.lookupService('envoy.service.discovery.v3.AggregatedDiscoveryService').methods.StreamAggregatedResources;
    const theirs = official.lookupService('envoy.service.discovery.v3.AggregatedDiscoveryService').methods.StreamAggregatedResources;
    for (const m of [mine, theirs]) assert.ok(m.requestStream && m.responseStream);
    assert.equal(mine.resolvedRequestType?.fullName, theirs.resolvedRequestType?.fullName);
    assert.equal(mine.resolvedResponseType?.fullName, theirs.resolvedResponseType?.fullName);
  });
});

describe('RateLimitConfig has the numbers of envoyproxy/ratelimit rls_conf.proto', () => {
  const P = '.ratelimit.config.ratelimit.v3.';
  const expected: Record<string, Record<string, [number, string, boolean]>> = {
    RateLimitConfig: { name: [1, 'string', false], domain: [2, 'string', false], descriptors: [3, `${P}RateLimitDescriptor`, true] },
    RateLimitDescriptor: {
      key: [1, 'string', false],
      value: [2, 'string', false],
      rate_limit: [3, `${P}RateLimitPolicy`, false],
      descriptors: [4, `${P}RateLimitDescriptor`, true],
      shadow_mode: [5, 'bool', false],
      detailed_metric: [6, 'bool', false],
      quota_mode: [7, 'bool', false],
      metadata: [8, '.google.protobuf.Struct', false],
    },
    RateLimitPolicy: {
      unit: [1, `${P}RateLimitUnit`, false],
      requests_per_unit: [2, 'uint32', false],
      unlimited: [3, 'bool', false],
      name: [4, 'string', false],
      replaces: [5, `${P}RateLimitReplace`, true],
    },
    RateLimitReplace: { name: [1, 'string', false] },
  };
  for (const [message, fields] of Object.entries(expected)) {
    test(message, () => {
      const mine = fieldsOf(ours, `ratelimit.config.ratelimit.v3.${message}`);
      assert.deepEqual(Object.fromEntries([...mine].map(([k, f]) => [k, [f.id, f.type, f.repeated]])), fields);
    });
  }
  test('RateLimitUnit (WEEK is 7)', () => {
    assert.deepEqual(
      { ...ours.lookupEnum('ratelimit.config.ratelimit.v3.RateLimitUnit').values },
      { UNKNOWN: 0, SECOND: 1, MINUTE: 2, HOUR: 3, DAY: 4, WEEK: 7, MONTH: 5, YEAR: 6 },
    );
  });
});

describe('bytes of the official schema decode in our generated code', () => {
  test('a DiscoveryResponse carrying a RateLimitConfig; our NACK read by the official schema', () => {
    const config = RateLimitConfig.fromPartial({
      name: 'edge',
      domain: 'edge',
      descriptors: [{ key: 'tenant', rateLimit: { unit: RateLimitUnit.WEEK, requestsPerUnit: 9, replaces: [{ name: 'x' }] }, metadata: { team: 'a' } }],
    });
    const Response = official.lookupType('envoy.service.discovery.v3.DiscoveryResponse');
    const bytes = Response.encode(
      Response.fromObject({
        version_info: 'v7',
        nonce: '3',
        type_url: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig',
        resources: [{ type_url: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig', value: RateLimitConfig.encode(config).finish() }],
      }),
    ).finish();
    const decoded = DiscoveryResponse.decode(bytes);
    assert.equal(decoded.versionInfo, 'v7');
    assert.equal(decoded.nonce, '3');
    assert.deepEqual(RateLimitConfig.decode(decoded.resources[0].value), config);

    const Request = official.lookupType('envoy.service.discovery.v3.DiscoveryRequest');
    const nack = DiscoveryRequest.encode(
      DiscoveryRequest.fromPartial({
        versionInfo: 'v6',
        responseNonce: '3',
        node: { id: 'n', metadata: { k: 'v' } },
        errorDetail: { code: 3, message: 'bad' },
      }),
    ).finish();
    const read = Request.toObject(Request.decode(nack), { defaults: false }) as Record<string, any>;
    assert.equal(read.version_info, 'v6');
    assert.equal(read.response_nonce, '3');
    assert.equal(read.node.id, 'n');
    const k = read.node.metadata.fields.k;
    assert.equal(k.string_value ?? k.stringValue, 'v', JSON.stringify(read.node.metadata));
    assert.deepEqual({ code: read.error_detail.code, message: read.error_detail.message }, { code: 3, message: 'bad' });
  });
});
