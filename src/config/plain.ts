import { isMap, isScalar, isSeq } from 'yaml';
import { LimitError, MAX_YAML_DEPTH } from './limits';

// YAML nodes → plain data (rule `metadata`, values quoted in errors), without the yaml package's
// toJS: aliases go through `deref`, which charges each use to the load's budget, and the depth is
// bounded however aliases nest. YAML 1.1 merge keys (`<<`) merge; explicit keys win.
export interface PlainContext {
  deref(node: unknown): unknown;
  lineOf(node: unknown): number | undefined;
}

export function toPlain(ctx: PlainContext, node: unknown, depth = 0): unknown {
  const n = ctx.deref(node);
  if (depth > MAX_YAML_DEPTH) throw new LimitError(`config limit: YAML nested deeper than ${MAX_YAML_DEPTH} levels`, ctx.lineOf(n));
  if (isScalar(n)) return n.value;
  if (isSeq(n)) return n.items.map((item) => toPlain(ctx, item, depth + 1));
  if (!isMap(n)) return null;
  const out: Record<string, unknown> = {};
  const merged: unknown[] = [];
  for (const pair of n.items) {
    if (isScalar(pair.key) && typeof pair.key.value === 'symbol') {
      const src = toPlain(ctx, pair.value, depth + 1);
      merged.push(...(Array.isArray(src) ? src : [src]));
      continue;
    }
    const k = toPlain(ctx, pair.key, depth + 1);
    define(out, typeof k === 'object' && k !== null ? JSON.stringify(k) : String(k), toPlain(ctx, pair.value, depth + 1));
  }
  for (const m of merged) {
    if (typeof m !== 'object' || m === null || Array.isArray(m)) continue;
    for (const [k, v] of Object.entries(m)) if (!Object.hasOwn(out, k)) define(out, k, v);
  }
  return out;
}

// A key named `__proto__` is data, not the object's prototype.
function define(obj: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(obj, key, { value, enumerable: true, writable: true, configurable: true });
}
