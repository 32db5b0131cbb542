import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { estimateMb } from '../../src/server/memory-fit';
import YAML from 'yaml';
import { MAIN_ROUTES } from '../../src/server/http';
import { loadSettings, SETTINGS, type Settings } from '../../src/settings';
import { validateObject } from '../support/k8s-models';
import { type K8sObject, kustomize, kustomizeWith } from '../support/kustomize';
import { REPO } from '../support/process';

// deploy/kubernetes as `kubectl apply -k` would send it: every object validated against the
// Kubernetes (and prometheus-operator) schemas, unknown fields refused as kubectl's strict field
// validation does, and the objects checked against sluice itself (its endpoints, ports, settings,
// example config). docs/istio.md's Istio objects are validated the same way.

type Yaml = any;

const K8S = path.join(REPO, 'deploy/kubernetes');
const BUILDS: Record<string, () => K8sObject[]> = {
  base: () => kustomize(path.join(K8S, 'base')),
  'overlays/redis': () => kustomize(path.join(K8S, 'overlays/redis')),
  // What docs/kubernetes.md tells a user to write to add the monitoring component.
  'base + components/monitoring': () => kustomizeWith(K8S, { resources: ['base'], components: ['components/monitoring'] }),
  'overlays/redis + components/monitoring': () => kustomizeWith(K8S, { resources: ['overlays/redis'], components: ['components/monitoring'] }),
  // What docs/kubernetes.md tells a user to write to add the network-policy component.
  'base + components/network-policy': () => kustomizeWith(K8S, { resources: ['base'], components: ['components/network-policy'] }),
  'overlays/redis + components/network-policy': () => kustomizeWith(K8S, { resources: ['overlays/redis'], components: ['components/network-policy'] }),
};

const find = (objects: K8sObject[], kind: string, name: string): K8sObject => {
  const o = objects.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o, `${kind} ${name} is built`);
  return o;
};
const deployments = (objects: K8sObject[]) => objects.filter((o) => o.kind === 'Deployment');
const sluiceContainer = (objects: K8sObject[]): Yaml =>
  find(objects, 'Deployment', 'sluice').spec.template.spec.containers.find((c: Yaml) => c.name === 'sluice');
const subset = (selector: Record<string, string>, labels: Record<string, string> = {}) => Object.entries(selector).every(([k, v]) => labels[k] === v);

// The settings sluice starts with in the container: its environment, as `sluice serve` reads it.
function containerSettings(container: Yaml): Settings {
  assert.equal(container.args?.[0], 'serve');
  const env: Record<string, string> = {};
  for (const e of container.env ?? []) {
    assert.equal(typeof e.value, 'string', `${e.name} has a literal value`);
    assert.ok(!(e.name in env), `${e.name} set once`);
    env[e.name] = e.value;
  }
  return loadSettings(container.args.slice(1), env);
}

// The NetworkPolicies that apply to the sluice pods (an empty podSelector applies to every pod).
const sluicePolicies = (objects: K8sObject[]): K8sObject[] => {
  const labels = find(objects, 'Deployment', 'sluice').spec.template.metadata.labels;
  return objects.filter((o) => o.kind === 'NetworkPolicy' && subset(o.spec.podSelector.matchLabels ?? {}, labels));
};

// A NetworkPolicy port, by number or by the container port's name, as the CNI resolves it.
const policyPort = (container: Yaml, port: number | string): number => (typeof port === 'number' ? port : portNumber(container, port));

// The YAML documents of a page's ```yaml blocks.
function docYaml(page: string): Yaml[] {
  const markdown = fs.readFileSync(path.join(REPO, page), 'utf8');
  const out: Yaml[] = [];
  for (const block of markdown.matchAll(/```ya?ml\n([\s\S]*?)```/g)) {
    for (const doc of YAML.parseAllDocuments(block[1])) {
      assert.deepEqual(
        doc.errors.map((e) => e.message),
        [],
        page,
      );
      out.push(doc.toJS());
    }
  }
  return out;
}

function portNumber(container: Yaml, name: string): number {
  const port = (container.ports ?? []).find((p: Yaml) => p.name === name);
  assert.ok(port, `container ${container.name} has a port named ${name}`);
  return port.containerPort;
}

describe('deploy/kubernetes', () => {
  for (const [name, build] of Object.entries(BUILDS)) {
    test(`${name}: every object validates against its schema, with no unknown field`, async () => {
      const objects = build();
      for (const o of objects) assert.deepEqual(await validateObject(o), [], `${o.kind} ${o.metadata.name}`);
      const kinds = new Set(objects.map((o) => o.kind));
      for (const kind of ['Namespace', 'Deployment', 'Service', 'ConfigMap', 'PodDisruptionBudget', 'HorizontalPodAutoscaler'])
        assert.ok(kinds.has(kind), `${name} has a ${kind}`);
      for (const o of objects) if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'ratelimit', `${o.kind} ${o.metadata.name} in the namespace`);
    });
  }

  test('the validation refuses a wrong type, a missing required field and an unknown field', async () => {
    const objects = BUILDS.base();
    const deployment = structuredClone(find(objects, 'Deployment', 'sluice'));
    deployment.spec.replicas = 'two';
    deployment.spec.template.spec.containers[0].readinesProbe = deployment.spec.template.spec.containers[0].readinessProbe;
    delete deployment.spec.template.spec.containers[0].name;
    const errors = await validateObject(deployment);
    assert.ok(
      errors.some((e) => e.startsWith('data/spec/replicas must be integer')),
      errors.join('\n'),
    );
    assert.ok(
      errors.some((e) => e.includes("must have required property 'name'") || e.includes('must have required property name')),
      errors.join('\n'),
    );
    assert.ok(errors.includes('data/spec/template/spec/containers/0/readinesProbe is not a field of apps/v1 Deployment'), errors.join('\n'));

    const rule = structuredClone(find(BUILDS['base + components/monitoring'](), 'PrometheusRule', 'sluice'));
    rule.spec.groups[1].rules[0].for = 120;
    assert.ok((await validateObject(rule)).some((e) => e.startsWith('data/spec/groups/1/rules/0/for must be string')));
  });

  test('probes ask sluice’s real endpoints on its HTTP port; the ports are the ones sluice listens on', () => {
    for (const build of Object.values(BUILDS)) {
      const c = sluiceContainer(build());
      const settings = containerSettings(c);
      assert.equal(portNumber(c, 'http'), settings.httpPort);
      assert.equal(portNumber(c, 'grpc'), settings.grpcPort);
      const expected = { startupProbe: '/livez', livenessProbe: '/livez', readinessProbe: '/readyz' };
      for (const [probe, endpoint] of Object.entries(expected)) {
        const get = c[probe]?.httpGet;
        assert.equal(get?.path, endpoint, probe);
        assert.equal(MAIN_ROUTES[endpoint]?.method, 'GET', `${endpoint} is a GET route of the HTTP port`);
        assert.equal(get.port, 'http', `${probe} on the HTTP port`);
        assert.equal(get.scheme ?? 'HTTP', settings.grpcTls && !settings.httpPlaintext ? 'HTTPS' : 'HTTP');
      }
    }
  });

  test('every environment variable is a sluice setting with a valid value; shutdown fits the probes and the grace period', () => {
    const names = new Set(SETTINGS.flatMap((s) => s.env));
    for (const build of Object.values(BUILDS)) {
      const objects = build();
      const c = sluiceContainer(objects);
      for (const e of c.env) assert.ok(names.has(e.name), `${e.name} is a sluice setting`);
      const settings = containerSettings(c);
      const readiness = c.readinessProbe;
      assert.ok(settings.shutdownDelayMs > readiness.periodSeconds * readiness.failureThreshold * 1000, 'SHUTDOWN_DELAY outlasts the readiness probe noticing');
      const grace = find(objects, 'Deployment', 'sluice').spec.template.spec.terminationGracePeriodSeconds * 1000;
      assert.ok(grace > settings.shutdownDelayMs + settings.drainTimeoutMs, 'terminationGracePeriodSeconds > SHUTDOWN_DELAY + DRAIN_TIMEOUT');
    }
  });

  test('the Service, PodDisruptionBudget, autoscaler and ServiceMonitor point at the sluice pods', () => {
    const objects = BUILDS['base + components/monitoring']();
    const deployment = find(objects, 'Deployment', 'sluice');
    const pod = deployment.spec.template;
    assert.ok(subset(deployment.spec.selector.matchLabels, pod.metadata.labels));
    const c = sluiceContainer(objects);
    const service = find(objects, 'Service', 'sluice');
    assert.ok(subset(service.spec.selector, pod.metadata.labels));
    for (const p of service.spec.ports) assert.equal(portNumber(c, p.targetPort), p.port, `Service port ${p.name} = container port`);
    // Istio speaks HTTP/2 to a port named grpc (or with appProtocol grpc).
    const grpc = service.spec.ports.find((p: Yaml) => p.name === 'grpc');
    assert.equal(grpc.appProtocol, 'grpc');
    assert.ok(subset(find(objects, 'PodDisruptionBudget', 'sluice').spec.selector.matchLabels, pod.metadata.labels));
    assert.deepEqual(find(objects, 'HorizontalPodAutoscaler', 'sluice').spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'sluice' });
    for (const t of pod.spec.topologySpreadConstraints) assert.ok(subset(t.labelSelector.matchLabels, pod.metadata.labels));
    const monitor = find(objects, 'ServiceMonitor', 'sluice');
    assert.ok(subset(monitor.spec.selector.matchLabels, service.metadata.labels));
    for (const e of monitor.spec.endpoints) {
      assert.ok(
        service.spec.ports.some((p: Yaml) => p.name === e.port),
        `ServiceMonitor port ${e.port} is a Service port`,
      );
      assert.equal(MAIN_ROUTES[e.path]?.method, 'GET');
    }
  });

  test('every pod runs as non-root with a read-only root, no privilege escalation, no capabilities and sized resources', () => {
    for (const [name, build] of Object.entries(BUILDS)) {
      for (const d of deployments(build())) {
        const where = `${name}: ${d.metadata.name}`;
        const spec = d.spec.template.spec;
        assert.equal(spec.securityContext.runAsNonRoot, true, where);
        assert.ok(Number.isInteger(spec.securityContext.runAsUser) && spec.securityContext.runAsUser > 0, where);
        assert.equal(spec.securityContext.seccompProfile.type, 'RuntimeDefault', where);
        assert.equal(spec.automountServiceAccountToken, false, where);
        assert.equal(spec.enableServiceLinks, false, where);
        for (const c of spec.containers) {
          assert.equal(c.securityContext.allowPrivilegeEscalation, false, where);
          assert.equal(c.securityContext.readOnlyRootFilesystem, true, where);
          assert.deepEqual(c.securityContext.capabilities, { drop: ['ALL'] }, where);
          assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory, `${where}: requests and a memory limit`);
          assert.ok(c.readinessProbe && c.livenessProbe, `${where}: probes`);
        }
      }
    }
  });

  // docs/kubernetes.md "Sizing": each process at rest and what the config adds to each, measured by
  // BENCH_SECTIONS=process-memory npm run bench (src/server/memory-fit.ts holds the figures).
  test('memory: the request holds the processes WORKERS starts at rest, the limit half as much again', () => {
    const configBytes = fs.statSync(path.join(K8S, 'base/config/edge.yaml')).size;
    for (const [name, build] of Object.entries(BUILDS)) {
      const container = sluiceContainer(build());
      const settings = containerSettings(container);
      // auto would follow the node's cores: the manifests must say how many.
      const workers = settings.store === 'memory' ? 1 : settings.workers;
      assert.equal(typeof workers, 'number', `${name}: WORKERS is set to a number with STORE=redis`);
      const need = estimateMb(workers as number, configBytes);
      const mb = (q: string) => (Number(/^(\d+)Mi$/.exec(q)?.[1]) * 2 ** 20) / 1e6;
      const request = mb(container.resources.requests.memory);
      const limit = mb(container.resources.limits.memory);
      assert.ok(request >= need, `${name}: memory request ${Math.round(request)} MB < ${need} MB for WORKERS=${workers} with ${configBytes} bytes of config`);
      assert.ok(limit >= 1.5 * need, `${name}: memory limit ${Math.round(limit)} MB < 1.5 × ${need} MB for WORKERS=${workers}`);
    }
  });

  test('the ConfigMap is examples/config, mounted where CONFIG_PATH points', () => {
    const examples = path.join(REPO, 'examples/config');
    const expected = Object.fromEntries(fs.readdirSync(examples).map((f) => [f, fs.readFileSync(path.join(examples, f), 'utf8')]));
    for (const build of Object.values(BUILDS)) {
      const objects = build();
      const configMap = find(objects, 'ConfigMap', 'sluice-config');
      assert.deepEqual(configMap.data, expected, 'deploy/kubernetes/base/config is a copy of examples/config: copy it again');
      const spec = find(objects, 'Deployment', 'sluice').spec.template.spec;
      const volume = spec.volumes.find((v: Yaml) => v.configMap?.name === configMap.metadata.name);
      assert.ok(volume, 'the ConfigMap is a volume');
      const mount = sluiceContainer(objects).volumeMounts.find((m: Yaml) => m.name === volume.name);
      assert.deepEqual(containerSettings(sluiceContainer(objects)).configPaths, [mount.mountPath]);
    }
  });

  test('the image is sluice at the package version', () => {
    const { version } = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8'));
    for (const build of Object.values(BUILDS)) assert.equal(sluiceContainer(build()).image, `sluice:${version}`);
  });

  test('base: the memory store; overlays/redis: sluice on the Redis it adds, which only sluice may reach', () => {
    assert.equal(containerSettings(sluiceContainer(BUILDS.base())).store, 'memory');
    const objects = BUILDS['overlays/redis']();
    const c = sluiceContainer(objects);
    const settings = containerSettings(c);
    assert.equal(settings.store, 'redis');
    assert.equal(settings.redisType, 'single');
    const url = new URL(settings.redisUrl);
    const service = find(objects, 'Service', url.hostname);
    const port = service.spec.ports.find((p: Yaml) => p.port === Number(url.port));
    assert.ok(port, `${settings.redisUrl}: a port of Service ${url.hostname}`);
    const redis = find(objects, 'Deployment', 'redis');
    const redisPod = redis.spec.template;
    assert.ok(subset(service.spec.selector, redisPod.metadata.labels));
    assert.equal(portNumber(redisPod.spec.containers[0], port.targetPort), port.port);
    const sluicePod = find(objects, 'Deployment', 'sluice').spec.template;
    assert.ok(!subset(find(objects, 'Service', 'sluice').spec.selector, redisPod.metadata.labels), 'the sluice Service does not select Redis');
    const policy = find(objects, 'NetworkPolicy', 'redis');
    assert.ok(subset(policy.spec.podSelector.matchLabels, redisPod.metadata.labels));
    assert.deepEqual(
      policy.spec.ingress.map((i: Yaml) => i.from.every((f: Yaml) => subset(f.podSelector.matchLabels, sluicePod.metadata.labels))),
      [true],
    );
    assert.equal(policy.spec.ingress[0].ports[0].port, port.targetPort);
  });

  test('without components/network-policy nothing restricts who reaches sluice', () => {
    for (const name of ['base', 'overlays/redis', 'base + components/monitoring']) {
      assert.deepEqual(
        sluicePolicies(BUILDS[name]()).map((p) => p.metadata.name),
        [],
        name,
      );
    }
    assert.deepEqual(
      BUILDS.base().filter((o) => o.kind === 'NetworkPolicy'),
      [],
    );
  });

  test('components/network-policy: gRPC only from the gateway, HTTP from anywhere as before, nothing else', () => {
    for (const name of ['base + components/network-policy', 'overlays/redis + components/network-policy']) {
      const objects = BUILDS[name]();
      const policies = sluicePolicies(objects);
      assert.equal(policies.length, 1, `${name}: one NetworkPolicy selects the sluice pods`);
      const [policy] = policies;
      const deployment = find(objects, 'Deployment', 'sluice');
      assert.deepEqual(policy.spec.podSelector, { matchLabels: deployment.spec.selector.matchLabels }, `${name}: the Deployment's own selector`);
      for (const d of deployments(objects).filter((d) => d !== deployment))
        assert.ok(!subset(policy.spec.podSelector.matchLabels, d.spec.template.metadata.labels), `${name}: not ${d.metadata.name}`);
      assert.deepEqual(policy.spec.policyTypes, ['Ingress'], `${name}: egress left alone`);

      const c = sluiceContainer(objects);
      const settings = containerSettings(c);
      // A rule without ports would open every port to its sources.
      const rules: { from?: Yaml[]; ports: number[] }[] = policy.spec.ingress.map((r: Yaml) => {
        assert.ok(r.ports?.length > 0, `${name}: every rule names its ports`);
        for (const p of r.ports) assert.equal(p.protocol, 'TCP');
        return { from: r.from, ports: r.ports.map((p: Yaml) => policyPort(c, p.port)) };
      });
      assert.deepEqual(
        rules.map((r) => r.ports),
        [[settings.grpcPort], [settings.httpPort]],
        `${name}: the gateway rule first (docs/kubernetes.md patches /spec/ingress/0), then HTTP`,
      );
      assert.equal(portNumber(c, 'grpc'), settings.grpcPort);
      // The gateway docs/istio.md installs the rate limit filter on: its pods, in its namespace only.
      const gateways = docYaml('docs/istio.md')
        .filter((d) => d.kind === 'EnvoyFilter')
        .map((f) => ({
          namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': f.metadata.namespace } },
          podSelector: { matchLabels: f.spec.workloadSelector.labels },
        }));
      assert.ok(gateways.length > 0);
      for (const g of gateways) assert.deepEqual(rules[0].from, [g], `${name}: gRPC from the gateway only`);
      assert.equal(rules[1].from, undefined, `${name}: HTTP (/metrics, POST /json) from every source, as without the policy`);
    }
  });

  test('docs/kubernetes.md: its patch points the gRPC rule at another gateway and changes nothing else', async () => {
    const k = docYaml('docs/kubernetes.md').find(
      (d) => d.kind === 'Kustomization' && d.components?.some((c: string) => c.endsWith('/components/network-policy')),
    );
    assert.ok(k, 'a kustomization adding the component');
    assert.ok(fs.statSync(path.join(REPO, k.components[0].replace(/^.*?\/deploy\//, 'deploy/'))).isDirectory(), k.components[0]);
    assert.equal(k.patches.length, 1);
    assert.deepEqual(k.patches[0].target, { kind: 'NetworkPolicy', name: 'sluice' });
    const ops = YAML.parse(k.patches[0].patch);
    assert.deepEqual(
      ops.map((o: Yaml) => [o.op, o.path]),
      [['replace', '/spec/ingress/0/from']],
      'only the gateway rule’s sources',
    );
    const objects = BUILDS['base + components/network-policy']();
    const [before] = sluicePolicies(objects);
    const after = structuredClone(before);
    after.spec.ingress[0].from = ops[0].value;
    assert.deepEqual(await validateObject(after), []);
    const c = sluiceContainer(objects);
    assert.deepEqual(
      after.spec.ingress[0].ports.map((p: Yaml) => policyPort(c, p.port)),
      [containerSettings(c).grpcPort],
      'rule 0 is the gRPC rule',
    );
    assert.notDeepEqual(after.spec.ingress[0].from, before.spec.ingress[0].from);
    // One item with both selectors: those pods in that namespace, not the union of both.
    assert.equal(after.spec.ingress[0].from.length, 1);
    assert.deepEqual(Object.keys(after.spec.ingress[0].from[0]).sort(), ['namespaceSelector', 'podSelector']);
  });

  test('the PrometheusRule holds the groups of deploy/observability/rules.yml', () => {
    const rules = YAML.parse(fs.readFileSync(path.join(REPO, 'deploy/observability/rules.yml'), 'utf8'));
    const rule = find(BUILDS['base + components/monitoring'](), 'PrometheusRule', 'sluice');
    assert.deepEqual(rule.spec.groups, rules.groups, 'copy the groups of rules.yml into components/monitoring/prometheusrule.yaml');
  });

  test('the resolver refuses what it does not model', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-kustomize-'));
    try {
      const write = (k: object) => fs.writeFileSync(path.join(dir, 'kustomization.yaml'), YAML.stringify(k));
      write({ commonLabels: { a: 'b' } });
      assert.throws(() => kustomize(dir), /'commonLabels' is not modelled/);
      write({ configMapGenerator: [{ name: 'c', files: [] }] });
      assert.throws(() => kustomize(dir), /disableNameSuffixHash/);
      write({ configMapGenerator: [{ name: 'c', files: [path.join(REPO, 'examples/config/edge.yaml')], options: { disableNameSuffixHash: true } }] });
      assert.throws(() => kustomize(dir), /not in or below the kustomization/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('docs/istio.md', () => {
  const objects = () => docYaml('docs/istio.md');

  test('its EnvoyFilters and VirtualService validate against Istio’s schemas, with no unknown field', async () => {
    const docs = objects();
    assert.ok(docs.filter((d) => d.kind === 'EnvoyFilter').length >= 2, 'the filter and the route actions');
    for (const d of docs) assert.deepEqual(await validateObject(d), [], `${d.kind} ${d.metadata.name}`);
  });

  test('an invalid EnvoyFilter is refused', async () => {
    const filter = structuredClone(objects().find((d) => d.kind === 'EnvoyFilter'));
    assert.ok(filter);
    filter.spec.configPatches[0].applyTo = 'HTTP_FILTERS';
    filter.spec.configPatchez = [];
    const errors = await validateObject(filter);
    assert.ok(
      errors.some((e) => e.startsWith('data/spec/configPatches/0/applyTo must be equal to one of the allowed values')),
      errors.join('\n'),
    );
    assert.ok(errors.includes('data/spec/configPatchez is not a field of networking.istio.io/v1alpha3 EnvoyFilter'), errors.join('\n'));
  });

  test('its rate limit filter points at the gRPC port of the Service in deploy/kubernetes', () => {
    const service = find(BUILDS.base(), 'Service', 'sluice');
    const grpc = service.spec.ports.find((p: Yaml) => p.name === 'grpc');
    const filter = objects()
      .filter((d) => d.kind === 'EnvoyFilter')
      .flatMap((d) => d.spec.configPatches)
      .find((p: Yaml) => p.patch.value?.name === 'envoy.filters.http.ratelimit');
    const envoyGrpc = filter.patch.value.typed_config.rate_limit_service.grpc_service.envoy_grpc;
    const host = `${service.metadata.name}.${service.metadata.namespace}.svc.cluster.local`;
    assert.equal(envoyGrpc.cluster_name, `outbound|${grpc.port}||${host}`);
    assert.equal(envoyGrpc.authority, host);
  });
});
