import type { K8sObject } from './kustomize';

// Validation of Kubernetes objects against the schemas shipped by the `kubernetes-models` packages
// (Kubernetes itself, @kubernetes-models/prometheus-operator, @kubernetes-models/istio).
//
// Those schemas, like Kubernetes' OpenAPI, do not forbid unknown fields, but `kubectl apply`
// refuses them (strict field validation), and a misspelt field (`readinesProbe`) would otherwise
// pass silently. So the object is validated through a Proxy that records which fields the compiled
// schema reads: in an object whose schema lists properties (the validator read some of them) and
// that it did not enumerate (a map such as labels), a field it never read is unknown. Free-form
// objects (an EnvoyFilter patch value) are neither read nor enumerated, and are left alone.

// The packages are ES modules only; this project compiles to CommonJS, where TypeScript turns
// import() into require(). A Function keeps a real import().
const importEsm = new Function('specifier', 'return import(specifier)') as (specifier: string) => Promise<Record<string, unknown>>;

interface Model {
  prototype: { validate(this: unknown): void };
}

export function modelModule(apiVersion: string, kind: string): string {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  if (group.endsWith('.coreos.com')) return `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  if (group.endsWith('.istio.io')) return `@kubernetes-models/istio/${group}/${version}/${kind}`;
  return `kubernetes-models/${group === '' ? '' : `${group}/`}${version}/${kind}`;
}

async function loadModel(apiVersion: string, kind: string): Promise<Model> {
  const specifier = modelModule(apiVersion, kind);
  let mod: Record<string, unknown>;
  try {
    mod = await importEsm(specifier);
  } catch (err) {
    throw new Error(`no schema for ${apiVersion} ${kind} (${specifier}): ${(err as Error).message}`);
  }
  const model = mod[kind] as Model | undefined;
  if (model === undefined) throw new Error(`${specifier} exports no ${kind}`);
  return model;
}

interface Reads {
  path: string;
  read: Set<string>;
  enumerated: boolean;
}

function recorder(root: object): { proxy: object; unknownFields(): string[] } {
  const records = new Map<object, Reads>();
  const proxies = new WeakMap<object, object>();
  const wrap = (value: unknown, at: string): unknown => {
    if (value === null || typeof value !== 'object') return value;
    const known = proxies.get(value);
    if (known !== undefined) return known;
    const rec: Reads = { path: at, read: new Set(), enumerated: false };
    records.set(value, rec);
    const proxy = new Proxy(value, {
      get(target, key, receiver) {
        const v = Reflect.get(target, key, receiver);
        if (typeof key !== 'string') return v;
        rec.read.add(key);
        return wrap(v, `${at}/${key}`);
      },
      has(target, key) {
        if (typeof key === 'string') rec.read.add(key);
        return Reflect.has(target, key);
      },
      ownKeys(target) {
        rec.enumerated = true;
        return Reflect.ownKeys(target);
      },
    });
    proxies.set(value, proxy);
    return proxy;
  };
  return {
    proxy: wrap(root, '') as object,
    unknownFields() {
      const out: string[] = [];
      for (const [target, rec] of records) {
        if (Array.isArray(target) || rec.enumerated || rec.read.size === 0) continue;
        for (const key of Object.keys(target)) if (!rec.read.has(key)) out.push(`${rec.path}/${key}`);
      }
      return out;
    },
  };
}

// The schema errors and unknown fields of one object, as `<path> <message>` lines; [] when valid.
export async function validateObject(obj: K8sObject): Promise<string[]> {
  const model = await loadModel(obj.apiVersion, obj.kind);
  // An instance of the model (its schema is found through the constructor), holding obj's fields.
  const rec = recorder(Object.assign(Object.create(model.prototype) as object, obj));
  const errors: string[] = [];
  try {
    model.prototype.validate.call(rec.proxy);
  } catch (err) {
    errors.push(...(err as Error).message.split(', data').map((m, i) => (i === 0 ? m : `data${m}`)));
  }
  for (const field of rec.unknownFields()) errors.push(`data${field} is not a field of ${obj.apiVersion} ${obj.kind}`);
  return errors;
}
