import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import YAML from 'yaml';
import { loadConfig } from '../../../src/config/load';
import { match } from '../../../src/config/match';
import type { CompiledConfig, DescriptorNode, KeyBranch, RateLimitRule } from '../../../src/config/types';
import { aggregateIp } from '../../../src/ip';
import { envoyProtoDirs, formatProtoJsonError, ProtoJsonValidator } from '../../support/proto-json-validate';

// envoy/envoy.yaml and docs/istio.md are checked here against Envoy's own protos (field by field,
// with messages naming the place), and against sluice's matcher for the descriptors their route
// actions produce; test/system/envoy-in-front.test.ts runs the real Envoy on envoy/envoy.yaml.

// Parsed YAML, navigated freely: the validator and the assertions are what check its shape.
type Yaml = any;
interface Entry {
  key: string;
  value: string;
}
interface SampleRequest {
  headers: Record<string, string>;
  remoteAddress: string;
}

const REPO = path.resolve(__dirname, '../../../..');
const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const HCM = 'envoy.filters.network.http_connection_manager';
const RATELIMIT = 'envoy.filters.http.ratelimit';
const LOCAL_RATELIMIT = 'envoy.filters.http.local_ratelimit';
const ROUTER = 'envoy.filters.http.router';
const SAMPLE_ADDRESSES = ['198.51.100.7', '2001:db8:1:2:3:4:5:6'];
const UNNAMED_VALUE = 'acme';

const validator = new ProtoJsonValidator(envoyProtoDirs());
const readRepo = (file: string) => fs.readFileSync(path.join(REPO, file), 'utf8');
const envoyYaml = (): Yaml => YAML.parse(readRepo('envoy/envoy.yaml'));
const validateBootstrap = (doc: Yaml) => validator.validate(doc, BOOTSTRAP).map(formatProtoJsonError);

function edgeConfig(): CompiledConfig {
  const { config, errors } = loadConfig([path.join(REPO, 'examples/config/edge.yaml')], { mergeDomains: false });
  assert.deepEqual(
    errors.map((e) => e.message),
    [],
  );
  assert.ok(config);
  return config;
}

function hcm(doc: Yaml): Yaml {
  return doc.static_resources.listeners[0].filter_chains[0].filters.find((f: Yaml) => f.name === HCM).typed_config;
}

function httpFilter(doc: Yaml, name: string): Yaml {
  return hcm(doc).http_filters.find((f: Yaml) => f.name === name);
}

function cluster(doc: Yaml, name: string): Yaml {
  return doc.static_resources.clusters.find((c: Yaml) => c.name === name);
}

function socketAddress(c: Yaml): Yaml {
  return c.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
}

function rename(obj: Yaml, from: string, to: string): void {
  obj[to] = obj[from];
  delete obj[from];
}

describe('envoy/envoy.yaml against Envoy protos', () => {
  test('validates as envoy.config.bootstrap.v3.Bootstrap with no error', () => {
    assert.deepEqual(validateBootstrap(envoyYaml()), []);
  });

  const broken: [string, (doc: Yaml) => void, RegExp][] = [
    [
      'failure_mode_deny misspelled',
      (d) => rename(httpFilter(d, RATELIMIT).typed_config, 'failure_mode_deny', 'failure_mode_denyy'),
      /http_filters\[1\]\.typed_config: unknown field 'failure_mode_denyy' in envoy\.extensions\.filters\.http\.ratelimit\.v3\.RateLimit/,
    ],
    [
      'a field misspelled in a message inside a typed_config',
      (d) => rename(httpFilter(d, LOCAL_RATELIMIT).typed_config.token_bucket, 'fill_interval', 'fill_intervall'),
      /http_filters\[0\]\.typed_config\.token_bucket: unknown field 'fill_intervall'/,
    ],
    [
      'a field misspelled in a cluster extension option',
      (d) =>
        rename(
          cluster(d, 'sluice').typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config,
          'http2_protocol_options',
          'http2_protocol_option',
        ),
      /explicit_http_config: unknown field 'http2_protocol_option'/,
    ],
    [
      'a field misspelled outside any typed_config',
      (d) => rename(cluster(d, 'upstream'), 'connect_timeout', 'connect_timout'),
      /static_resources\.clusters\[0\]: unknown field 'connect_timout' in envoy\.config\.cluster\.v3\.Cluster/,
    ],
    [
      'an unknown @type',
      (d) => (httpFilter(d, ROUTER).typed_config['@type'] = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Routr'),
      /http_filters\[2\]\.typed_config: '@type' type\.googleapis\.com\/envoy\.extensions\.filters\.http\.router\.v3\.Routr does not name a known message/,
    ],
    [
      'a @type without type.googleapis.com/',
      (d) => (httpFilter(d, ROUTER).typed_config['@type'] = 'envoy.extensions.filters.http.router.v3.Router'),
      /must start with type\.googleapis\.com\//,
    ],
    [
      'a string for an integer',
      (d) => (socketAddress(cluster(d, 'sluice')).port_value = 'grpc'),
      /socket_address\.port_value: expected an integer \(uint32\), got string "grpc"/,
    ],
    [
      'an unknown enum name',
      (d) => (httpFilter(d, RATELIMIT).typed_config.enable_x_ratelimit_headers = 'DRAFT_VERSION_3'),
      /enable_x_ratelimit_headers: expected one of OFF, DRAFT_VERSION_03/,
    ],
    [
      'a duration not in proto form',
      (d) => (httpFilter(d, RATELIMIT).typed_config.timeout = '20ms'),
      /typed_config\.timeout: expected a duration such as "0\.25s", got string "20ms"/,
    ],
    ['a scalar for a repeated field', (d) => (hcm(d).route_config.virtual_hosts[0].domains = '*'), /virtual_hosts\[0\]\.domains: expected a list, got string/],
    [
      'two members of a oneof',
      (d) => (hcm(d).route_config.virtual_hosts[0].routes[0].match.prefix = '/'),
      /routes\[0\]\.match: 'path' and 'prefix' exclude each other/,
    ],
    ['a required message missing', (d) => delete hcm(d).route_config.virtual_hosts[0].routes[0].match, /routes\[0\]: missing required field 'match'/],
  ];
  for (const [name, breakIt, expected] of broken) {
    test(`fails on ${name}`, () => {
      const doc = envoyYaml();
      breakIt(doc);
      const errors = validateBootstrap(doc);
      assert.ok(
        errors.some((e) => expected.test(e)),
        `no error matching ${expected}:\n${errors.join('\n')}`,
      );
    });
  }

  test('accepts lowerCamelCase names, as Envoy does, but not both spellings at once', () => {
    const doc = envoyYaml();
    rename(httpFilter(doc, RATELIMIT).typed_config, 'failure_mode_deny', 'failureModeDeny');
    rename(hcm(doc), 'stat_prefix', 'statPrefix');
    assert.deepEqual(validateBootstrap(doc), []);
    hcm(doc).stat_prefix = 'again';
    assert.match(validateBootstrap(doc).join('\n'), /'stat_prefix' given twice \(also as 'statPrefix'\)/);
  });
});

describe('envoy/envoy.yaml wiring', () => {
  const doc = envoyYaml();

  test('listener on 0.0.0.0:10000, admin on 9901', () => {
    assert.deepEqual(doc.static_resources.listeners[0].address.socket_address, { address: '0.0.0.0', port_value: 10000 });
    assert.equal(doc.admin.address.socket_address.port_value, 9901);
  });

  test('local_ratelimit, then ratelimit, then the router last', () => {
    assert.deepEqual(
      hcm(doc).http_filters.map((f: Yaml) => f.name),
      [LOCAL_RATELIMIT, RATELIMIT, ROUTER],
    );
    const local = httpFilter(doc, LOCAL_RATELIMIT).typed_config;
    for (const knob of [local.filter_enabled, local.filter_enforced]) {
      assert.deepEqual(knob.default_value, { numerator: 100, denominator: 'HUNDRED' });
    }
    assert.ok(local.token_bucket.max_tokens >= 1000, 'the local bucket is a generous ceiling, not the real limit');
  });

  test('ratelimit asks sluice over gRPC for domain edge and fails open', () => {
    const rl = httpFilter(doc, RATELIMIT).typed_config;
    assert.equal(rl.domain, 'edge');
    assert.equal(rl.failure_mode_deny, false);
    assert.equal(rl.enable_x_ratelimit_headers, 'DRAFT_VERSION_03');
    assert.match(rl.timeout, /^0\.0\d+s$/);
    assert.equal(rl.rate_limit_service.transport_api_version, 'V3');
    assert.equal(rl.rate_limit_service.grpc_service.envoy_grpc.cluster_name, 'sluice');
  });

  test('the sluice cluster speaks HTTP/2 to sluice:8081; upstream is upstream:5678', () => {
    const sluice = cluster(doc, 'sluice');
    const options = sluice.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    assert.ok(options.explicit_http_config.http2_protocol_options);
    assert.deepEqual(socketAddress(sluice), { address: 'sluice', port_value: 8081 });
    assert.deepEqual(socketAddress(cluster(doc, 'upstream')), { address: 'upstream', port_value: 5678 });
  });

  test('every route goes to a defined cluster', () => {
    for (const route of hcm(doc).route_config.virtual_hosts.flatMap((v: Yaml) => v.routes)) {
      assert.ok(cluster(doc, route.route.cluster), `route ${JSON.stringify(route.match)}: no cluster ${route.route.cluster}`);
    }
  });
});

// ---- descriptors produced by route actions ---------------------------------------------------

function onlyKey(action: Yaml): [string, Yaml] {
  const entries = Object.entries(action);
  assert.equal(entries.length, 1, `an action has exactly one kind: ${JSON.stringify(action)}`);
  return entries[0] as [string, Yaml];
}

function headerMatches(matcher: Yaml, headers: Record<string, string>): boolean {
  const value = headers[matcher.name.toLowerCase()];
  let matched: boolean;
  if (matcher.present_match !== undefined) matched = (value !== undefined) === matcher.present_match;
  else if (matcher.string_match?.exact !== undefined) matched = value === matcher.string_match.exact;
  else if (matcher.string_match?.prefix !== undefined) matched = value?.startsWith(matcher.string_match.prefix) ?? false;
  else throw new Error(`the test does not model header matcher ${JSON.stringify(matcher)}`);
  return matcher.invert_match === true ? !matched : matched;
}

// Envoy's action semantics: [] = the action adds nothing, undefined = the whole descriptor is dropped.
function actionEntries(action: Yaml, req: SampleRequest): Entry[] | undefined {
  const [kind, spec] = onlyKey(action);
  switch (kind) {
    case 'request_headers': {
      const value = req.headers[spec.header_name.toLowerCase()];
      if (value === undefined) return spec.skip_if_absent === true ? [] : undefined;
      return [{ key: spec.descriptor_key, value }];
    }
    case 'generic_key':
      return [{ key: spec.descriptor_key ?? 'generic_key', value: spec.descriptor_value }];
    case 'header_value_match': {
      const matched = spec.headers.every((h: Yaml) => headerMatches(h, req.headers));
      return matched === (spec.expect_match ?? true) ? [{ key: spec.descriptor_key ?? 'header_match', value: spec.descriptor_value }] : undefined;
    }
    case 'masked_remote_address': {
      const prefix = { v4: spec.v4_prefix_mask_len ?? 32, v6: spec.v6_prefix_mask_len ?? 128 };
      return [{ key: 'masked_remote_address', value: aggregateIp(req.remoteAddress, prefix) }];
    }
    case 'remote_address':
      return [{ key: 'remote_address', value: req.remoteAddress }];
    default:
      throw new Error(`the test does not model the '${kind}' action`);
  }
}

function descriptorOf(rateLimit: Yaml, req: SampleRequest): Entry[] | undefined {
  const entries: Entry[] = [];
  for (const action of rateLimit.actions) {
    const produced = actionEntries(action, req);
    if (produced === undefined) return undefined;
    entries.push(...produced);
  }
  return entries.length > 0 ? entries : undefined;
}

// The filter's default vh_rate_limits (OVERRIDE): virtual host actions apply only to routes without
// their own; INCLUDE in the route's RateLimitPerRoute applies both.
function effectiveRateLimits(vhost: Yaml, route: Yaml): Yaml[] {
  const own: Yaml[] = route.route?.rate_limits ?? [];
  const perRoute = route.typed_per_filter_config?.[RATELIMIT];
  assert.equal(perRoute?.rate_limits, undefined, 'RateLimitPerRoute.rate_limits is not modelled');
  const mode = perRoute?.vh_rate_limits ?? 'OVERRIDE';
  const withVhost = mode === 'INCLUDE' || (mode === 'OVERRIDE' && own.length === 0);
  return (withVhost ? [...own, ...(vhost.rate_limits ?? [])] : own).filter((rl) => (rl.stage ?? 0) === 0);
}

function allActions(vhosts: Yaml[]): Yaml[] {
  return vhosts.flatMap((v) => [v, ...v.routes].flatMap((r) => [...(r.rate_limits ?? []), ...(r.route?.rate_limits ?? [])]).flatMap((rl: Yaml) => rl.actions));
}

function childNodes(branch: KeyBranch): DescriptorNode[] {
  return [...branch.values.values(), ...branch.wildcards.map((w) => w.node), ...(branch.defaultNode ? [branch.defaultNode] : [])];
}

// The literal values the config names for each descriptor key (wildcards instantiated), so that
// samples reach every rule; plus a value the config does not name.
function configValues(root: DescriptorNode, out = new Map<string, Set<string>>()): Map<string, Set<string>> {
  for (const [key, branch] of root.children) {
    const values = out.get(key) ?? new Set([UNNAMED_VALUE]);
    out.set(key, values);
    for (const value of branch.values.keys()) values.add(value);
    for (const w of branch.wildcards) values.add(w.pattern.replace(/\*/g, 'x'));
    for (const node of childNodes(branch)) configValues(node, out);
  }
  return out;
}

function sampleRequests(vhosts: Yaml[], root: DescriptorNode): SampleRequest[] {
  const values = configValues(root);
  const perHeader = new Map<string, Set<string | undefined>>();
  for (const action of allActions(vhosts)) {
    const [kind, spec] = onlyKey(action);
    const named: { name: string; key?: string }[] =
      kind === 'request_headers' ? [{ name: spec.header_name, key: spec.descriptor_key }] : kind === 'header_value_match' ? spec.headers : [];
    for (const { name, key } of named) {
      const samples = perHeader.get(name.toLowerCase()) ?? new Set<string | undefined>([undefined, UNNAMED_VALUE]);
      for (const v of values.get(key ?? '') ?? []) samples.add(v);
      perHeader.set(name.toLowerCase(), samples);
    }
  }
  let headerSets: Record<string, string>[] = [{}];
  for (const [name, samples] of perHeader) {
    headerSets = headerSets.flatMap((h) => [...samples].map((v) => (v === undefined ? h : { ...h, [name]: v })));
  }
  return headerSets.flatMap((headers) => SAMPLE_ADDRESSES.map((remoteAddress) => ({ headers, remoteAddress })));
}

interface Produced {
  where: string;
  entries: Entry[];
}

function producedDescriptors(vhosts: Yaml[], root: DescriptorNode): Produced[] {
  const out: Produced[] = [];
  for (const req of sampleRequests(vhosts, root)) {
    for (const vhost of vhosts) {
      for (const route of vhost.routes) {
        for (const rl of effectiveRateLimits(vhost, route)) {
          const entries = descriptorOf(rl, req);
          if (entries) out.push({ where: `route ${JSON.stringify(route.match ?? {})}, request ${JSON.stringify(req)}`, entries });
        }
      }
    }
  }
  return out;
}

function allRules(node: DescriptorNode, out = new Set<RateLimitRule>()): Set<RateLimitRule> {
  if (node.rule) out.add(node.rule);
  for (const branch of node.children.values()) for (const child of childNodes(branch)) allRules(child, out);
  return out;
}

const show = (entries: Entry[]) => entries.map((e) => `${e.key}=${e.value}`).join(', ');

// Every descriptor matches a rule, and every rule is matched by some descriptor.
function assertCoverage(vhosts: Yaml[], domain: string): Set<string> {
  const config = edgeConfig();
  const root = config.domains.get(domain);
  assert.ok(root, `edge.yaml has no domain ${domain}`);
  const reached = new Set<RateLimitRule>();
  const shapes = new Set<string>();
  for (const { where, entries } of producedDescriptors(vhosts, root)) {
    const found = match(config, domain, { entries });
    assert.ok(found, `[${show(entries)}] (${where}) matches no rule of edge.yaml`);
    reached.add(found.rule);
    shapes.add(show(entries));
  }
  const unreached = [...allRules(root)].filter((r) => !reached.has(r)).map((r) => r.name || r.fullKey);
  assert.deepEqual(unreached, [], 'rules of edge.yaml no route action reaches');
  return shapes;
}

describe('envoy/envoy.yaml route actions × examples/config/edge.yaml', () => {
  test('every descriptor matches a rule and every rule is reached', () => {
    const doc = envoyYaml();
    const shapes = assertCoverage(hcm(doc).route_config.virtual_hosts, httpFilter(doc, RATELIMIT).typed_config.domain);
    for (const expected of [
      'tenant=acme',
      'tenant=cust_ent_9942, route=/v1/payments/checkout',
      'route=/v1/payments/checkout',
      'route=/v1/search',
      'auth=anonymous, masked_remote_address=198.51.100.0/24',
      'auth=anonymous, masked_remote_address=2001:db8:1:2::/64',
    ]) {
      assert.ok(shapes.has(expected), `expected descriptor [${expected}]`);
    }
    assert.ok(![...shapes].some((s) => s.startsWith('tenant=') && s.includes('auth=')), 'tenant and anonymous never mix');
  });

  test('the named rules are what the sample requests hit', () => {
    const config = edgeConfig();
    const name = (...pairs: [string, string][]) => match(config, 'edge', { entries: pairs.map(([key, value]) => ({ key, value })) })?.rule.name;
    assert.equal(name(['tenant', 'acme']), 'tenant_free');
    assert.equal(name(['tenant', 'cust_ent_9942']), 'tenant_enterprise');
    assert.equal(name(['tenant', 'acme'], ['route', '/v1/payments/checkout']), 'checkout_free');
    assert.equal(name(['route', '/v1/payments/checkout']), 'checkout_global');
    assert.equal(name(['route', '/v1/search']), 'search_trial');
    assert.equal(name(['auth', 'anonymous'], ['masked_remote_address', '198.51.100.0/24']), 'anonymous');
  });
});

// ---- docs/istio.md ---------------------------------------------------------------------------

// What an EnvoyFilter patch's value is, by applyTo.
const PATCH_TYPES: Record<string, string> = {
  HTTP_FILTER: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter',
  NETWORK_FILTER: 'envoy.config.listener.v3.Filter',
  LISTENER: 'envoy.config.listener.v3.Listener',
  CLUSTER: 'envoy.config.cluster.v3.Cluster',
  ROUTE_CONFIGURATION: 'envoy.config.route.v3.RouteConfiguration',
  VIRTUAL_HOST: 'envoy.config.route.v3.VirtualHost',
  HTTP_ROUTE: 'envoy.config.route.v3.Route',
};

function yamlBlocks(markdown: string): Yaml[] {
  const docs: Yaml[] = [];
  for (const block of markdown.matchAll(/```ya?ml\n([\s\S]*?)```/g)) {
    for (const doc of YAML.parseAllDocuments(block[1])) {
      assert.deepEqual(
        doc.errors.map((e) => e.message),
        [],
      );
      docs.push(doc.toJS());
    }
  }
  return docs;
}

function istioPatches(): Yaml[] {
  const filters = yamlBlocks(readRepo('docs/istio.md')).filter((d) => d?.kind === 'EnvoyFilter');
  assert.ok(filters.length >= 2, 'docs/istio.md shows the filter and the route actions');
  for (const f of filters) assert.equal(f.apiVersion, 'networking.istio.io/v1alpha3');
  return filters.flatMap((f) => f.spec.configPatches);
}

describe('docs/istio.md', () => {
  test('every EnvoyFilter patch value validates against Envoy protos', () => {
    for (const [i, p] of istioPatches().entries()) {
      const type = PATCH_TYPES[p.applyTo];
      assert.ok(type, `patch ${i}: applyTo ${p.applyTo} not modelled`);
      // MERGE values are fragments of an existing message: their required fields come from it.
      const errors = validator.validate(p.patch.value, type, { at: `configPatches[${i}].patch.value`, partial: p.patch.operation === 'MERGE' });
      assert.deepEqual(errors.map(formatProtoJsonError), []);
    }
  });

  test('inserts local_ratelimit and ratelimit before the router, pointed at the sluice service', () => {
    const filters = istioPatches().filter((p) => p.applyTo === 'HTTP_FILTER');
    assert.deepEqual(
      filters.map((p) => [p.patch.operation, p.match.listener.filterChain.filter.subFilter.name, p.patch.value.name]),
      [
        ['INSERT_BEFORE', ROUTER, LOCAL_RATELIMIT],
        ['INSERT_BEFORE', ROUTER, RATELIMIT],
      ],
    );
    const rl = filters[1].patch.value.typed_config;
    assert.equal(rl.rate_limit_service.grpc_service.envoy_grpc.cluster_name, 'outbound|8081||sluice.ratelimit.svc.cluster.local');
    assert.equal(rl.domain, 'edge');
  });

  test('its route patches name routes of its VirtualService', () => {
    const names = yamlBlocks(readRepo('docs/istio.md'))
      .filter((d) => d?.kind === 'VirtualService')
      .flatMap((vs) => vs.spec.http.map((h: Yaml) => h.name));
    for (const p of istioPatches().filter((p) => p.applyTo === 'HTTP_ROUTE')) {
      assert.ok(names.includes(p.match.routeConfiguration.vhost.route.name), `no VirtualService route ${p.match.routeConfiguration.vhost.route.name}`);
    }
  });

  test('produces the same descriptors as envoy/envoy.yaml, all matching edge.yaml', () => {
    const patches = istioPatches();
    const vhost = {
      rate_limits: patches.filter((p) => p.applyTo === 'VIRTUAL_HOST').flatMap((p) => p.patch.value.rate_limits ?? []),
      // The patched routes, and one standing for every route no patch touches.
      routes: [...patches.filter((p) => p.applyTo === 'HTTP_ROUTE').map((p) => p.patch.value), {}],
    };
    const doc = envoyYaml();
    const ours = assertCoverage(hcm(doc).route_config.virtual_hosts, 'edge');
    const istio = assertCoverage([vhost], 'edge');
    assert.deepEqual([...istio].sort(), [...ours].sort());
  });
});
