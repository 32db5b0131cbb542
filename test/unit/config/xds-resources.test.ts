import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { backoffDelay } from '../../../src/config/xds/backoff';
import { convertResources, RATE_LIMIT_CONFIG_TYPE } from '../../../src/config/xds/convert';
import { compileDocuments } from '../../../src/config/load';
import { type DeepPartial, RateLimitConfig, type RateLimitDescriptor, RateLimitUnit } from '../../../src/gen/ratelimit/config/ratelimit/v3/rls_conf';
import { describeSettings, loadSettings, SettingsError, upstreamSettingsNotRead } from '../../../src/settings';

const any = (c: DeepPartial<RateLimitConfig>) => ({
  typeUrl: RATE_LIMIT_CONFIG_TYPE,
  value: Buffer.from(RateLimitConfig.encode(RateLimitConfig.fromPartial(c)).finish()),
});

describe('xDS resources → the compiler', () => {
  test('a pushed config compiles to the rules its YAML twin does', () => {
    const { documents, errors } = convertResources([
      any({
        name: 'gw',
        domain: 'edge',
        descriptors: [
          {
            key: 'tenant',
            rateLimit: { unit: RateLimitUnit.SECOND, requestsPerUnit: 5, name: 'per-tenant' },
            shadowMode: true,
            metadata: { team: 'a' },
            descriptors: [{ key: 'route', value: '/x', rateLimit: { unlimited: true } }],
          },
          { key: 'ip', rateLimit: { unit: RateLimitUnit.WEEK, requestsPerUnit: 1, replaces: [{ name: 'per-tenant' }] } },
        ],
      }),
    ]);
    assert.deepEqual(errors, []);
    assert.equal(documents[0].file, 'xds:gw');
    const compiled = compileDocuments(documents, { mergeDomains: false });
    assert.deepEqual(compiled.errors, []);
    const tenant = compiled.config!.domains.get('edge')!.children.get('tenant')!.defaultNode!;
    assert.equal(tenant.rule?.requestsPerUnit, 5);
    assert.equal(tenant.rule?.unit, 'second');
    assert.equal(tenant.rule?.shadowMode, true);
    assert.equal(compiled.config!.domains.get('edge')!.children.get('ip')!.defaultNode!.rule?.unit, 'week');
  });

  test("the compiler's messages name the resource; duplicate domains across resources are refused", () => {
    const { documents } = convertResources([any({ name: 'a', domain: 'edge' }), any({ name: 'b', domain: 'edge' }), any({ name: 'c', domain: '' })]);
    const messages = compileDocuments(documents, { mergeDomains: false }).errors.map((e) => e.message);
    assert.ok(
      messages.some((m) => /^xds:b: duplicate domain 'edge'/.test(m)),
      messages.join('\n'),
    );
    assert.ok(
      messages.some((m) => /^xds:c: config file cannot have empty domain/.test(m)),
      messages.join('\n'),
    );
    assert.deepEqual(compileDocuments(documents.slice(0, 2), { mergeDomains: true }).errors, []);
  });

  test('a resource of another type, undecodable bytes, too many or too deep descriptors are errors, not crashes', () => {
    let deep: DeepPartial<RateLimitDescriptor> = { key: 'k' };
    for (let i = 0; i < 40; i++) deep = { key: 'k', descriptors: [deep] };
    const { errors } = convertResources([
      { typeUrl: 'type.googleapis.com/envoy.config.cluster.v3.Cluster', value: Buffer.alloc(0) },
      { typeUrl: RATE_LIMIT_CONFIG_TYPE, value: Buffer.from([0x0a, 0xff, 0xff]) },
      any({ name: 'deep', domain: 'd', descriptors: [deep] }),
    ]);
    const text = errors.map((e) => e.message);
    assert.match(text[0], /xds resource #0: resource of type 'type.googleapis.com\/envoy.config.cluster.v3.Cluster'/);
    assert.match(text[1], /xds resource #1: cannot decode RateLimitConfig/);
    assert.match(text[2], /xds:deep: config limit: descriptors nested deeper than 32 levels/);
    const many = convertResources([any({ domain: 'm', descriptors: [{ key: 'a' }, { key: 'b' }, { key: 'c' }] })], { maxFileBytes: 1e6, maxDescriptors: 2 });
    assert.match(many.errors[0].message, /more than 2 descriptors \(CONFIG_MAX_DESCRIPTORS/);
  });
});

describe('reconnect backoff', () => {
  const opts = { initialMs: 100, maxMs: 1000, randomFactor: 0.5, jitter: true };
  test('doubles up to the max; without jitter exactly', () => {
    assert.deepEqual(
      [0, 1, 2, 3, 4, 50].map((a) => backoffDelay({ ...opts, jitter: false }, a)),
      [100, 200, 400, 800, 1000, 1000],
    );
  });
  test('with jitter, spread by the random factor either way, never past the max', () => {
    assert.equal(
      backoffDelay(opts, 0, () => 0),
      50,
    );
    assert.equal(
      backoffDelay(opts, 0, () => 1),
      150,
    );
    assert.equal(
      backoffDelay(opts, 9, () => 1),
      1000,
    );
  });
});

describe('settings', () => {
  test("upstream's xDS names, defaults as upstream", () => {
    const s = loadSettings([], {
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      CONFIG_GRPC_XDS_SERVER_URL: 'envoy-gateway:18001',
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      RUNTIME_ROOT: '/data',
    });
    assert.equal(s.configType, 'grpc_xds_sotw');
    assert.equal(s.xdsServerUrl, 'envoy-gateway:18001');
    assert.equal(s.xdsNodeId, 'default');
    assert.equal(s.forceStartWithoutInitialConfig, true);
    assert.deepEqual(s.configPaths, [], 'RUNTIME_ROOT is not a config path when config comes over xDS');
    assert.deepEqual([s.xdsBackoffInitialMs, s.xdsBackoffMaxMs, s.xdsBackoffRandomFactor, s.xdsBackoffJitter], [10_000, 60_000, 0.5, true]);
    assert.equal(loadSettings([], {}).configType, 'file');
  });

  test('malformed entries name the setting; header values are redacted', () => {
    assert.throws(
      () => loadSettings([], { CONFIG_GRPC_XDS_NODE_METADATA: 'novalue' }),
      (e: Error) => e instanceof SettingsError && /CONFIG_GRPC_XDS_NODE_METADATA: expected key=value/.test(e.message),
    );
    assert.throws(() => loadSettings([], { CONFIG_GRPC_XDS_CLIENT_TLS_CERT: '/c.pem' }), /CONFIG_GRPC_XDS_CLIENT_TLS_KEY go together/);
    assert.throws(() => loadSettings([], { XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '2m' }), /XDS_CLIENT_BACKOFF_MAX_INTERVAL/);
    assert.throws(
      () => loadSettings([], { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'bad key:v' }),
      /CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: .*got 'bad key'/,
    );
    assert.throws(() => loadSettings([], { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'novalue' }), /CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS/);
    const s = loadSettings([], { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'Authorization:Bearer abc' });
    assert.deepEqual(describeSettings(s).xdsAdditionalHeaders, ['Authorization:[redacted]']);
  });

  test('REDIS_URL without STORE / BACKEND_TYPE means redis, as upstream; the memory default stays otherwise', () => {
    const implied = loadSettings([], { REDIS_URL: '127.0.0.1:1234', REDIS_SOCKET_TYPE: 'tcp' });
    assert.equal(implied.store, 'redis');
    assert.equal(implied.storeImpliedBy, 'REDIS_URL');
    assert.equal(loadSettings(['--redis-url', 'r:1']).store, 'redis');
    assert.equal(loadSettings([], { REDIS_URL: 'r:1', BACKEND_TYPE: 'memory' }).store, 'memory');
    assert.equal(loadSettings([], { REDIS_URL: 'r:1', STORE: 'memory' }).storeImpliedBy, undefined);
    assert.equal(loadSettings([], {}).store, 'memory');
  });

  test('the xDS names are no longer reported as unread', () => {
    const env = {
      CONFIG_TYPE: 'GRPC_XDS_SOTW',
      CONFIG_GRPC_XDS_NODE_ID: 'x',
      XDS_CLIENT_BACKOFF_JITTER: 'false',
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: 'true',
      CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: '3s',
    };
    assert.deepEqual(upstreamSettingsNotRead(env), ['CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL']);
  });
});
