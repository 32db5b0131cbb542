import { InvalidRequestError } from '../errors';
import type { RateLimitRequest as PbRequest } from '../gen/envoy/service/ratelimit/v3/rls';
import type { RateLimitDescriptor as PbDescriptor } from '../gen/envoy/extensions/common/ratelimit/v3/ratelimit';
import { RateLimitUnit } from '../gen/envoy/type/v3/ratelimit_unit';
import { checkDescriptorCount, checkEntryCount, type RequestBounds } from './request';

// POST /json and /explain bodies: a RateLimitRequest in protobuf's JSON mapping, type-checked
// field by field (the generated fromJSON coerces anything: null entries throw a TypeError, "abc"
// becomes NaN, true becomes 1). Field names in lowerCamelCase or as in the proto; null means the
// default, as in protobuf JSON; unknown fields are errors, so a misspelt hits_addend is not
// silently 1. Integers may be JSON numbers or decimal strings (protobuf writes 64-bit ones as strings).

type Json = Record<string, unknown>;

const UINT32_MAX = 0xffff_ffff;

function bad(path: string, what: string): InvalidRequestError {
  return new InvalidRequestError(`${path}: ${what}`);
}

function object(v: unknown, path: string): Json {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(path, 'expected a JSON object');
  return v as Json;
}

// Reads the fields of `o` by their JSON or proto name, rejecting unknown ones and duplicates.
function fields(o: Json, path: string, names: Record<string, string>): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const [k, v] of Object.entries(o)) {
    const name = names[k];
    if (name === undefined) throw bad(path, `unknown field '${k}'`);
    if (out.has(name)) throw bad(path, `field '${k}' given twice`);
    if (v !== null) out.set(name, v);
  }
  return out;
}

function string(v: unknown, path: string): string {
  if (v === undefined) return '';
  if (typeof v !== 'string') throw bad(path, 'expected a string');
  return v;
}

function array(v: unknown, path: string): unknown[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw bad(path, 'expected an array');
  return v;
}

function integer(v: unknown, path: string, max: number): number {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d{1,16}$/.test(v) ? Number(v) : NaN;
  if (!Number.isInteger(n) || n < 0 || n > max) throw bad(path, `expected an integer 0..${max}`);
  return n;
}

function unit(v: unknown, path: string): RateLimitUnit {
  const byName = typeof v === 'string' ? (RateLimitUnit as unknown as Record<string, number>)[v] : undefined;
  const n = typeof byName === 'number' ? byName : v;
  if (typeof n !== 'number' || RateLimitUnit[n] === undefined || n === RateLimitUnit.UNRECOGNIZED) {
    throw bad(
      path,
      `expected one of ${Object.keys(RateLimitUnit)
        .filter((k) => !/^-?\d+$/.test(k) && k !== 'UNRECOGNIZED')
        .join(', ')}`,
    );
  }
  return n;
}

function descriptor(v: unknown, i: number, bounds: RequestBounds): PbDescriptor {
  const path = `descriptors[${i}]`;
  const f = fields(object(v, path), path, { entries: 'entries', limit: 'limit', hitsAddend: 'hitsAddend', hits_addend: 'hitsAddend' });
  const rawEntries = array(f.get('entries'), `${path}.entries`);
  checkEntryCount(i, rawEntries.length, bounds);
  const entries = rawEntries.map((e, j) => {
    const p = `${path}.entries[${j}]`;
    const ef = fields(object(e, p), p, { key: 'key', value: 'value' });
    return { key: string(ef.get('key'), `${p}.key`), value: string(ef.get('value'), `${p}.value`) };
  });
  const out: PbDescriptor = { entries, limit: undefined, hitsAddend: undefined };
  if (f.has('limit')) {
    const p = `${path}.limit`;
    const lf = fields(object(f.get('limit'), p), p, { requestsPerUnit: 'rpu', requests_per_unit: 'rpu', unit: 'unit' });
    out.limit = {
      requestsPerUnit: lf.has('rpu') ? integer(lf.get('rpu'), `${p}.requestsPerUnit`, UINT32_MAX) : 0,
      unit: lf.has('unit') ? unit(lf.get('unit'), `${p}.unit`) : RateLimitUnit.UNKNOWN,
    };
  }
  // A UInt64Value: JavaScript numbers are exact to 2^53 - 1 only; the service bounds it further.
  if (f.has('hitsAddend')) out.hitsAddend = integer(f.get('hitsAddend'), `${path}.hitsAddend`, Number.MAX_SAFE_INTEGER);
  return out;
}

export function requestFromJson(v: unknown, bounds: RequestBounds): PbRequest {
  const path = 'request';
  const f = fields(object(v, path), path, { domain: 'domain', descriptors: 'descriptors', hitsAddend: 'hitsAddend', hits_addend: 'hitsAddend' });
  const descriptors = array(f.get('descriptors'), 'descriptors');
  checkDescriptorCount(descriptors.length, bounds);
  return {
    domain: string(f.get('domain'), 'domain'),
    descriptors: descriptors.map((d, i) => descriptor(d, i, bounds)),
    hitsAddend: f.has('hitsAddend') ? integer(f.get('hitsAddend'), 'hitsAddend', UINT32_MAX) : 0,
  };
}
