import fs from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

// The part of kustomize that deploy/kubernetes uses, so that the test can validate the objects
// `kubectl apply -k` would send (no kubectl or kustomize runs on the development machines).
// Anything else in a kustomization is an error here, so that a manifest growing a feature this does
// not model fails the test instead of being validated wrongly.

// Parsed YAML objects, navigated freely: the schema validation is what checks their shape.
export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [field: string]: any;
};

export interface Kustomization {
  apiVersion?: string;
  kind?: string;
  namespace?: string;
  resources?: string[];
  components?: string[];
  patches?: { path: string }[];
  configMapGenerator?: { name: string; files: string[]; options?: { disableNameSuffixHash?: boolean } }[];
  images?: { name: string; newName?: string; newTag?: string }[];
}

const MODELLED = new Set(['apiVersion', 'kind', 'namespace', 'resources', 'components', 'patches', 'configMapGenerator', 'images']);
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'PriorityClass', 'StorageClass']);

export function readYamlObjects(file: string): K8sObject[] {
  const out: K8sObject[] = [];
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(file, 'utf8'))) {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value = doc.toJS();
    if (value !== null) out.push(value);
  }
  return out;
}

function readKustomization(dir: string): Kustomization {
  const [k, ...rest] = readYamlObjects(path.join(dir, 'kustomization.yaml'));
  if (rest.length > 0) throw new Error(`${dir}/kustomization.yaml: one document expected`);
  return k as unknown as Kustomization;
}

// kustomize's default load restrictor: files only from the kustomization's directory or below.
function fileWithin(dir: string, file: string): string {
  const full = path.resolve(dir, file);
  const rel = path.relative(dir, fs.realpathSync(full));
  if (rel.startsWith('..') || path.isAbsolute(rel)) throw new Error(`${dir}: ${file} is not in or below the kustomization (kustomize refuses it)`);
  return full;
}

// Builds the kustomization in `dir` (`kustomize build dir`).
export function kustomize(dir: string): K8sObject[] {
  return build(dir, readKustomization(dir), 'Kustomization');
}

// Builds a kustomization given as an object, as if it were the kustomization.yaml of `dir`.
export function kustomizeWith(dir: string, k: Kustomization): K8sObject[] {
  return build(dir, k, 'Kustomization');
}

function build(dir: string, k: Kustomization, expectedKind: string, accumulated: K8sObject[] = []): K8sObject[] {
  const where = `${dir}/kustomization.yaml`;
  for (const key of Object.keys(k)) if (!MODELLED.has(key)) throw new Error(`${where}: '${key}' is not modelled by test/support/kustomize.ts`);
  if (k.kind !== undefined && k.kind !== expectedKind) throw new Error(`${where}: kind ${k.kind} where ${expectedKind} is expected`);
  let objects = [...accumulated];
  for (const r of k.resources ?? []) {
    const full = path.resolve(dir, r);
    if (fs.statSync(full).isDirectory()) objects.push(...kustomize(full));
    else objects.push(...readYamlObjects(fileWithin(dir, r)));
  }
  for (const c of k.components ?? []) {
    const componentDir = path.resolve(dir, c);
    objects = build(componentDir, readKustomization(componentDir), 'Component', objects);
  }
  objects.push(...(k.configMapGenerator ?? []).map((g) => generateConfigMap(dir, g)));
  for (const p of k.patches ?? []) objects = applyPatchFile(dir, p, objects);
  if (k.namespace !== undefined) {
    for (const o of objects) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  }
  for (const image of k.images ?? []) setImage(objects, image);
  assertUnique(objects, where);
  return objects;
}

function generateConfigMap(dir: string, g: NonNullable<Kustomization['configMapGenerator']>[number]): K8sObject {
  const where = `${dir}: configMapGenerator ${g.name}`;
  for (const key of Object.keys(g)) if (!['name', 'files', 'options'].includes(key)) throw new Error(`${where}: '${key}' is not modelled`);
  // With the hash suffix, kustomize renames the ConfigMap and rewrites every reference to it;
  // not modelled.
  if (g.options?.disableNameSuffixHash !== true || Object.keys(g.options).length !== 1)
    throw new Error(`${where}: only options.disableNameSuffixHash: true is modelled`);
  const data: Record<string, string> = {};
  for (const entry of g.files) {
    const [key, file] = entry.includes('=') ? entry.split('=', 2) : [path.basename(entry), entry];
    data[key] = fs.readFileSync(fileWithin(dir, file), 'utf8');
  }
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: g.name }, data };
}

function applyPatchFile(dir: string, p: { path: string }, objects: K8sObject[]): K8sObject[] {
  if (Object.keys(p).join() !== 'path') throw new Error(`${dir}: only patches given by path (targets named inside) are modelled`);
  for (const patch of readYamlObjects(fileWithin(dir, p.path))) {
    const i = objects.findIndex((o) => o.apiVersion === patch.apiVersion && o.kind === patch.kind && o.metadata.name === patch.metadata.name);
    if (i < 0) throw new Error(`${dir}/${p.path}: no ${patch.kind} ${patch.metadata.name} to patch`);
    objects[i] = strategicMerge(objects[i], patch) as K8sObject;
  }
  return objects;
}

// The merge keys (patchMergeKey) of the lists this project patches; other lists are replaced, as
// Kubernetes does for lists without one.
const MERGE_KEYS: Record<string, string> = {
  containers: 'name',
  initContainers: 'name',
  env: 'name',
  volumes: 'name',
  volumeMounts: 'mountPath',
  imagePullSecrets: 'name',
};

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function strategicMerge(base: unknown, patch: unknown, field = ''): unknown {
  if (Array.isArray(patch)) {
    // Container ports merge by containerPort, Service ports by port.
    const key = field === 'ports' ? (patch.every((p) => isObject(p) && 'containerPort' in p) ? 'containerPort' : 'port') : MERGE_KEYS[field];
    if (key === undefined || !Array.isArray(base)) return structuredClone(patch);
    const out = structuredClone(base);
    for (const item of patch) {
      if (!isObject(item) || item[key] === undefined) throw new Error(`patch of ${field}: every item needs its ${key}`);
      const i = out.findIndex((b: Record<string, unknown>) => b[key] === item[key]);
      if (i < 0) out.push(structuredClone(item));
      else out[i] = strategicMerge(out[i], item);
    }
    return out;
  }
  if (isObject(patch)) {
    if (!isObject(base)) return structuredClone(patch);
    const out: Record<string, unknown> = { ...base };
    for (const [k, v] of Object.entries(patch)) {
      if (k.startsWith('$')) throw new Error(`patch directive ${k} is not modelled`);
      // null deletes the field.
      if (v === null) delete out[k];
      else out[k] = strategicMerge(base[k], v, k);
    }
    return out;
  }
  return patch;
}

function setImage(objects: K8sObject[], image: NonNullable<Kustomization['images']>[number]): void {
  for (const key of Object.keys(image)) if (!['name', 'newName', 'newTag'].includes(key)) throw new Error(`images: '${key}' is not modelled`);
  for (const o of objects) {
    const pod = o.spec?.template?.spec;
    for (const c of [...(pod?.containers ?? []), ...(pod?.initContainers ?? [])]) {
      // name[:tag]; a registry port (host:5000/name) is not a tag.
      const colon = c.image.lastIndexOf(':');
      const [name, tag] = colon > c.image.lastIndexOf('/') ? [c.image.slice(0, colon), c.image.slice(colon + 1)] : [c.image, undefined];
      if (name !== image.name) continue;
      const newTag = image.newTag ?? tag;
      c.image = `${image.newName ?? name}${newTag === undefined ? '' : `:${newTag}`}`;
    }
  }
}

function assertUnique(objects: K8sObject[], where: string): void {
  const seen = new Set<string>();
  for (const o of objects) {
    const id = `${o.apiVersion}/${o.kind} ${o.metadata.namespace ?? ''}/${o.metadata.name}`;
    if (seen.has(id)) throw new Error(`${where}: ${id} twice`);
    seen.add(id);
  }
}
